"""Implementation ``overlay``: a published offloader class loaded from a source root given per runtime.

What is modelled: the runner puts ``runtime.overlay_source_root`` on the case's ``PYTHONPATH`` (after
the evidence hook and the repository, before the installed packages, so a published
``vllm_ascend/...`` tree shadows the installed vLLM-Ascend) and sets :data:`OVERLAY_CLASS_ENV`
(``runtime.overlay_class``, ``"module.path:ClassName"``) and :data:`OVERLAY_ROOT_ENV`. With
``OFFLOAD_IMPL=overlay`` the plugin's factory (:mod:`offload.factory`) calls :func:`create_overlay`
where vLLM would create its offloader (same hook points and ``offload_backend`` contract as
``current``). The instance is built like upstream's ``create_offloader`` builds
``PrefetchOffloader`` (vLLM 0.32 ``vllm/model_executor/offloader/base.py``): the offload config's
fields by keyword, ``group_size``, ``num_in_group``, ``prefetch_step``, ``offload_params``, and
``mode="cpu"`` when the constructor takes it.

Fail-closed rules (``ValueError`` naming the class and the value, raised before any weight loads):

* the class pattern is malformed, the module cannot be imported or has no such class;
* the class's module was not loaded from the overlay source root (the installed package was
  measured instead of the published code);
* the constructor needs an argument none of the offload config's fields provides, or does not
  accept one that carries a setting (``group_size``, ``num_in_group``, ``prefetch_step``, a
  non-empty ``offload_params``).

Not modelled: anything the published class does at run time (it is measured as it is: its own
ring, streams and ``post_init``; the plugin only calls ``post_init`` after ``load_model`` when the
runner did not, as it does for ``current`` on the CPU runner).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from typing import Any

OVERLAY_CLASS_ENV = "OFFLOAD_OVERLAY_CLASS"
"""Environment variable naming the overlay class of a case: ``module.path:ClassName``."""

OVERLAY_ROOT_ENV = "OFFLOAD_OVERLAY_SOURCE_ROOT"
"""Environment variable naming the overlay source root of a case (where the class must come from)."""

CLASS_PATTERN = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
"""``runtime.overlay_class``: ``module.path:ClassName``."""

SETTING_KWARGS = ("group_size", "num_in_group", "prefetch_step", "offload_params")
"""Keywords upstream's ``create_offloader`` passes to ``PrefetchOffloader`` (besides ``mode``)."""

POST_INIT_MARK = "_offload_overlay_post_init_ran"
"""Instance attribute set once the overlay's ``post_init`` ran (the plugin calls it when nobody did)."""

OVERLAY_MARK = "_offload_overlay"
"""Instance attribute marking an offloader the factory created for ``overlay``."""


def check_class_pattern(pattern: object) -> str:
    """``pattern`` when it is ``module.path:ClassName``.

    Raises:
        ValueError: anything else (naming the value and the allowed form).
    """
    if not isinstance(pattern, str) or not CLASS_PATTERN.match(pattern):
        raise ValueError(f"overlay_class {pattern!r} must be 'module.path:ClassName' "
                         "(e.g. vllm_ascend.model_executor.offloader.prefetch:AscendPrefetchOffloader)")
    return pattern


def _under(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def load_overlay_class(pattern: str, source_root: str | None) -> type:
    """Import the class named by ``pattern``; it must come from ``source_root`` when one is given.

    Raises:
        ValueError: malformed pattern, module not importable, no such class, or a module file
            outside ``source_root`` (naming all of them).
    """
    module_name, _, class_name = check_class_pattern(pattern).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"overlay_class {pattern!r}: module {module_name!r} cannot be imported "
                         f"(overlay source root {source_root!r}): {exc}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"overlay_class {pattern!r}: module {module_name!r} has no class {class_name!r}")
    origin = getattr(module, "__file__", None) or ""
    if source_root and not _under(origin, source_root):
        raise ValueError(f"overlay_class {pattern!r}: module {module_name!r} was loaded from {origin!r}, not from "
                         f"the overlay source root {source_root!r} (the installed package would be measured, "
                         "not the published code)")
    return cls


def constructor_kwargs(cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``cls(...)``: the offload config's fields it accepts.

    Args:
        cls: the overlay class.
        settings: ``group_size``, ``num_in_group``, ``prefetch_step``, ``offload_params`` values.

    Raises:
        ValueError: a required constructor argument no field provides, or a setting the
            constructor cannot take (naming the class and the argument).
    """
    name = f"{cls.__module__}.{cls.__qualname__}"
    params = dict(inspect.signature(cls).parameters)
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    for key, value in settings.items():
        if key in params or var_kw:
            kwargs[key] = value
        elif key != "offload_params" or value:
            raise ValueError(f"overlay class {name}: its constructor takes no argument {key!r} "
                             f"(needed for {key}={value!r})")
    if "mode" in params:
        kwargs["mode"] = "cpu"
    for p in params.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty and p.name not in kwargs:
            raise ValueError(f"overlay class {name}: constructor argument {p.name!r} is required and none of the "
                             f"offload config's fields ({', '.join(SETTING_KWARGS)}, mode) provides it")
    return kwargs


def create_overlay(group_size: int, num_in_group: int, prefetch_step: int, offload_params: tuple[str, ...],
                   *, pattern: str | None = None, source_root: str | None = None) -> Any:
    """The overlay offloader for these settings (``pattern`` / ``source_root`` default to the environment).

    Raises:
        ValueError: no class named (:data:`OVERLAY_CLASS_ENV` unset), or :func:`load_overlay_class` /
            :func:`constructor_kwargs` refuse.
    """
    pattern = pattern if pattern is not None else os.environ.get(OVERLAY_CLASS_ENV, "")
    source_root = source_root if source_root is not None else (os.environ.get(OVERLAY_ROOT_ENV) or None)
    if not pattern:
        raise ValueError(f"OFFLOAD_IMPL=overlay needs {OVERLAY_CLASS_ENV} (runtime.overlay_class) naming the class")
    cls = load_overlay_class(pattern, source_root)
    settings = {"group_size": group_size, "num_in_group": num_in_group, "prefetch_step": prefetch_step,
                "offload_params": set(offload_params)}
    off = cls(**constructor_kwargs(cls, settings))
    _mark(off)
    return off


def _mark(off: Any) -> None:
    """Mark ``off`` as the overlay and record when its ``post_init`` ran (instance-level wrapper)."""
    setattr(off, OVERLAY_MARK, True)
    setattr(off, POST_INIT_MARK, False)
    original = getattr(off, "post_init", None)
    if original is None:
        return

    def post_init(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        setattr(off, POST_INIT_MARK, True)
        return result

    off.post_init = post_init


def is_overlay(off: Any) -> bool:
    """Whether ``off`` was created by :func:`create_overlay`."""
    return bool(getattr(off, OVERLAY_MARK, False))


def ensure_post_init(off: Any) -> bool:
    """Call the overlay's ``post_init`` if it has not run (the CPU runner never calls it); returns whether it did."""
    if not is_overlay(off) or getattr(off, POST_INIT_MARK, True):
        return False
    off.post_init()
    return True
