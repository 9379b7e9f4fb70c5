"""Recording at the compiled boundary: the calls of a torch.compile'd callable that reach a mapped
target are recorded as that target's phase (docs/DEFINITIONS.md, "Compiled boundary").

Inside code that Dynamo traces, nothing of tracekit runs. Every wrapper's first statement is
`if dyn(): noted(); return fn(*args, **kwargs)` (`gate`): `dyn` is
`torch.compiler.is_dynamo_compiling`, which Dynamo folds to True, so a traced wrapper is `fn`
plus one call of `noted`, a per-site function marked as a constant (`_dynamo_marked_constant`,
what `torch._dynamo.assume_constant_result` sets): Dynamo calls it once while it traces and
puts its constant result nowhere in the graph. So the graphs, graph breaks, guards that can fail
and recompiles are the program's own (tests/unit/collectors/test_collectors_compiled.py reads
`torch._dynamo.utils.counters`). Eagerly `dyn()` is a bare `return False`.

`noted` is how tracekit learns that Dynamo traced a target, and for which compiled callable:
every callable torch.compile returns (a function, a bound method, an `OptimizedModule`'s
forward, transformers' `get_compiled_call`) passes through
`torch._dynamo.eval_frame.OptimizeContext.__call__`, which `install_boundaries` wraps: the
returned callable is wrapped once more, outside traced code (`Boundaries.wrap`), and that
wrapper sets this thread's current compiled call while it runs (the recorder's
`ThreadState.boundary`; the native `PhaseCall` sets it in C). Dynamo compiles on the calling
thread inside that call, so `noted` attaches the site to it. From then on each call of the
compiled callable is recorded with that site (the native hot path where it can be, else
`enter` / `exit`): the same phase name, nesting, cycle rule and acceptance as an eager call.
The call that compiled is recorded after it returns, from its start.

Which site a compiled callable records: the first one traced at its top (not inside another
mapped target's call in the same trace, and not an `allreduce` phase: a compiled call that
reaches only the communicator is the model's forward, not a collective). Sites traced below it
are its sub-phases, which a compiled call hides; each is said once on stderr. A target traced
with no compiled callable around it (the caller reached Dynamo's compiled code another way, e.g.
a server's own dispatcher) is said once on stderr and kept in process.json (`compiled`), which
merge reports too (tracekit/store/merge_checks.py `compiled_unseen`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracekit.collectors.direct import to_shims, traceable

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site
    from tracekit.collectors.recorder import Recorder

EVAL_FRAME_MODULE = "torch._dynamo.eval_frame"
COMM_PHASE = "allreduce"  # never the phase of a whole compiled call (see the module's text)
_MARK = "_dynamo_marked_constant"
_BOUNDARY = "__tracekit_boundary__"

_gates: dict[int, tuple[Callable[[], bool], Callable[[], bool]]] = {}
_noted: list[Callable[[], bool]] = []
_gates_keep: list[Any] = []  # the sites with a gate: keeps each id(site) unique
_state: Boundaries | None = None  # the process's boundaries (set by `Boundaries.install`)
_dyn: Callable[[], bool] | None = None


def _false() -> bool:
    return False


def _late_dyn() -> bool:
    """`dyn` of a wrapper made before torch was imported: torch's check once it is there."""
    return (_dyn or _false)()


def _torch_dyn() -> Callable[[], bool] | None:
    torch = sys.modules.get("torch")
    compiler = getattr(torch, "compiler", None) if torch is not None else None
    fn = getattr(compiler, "is_dynamo_compiling", None)
    return fn if callable(fn) else None


def gate(site: Site) -> tuple[Callable[[], bool], Callable[[], bool]]:
    """(dyn, noted) for `site`'s wrapper, the same pair for every wrapper of one site."""
    global _dyn
    pair = _gates.get(id(site))
    if pair is not None:
        return pair
    if _dyn is None:
        _dyn = _torch_dyn()
    dyn = _dyn or _late_dyn

    def noted() -> bool:
        return _traced(site)

    setattr(noted, _MARK, True)
    _noted.append(noted)
    pair = (dyn, noted)
    _gates[id(site)] = pair
    _gates_keep.append(site)
    return pair


def _traced(site: Site) -> bool:
    """Dynamo traced `site`'s wrapper (called at trace time only, never from a graph)."""
    state = _state
    if state is not None:
        try:
            state.traced(site)
        except Exception as exc:  # never into Dynamo's trace
            with contextlib.suppress(Exception):
                state.rec.fail("compiled boundary", exc)
    return True


def _nested_in_wrapper() -> bool:
    """True when the site being traced sits inside another tracekit wrapper's traced call
    (Dynamo's inlining stack holds a frame of a wrapper's file)."""
    try:
        from torch._guards import TracingContext

        tc = TracingContext.try_get()
        frames = getattr(tc, "frame_summary_stack", None) or []
        files = _wrapper_files()
        return any(getattr(f, "filename", None) in files for f in frames)
    except Exception:
        return False


@functools.cache
def _wrapper_files() -> frozenset[str]:
    from tracekit.collectors import wrappers
    from tracekit.collectors.recording import hotpath

    return frozenset(m.__file__ for m in (wrappers, hotpath) if m.__file__)


class Boundary:
    """One compiled callable: its name and the site its calls are recorded as."""

    __slots__ = ("args_self", "name", "site")

    def __init__(self, name: str, args_self: object) -> None:
        self.name = name
        self.site: Site | None = None
        self.args_self = args_self  # the bound `self` a method's accept rule counts, or None

    def exit_args(self, site: Site, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arguments `exit` hands `site`'s accept rule: a bound method's `self` first."""
        if self.args_self is not None and site.needs_args:
            return (self.args_self, *args)
        return args


def _name(fn: Any) -> str:
    """`module:Qual.name` of a compiled callable; a module's call is `Class.__call__`."""
    inner = getattr(fn, "__func__", fn)
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        klass = type(owner)
        name = getattr(inner, "__name__", "?")
        if name in ("_wrapped_call_impl", "_call_impl"):
            name = "__call__"
        return f"{klass.__module__}:{klass.__qualname__}.{name}"
    return f"{getattr(inner, '__module__', '?')}:{getattr(inner, '__qualname__', repr(inner))}"


class Boundaries:
    """The compiled callables of a process and what was traced under them."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.boundaries: list[Boundary] = []
        self.report: dict[str, Any] = {"boundaries": [], "inner": [], "unattached": []}
        self._said: set[tuple[str, str]] = set()
        self._rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def install(self) -> None:
        """Make this the process's boundaries; process.json carries `compiled`."""
        global _state
        _state = self
        self.rec.process_info["compiled"] = self.report

    # -- trace time ---------------------------------------------------------------------------
    def traced(self, site: Site) -> None:
        # this thread's compiled call: [Boundary, entered frame or None, discovered?], or None
        call = self.rec._this_thread().boundary
        target = str(site.target)
        if call is None:
            self._count("unattached", target, site.phase or "cycle", "")
            self._say(
                "unattached",
                target,
                f"tracekit: {target} (phase {site.phase or 'cycle'}) runs inside code that "
                "torch.compile traces, but the compiled callable that calls it was not made "
                "by torch.compile in this process (a server's own dispatcher?): its calls are "
                "not recorded; map the function that calls the compiled code instead\n",
            )
            return
        b: Boundary = call[0]
        inner = site.phase == COMM_PHASE or _nested_in_wrapper()
        if not inner and (b.site is None or b.site is site):
            if b.site is None:
                b.site = site
                call[2] = True
            self._count("boundaries", target, site.phase or "cycle", b.name)
            return
        self._count("inner", target, site.phase or "cycle", b.name)
        self._say(
            "inner",
            target,
            f"tracekit: {target} (phase {site.phase or 'cycle'}) is traced inside the "
            f"torch.compile'd {b.name}: its calls run inside that compiled call and are not "
            "recorded one by one (light mode; full mode sees their kernels)\n",
        )

    def _count(self, kind: str, target: str, phase: str, boundary: str) -> None:
        key = (kind, target, boundary)
        row = self._rows.get(key)
        if row is None:
            row = {"target": target, "phase": phase, "traced": 0}
            if boundary:
                row["compiled"] = boundary
            self._rows[key] = row
            self.report[kind].append(row)
        row["traced"] += 1

    def _say(self, kind: str, target: str, line: str) -> None:
        if (kind, target) in self._said:
            return
        self._said.add((kind, target))
        with contextlib.suppress(Exception):
            sys.stderr.write(line)

    # -- the compiled callable's wrapper ------------------------------------------------------
    def wrap(self, compiled: Any, fn: Any) -> Any:
        """`compiled` (what torch.compile returned for `fn`) wrapped to set the current
        compiled call and record it; anything but a plain function is returned as is."""
        if not inspect.isfunction(compiled) or getattr(compiled, _BOUNDARY, None) is not None:
            return compiled
        owner = getattr(fn, "__self__", None) if inspect.ismethod(fn) else None
        b = Boundary(_name(fn), owner)
        self.boundaries.append(b)
        body = _boundary_call(compiled, b, self.rec)
        functools.update_wrapper(body, compiled)  # Dynamo's attributes too (_torchdynamo_*)
        if hasattr(body, "_torchdynamo_wrapper_id"):
            # torch follows `_torchdynamo_orig_callable` only from the wrapper whose id this is
            body._torchdynamo_wrapper_id = id(body)
        setattr(body, _BOUNDARY, b)
        return body


def _boundary_call(compiled: Callable[..., Any], b: Boundary, rec: Recorder) -> Callable[..., Any]:
    """The compiled callable's wrapper: its site known, a plain `enter` / call / `exit` (on the
    native hot path where the site allows: `_fast_path`, which also sets the thread's current
    compiled call in C); not yet (it may compile now), the call's start is kept for a record
    made when it returns."""
    marker: list[Any] = [b, None, False]  # this thread's current call, once `b.site` is known
    from tracekit.collectors.recording.state import now_ns

    def generic(*args: Any, **kwargs: Any) -> Any:
        site = b.site
        assert site is not None
        fr = rec.enter(site)
        if fr is None:
            return compiled(*args, **kwargs)
        try:
            result = compiled(*args, **kwargs)
        except BaseException:
            rec.exit(fr, False, None, b.exit_args(site, args), kwargs)
            raise
        rec.exit(fr, True, result, b.exit_args(site, args), kwargs)
        return result

    # once the site is known: the native call, pc(args, kwargs), or `generic` as pc's stand-in
    body: list[Callable[[tuple[Any, ...], dict[str, Any]], Any] | None] = [None]

    def call(*args: Any, **kwargs: Any) -> Any:
        fn = body[0]
        if fn is None:
            site = b.site
            if site is None:  # also while recording is off: a compile now must find its caller
                return _discovering(compiled, b, rec, now_ns, args, kwargs)
            fn = body[0] = _fast_path(rec, compiled, site, generic, marker)
        return fn(args, kwargs)  # the tuple and dict as they came (no copies, no frame)

    return call


def _fast_path(
    rec: Recorder,
    compiled: Callable[..., Any],
    site: Site,
    generic: Callable[..., Any],
    marker: list[Any],
) -> Callable[[tuple[Any, ...], dict[str, Any]], Any]:
    """What records a boundary call once its site is known, called as `fn(args, kwargs)`: the
    native hot path's `PhaseCall` where it serves the site (`HotPath.native_phase_call`), else
    `generic` (`enter` / `exit`) behind the same signature. While recording, either makes
    `marker` this thread's current compiled call for the call's length (a recompile during it
    finds its boundary); not recording, the compiled callable is called as it is."""
    try:
        pc = rec.native_phase_call(compiled, site, generic, boundary=marker)
    except Exception as exc:
        rec.fail("compiled boundary", exc)
        pc = None
    if pc is not None:
        return pc  # type: ignore[no-any-return]
    hot = rec._hot  # the recorder's hot attributes (collectors/recording/hot.py)

    def slow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not hot.active:
            return compiled(*args, **kwargs)
        ts = rec._this_thread()
        prev, ts.boundary = ts.boundary, marker
        try:
            return generic(*args, **kwargs)
        finally:
            ts.boundary = prev

    return slow


def _discovering(
    compiled: Callable[..., Any],
    b: Boundary,
    rec: Recorder,
    now_ns: Callable[[], int],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """A call of a compiled callable whose site is not known: Dynamo may trace it now (and
    `traced` attach a site); then the call is recorded when it returns, from its start."""
    ts = rec._this_thread()
    rep0 = ts.replays
    start = now_ns()
    me: list[Any] = [b, None, False]
    prev, ts.boundary = ts.boundary, me
    ok = False
    result = None
    try:
        result = compiled(*args, **kwargs)
        ok = True
    finally:
        ts.boundary = prev
        site = b.site
        # the call that compiled (its site learnt during it): entered now, stamped from its
        # start and its replay count then
        fr = rec.enter(site) if me[2] and site is not None and rec.active else None
        if fr is not None and site is not None:
            fr = (*fr[:7], rep0, *fr[8:-1], start)
            rec.exit(fr, ok, result, b.exit_args(site, args), kwargs)
    return result


def install_boundaries(module: Any, boundaries: Boundaries) -> None:
    """Wrap `OptimizeContext.__call__` in torch._dynamo.eval_frame (import hook) so every
    callable torch.compile returns is a boundary; mark the gates' `noted` functions the way
    this torch's `assume_constant_result` does. Older or newer torch without these names:
    said once, and targets traced by Dynamo stay unrecorded."""
    global _dyn
    _dyn = _dyn or _torch_dyn()
    _mark_constants()
    ctx = getattr(module, "OptimizeContext", None)
    mro = ctx.__mro__ if isinstance(ctx, type) else ()
    orig = next((vars(k)["__call__"] for k in mro if "__call__" in vars(k)), None)
    if orig is None:
        sys.stderr.write(
            "tracekit: torch._dynamo.eval_frame has no OptimizeContext.__call__ in this torch: "
            "calls of torch.compile'd callables are not recorded\n"
        )
        return
    if getattr(orig, _BOUNDARY, False):
        return
    call_orig: Callable[..., Any] = orig

    @functools.wraps(call_orig)
    def __call__(self: Any, fn: Any) -> Any:
        to_shims()  # before anything is traced: Dynamo traces the shims (direct.py)
        fn = traceable(fn)
        result = call_orig(self, fn)
        try:
            return boundaries.wrap(result, fn)
        except Exception as exc:
            boundaries.rec.fail("compiled boundary", exc)
            return result

    setattr(__call__, _BOUNDARY, True)
    setattr(ctx, "__call__", __call__)  # noqa: B010 (mypy cannot type a class attribute set)


def _mark_constants() -> None:
    """Mark every gate's `noted` with this torch's own `assume_constant_result` too (it sets
    `_dynamo_marked_constant` today; a torch that spells it otherwise still gets it)."""
    decorators = sys.modules.get("torch._dynamo.decorators")
    mark = getattr(decorators, "assume_constant_result", None)
    if mark is None:
        return
    for fn in _noted:
        with contextlib.suppress(Exception):
            mark(fn)
