"""Acceptance read from a wrapped call at its exit (the recorder's `_accept`): a number for the
record row, and each request's numbers kept aside for `accepts.jsonl`
(tracekit/store/raw/accepts.py). Never synchronises a device; a failing rule is switched off.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from tracekit.collectors.accept import read_attr_path

_NAN = float("nan")


def as_accept_len(value: object) -> float | None:
    """A number from a return-value field; never synchronises a device."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        nums = [float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return sum(nums) / len(nums) if nums else None
    if hasattr(value, "item") and hasattr(value, "numel"):
        tensor: Any = value
        if getattr(tensor, "is_cuda", False):
            return None  # reading it would synchronise the stream
        if tensor.numel() == 1:
            return float(tensor.item())
        if tensor.numel() > 1:
            return float(tensor.float().mean().item())
    return None


def per_request(value: object, scalar: bool = False) -> list[float] | None:
    """The numbers of a list or tuple (one a request of the step), or None when `value` is
    no such list; with `scalar`, a bare number is one request's."""
    if isinstance(value, bool):
        return None
    if scalar and isinstance(value, (int, float)):
        return [float(value)]
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        out.append(float(v))
    return out


def read_accept(
    rec: Any,
    result: object,
    rule: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    site: Any,
    key: int = 0,
) -> float:
    """A cycle's tokens from a call, for the recorder `rec`: a legacy `accept_len` path on the
    return value (NaN when absent), or a bound `accept` rule; a rule that fails, or gives no
    number, is disabled for this target and said once on stderr; the program never sees it.

    A rule's per-request numbers (a list from a "count" rule, any "drafted" rule) are kept
    aside under `key` (the row's seq; -seq for a cycle rule) for the `accepts.jsonl` file
    beside the records (DEFINITIONS.md "Acceptance length"); a "drafted" row carries NaN."""
    if isinstance(rule, str):
        try:
            acc = as_accept_len(read_attr_path(result, rule))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            return _NAN
        return _NAN if acc is None else acc
    if id(rule) in rec._accept_off:
        return _NAN
    try:
        value = rule.read(result, args, kwargs or {})
    except Exception as exc:
        return _disable(rec, rule, site, f"{type(exc).__name__}: {exc}")
    return accept_value(rec, value, rule, site, key)


def accept_value(rec: Any, value: object, rule: Any, site: Any, key: int = 0) -> float:
    """`read_accept` past the reading: the number of the value a bound rule read (the native
    path reads a plain argument's path itself, `arg_plan`, and hands the value here when it
    is not a plain int or float)."""
    why = ""
    try:
        kind = rule.rule.kind
        nums = None if kind == "delta" else per_request(value, kind == "drafted")
        if kind == "drafted" or nums is not None:
            if nums is None:
                why = f"gave {type(value).__name__}, not a list of numbers"
                acc = None
            else:
                tag = "d" if kind == "drafted" else "t"
                if key and (nums or tag == "d"):
                    rec._accept_detail.append((key, tag, nums))
                if tag == "d" or not nums:
                    return _NAN
                acc = sum(nums) / len(nums)
        else:
            acc = as_accept_len(value)
            if acc is None:
                why = f"gave {type(value).__name__}, not a number (a CUDA tensor is not read: that would synchronise)"
    except Exception as exc:
        acc, why = None, f"{type(exc).__name__}: {exc}"
    return _disable(rec, rule, site, why) if acc is None else acc


def _disable(rec: Any, rule: Any, site: Any, why: str) -> float:
    """Switch `rule` off for good (here and on the native path) and say so once: NaN."""
    rec._accept_off.add(id(rule))
    plan = rec._arg_plans.get(id(rule))
    if plan is not None:
        plan[0] = False
    with contextlib.suppress(Exception):
        rec.accept_failed.append(
            {
                "rule": rule.rule.text,
                "where": rule.rule.where,
                "target": str(site.target),
                "why": why,
            }
        )
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"tracekit: accept rule {rule.rule.text} ({rule.rule.where}) on {site.target} "
            f"{why}; acceptance is not read from this target any more, the program goes on\n"
        )
    return _NAN


_STEP_CODES = {"attr": 0, "index": 1, "len": 2}


def arg_plan(rec: Any, rule: object) -> list[Any] | None:
    """What the native path needs to read a rule on an argument itself, or None where it
    leaves the rule to `read_accept`: `[on, name, position, (default,) or None, steps]`, the
    steps as `(0, name)` attribute (a mapping's key), `(1, int)` index, `(2, None)` len. Kept
    by the recorder under the rule's id, so that `_disable` turns off every copy. A "drafted"
    rule and a `[*]` path are read in Python."""
    bound: Any = rule
    r = getattr(bound, "rule", None)
    if r is None or r.source != "arg" or r.kind == "drafted":
        return None
    if any(kind not in _STEP_CODES for kind, _ in r.steps):
        return None
    plan: list[Any] | None = rec._arg_plans.get(id(rule))
    if plan is None:
        steps = tuple((_STEP_CODES[kind], arg) for kind, arg in r.steps)
        default = (bound.default,) if bound.has_default else None
        plan = [id(rule) not in rec._accept_off, r.arg, bound.position, default, steps]
        rec._arg_plans[id(rule)] = plan
    return plan
