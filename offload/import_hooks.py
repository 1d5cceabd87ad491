"""Run a callback right after a module is imported (or now, if it already is). No torch.

Used by :mod:`offload.plugin` so that registering the plugin never imports heavy vLLM
modules (model runners, vLLM-Ascend) in processes that do not need them: the patch is
applied when the runner module is first imported, before anyone can look its names up.

Not modelled: modules reloaded with ``importlib.reload`` (callbacks run once per module).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]

_lock = threading.RLock()
_pending: dict[str, list[Callback]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:  # restore the real loader for introspection (inspect, resources)
            spec.loader = self._inner
            module.__loader__ = self._inner
        self._inner.exec_module(module)
        with _lock:
            callbacks = _pending.pop(self._name, [])
        for cb in callbacks:
            cb(module)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        with _lock:
            if fullname not in _pending:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_finder = _Finder()


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported; immediately if it already is.

    Args:
        name: fully qualified module name.
        callback: receives the executed module; its exceptions propagate to the importer.
    """
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _pending.setdefault(name, []).append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return
    callback(module)
