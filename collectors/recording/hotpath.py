"""The hot path: `enter` / `exit` of a wrapped call and `sync_call`, the sync wrapper's body with
both inlined (budget 2 µs of CPU a call; docs/BENCHMARKS.md); the site codes (sites.json) and
NVTX ranges; acceptance lengths read from a call.

`enter` and `exit` stay whole (each a single function under the house limit): they are the
measured per-call path, where every call and attribute look-up saved counts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracekit.collectors.compiled import gate as _gate
from tracekit.collectors.recording.lifecycle import Lifecycle
from tracekit.collectors.recording.readings import arg_plan, as_accept_len
from tracekit.collectors.recording.state import CLOCK_OFFSET_NS, Frame, SiteInfo, ThreadState
from tracekit.collectors.recording.state import now_ns as _time_ns
from tracekit.store.raw.schema import ROW, SiteKind

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site

_ROW = ROW
_pack = ROW.pack
_NAN = float("nan")
_modules = sys.modules
__all__ = ["HotPath", "as_accept_len"]


class HotPath(Lifecycle):
    """What a wrapper calls: the `Hooks` protocol of `wrappers`."""

    def _init_nvtx(self) -> None:
        """The `tracekit` NVTX domain, or None when `nvtx` is missing or no NVTX tool (Nsight
        Systems, ...) is attached: `nvtx` then hands out a `DummyDomain` whose calls do nothing,
        and skipping them saves the calls."""
        self._nvtx_ready = True
        try:
            import nvtx

            dom = nvtx.get_domain("tracekit")
            self._nvtx = None if type(dom).__name__ == "DummyDomain" else dom
        except Exception:
            self._nvtx = None

    def _new_code(self, site: Site, kind: SiteKind) -> int:
        with self._lock:
            name = site.phase if kind == "phase" else "cycle"
            code = len(self._sites)
            self._sites.append(
                {"code": code, "kind": kind, "phase": name, "target": str(site.target)}
            )
            attrs = None
            if self._nvtx is not None:
                attrs = self._nvtx.get_event_attributes(message=name, category=name)
            self._nvtx_attrs.append(attrs)
            (self._codes if kind == "phase" else self._cycle_codes)[id(site)] = code
            return code

    def _site_info(self, site: Site) -> SiteInfo:
        """First call of a site: its phase code (sites.json), NVTX attributes, flags."""
        if not self._nvtx_ready:
            self._init_nvtx()
        code = -1
        if site.phase is not None:
            code = self._codes.get(id(site), -1)
            if code < 0:
                code = self._new_code(site, "phase")
        acc = site.bound[0] if site.bound[0] is not None else site.accept_len
        cacc = site.bound[1] if site.bound[1] is not None else site.cycle_accept_len
        info = (code, site.cycle, site.starts_cycle, acc, cacc, site)
        self._info[id(site)] = info
        return info

    def _in_capture(self, info: SiteInfo, in_cycle: bool) -> bool:
        """At depth 0: whether the stream captures a CUDA graph, asked only where a capture or
        a CUDA event can be (`asks_capture`; DEFINITIONS.md, "Hot path")."""
        opens_cycle = not in_cycle and bool(info[1] or info[2])
        return self.asks_capture(info[0] >= 0, opens_cycle) and bool(
            self._cuda.is_current_stream_capturing()
        )

    # Kept whole: the measured per-call path (docs/BENCHMARKS.md, "Collector overhead").
    def enter(self, site: Site) -> Frame | None:
        """Start a record; None means: pass straight through (tracekit's own call, torch.compile
        tracing, CUDA graph capture, or a recorder failure)."""
        try:
            comp = (hot := self._hot).is_compiling  # first: torch.compile traces this code too
            if comp is None and "torch" in _modules:
                self._probe_torch()
                comp = hot.is_compiling
            cuda_on = False
            if comp is not None:
                if comp():
                    return None
                cuda_on = hot.cuda._initialized
            try:
                ts = hot.loc.ts
            except AttributeError:
                ts = self._thread()
            if ts.internal:
                return None
            stack = ts.stack
            info = self._info.get(id(site))
            if info is None:
                info = self._site_info(site)
            code = info[0]
            if cuda_on and not stack and self._in_capture(info, ts.in_cycle):
                return None
            nv = hot.nvtx
            prof = hot.profile
            ccode = -1
            rf = rfc = None
            qualified = False
            if info[1] and not ts.in_cycle:  # a cycle-target call starts a cycle
                ts.in_cycle = True
                ccode = self._cycle_codes.get(id(site), -1)
                if ccode < 0:
                    ccode = self._new_code(site, "cycle")
                hot.cycle += 1
                if ts.bound is not None:
                    self._drop_bound(ts)
                if prof is not None:
                    prof.cycle_start(hot.cycle, target=True)  # counts; opens no range
                if nv is not None:
                    nv.push_range(self._nvtx_attrs[ccode])
            depth = len(stack)
            parent = -1
            if code >= 0:
                if depth:
                    parent = stack[-1]
                elif info[2] and not ts.in_cycle:  # the map's `starts_with` phase
                    hot.cycle += 1
                    if prof is not None:
                        prof.cycle_start(hot.cycle)
                stack.append(code)
                if nv is not None:
                    nv.push_range(self._nvtx_attrs[code])
                if prof is not None:
                    qualified = prof.phase_start(site.phase, hot.cycle)
            seq = hot.next_seq()
            # CUDA events for top-level phases only (a cycle-only target has none: merge keeps
            # no GPU times for cycles), on the sampled cycles, shared at boundaries
            ev = self._gpu_begin(ts) if cuda_on and depth == 0 and code >= 0 else None
            start = _time_ns()
            if prof is not None and prof.active:
                # Inside the recorded [start, end]: a profiler range never starts before its
                # record (nor ends after it), so the cycle the record is in holds it too.
                if ccode >= 0 and prof.marks_cycle_at_start:
                    rfc = prof.range("tracekit/cycle")
                if qualified:  # `require` made this step a cycle: its range opens here
                    prof.open_cycle_range()
                if code >= 0:
                    rf = prof.range(f"tracekit/{site.phase}")
            return (
                info, code, hot.cycle, depth, parent, ts, seq, ts.replays, ev, ccode, rf, rfc,
                start,
            )  # fmt: skip
        except Exception as exc:
            self.fail("enter", exc)
            return None

    def exit(
        self,
        fr: Frame | None,
        ok: bool,
        result: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        if fr is None:
            return
        try:
            info, code, cycle, depth, parent, ts, seq, rep0, ev, ccode, rf, rfc, start = fr
            if ccode >= 0 and rfc is None and self.profile is not None:
                rfc = self.profile.take_cycle_range(cycle)
            if rf is not None or rfc is not None:  # full mode: close the ranges, then stamp
                if rf is not None:
                    self.profile.range_exit(rf)  # type: ignore[union-attr]
                if rfc is not None:
                    self.profile.range_exit(rfc)  # type: ignore[union-attr]
                rf = rfc = None
            end = _time_ns()
            if ev is not None:  # before the row: a flush never takes the row without its events
                self._gpu_end(ts, seq, ev, cycle)
            replays = ts.replays - rep0
            nv = self._nvtx
            rows = self._rows
            if code >= 0:
                if nv is not None:
                    nv.pop_range()
                ts.stack.pop()
                acc = _NAN
                if ok and info[3] is not None:
                    acc = self._accept(result, info[3], args, kwargs, info[5], seq)
                rows += _pack(code, cycle, depth, parent, ts.tid, seq, start, end, replays, acc, ok)
            if ccode >= 0:
                ts.in_cycle = False
                if ts.bound is not None:
                    self._drop_bound(ts)
                if nv is not None:
                    nv.pop_range()
                acc = _NAN
                if ok and info[4] is not None:
                    acc = self._accept(result, info[4], args, kwargs, info[5], -seq)
                cseq = seq if code < 0 else -seq  # a site both phase and cycle: two rows
                rows += _pack(ccode, cycle, depth, -1, ts.tid, cseq, start, end, replays, acc, ok)
                if self.profile is not None:
                    self.profile.cycle_end(cycle)
            # Flush between cycles (not inside one, where it would add to the cycle's time),
            # unless the buffer keeps growing inside a very long cycle.
            if depth == 0:
                n = len(rows)
                if (
                    not ts.in_cycle
                    and (n >= self._flush_bytes or end - self._last_flush >= self._flush_ns)
                ) or (n >= 4 * self._flush_bytes):
                    self._flush_due()
        except Exception as exc:
            self.fail("exit", exc)

    def sync_call(
        self, fn: Callable[..., Any], site: Site, generic: Callable[..., Any]
    ) -> Callable[..., Any]:
        """The body of the sync wrapper of `site` (`wrappers.make_wrapper` adds the metadata).

        For a phase or cycle site (draft, verify, allreduce, the cycle's step...) the native
        `PhaseCall` (`native_phase_call`) or, without the extension and for a phase site that
        is no cycle target, `python_call`: both are `enter` + `exit` inlined for such a site
        with no NVTX tool and no profiler window; any other state (the site's first calls,
        which register it, an NVTX tool, full mode) goes through `generic`, the wrapper's plain
        `enter` / `exit` body (the test `test_inlined_phase_path_records_what_enter_exit_record`
        compares both, test_native_hotpath.py the native path and `generic`)."""
        if site.phase is None and not site.cycle:
            return generic
        dyn, noted = _gate(site)
        native = self.native_phase_call(fn, site, generic, with_args=True)
        if native is not None:
            return _native_shim(fn, native, dyn, noted)
        if site.cycle or site.needs_args:  # the Python body serves phase sites, no arguments
            return generic
        acc_path = site.bound[0] if site.bound[0] is not None else site.accept_len
        return python_call(self, fn, site, generic, (site.starts_cycle, acc_path, dyn, noted))

    def native_phase_call(
        self,
        fn: Callable[..., Any],
        site: Site,
        generic: Callable[..., Any],
        boundary: object = None,
        with_args: bool = False,
    ) -> Any:
        """The native `_native.PhaseCall` that records `site`'s calls of `fn` in C, as the
        Python body does (same rows, same order of calls into the recorder; `generic` for the
        states it leaves to Python), called as `pc(args, kwargs)`; None where the native path
        does not serve the site (no extension; an accept rule that reads the call's arguments
        unless `with_args`, which the sync wrapper sets and the compiled boundary does not:
        then `_accept` gets the call's arguments as `exit` would). A cycle target's call opens
        its cycle and writes its cycle row as `enter` / `exit` do (docs/BENCHMARKS.md, "seventh
        session": the generic path was most of a cycle's host cost). The sync wrapper and the compiled boundary (collectors/compiled.py) use it; the
        boundary's `boundary` marker is this thread's `ThreadState.boundary` while a call runs."""
        if self._native is None or (site.phase is None and not site.cycle):
            return None
        if site.needs_args and not with_args:
            return None
        if self._is_compiling is None and "torch" in _modules:
            self._probe_torch()  # the compile check is live from the first call
        acc_path = site.bound[0] if site.bound[0] is not None else site.accept_len
        cacc_path = site.bound[1] if site.bound[1] is not None else site.cycle_accept_len
        return self._native.PhaseCall(
            self, fn, site, generic, acc_path, site.starts_cycle, CLOCK_OFFSET_NS,
            cycle=site.cycle, has_phase=site.phase is not None, cycle_acc_path=cacc_path,
            boundary=boundary, with_args=site.needs_args, acc_plan=arg_plan(self, acc_path),
            cycle_acc_plan=arg_plan(self, cacc_path),
        )  # fmt: skip

    @property
    def _buf(self) -> list[tuple[Any, ...]]:
        """The buffered rows, unpacked (tests, debugging; accept_len None when absent)."""
        return [
            (*r[:9], None if r[9] != r[9] else r[9], r[10]) for r in _ROW.iter_unpack(self._rows)
        ]


def _native_shim(
    fn: Callable[..., Any], native: Any, dyn: Callable[[], bool], noted: Callable[[], bool]
) -> Callable[..., Any]:
    """`sync_call`'s body on the native hot path: the Python shim around the `PhaseCall` keeps
    one job, the first statement: while Dynamo traces (it folds `is_dynamo_compiling()` to
    True) the call goes straight to `fn`, so traced code never reaches the C object (a graph
    break) nor reads recorder state past this check."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if dyn():  # first: Dynamo folds it, sees `fn` only (collectors/compiled.py)
            noted()
            return fn(*args, **kwargs)
        return native(args, kwargs)  # the tuple and dict as they are (no copies)

    call.__tracekit_native__ = native  # type: ignore[attr-defined]
    return call


def python_call(
    rec: HotPath,
    fn: Callable[..., Any],
    site: Site,
    generic: Callable[..., Any],
    rules: tuple[bool, Any, Callable[[], bool], Callable[[], bool]],
) -> Callable[..., Any]:
    """`HotPath.sync_call`'s body without the native extension: `enter` and `exit` inlined for
    a phase site that is no cycle target; `rules` = (starts_cycle, accept path, the Dynamo
    check, its trace-time note)."""
    starts_cycle, acc_path, dyn, noted = rules
    hot, next_seq = rec._hot, rec._next_seq  # hot: collectors/recording/hot.py
    code = -1  # the site's phase code, known after its first call

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal code
        if dyn():  # first: Dynamo folds it, sees `fn` only (collectors/compiled.py)
            noted()
            return fn(*args, **kwargs)
        if not hot.active:
            return fn(*args, **kwargs)
        if code < 0 or hot.nvtx is not None or hot.profile is not None:
            code = rec._info.get(id(site), (code,))[0]  # known once `generic` registered it
            return generic(*args, **kwargs)
        ts: ThreadState | None = None  # -- enter
        try:
            ts = getattr(hot.loc, "ts", None) or rec._thread()
            stack = ts.stack
            ask = not stack and rec.asks_capture(True, starts_cycle and not ts.in_cycle)
            state = rec.capture_state(ask)  # torch.compile's tracing, CUDA graph capture
            cuda_on = state > 0
            if state < 0 or ts.internal:
                ts = None
            else:
                depth = len(stack)
                parent = stack[-1] if depth else -1
                if not depth and starts_cycle and not ts.in_cycle:
                    hot.cycle += 1
                stack.append(code)
                cycle = hot.cycle
                seq = next_seq()
                rep0 = ts.replays
                ev = rec._gpu_begin(ts) if cuda_on and depth == 0 else None
                start = _time_ns()
        except Exception as exc:
            rec.fail("enter", exc)
            ts = None
        if ts is None:
            return fn(*args, **kwargs)
        # -- the call, then exit (also when it raises)
        ok = False
        result = None
        try:
            result = fn(*args, **kwargs)
            ok = True
        finally:
            try:
                end = _time_ns()
                if ev is not None:
                    rec._gpu_end(ts, seq, ev, cycle)
                ts.stack.pop()
                acc = _NAN
                if ok and acc_path is not None:
                    acc = rec._accept(result, acc_path, (), None, site, seq)
                rows = hot.rows
                rows += _pack(
                    code, cycle, depth, parent, ts.tid, seq, start, end,
                    ts.replays - rep0, acc, ok,
                )  # fmt: skip
                if depth == 0:
                    n = len(rows)
                    if (n >= hot.flush_bytes or end - hot.last_flush >= hot.flush_ns) and (
                        not ts.in_cycle or n >= 4 * hot.flush_bytes
                    ):
                        rec._flush_due()
            except Exception as exc:
                rec.fail("exit", exc)
        return result

    return call
