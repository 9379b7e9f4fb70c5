"""Name the components in use (vLLM's drafter and communicator) and whether the map covers them.

A phase map's `[[component]]` says where an object whose class decides what runs can be read:
`at` a target, from `value` (an argument path such as `self.drafter`, or a module function
call such as `pkg.mod:get_tp_group().device_communicator`). At the first call of `at` in a
process a one-shot probe reads the object, removes itself (later calls go straight to the
wrapper underneath), and reports the class with the map's targets that wrap one of its methods
(its own or inherited): in process.json (`components`, gathered into run.json by the launcher)
and in one stderr line a process. A probe that fails says so in process.json and never reaches
the program. Standard library only.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tracekit.collectors.phasemap import ComponentSpec
from tracekit.collectors.wrappers import WRAPPED_MARK, resolve_owner

Report = Callable[[str, dict[str, Any]], None]


def read_value(
    value: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The object `value` names, for one call of `fn(*args, **kwargs)`."""
    if ":" in value:
        module, rest = value.split(":", 1)
        func, _, path = rest.partition("().")
        obj = getattr(importlib.import_module(module), func.removesuffix("()"))()
        parts = path.split(".") if path else []
    else:
        first, *parts = value.split(".")
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
        obj = bound.arguments[first]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def covered_by(cls: type) -> list[str]:
    """`Class.method (phase)` for each tracekit-wrapped method `cls` has or inherits."""
    out: list[str] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, raw in vars(klass).items():
            if name in seen:
                continue
            fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            site = getattr(fn, WRAPPED_MARK, None)
            if site is None:
                continue
            seen.add(name)
            out.append(f"{klass.__qualname__}.{name} ({getattr(site, 'phase', None) or 'cycle'})")
    return out


def describe(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {"class": None, "covered": None, "covered_by": []}
    cls = type(obj)
    by = covered_by(cls)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "covered": bool(by), "covered_by": by}


def line(name: str, info: dict[str, Any]) -> str:
    if info.get("error"):
        return f"{name}: could not be read ({info['error']})"
    if info["class"] is None:
        return f"{name}: none"
    if info["covered"]:
        return f"{name} {info['class']}, covered by the map ({', '.join(info['covered_by'])})"
    return (
        f"{name} {info['class']}, NOT covered by the map: none of its methods is a target, so "
        "its time is not recorded as its own phase; add its methods to the phase map (--phases)"
    )


def install_probe(module: ModuleType, spec: ComponentSpec, report: Report) -> bool:
    """Put a one-shot probe over `spec.at` in the imported `module`; False if it is absent."""
    try:
        owner, attr = resolve_owner(module, spec.at.qualname)
    except AttributeError:
        return False
    raw = inspect.getattr_static(owner, attr) if inspect.isclass(owner) else getattr(owner, attr)
    if isinstance(raw, (staticmethod, classmethod)) or not callable(raw):
        return False
    fn: Callable[..., Any] = raw
    done = False

    @functools.wraps(fn)
    def probe(*args: Any, **kwargs: Any) -> Any:
        nonlocal done
        if not done:
            done = True
            try:
                setattr(owner, attr, raw)
                info = describe(read_value(spec.value, fn, args, kwargs))
            except Exception as exc:
                info = {
                    "class": None,
                    "covered": None,
                    "covered_by": [],
                    "error": f"{type(exc).__name__}: {exc}",
                }
            info["at"] = str(spec.at)
            try:
                report(spec.name, info)
            except Exception:
                pass
        return fn(*args, **kwargs)

    setattr(owner, attr, probe)
    return True


def reporter(rec: Any) -> Report:
    """Report into a recorder's process.json (`components`) and one stderr line each."""

    def report(name: str, info: dict[str, Any]) -> None:
        comps = rec.process_info.setdefault("components", {})
        if name in comps and comps[name].get("class") and not info.get("class"):
            return  # a second probe (the other runner) found nothing: keep the first
        comps[name] = info
        rec._write_process()
        sys.stderr.write(f"tracekit: pid {rec.pid}: {line(name, info)}\n")

    return report
