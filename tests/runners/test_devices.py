"""Logical -> physical device mapping from npu-smi / nvidia-smi output."""

from __future__ import annotations

import pytest

from runners.identity.devices import DeviceError, cpu_identity, cuda_identity, npu_identity, parse_npu_smi_mapping

NPU_SMI_M = """\
        NPU ID                         Chip ID                        Chip Logic ID                  Chip Name
        0                              0                              0                              Ascend 910B3
        0                              1                              -                              Mcu
        4                              0                              1                              Ascend 910B3
        4                              1                              -                              Mcu
"""


def test_parses_npu_smi_mapping_skipping_mcu_rows() -> None:
    assert parse_npu_smi_mapping(NPU_SMI_M) == {0: (0, "Ascend 910B3"), 1: (4, "Ascend 910B3")}


def test_visible_logical_npu_maps_to_physical_npu_id() -> None:
    ident = npu_identity({"ASCEND_RT_VISIBLE_DEVICES": "1"}, NPU_SMI_M)
    assert (ident.logical_index, ident.physical_index, ident.source) == (1, 4, "npu-smi info -m")


def test_explicit_npu_index_overrides() -> None:
    ident = npu_identity({"ASCEND_RT_VISIBLE_DEVICES": "1", "NPU_INDEX": "6"}, NPU_SMI_M)
    assert (ident.physical_index, ident.source) == (6, "NPU_INDEX")


def test_unknown_logical_npu_is_an_error() -> None:
    with pytest.raises(DeviceError, match="logical NPU 3"):
        npu_identity({"ASCEND_RT_VISIBLE_DEVICES": "3"}, NPU_SMI_M)


def test_cuda_mapping_by_index_and_uuid() -> None:
    out = "0, GPU-aaa, NVIDIA H100\n1, GPU-bbb, NVIDIA H100\n"
    assert cuda_identity({"CUDA_VISIBLE_DEVICES": "1"}, out).physical_index == 1
    assert cuda_identity({"CUDA_VISIBLE_DEVICES": "GPU-bbb"}, out).physical_index == 1
    assert cuda_identity({}, out).physical_index == 0


def test_cpu_identity_counts_cores() -> None:
    assert cpu_identity().count >= 1
