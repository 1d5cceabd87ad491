"""Evidence hook on the published offloader's layout (implementation ``overlay``): module offloaders
without ``device`` (the published ``_PrefetchModuleOffloader``), the class name recorded, the cross-check
still failing closed. Uses the emulation in ``tests/fixtures/overlay_src`` (our code, not the published code)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import runners.incase.evidence_hook.offload_evidence_hook as hook
from offload import overlay
from results_schema.records.models import RuntimeEvidence

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "overlay_src"
LAYER_BYTES = (16 * 16 + 16) * 4 + 2 * 16 * 4  # Linear(16, 16) + LayerNorm(16), float32


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(hook, "_state", hook._State())
    path = tmp_path / "evidence" / "case-r0.json"
    monkeypatch.setenv("OFFLOAD_EVIDENCE_PATH", str(path))
    monkeypatch.setenv("OFFLOAD_IMPL", "overlay")
    monkeypatch.syspath_prepend(str(ROOT))
    return path


def layers(n: int = 8, width: int = 16):
    return (torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.LayerNorm(width)) for _ in range(n))


def _stale(g: int = 8, n: int = 3, step: int = 2):
    return overlay.create_overlay(g, n, step, (), pattern="overlay_emulation.prefetch:StaleRingOffloader",
                                  source_root=str(ROOT))


def test_published_layout_without_device_publishes_overlay_evidence_with_the_class_name(fresh, capsys):
    off = _stale()
    assert not any(hasattr(mo, "device") for mo in off.module_offloaders)
    hook.observe(off)
    off.wrap_modules(layers())
    assert not hasattr(off.module_offloaders[0], "device")  # vLLM's _ModuleOffloader has it; the published one not
    off.post_init()
    out = capsys.readouterr()
    assert "OFFLOAD_EVIDENCE_ERROR" not in out.err, out.err
    ev = RuntimeEvidence.model_validate_json(fresh.read_text())
    assert out.out.splitlines()[-1] == f"OFFLOAD_EVIDENCE {fresh.read_text()}"
    assert ev.implementation == "overlay"
    assert ev.offloader_class == "overlay_emulation.prefetch.StaleRingOffloader"
    assert ev.selected_layers == ev.wrapped_layers == (5, 6, 7) and ev.wrapped_count == 3
    assert ev.offloaded_bytes == 3 * LAYER_BYTES and ev.static_buffer_bytes == 2 * LAYER_BYTES
    assert ev.released_bytes == LAYER_BYTES and ev.post_init_called and ev.device == "cpu"
    assert (ev.offload_group_size, ev.offload_num_in_group, ev.offload_prefetch_step) == (8, 3, 2)


@pytest.mark.parametrize(("offloader_device", "param_device", "pool_device", "expected"), [
    ("npu:0", "meta", "meta", "npu"),          # the offloader's own device
    (None, "meta", "cpu", "meta"),             # the wrapped modules' parameters
    (None, None, "cpu", "cpu"),                # the buffer pool's buffers
])
def test_device_is_derived_from_the_offloader_the_params_or_the_buffers(offloader_device, param_device, pool_device,
                                                                        expected):
    module = torch.nn.Linear(2, 2, device=param_device) if param_device else torch.nn.Module()
    off = SimpleNamespace(module_offloaders=[SimpleNamespace(module=module)],
                          buffer_pool=SimpleNamespace(_buffers={"k": [torch.empty(1, device=pool_device)]}))
    if offloader_device:
        off.device = offloader_device
    assert hook._offloader_device(off) == expected
    off.module_offloaders[0].device = torch.device("cuda", 0)
    assert hook._offloader_device(off) == "cuda"  # vLLM's _ModuleOffloader.device wins when present


def test_cross_check_still_fails_closed_on_the_published_layout(fresh, capsys):
    off = _stale()
    hook.observe(off)
    off.wrap_modules(layers())
    stranger = next(layers(1))  # a module the offloader holds but wrap_modules never saw
    names = list(off.module_offloaders[0]._param_offloaders)
    off.module_offloaders.append(type(off.module_offloaders[0])(stranger, 99, names))
    off.post_init()
    err = capsys.readouterr().err
    assert "OFFLOAD_EVIDENCE_ERROR evidence cross-check failed: wrapped modules: expected every module" in err, err
    assert not fresh.exists()
