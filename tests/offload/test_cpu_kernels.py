"""offload.cpu_kernels: kernel classification and the process_weights_after_loading patch (no engine)."""

from __future__ import annotations

import json
import types

import pytest
import torch

from offload import cpu_kernels


def test_classify_names_vllm_dispatch_closures() -> None:
    ops = types.SimpleNamespace(weight_packed_linear_cpu=None, onednn_mm=None)
    assert cpu_kernels.classify(torch.nn.functional.linear) == "torch_linear"
    assert cpu_kernels.classify(lambda x, w, b: torch.nn.functional.linear(x, w, b)) == "torch_linear"
    assert cpu_kernels.classify(lambda x, w, b: ops.weight_packed_linear_cpu(x, w, 1, b)) == "sgl_weight_packed"
    assert cpu_kernels.classify(lambda x, w, b: ops.onednn_mm(None, x, b)) == "onednn"
    assert cpu_kernels.classify(lambda x, w, b: x) == "other"
    assert cpu_kernels.classify(None) == "none"


def test_bad_path_names_the_variable_and_the_allowed_values(monkeypatch) -> None:
    monkeypatch.setenv(cpu_kernels.CPU_KERNEL_ENV, "fast")
    with pytest.raises(ValueError, match="OFFLOAD_CPU_KERNEL_PATH='fast': allowed values are plain, packed"):
        cpu_kernels.requested_path()


@pytest.mark.parametrize("path, skip", [("plain", True), ("packed", False), ("", False)])
def test_patch_sets_skip_flag_only_for_plain_and_reports_kernels(monkeypatch, capsys, path, skip) -> None:
    seen = {}

    class UnquantizedLinearMethod:
        def process_weights_after_loading(self, layer):
            seen["skip"] = getattr(layer, "_cpu_skip_gemm_dispatch", False)
            layer.cpu_linear = torch.nn.functional.linear if seen["skip"] else (lambda x, w, b: ops.onednn_mm(x))

    ops = types.SimpleNamespace(onednn_mm=None)
    module = types.ModuleType("fake_linear")
    module.UnquantizedLinearMethod = UnquantizedLinearMethod
    monkeypatch.setenv(cpu_kernels.CPU_KERNEL_ENV, path)
    cpu_kernels._counts.clear()
    cpu_kernels.patch_linear_module(module)
    cpu_kernels.patch_linear_module(module)  # idempotent
    layer = torch.nn.Module()
    UnquantizedLinearMethod().process_weights_after_loading(layer)
    assert seen["skip"] is skip
    cpu_kernels.print_report_once()
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(cpu_kernels.REPORT_PREFIX)]
    if not path:
        assert out == []
    else:
        kernel = "torch_linear" if skip else "onednn"
        assert [json.loads(ln[len(cpu_kernels.REPORT_PREFIX):]) for ln in out] == [
            {"path": path, "layers": 1, "kernels": {kernel: 1}}]
