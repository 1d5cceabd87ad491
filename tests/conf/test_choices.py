"""The config's choice fields are enums; three also exist as ``results_schema`` ``Literal`` types."""

from __future__ import annotations

from enum import StrEnum
from typing import get_args

import pytest

from conf import choices
from offload.cpu_kernels import CpuKernelPath
from offload.faults import OffloadFault
from results_schema.base import Implementation, OffloadBackend
from results_schema.models import WorkloadSpec

ENUMS = [v for v in vars(choices).values() if isinstance(v, type) and issubclass(v, StrEnum) and v is not StrEnum]


@pytest.mark.parametrize("enum_type", [*ENUMS, CpuKernelPath, OffloadFault], ids=lambda e: e.__name__)
def test_member_names_are_their_values(enum_type: type[StrEnum]) -> None:
    # OmegaConf looks members up by name and writes names with enum_to_str=True
    assert [m.name for m in enum_type] == [m.value for m in enum_type]


def test_the_enums_equal_the_result_schemas_literals() -> None:
    # results_schema imports nothing of conf: its Literal types (what records accept) are the one copy left
    assert tuple(choices.Implementation) == get_args(Implementation)
    assert tuple(choices.OffloadBackend) == get_args(OffloadBackend)
    assert tuple(choices.PromptMode) == get_args(WorkloadSpec.model_fields["prompt_mode"].annotation)
