"""Transparent wrappers around phase targets, and installing them on their owners.

A wrapper keeps the wrapped callable's name, qualname, docstring, signature (`__wrapped__`),
attributes, return value and exceptions. It records only when the recorder is active and passes
straight through while a CUDA graph is being captured or torch.compile is tracing. Its first
statement is the compiled gate (collectors/compiled.py): under Dynamo's tracing a wrapper is the
wrapped call and one trace-time constant, so a compiled program compiles the same graphs with
and without tracekit, and its compiled calls are recorded at the compiled boundary. Everything the
recorder does is guarded: a recorder failure never reaches the program (the recorder disables
itself and says so once).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tracekit.collectors import direct

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site

WRAPPED_MARK = "__tracekit_site__"


class Hooks(Protocol):
    """What a wrapper calls; implemented by `tracekit.collectors.recorder.Recorder`.

    `enter` returns None to let the call pass straight through (CUDA graph capture,
    torch.compile tracing, tracekit's own calls, a disabled recorder). Hooks may also offer
    `sync_call(fn, site, generic)`, the whole body of a sync wrapper (the recorder inlines its
    `enter` and `exit` there, see `Recorder.sync_call`, and falls back to `generic`, the plain
    enter/exit body); the wrapper then uses it as is.
    """

    active: bool

    def enter(self, site: Site) -> Any: ...

    def exit(
        self,
        frame: Any,
        ok: bool,
        result: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None: ...


def make_wrapper(fn: Callable[..., Any], site: Site, hooks: Hooks) -> Callable[..., Any]:
    """Wrap a plain function (sync or async). A site whose accept rule reads an argument hands
    the call's arguments to `exit` (the rule is evaluated there, at the phase exit)."""
    from tracekit.collectors.compiled import gate
    from tracekit.collectors.phasemap import bind_site

    site = bind_site(site, fn)
    sync_call = getattr(hooks, "sync_call", None)
    if site.needs_args:
        if inspect.iscoroutinefunction(fn) or sync_call is None:
            return _args_wrapper(fn, site, hooks)
        # the recorder's own body (native: the arguments handed to the rule in C), or this
        return _marked(fn, site, sync_call(fn, site, _args_body(fn, site, hooks)))
    dyn, noted = gate(site)
    if inspect.iscoroutinefunction(fn):
        return _marked(fn, site, _async_body(fn, site, hooks, dyn, noted, with_args=False))

    enter = hooks.enter
    leave = hooks.exit

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if dyn():  # first: Dynamo folds it, sees `fn` only (collectors/compiled.py)
            noted()
            return fn(*args, **kwargs)
        if not hooks.active:
            return fn(*args, **kwargs)
        frame = enter(site)
        if frame is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            leave(frame, False, None)
            raise
        leave(frame, True, result)
        return result

    # the recorder's own body, with enter/exit inlined, falling back to `wrapper`
    return _marked(fn, site, wrapper if sync_call is None else sync_call(fn, site, wrapper))


def _marked(fn: Callable[..., Any], site: Site, body: Callable[..., Any]) -> Callable[..., Any]:
    """`body` dressed as `fn` (name, docstring, `__wrapped__`, ...) and marked with its site."""
    body = functools.wraps(fn)(body)
    setattr(body, WRAPPED_MARK, site)
    return body


def _async_body(
    fn: Callable[..., Any],
    site: Site,
    hooks: Hooks,
    dyn: Callable[[], bool],
    noted: Callable[[], bool],
    *,
    with_args: bool,
) -> Callable[..., Any]:
    """The body of an async wrapper; `with_args`: hand the call's arguments to `exit`."""

    async def body(*args: Any, **kwargs: Any) -> Any:
        if dyn():  # first: Dynamo folds it, sees `fn` only (collectors/compiled.py)
            noted()
            return await fn(*args, **kwargs)
        if not hooks.active:
            return await fn(*args, **kwargs)
        frame = hooks.enter(site)
        if frame is None:
            return await fn(*args, **kwargs)
        try:
            result = await fn(*args, **kwargs)
        except BaseException:
            hooks.exit(frame, False, None)
            raise
        if with_args:
            hooks.exit(frame, True, result, args, kwargs)
        else:
            hooks.exit(frame, True, result)
        return result

    return body


def _args_wrapper(fn: Callable[..., Any], site: Site, hooks: Hooks) -> Callable[..., Any]:
    """`make_wrapper` for a site whose accept rule reads an argument of the call."""
    from tracekit.collectors.compiled import gate

    if inspect.iscoroutinefunction(fn):
        dyn, noted = gate(site)
        return _marked(fn, site, _async_body(fn, site, hooks, dyn, noted, with_args=True))
    return _marked(fn, site, _args_body(fn, site, hooks))


def _args_body(fn: Callable[..., Any], site: Site, hooks: Hooks) -> Callable[..., Any]:
    """The plain `enter` / `exit` body of a sync wrapper whose rule reads the call's arguments
    (they are handed to `exit`)."""
    from tracekit.collectors.compiled import gate

    dyn, noted = gate(site)

    def body(*args: Any, **kwargs: Any) -> Any:
        if dyn():  # first: Dynamo folds it, sees `fn` only (collectors/compiled.py)
            noted()
            return fn(*args, **kwargs)
        if not hooks.active:
            return fn(*args, **kwargs)
        frame = hooks.enter(site)
        if frame is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            hooks.exit(frame, False, None)
            raise
        hooks.exit(frame, True, result, args, kwargs)
        return result

    return body


@dataclass(frozen=True)
class Installed:
    target: str
    owner: object
    attr: str
    original: object  # what was in the owner's namespace (function, staticmethod, ...)


def resolve_owner(module: object, qualname: str) -> tuple[object, str]:
    """(owner, attribute name) for `Qual.name.attr` inside `module`; AttributeError if absent."""
    parts = qualname.split(".")
    owner = module
    for part in parts[:-1]:
        owner = getattr(owner, part)
    attr = parts[-1]
    if inspect.isclass(owner):
        inspect.getattr_static(owner, attr)  # raises AttributeError when absent
    else:
        getattr(owner, attr)
    return owner, attr


def install(module: object, site: Site, hooks: Hooks) -> Installed | None:
    """Wrap `site.target` inside the imported `module`. Returns None if it was already wrapped.

    Raises AttributeError when the target does not exist and TypeError when it is not a
    function (e.g. a C builtin, which cannot carry a Python wrapper's metadata here).
    """
    owner, attr = resolve_owner(module, site.target.qualname)
    raw = inspect.getattr_static(owner, attr) if inspect.isclass(owner) else getattr(owner, attr)
    kind = "plain"
    fn: Any = raw
    if isinstance(raw, staticmethod):
        kind, fn = "static", raw.__func__
    elif isinstance(raw, classmethod):
        kind, fn = "class", raw.__func__
    if getattr(fn, WRAPPED_MARK, None) is not None:
        return None
    if not callable(fn):
        msg = f"{site.target} is not callable ({type(fn).__name__})"
        raise TypeError(msg)
    wrapped = direct.wrapper_for(owner, make_wrapper(fn, site, hooks))
    new: object = wrapped
    if kind == "static":
        new = staticmethod(wrapped)
    elif kind == "class":
        new = classmethod(wrapped)
    setattr(owner, attr, new)
    direct.installed(owner, attr, kind, wrapped)
    return Installed(str(site.target), owner, attr, raw)
