"""vLLM general plugin (entry point ``offload = "offload.plugin:register"``, group
``vllm.general_plugins``) that installs this project's offloader into a stock runtime.

vLLM calls :func:`register` in every process (front end, engine core, workers). It is
inert unless ``OFFLOAD_IMPL`` is ``current``, ``sync`` or ``overlay`` (the published class named by
``OFFLOAD_OVERLAY_CLASS``, :mod:`offload.overlay`, installed at the same points as ours). When
active it patches, each at
the moment the module is first imported (no eager heavy imports):

* ``vllm.v1.worker.gpu_model_runner.create_offloader`` - the name ``GPUModelRunner.__init__``
  calls (``CPUModelRunner`` subclasses it); model runner V2: ``vllm.v1.worker.gpu.model_runner``;
* ``vllm_ascend.worker.model_runner_v1``: its module-level ``create_offloader`` if it has one
  (newer vLLM-Ascend), and ``NPUModelRunner.__init__``, which in v0.23 replaces the parent's
  offloader with ``NPUPrefetchOffloader`` when ``offload_group_size > 0``: after it ran, ours
  replaces that one again (only when the factory contract says ours is wanted, and only when
  ``OFFLOAD_IMPL`` read at that moment asks for ours: ``official`` keeps vLLM-Ascend's);
* ``vllm_ascend.compilation.acl_graph.ACLGraphWrapper.__call__``: vLLM-Ascend 0.23 calls
  ``sync_prev_onload`` only before capture, while vLLM 0.32's ``CUDAGraphWrapper`` also calls
  it before every replay; a replay after an eager pass could read a slot whose refill is
  still in flight. When our offloader is installed, the wrapper now syncs before replay too
  (not for ``overlay``: the published code is measured as it runs);
* ``vllm.compilation.cuda_graph.CUDAGraphWrapper.__call__``: before a capture or replay, tells our
  offloader which graph follows (``expect_graph``), so the crossing protocol arms after
  ``sync_prev_onload`` only the refills that graph leaves owed (in PIECEWISE mode every piece
  calls ``sync_prev_onload``; only the piece holding a slot's last reader owes that slot);
* ``load_model`` of the CPU runner (which never calls ``post_init``), the GPU runners and the
  NPU runner: after loading, ``post_init`` of our offloader (or of the overlay) runs if nobody called it
  (idempotent; the GPU runner already calls it), and the CPU kernel report is printed;
* with ``OFFLOAD_CPU_KERNEL_PATH`` set (any implementation, baseline included):
  ``UnquantizedLinearMethod.process_weights_after_loading`` (:mod:`offload.cpu_kernels`);
* with ``OFFLOAD_STEP_DELAY_MS`` set (a baseline speed control, :mod:`offload.controls`): the same
  ``load_model`` wrapper puts a sleeping forward pre-hook on the loaded model.

The factory keeps the runner's own offloader for ``uva`` and for ``auto`` with offload
disabled, and raises ``ValueError`` before loading for invalid settings
(:mod:`offload.factory`). Not modelled: model runners outside these modules.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeGuard

from offload import ACTIVE_IMPLEMENTATIONS, IMPL_ENV
from offload.import_hooks import when_imported

if TYPE_CHECKING:  # the plugin imports torch only once a runner module is imported
    from offload.prefetch import CurrentPrefetchOffloader

RUNNER_FACTORY_MODULES = (
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu.model_runner",
)
"""Modules whose global ``create_offloader`` a model runner calls in ``__init__``."""

LOAD_MODEL_CLASSES = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
    ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
    ("vllm_ascend.worker.model_runner_v1", "NPUModelRunner"),
)
"""Runner classes whose own ``load_model`` gets the ensure-``post_init`` wrapper."""

ASCEND_RUNNER_MODULE = "vllm_ascend.worker.model_runner_v1"
ASCEND_ACL_GRAPH_MODULE = "vllm_ascend.compilation.acl_graph"
CUDA_GRAPH_MODULE = "vllm.compilation.cuda_graph"

_PATCHED = "_offload_plugin_patched"
_installed_impl: str | None = None
_kernel_path_installed = False


def active_implementation() -> str | None:
    """``OFFLOAD_IMPL`` when it asks for this package's offloader, else ``None``."""
    impl = os.environ.get(IMPL_ENV, "")
    return impl if impl in ACTIVE_IMPLEMENTATIONS else None


def register() -> None:
    """Entry point: install the factory and hooks when ``OFFLOAD_IMPL`` is current/sync/overlay, and
    the CPU kernel path (:mod:`offload.cpu_kernels`) when ``OFFLOAD_CPU_KERNEL_PATH`` is set
    (every case of a CPU runtime, baseline included)."""
    global _installed_impl, _kernel_path_installed
    from offload import cpu_kernels

    kernel_path = None
    if not _kernel_path_installed:
        kernel_path = cpu_kernels.install(when_imported)
        _kernel_path_installed = kernel_path is not None
    impl = active_implementation()
    if impl is None or _installed_impl is not None:
        if kernel_path is not None or _step_delay_wanted():
            for mod, cls in LOAD_MODEL_CLASSES:
                when_imported(mod, functools.partial(patch_load_model, class_name=cls))
        return
    _installed_impl = impl
    for name in RUNNER_FACTORY_MODULES:
        when_imported(name, functools.partial(patch_factory_module, implementation=impl))
    for mod, cls in LOAD_MODEL_CLASSES:
        when_imported(mod, functools.partial(patch_load_model, class_name=cls))
    when_imported(ASCEND_RUNNER_MODULE, functools.partial(patch_ascend_runner, implementation=impl))
    when_imported(ASCEND_ACL_GRAPH_MODULE, patch_acl_graph_wrapper)
    when_imported(CUDA_GRAPH_MODULE, patch_cuda_graph_wrapper)


def _step_delay_wanted() -> bool:
    """Whether ``OFFLOAD_STEP_DELAY_MS`` asks for the speed control (:mod:`offload.controls`)."""
    from offload.controls import STEP_DELAY_ENV

    return os.environ.get(STEP_DELAY_ENV, "").strip() not in ("", "0")


def patch_factory_module(module: ModuleType, implementation: str) -> None:
    """Replace ``module.create_offloader`` with our factory (idempotent)."""
    from offload.factory import make_factory

    original = getattr(module, "create_offloader", None)
    if original is None or getattr(original, "_offload_impl", None):
        return
    setattr(module, "create_offloader", make_factory(original, implementation))  # noqa: B010 - a module's attribute


def _is_ours(obj: Any) -> TypeGuard[CurrentPrefetchOffloader]:
    from offload.prefetch import CurrentPrefetchOffloader

    return isinstance(obj, CurrentPrefetchOffloader)


def _installed_is(off: Any, impl: str) -> bool:
    """Whether ``off`` is what ``impl`` installs (ours of that implementation, or the overlay)."""
    from offload.overlay import is_overlay

    if impl == "overlay":
        return is_overlay(off)
    return _is_ours(off) and off.implementation == impl


def ensure_post_init() -> None:
    """Run ``post_init`` of the installed offloader if it is ours (or the overlay) and has not run yet."""
    from vllm.model_executor.offloader.base import get_offloader

    from offload import overlay

    off = get_offloader()
    if _is_ours(off):
        if not off.post_init_called:
            off.post_init()
        from offload.faults import apply_fault_from_env

        apply_fault_from_env(off)  # negative control only: OFFLOAD_FAULT names a fault (applied once)
    overlay.ensure_post_init(off)


def patch_load_model(module: ModuleType, class_name: str) -> None:
    """Wrap ``class_name.load_model`` (its own, not inherited) to ensure ``post_init`` ran."""
    cls = getattr(module, class_name, None)
    if cls is None or "load_model" not in vars(cls) or getattr(vars(cls)["load_model"], _PATCHED, False):
        return
    original = vars(cls)["load_model"]

    @functools.wraps(original)
    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        ensure_post_init()
        from offload.controls import apply_step_delay_from_env

        apply_step_delay_from_env(self)  # speed control only: OFFLOAD_STEP_DELAY_MS (once per model)
        from offload.cpu_kernels import print_report_once

        print_report_once()
        return result

    setattr(load_model, _PATCHED, True)
    cls.load_model = load_model


def patch_ascend_runner(module: ModuleType, implementation: str) -> None:
    """vLLM-Ascend: patch the module factory (newer) and ``NPUModelRunner.__init__`` (v0.23)."""
    patch_factory_module(module, implementation)
    cls = getattr(module, "NPUModelRunner", None)
    if cls is None or getattr(cls.__init__, _PATCHED, False):
        return
    original_init = cls.__init__

    @functools.wraps(original_init)
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, vllm_config, *args, **kwargs)
        from vllm.model_executor.offloader import base

        from offload.factory import create_offloader, wants_our_offloader

        offload_config = getattr(vllm_config, "offload_config", None)
        impl = os.environ.get(IMPL_ENV, implementation)  # read now, as the GPU factory does
        if impl not in ACTIVE_IMPLEMENTATIONS:
            return  # e.g. official: keep vLLM-Ascend's NPUPrefetchOffloader
        current = base.get_offloader()
        if wants_our_offloader(offload_config) and not _installed_is(current, impl):
            base.set_offloader(create_offloader(offload_config, implementation=impl))

    setattr(__init__, _PATCHED, True)
    cls.__init__ = __init__


def _acl_graph_will_replay(module: ModuleType, wrapper: Any) -> bool:
    """Whether ``ACLGraphWrapper.__call__`` (v0.23 logic) is about to replay a captured graph."""
    ctx = module.get_forward_context()
    mode = getattr(ctx, "cudagraph_runtime_mode", None)
    own = vars(wrapper).get("runtime_mode")
    if mode is None or getattr(mode, "name", "NONE") == "NONE" or mode != own:
        return False
    entry = vars(wrapper).get("concrete_aclgraph_entries", {}).get(getattr(ctx, "batch_descriptor", None))
    return entry is not None and getattr(entry, "aclgraph", None) is not None


def patch_acl_graph_wrapper(module: ModuleType) -> None:
    """Make ``ACLGraphWrapper`` call ``sync_prev_onload()`` of our offloader before a replay.

    The check runs before the original ``__call__`` (a replay is a call whose batch
    descriptor already has a captured graph and whose runtime mode matches the wrapper's),
    exactly where vLLM 0.32's ``CUDAGraphWrapper`` calls it. Idempotent; other offloaders
    (official) are left as vLLM-Ascend runs them.
    """
    cls = getattr(module, "ACLGraphWrapper", None)
    if cls is None or getattr(vars(cls).get("__call__"), _PATCHED, False):
        return
    original = cls.__call__

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _acl_graph_will_replay(module, self):
            from vllm.model_executor.offloader.base import get_offloader

            off = get_offloader()
            if _is_ours(off):
                off.sync_prev_onload()
        return original(self, *args, **kwargs)

    setattr(__call__, _PATCHED, True)
    cls.__call__ = __call__


def _graph_key(module: ModuleType, wrapper: Any) -> tuple[int, Any] | None:
    """``(wrapper id, batch descriptor)`` when ``CUDAGraphWrapper.__call__`` (vLLM 0.32) is about to
    capture or replay (forward context available, runtime mode not NONE and the wrapper's own), else None."""
    available = getattr(module, "is_forward_context_available", None)
    if available is not None and not available():
        return None
    ctx = module.get_forward_context()
    mode = getattr(ctx, "cudagraph_runtime_mode", None)
    if mode is None or getattr(mode, "name", "NONE") == "NONE" or mode != vars(wrapper).get("runtime_mode"):
        return None
    return id(wrapper), getattr(ctx, "batch_descriptor", None)


def patch_cuda_graph_wrapper(module: ModuleType) -> None:
    """Make ``CUDAGraphWrapper.__call__`` name the graph it captures or replays to our offloader.

    The original ``__call__`` then calls ``sync_prev_onload`` before the capture or replay, as in
    vLLM 0.32 (``vllm/compilation/cuda_graph.py`` l. 311 and 360). Idempotent; other offloaders
    are left alone.
    """
    cls = getattr(module, "CUDAGraphWrapper", None)
    if cls is None or getattr(vars(cls).get("__call__"), _PATCHED, False):
        return
    original = cls.__call__

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = _graph_key(module, self)
        if key is not None:
            from vllm.model_executor.offloader.base import get_offloader

            off = get_offloader()
            if _is_ours(off):
                off.expect_graph(key)
        return original(self, *args, **kwargs)

    setattr(__call__, _PATCHED, True)
    cls.__call__ = __call__
