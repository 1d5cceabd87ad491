"""The config's choice fields are ``StrEnum`` types whose member names are their values."""

from __future__ import annotations

from enum import StrEnum

import pytest

from conf import choices
from offload.cpu_kernels import CpuKernelPath
from offload.faults import OffloadFault
from results_schema.records import base

ENUMS = [v for m in (choices, base) for v in vars(m).values()
         if isinstance(v, type) and issubclass(v, StrEnum) and v is not StrEnum]


@pytest.mark.parametrize("enum_type", [*ENUMS, CpuKernelPath, OffloadFault], ids=lambda e: e.__name__)
def test_member_names_are_their_values(enum_type: type[StrEnum]) -> None:
    # OmegaConf looks members up by name and writes names with enum_to_str=True
    assert [m.name for m in enum_type] == [m.value for m in enum_type]


def test_the_shared_value_sets_are_found() -> None:
    # the parametrisation above covers the sets results_schema defines for the config and the records
    assert {e.__name__ for e in ENUMS} >= {"Implementation", "OffloadBackend", "PromptMode", "Device"}
