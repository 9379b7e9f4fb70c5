"""A `sys.meta_path` post-import hook: run a callback right after chosen modules are executed.

The server is never imported eagerly: targets are wrapped when the program itself imports their
module. A module already imported when the hook is installed is handled at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _ChainedLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callbacks on the executed module."""

    def __init__(self, loader: Any, fire: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self._fire = fire

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first, so that code run by the module (and inspect, pkgutil
        # or importlib.resources afterwards) sees the loader it expects.
        try:
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader
        except (AttributeError, TypeError):
            pass
        self.loader.exec_module(module)
        self._fire(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PostImportHook(importlib.abc.MetaPathFinder):
    """Calls `callbacks[name](module)` once `name` has been imported (and executed)."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._lock = threading.RLock()

    def register(self, name: str, callback: Callback) -> None:
        with self._lock:
            module = sys.modules.get(name)
            if module is not None and _is_initialised(module):
                callback(module)
                return
            self._callbacks.setdefault(name, []).append(callback)

    @property
    def pending(self) -> list[str]:
        return sorted(self._callbacks)

    def _fire(self, module: ModuleType) -> None:
        with self._lock:
            callbacks = self._callbacks.pop(module.__name__, [])
        for cb in callbacks:
            cb(module)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._callbacks:
            return None
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _ChainedLoader(loader, self._fire)
        return spec

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)


def _is_initialised(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return not getattr(spec, "_initializing", False)
