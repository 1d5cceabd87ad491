"""Negative-control faults of our offloader (``offload.faults``): what they corrupt, once, and what they refuse."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from offload.faults import FAULT_ENV, FAULTS, apply_fault, apply_fault_from_env


class FakeOffloader:
    def __init__(self, layers: tuple[int, ...]) -> None:
        self.wrapped = [SimpleNamespace(layer=i, host_flat=torch.ones(8, dtype=torch.bfloat16)) for i in layers]
        self.reloads = 0

    def _initial_loads(self) -> None:
        self.reloads += 1


def test_zero_host_copy_zeroes_only_the_first_offloaded_layer_and_refills_the_slots(capsys) -> None:
    off = FakeOffloader((3, 7))
    line = apply_fault(off, "zero_host_copy")
    assert line == "OFFLOAD_FAULT applied zero_host_copy: host copy of layer 3 zeroed (16 bytes)"
    assert capsys.readouterr().out.strip() == line
    assert not off.wrapped[0].host_flat.any() and off.wrapped[1].host_flat.all()
    assert off.reloads == 1
    assert apply_fault(off, "zero_host_copy") == line and off.reloads == 1  # applied once per offloader


def test_unknown_fault_and_nothing_to_corrupt_are_refused() -> None:
    with pytest.raises(ValueError, match=r"OFFLOAD_FAULT='flip' is not a known fault; allowed: \['zero_host_copy', 'decode_batch_ge_72'\]"):
        apply_fault(FakeOffloader((1,)), "flip")
    with pytest.raises(ValueError, match="wrapped no layer"):
        apply_fault(FakeOffloader(()), "zero_host_copy")


def test_no_variable_no_fault(monkeypatch) -> None:
    off = FakeOffloader((1,))
    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert apply_fault_from_env(off) is None
    monkeypatch.setenv(FAULT_ENV, "")
    assert apply_fault_from_env(off) is None and off.wrapped[0].host_flat.all() and off.reloads == 0
