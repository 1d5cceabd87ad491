"""The in-process A/B switch of the offloader (offload.inprocess) on the CPU backend.

Claims: in mode A every offloaded parameter is a view into the offloader's packed host buffer and forward passes
issue no copy (the wait / refill ops are skipped and counted); in mode B the parameters are views into their slots
again and prefetch copies resume; every layer sees its own weights in both modes and across switches; the switch
refuses an asynchronous (accelerator) backend and an offloader without post_init; the ABBA order and the designs'
modes are as documented.
"""

from __future__ import annotations

import pytest
import torch

from offload import copy_protocol, inprocess
from offload.backend import CpuBackend
from offload.host_storage import resolve
from offload.prefetch import CurrentPrefetchOffloader, SyncOffloader
from tests.offload.fakes import FakeBackend, ProbeLayer


class CountingCpu(CpuBackend):
    """The CPU backend, counting every host-to-slot copy (the sync reference's ``copy``; the prefetch protocol's
    ``issue_copy``, counted by ``_count_issue_copy``)."""

    def __init__(self) -> None:
        self.copies = 0

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.copies += 1
        super().copy(dst, src)


@pytest.fixture(autouse=True)
def _count_issue_copy(monkeypatch):
    """Every ``copy_protocol.issue_copy`` (the CPU path copies there with ``copy_``) adds to its backend's count."""
    real = copy_protocol.issue_copy

    def counted(b, copy_stream, w, tag=None):
        if isinstance(b, CountingCpu):
            b.copies += 1
        real(b, copy_stream, w, tag)

    monkeypatch.setattr(copy_protocol, "issue_copy", counted)


def _build(cls=CurrentPrefetchOffloader, layers: int = 6, g: int = 2, step: int = 1):
    log: list = []
    backend = CountingCpu()
    off = cls(g, 1, step, backend_factory=lambda device: backend)
    mods = off.wrap_modules(ProbeLayer(i, log) for i in range(layers))
    off.post_init()
    return off, backend, mods, log


def _forward(mods, log) -> float:
    log.clear()
    x = torch.zeros(())
    for m in mods:
        x = m(x)
    for _, layer, _, w, b in log:
        assert (w, b) == (layer + 1, -(layer + 1)), f"layer {layer} read another module's weights"
    return float(x)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("cls", [CurrentPrefetchOffloader, SyncOffloader])
def test_mode_a_points_parameters_at_the_host_buffer_and_issues_no_copy(cls):
    off, backend, mods, log = _build(cls)
    want = _forward(mods, log)
    inprocess.set_in_place(off, True)
    for w in off.wrapped:
        for name in w.param_names:
            p = resolve(w.module, name)
            assert p.data_ptr() == w.host[name].data_ptr()
            assert _storage(p) == _storage(w.host_flat)
    before, issued = backend.copies, off.copies_issued
    assert _forward(mods, log) == want
    assert _forward(mods, log) == want
    assert backend.copies == before and off.copies_issued == issued
    assert off.in_place_skips > 0
    assert inprocess.state(off)["in_place"] is True


@pytest.mark.parametrize("cls", [CurrentPrefetchOffloader, SyncOffloader])
def test_mode_b_points_parameters_back_at_their_slots_and_copies_resume(cls):
    off, backend, mods, log = _build(cls)
    want = _forward(mods, log)
    inprocess.set_in_place(off, True)
    _forward(mods, log)
    inprocess.set_in_place(off, False)
    arenas = {_storage(a) for a in off.buffer_pool.arenas}
    for w in off.wrapped:
        for name in w.param_names:
            p = resolve(w.module, name)
            assert _storage(p) in arenas
            assert p.data_ptr() == off.buffer_pool.view(w.slot, w.keys[name]).data_ptr()
    before = backend.copies
    for _ in range(3):  # B A B ... every layer keeps its own weights across switches
        assert _forward(mods, log) == want
    assert backend.copies > before
    assert inprocess.state(off)["in_place"] is False


def test_switching_between_rounds_keeps_every_layer_on_its_own_weights_with_several_slots():
    off, _backend, mods, log = _build(layers=9, g=3, step=2)
    want = _forward(mods, log)
    for mode in inprocess.round_arms(8):
        inprocess.set_in_place(off, mode == inprocess.IN_PLACE)
        assert _forward(mods, log) == want
    assert off.fallback_loads == 0


def test_the_switch_refuses_an_accelerator_backend():
    fake = FakeBackend("eager")
    off = CurrentPrefetchOffloader(2, 1, 1, backend_factory=lambda device: fake)
    off.wrap_modules(ProbeLayer(i, []) for i in range(4))
    off.post_init()
    with pytest.raises(ValueError, match="CPU only"):
        inprocess.set_in_place(off, True)


def test_the_switch_refuses_an_offloader_before_post_init():
    off = CurrentPrefetchOffloader(2, 1, 1, backend_factory=lambda device: CountingCpu())
    off.wrap_modules(ProbeLayer(i, []) for i in range(4))
    with pytest.raises(ValueError, match="after post_init"):
        inprocess.set_in_place(off, True)


def test_rounds_run_in_abba_order_and_the_designs_set_the_modes():
    assert inprocess.round_arms(8) == tuple("ABBAABBA")
    assert inprocess.round_modes("abba", 4) == tuple("ABBA")
    assert inprocess.round_modes("aa", 4) == tuple("AAAA")
    assert inprocess.round_modes("bb", 4) == tuple("BBBB")
    assert [inprocess.whole_blocks(n) for n in (1, 3, 4, 5, 8)] == [4, 4, 4, 8, 8]
    with pytest.raises(ValueError, match="multiple of 4"):
        inprocess.round_arms(6)
    with pytest.raises(ValueError, match="not one of abba, aa, bb"):
        inprocess.round_modes("ab", 4)


def test_worker_set_mode_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="is not 'A' or 'B'"):
        inprocess.worker_set_mode(None, "C")
