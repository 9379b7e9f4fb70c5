"""Direct calls: a phase method's wrapper is the native `PhaseCall` itself, until Dynamo runs.

On the native hot path a phase site's wrapper is a Python shim whose first statement lets
Dynamo trace straight through to the function (collectors/compiled.py), then the C body. The
shim's frame, its `*args, **kwargs` and the compile check are most of a nested call's cost
(docs/BENCHMARKS.md, "Collector overhead"). Where the target is a class attribute (a method, a
static or class method: every phase target of the shipped maps), `install` puts the C object
itself in the class (`PhaseCall.direct()`: called with the program's arguments as they came,
and binding to an instance as a function does), with the shim's attributes (`__wrapped__`,
`__name__`, the site mark).

Dynamo cannot trace into C code, so before it traces anything the process goes back to the
shims for good (`to_shims`): when torch.compile makes a compiled callable (the boundary hook
on `OptimizeContext.__call__`) and when a Dynamo compile starts (`run_start_callbacks` of
torch._dynamo.callback's handler, which every compile runs before it traces, whatever made
it). Each installed class attribute that still holds its direct call gets its shim; wrappers
made later are shims; a direct call or a method bound to one handed to torch.compile itself
(`torch.compile(obj.method)` binds first) is replaced by its shim there (`traceable`). A method
bound before that moment and kept elsewhere (`f = obj.method`) stays the C object: a trace
that reaches it breaks the graph there, as any C function does, and the call is still
recorded. Module-level targets (`from m import f` copies them where no swap can reach) are
never direct. `TRACEKIT_DIRECT=0` keeps the shims from the start.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

ENV_DIRECT = "TRACEKIT_DIRECT"
COMPILE_START_MODULE = "torch._dynamo.callback"  # every Dynamo compile starts here
_NATIVE = "__tracekit_native__"
_SHIM = "__tracekit_shim__"
_COPIED = ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__")


@dataclass(frozen=True)
class _Installed:
    owner: type
    attr: str
    kind: str  # "plain", "static", "class": how the owner holds it
    direct: Any
    shim: Any


_installed: list[_Installed] = []
_lock = threading.Lock()
_shims_only = os.environ.get(ENV_DIRECT, "1") == "0"


def wrapper_for(owner: object, shim: Any) -> Any:
    """What `install` puts in `owner` for the marked shim `shim`: its direct call when the
    native path serves the site, the owner is a class and no compile was seen; else `shim`."""
    native = getattr(shim, _NATIVE, None)
    if native is None or _shims_only or not isinstance(owner, type):
        return shim
    direct = native.direct()
    direct.__dict__.update(shim.__dict__)  # __wrapped__, the site mark, the native body
    for name in _COPIED:
        if hasattr(shim, name):
            setattr(direct, name, getattr(shim, name))
    setattr(direct, _SHIM, shim)
    return direct


def installed(owner: object, attr: str, kind: str, new: Any) -> None:
    """Remember a direct call `install` put in `owner.attr`, for `to_shims`."""
    shim = getattr(new, _SHIM, None)
    if shim is None or not isinstance(owner, type):
        return
    with _lock:
        if not _shims_only:
            _installed.append(_Installed(owner, attr, kind, new, shim))
            return
    _swap(_Installed(owner, attr, kind, new, shim))  # a compile began meanwhile


def to_shims() -> None:
    """From now on every wrapper is a shim Dynamo can trace through (see the module's text)."""
    global _shims_only
    with _lock:
        if _shims_only:
            return
        _shims_only = True
        todo = list(_installed)
        _installed.clear()
    for entry in todo:
        _swap(entry)


def _swap(entry: _Installed) -> None:
    current = entry.owner.__dict__.get(entry.attr)
    inner = getattr(current, "__func__", current)  # a staticmethod's or classmethod's
    if inner is not entry.direct:
        return  # replaced since (the program's own patch): leave it
    shim: Any = entry.shim
    if entry.kind == "static":
        shim = staticmethod(shim)
    elif entry.kind == "class":
        shim = classmethod(shim)
    try:
        setattr(entry.owner, entry.attr, shim)
    except Exception as exc:  # a class that refuses (a C type's): its calls stay direct
        sys.stderr.write(
            f"tracekit: could not put back the Python wrapper of {entry.owner.__qualname__}."
            f"{entry.attr} before torch.compile ({type(exc).__name__}: {exc}); a trace that "
            "reaches it breaks the graph there\n"
        )


def traceable(fn: Any) -> Any:
    """`fn` as torch.compile should get it: a direct call, or a method bound to one before the
    swap (`torch.compile(obj.method)` binds before it compiles), becomes its shim."""
    try:
        inner = fn.__func__ if isinstance(fn, types.MethodType) else fn
        if getattr(inner, "is_direct", None) is not True:
            return fn
        shim = getattr(inner, _SHIM, None)
        if shim is None:
            return fn
        return types.MethodType(shim, fn.__self__) if inner is not fn else shim
    except Exception:  # an object whose attributes raise: torch.compile gets it as it came
        return fn


def install_compile_start(module: Any) -> None:
    """Wrap `run_start_callbacks` of torch._dynamo.callback's `callback_handler` class (import
    hook) so that every Dynamo compile goes back to the shims before it traces.
    `torch._dynamo.reset()` clears the registered callbacks, not this."""
    try:
        instance = getattr(module, "callback_handler", None)
        handler = type(instance) if instance is not None else None
        orig = getattr(handler, "run_start_callbacks", None)
        if orig is None or getattr(orig, _SHIM, False):
            return

        def run_start_callbacks(self: Any, *args: Any, **kwargs: Any) -> Any:
            to_shims()
            return orig(self, *args, **kwargs)

        setattr(run_start_callbacks, _SHIM, True)
        handler.run_start_callbacks = run_start_callbacks  # type: ignore[union-attr]
    except Exception as exc:  # the boundary hook still goes back to the shims
        sys.stderr.write(f"tracekit: no hook on Dynamo's compile start ({exc}); see direct.py\n")
