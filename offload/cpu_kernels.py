"""CPU GEMM kernel path: make the baseline and every offload case run the same kernels.

Why: on the CPU platform vLLM 0.32's ``UnquantizedLinearMethod.process_weights_after_loading``
packs each Linear weight (``vllm/model_executor/layers/utils.py``,
``dispatch_cpu_unquantized_gemm``): on CPUs with AMX tiles small bf16 GEMMs go to the
sgl-kernel ``weight_packed_linear_cpu`` (bias cast to fp32), elsewhere to oneDNN
``onednn_mm`` (zentorch on AMD Zen builds), and the weight Parameter is emptied. A layer
with ``_cpu_skip_gemm_dispatch = True`` keeps its plain weight and runs
``torch.nn.functional.linear``. The offloader must keep wrapped layers plain (otherwise it
offloads nothing the layer reads), and the plain and packed bf16 kernels round
differently on some CPUs, so an offload case that differs from the baseline in *which
kernel* a layer runs is not a residency comparison.

Paths (``OFFLOAD_CPU_KERNEL_PATH``, set by the runner for every case of a CPU runtime):

* ``plain`` - every ``UnquantizedLinearMethod`` layer (all decoder linear layers; the LM
  head is an embedding method and keeps vLLM's dispatch in every case) gets
  ``_cpu_skip_gemm_dispatch = True`` before weight processing, baseline included. Baseline
  and offload cases then run the same kernel for every layer; weight residency is the only
  difference.
* ``packed`` - vLLM's stock dispatch untouched. Only meaningful where no layer is wrapped
  (baseline-only runs, e.g. to measure the stock kernels): the runner refuses offload
  cases with this path, because our offloader would turn its wrapped layers plain.

Observation: every processed layer's resulting ``cpu_linear`` is classified
(:func:`classify`) and, after the CPU model runner's ``load_model``, the process that
loaded the model prints one ``OFFLOAD_CPU_KERNELS <json>`` line (path asked for, count of
layers per kernel). The runner checks it against the path it asked for.

Not modelled: quantised linear methods (their own kernels), non-CPU platforms (the patch
does nothing there: ``current_platform.is_cpu()`` is False).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections import Counter
from enum import StrEnum
from types import ModuleType
from typing import Any

from results_schema.rules.log_rule import OFFLOAD_CPU_KERNELS

CPU_KERNEL_ENV = "OFFLOAD_CPU_KERNEL_PATH"
"""Environment variable naming the CPU GEMM kernel path of a case: ``plain`` or ``packed``."""

class CpuKernelPath(StrEnum):
    """GEMM kernel path of a CPU runtime (see module docstring); also the config's value set."""

    plain = "plain"
    packed = "packed"


CPU_KERNEL_PATHS = tuple(p.value for p in CpuKernelPath)
"""Selectable CPU kernel paths (see module docstring)."""

REPORT_PREFIX = OFFLOAD_CPU_KERNELS
"""Prefix of the one line the model-loading process prints after ``load_model`` (``results_schema.rules.log_rule``)."""

PLAIN_KERNEL = "torch_linear"
"""Kernel name of the plain path (``torch.nn.functional.linear`` on the layer's weight)."""

LINEAR_MODULE = "vllm.model_executor.layers.linear"
_PATCHED = "_offload_cpu_kernel_patched"
_counts: Counter[str] = Counter()


def requested_path() -> str | None:
    """``OFFLOAD_CPU_KERNEL_PATH`` when it names a known path, else ``None``.

    Raises:
        ValueError: the variable is set to anything other than ``plain``/``packed``.
    """
    value = os.environ.get(CPU_KERNEL_ENV, "")
    if not value:
        return None
    if value not in CPU_KERNEL_PATHS:
        raise ValueError(f"{CPU_KERNEL_ENV}={value!r}: allowed values are {', '.join(CPU_KERNEL_PATHS)}")
    return value


def classify(cpu_linear: Any) -> str:
    """Name the GEMM kernel a layer's ``cpu_linear`` callable runs.

    ``torch.nn.functional.linear`` itself (the ``_cpu_skip_gemm_dispatch`` path) or vLLM's
    fallback lambda calling it -> ``torch_linear``; vLLM's closures are recognised by the
    op they call (``co_names`` of the lambda): ``weight_packed_linear_cpu`` ->
    ``sgl_weight_packed``, ``onednn_mm`` -> ``onednn``, ``zentorch_linear_unary`` ->
    ``zentorch``; anything else ``other``; a layer without ``cpu_linear`` -> ``none``.
    """
    import torch

    if cpu_linear is None:
        return "none"
    if cpu_linear is torch.nn.functional.linear:
        return PLAIN_KERNEL
    names = set(getattr(getattr(cpu_linear, "__code__", None), "co_names", ()) or ())
    if "weight_packed_linear_cpu" in names:
        return "sgl_weight_packed"
    if "onednn_mm" in names:
        return "onednn"
    if "zentorch_linear_unary" in names:
        return "zentorch"
    if "linear" in names and "functional" in names:
        return PLAIN_KERNEL
    return "other"


def patch_linear_module(module: ModuleType, path: str | None = None) -> None:
    """Wrap ``UnquantizedLinearMethod.process_weights_after_loading`` (idempotent).

    The path is read from ``OFFLOAD_CPU_KERNEL_PATH`` at each call (``path`` is the value at
    install time, kept for the signature). On the CPU platform with ``plain`` the layer gets
    ``_cpu_skip_gemm_dispatch`` before vLLM's dispatch runs; with either path the resulting
    kernel is counted; unset: vLLM's behaviour, nothing counted.
    """
    cls = getattr(module, "UnquantizedLinearMethod", None)
    if cls is None or getattr(cls.process_weights_after_loading, _PATCHED, False):
        return
    original = cls.process_weights_after_loading

    @functools.wraps(original)
    def process_weights_after_loading(self: Any, layer: Any) -> Any:
        from vllm.platforms import current_platform

        path = requested_path() or ""  # read per call: one process may build several engines (tests)
        on_cpu = current_platform.is_cpu() and bool(path)
        if on_cpu and path == "plain":
            layer._cpu_skip_gemm_dispatch = True
        result = original(self, layer)
        if on_cpu:
            _counts[classify(getattr(layer, "cpu_linear", None))] += 1
        return result

    setattr(process_weights_after_loading, _PATCHED, True)
    cls.process_weights_after_loading = process_weights_after_loading


def report(path: str) -> dict[str, Any]:
    """The kernel report of this process: path asked for and layers per kernel."""
    kernels = dict(sorted(_counts.items()))
    return {"path": path, "layers": sum(kernels.values()), "kernels": kernels}


def print_report_once() -> None:
    """Print ``OFFLOAD_CPU_KERNELS <json>`` for the layers processed since the last report.

    Called after each ``load_model``: one line per loaded model (a case process loads one),
    nothing when no path is active or no layer was processed.
    """
    path = requested_path()
    if path is None or not _counts:
        return
    line = REPORT_PREFIX + json.dumps(report(path), sort_keys=True)
    _counts.clear()
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def install(when_imported: Any) -> str | None:
    """Install the patch for the requested path (via ``when_imported``); returns the path or None."""
    path = requested_path()
    if path is not None:
        when_imported(LINEAR_MODULE, functools.partial(patch_linear_module, path=path))
    return path
