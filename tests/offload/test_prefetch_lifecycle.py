"""Offloader lifecycle details at the fake device boundary.

Claims: garbage collection of an offloader never synchronizes a stream (its arenas are
marked used by the copy stream instead); wrap-time host copies are released after
``post_init`` and the pinned bytes left are the packed buffers; on CPU (the real backend) the original parameter
storages are freed by ``post_init``, so no second copy of an offloaded layer stays alive (the host-memory report's
CPU model rests on it: ``analysis.report.host_memory``); a layer whose forward has
no tensor activation still goes through the custom ops; ``wrap_modules`` may be called
again after a call that wrapped nothing (as upstream), not after one that wrapped layers;
a parameter in an Ascend FRACTAL_NZ format is refused with a message naming it.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import offload.host_storage as host_storage
import offload.prefetch as prefetch
from offload import ops
from offload.host_storage import UnsupportedWeightFormat
from offload.prefetch import CurrentPrefetchOffloader
from tests.offload.fakes import FakeBackend, ProbeLayer


def _build(m=3, step=2, mode="lazy"):
    log: list = []
    fake = FakeBackend(mode)
    off = CurrentPrefetchOffloader(1, 1, step, backend_factory=lambda device: fake)
    layers = off.wrap_modules(ProbeLayer(i, log) for i in range(m))
    return off, fake, layers, log


def test_garbage_collection_never_synchronizes_and_arenas_are_recorded_on_the_copy_stream():
    off, fake, layers, _ = _build()
    off.post_init()
    recorded = {t[2] for t in fake.trace if t[0] == "record_stream" and t[1] == off.copy_stream.name}
    assert recorded == {a.data_ptr() for a in off.buffer_pool.arenas}
    ref = weakref.ref(off)
    del off, layers
    gc.collect()
    assert ref() is None
    assert not [t for t in fake.trace if t[0] == "synchronize"]


def test_wrap_time_host_copies_are_released_and_pinned_bytes_are_the_packed_buffers():
    off, fake, layers, _ = _build()
    wrap_time = [weakref.ref(t) for w in off.wrapped for t in w.host.values()]
    off.post_init()
    gc.collect()
    assert all(r() is None for r in wrap_time)
    assert off.pinned_host_bytes == sum(w.host_flat.numel() for w in off.wrapped)
    assert off.released_host_bytes == off.evidence_state()["offloaded_bytes"]


def test_on_cpu_post_init_frees_the_original_storages_of_every_offloaded_parameter():
    from torch.multiprocessing.reductions import StorageWeakRef

    off = CurrentPrefetchOffloader(2, 1, 1)  # the real CPU backend (backend_for_device)
    layers = off.wrap_modules(ProbeLayer(i, [], width=4096) for i in range(4))
    originals = [StorageWeakRef(p.data.untyped_storage()) for w in off.wrapped for p in w.module.parameters()]
    kept = [p.data.untyped_storage().data_ptr() for i in (0, 2) for p in layers[i].parameters()]
    off.post_init()
    gc.collect()
    assert off.device_type == "cpu" and len(originals) == 4
    assert all(r.expired() for r in originals)  # freed: the packed host buffers and the slot are all that hold them
    assert [p.data.untyped_storage().data_ptr() for i in (0, 2) for p in layers[i].parameters()] == kept
    x = torch.zeros(1)
    assert [float(layer(x)) for layer in layers] == [float(ProbeLayer(i, [], width=4096)(x)) for i in range(4)]


class _NoActivation(torch.nn.Module):
    def __init__(self, i):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((4,), float(i + 1)), requires_grad=False)

    def forward(self, scale: float = 1.0):
        return None  # nothing to hand to the ops


def test_a_layer_without_tensor_activation_still_goes_through_the_custom_ops(monkeypatch):
    calls = []
    monkeypatch.setattr(ops, "wait_prefetch", lambda x, oid, i: calls.append(("wait", i, x)))
    monkeypatch.setattr(ops, "start_prefetch", lambda x, oid, i: calls.append(("start", i, x)))
    off = CurrentPrefetchOffloader(1, 1, 1, backend_factory=lambda d: FakeBackend("eager"))
    layers = off.wrap_modules(_NoActivation(i) for i in range(2))
    off.post_init()
    layers[0](2.0)
    assert [(c[0], c[1]) for c in calls] == [("wait", 0), ("start", 1)]  # refill the next user of the slot
    assert all(c[2] is off._token for c in calls)


def test_second_wrap_modules_is_allowed_only_after_one_that_wrapped_nothing():
    off = CurrentPrefetchOffloader(2, 1, 1, {"nonexistent"}, backend_factory=lambda d: FakeBackend("eager"))
    assert len(off.wrap_modules(torch.nn.Linear(2, 2) for _ in range(2))) == 2
    assert off.wrapped == []
    off.offload_params = ()
    off.wrap_modules(ProbeLayer(i, []) for i in range(4))
    assert [w.layer for w in off.wrapped] == [1, 3]
    with pytest.raises(RuntimeError, match=r"only be called once with modules to offload .*layers \[1, 3\]"):
        off.wrap_modules(ProbeLayer(i, []) for i in range(4))


def test_fractal_nz_parameters_are_refused_with_a_clear_error(monkeypatch):
    off, fake, layers, _ = _build()
    monkeypatch.setattr(host_storage, "npu_format", lambda t: 29)
    with pytest.raises(UnsupportedWeightFormat, match=r"layer 0 parameter 'weight' is stored in npu format 29"):
        off.post_init()
    monkeypatch.setattr(host_storage, "npu_format", lambda t: host_storage.ACL_FORMAT_ND)
    off2, *_ = _build()
    off2.post_init()
    assert off2.weight_format == "ND"


def test_the_state_line_names_where_the_slots_and_host_buffers_landed(capsys):
    off, _fake, _layers, _ = _build()
    off.post_init()
    placed = off.placement_state()
    assert placed["slot_address_mod_2mib"] == [a.data_ptr() % (2 * 1024 * 1024) for a in off.buffer_pool.arenas]
    assert placed["host_buffer_address_mod_2mib"] == [w.host_flat.data_ptr() % (2 * 1024 * 1024) for w in off.wrapped]
    assert len(placed["host_buffer_address_mod_2mib"]) == len(off.wrapped) >= 1
    off._log_state()
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("OFFLOAD_STATE "))
    assert '"slot_address_mod_2mib": ' in line and '"host_buffer_address_mod_2mib": ' in line
