"""This project's vLLM layer-group weight offloader ("current") and its sync reference.

Modules (``offload`` and ``offload.selection``, ``offload.matching``, ``offload.ring`` import
no torch; analysis imports the selection rule from here):

* :mod:`offload.selection` - the one layer-selection rule and parameter validation;
* :mod:`offload.matching` - ``offload_params`` segment matching, as upstream;
* :mod:`offload.ring` - static-buffer slot ring (which module refills which slot);
* :mod:`offload.backend` - CUDA / NPU / CPU device backends (streams, events, copies);
* :mod:`offload.prefetch` - ``CurrentPrefetchOffloader`` and ``SyncOffloader``, built from
  :mod:`offload.arena` (static buffers), :mod:`offload.host_storage` (host copies of wrapped
  modules), :mod:`offload.copy_protocol` (upstream's copy/event protocol), :mod:`offload.base`;
* :mod:`offload.inprocess` - the CPU-only switch between copies on (B) and in-place reads (A) between rounds of
  one case process (the in-process copy-share measurement, docs/inprocess.md);
* :mod:`offload.factory` - ``create_offloader`` honouring vLLM's ``offload_backend``;
* :mod:`offload.overlay` - implementation ``overlay``: a published offloader class loaded from a
  source root given per runtime;
* :mod:`offload.plugin` - the ``vllm.general_plugins`` entry point (``offload.plugin:register``),
  active only when ``OFFLOAD_IMPL`` is ``current``, ``sync`` or ``overlay``;
* :mod:`offload.ops` - the ``offload::wait_prefetch``/``start_prefetch`` custom ops (torch only);
* :mod:`offload_tools.bench` - CPU onload-time benchmark; :mod:`offload_tools.gpu_compare` - GPU check
  (vLLM, current vs official); :mod:`offload_tools.gpu_check_torch` - torch-only GPU check
  (stack in :mod:`offload_tools.synthetic_stack`).

Must not import Hydra, pandas or ``runners``.
"""

__all__ = ["IMPL_ENV", "ACTIVE_IMPLEMENTATIONS"]

IMPL_ENV = "OFFLOAD_IMPL"
"""Environment variable the runner sets per case: baseline, current, official, sync, overlay."""

ACTIVE_IMPLEMENTATIONS = ("current", "sync", "overlay")
"""Values of ``OFFLOAD_IMPL`` that make the plugin install this package's factory (``overlay``: the
published class named by ``OFFLOAD_OVERLAY_CLASS``, :mod:`offload.overlay`)."""
