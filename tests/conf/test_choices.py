"""The config's choice fields are enums whose value sets equal the sets the other layers define."""

from __future__ import annotations

from enum import StrEnum
from typing import get_args

import pytest

from conf import choices
from results_schema.base import Implementation, OffloadBackend
from results_schema.models import WorkloadSpec

ENUMS = [v for v in vars(choices).values() if isinstance(v, type) and issubclass(v, StrEnum) and v is not StrEnum]


@pytest.mark.parametrize("enum_type", ENUMS, ids=lambda e: e.__name__)
def test_member_names_are_their_values(enum_type: type[StrEnum]) -> None:
    # OmegaConf looks members up by name and writes names with enum_to_str=True
    assert [m.name for m in enum_type] == [m.value for m in enum_type]


def test_value_sets_equal_the_other_layers() -> None:
    from offload.cpu_kernels import CPU_KERNEL_PATHS
    from runners.launching.executors import NODE_FAILURE_ACTIONS, SHARING_MODES
    from runners.planning.plan import KINDS

    assert tuple(choices.Implementation) == get_args(Implementation)
    assert tuple(choices.OffloadBackend) == get_args(OffloadBackend)
    assert tuple(choices.PromptMode) == get_args(WorkloadSpec.model_fields["prompt_mode"].annotation)
    assert tuple(choices.CpuKernelPath) == CPU_KERNEL_PATHS
    assert tuple(choices.PhaseKind) == KINDS
    assert tuple(choices.PerformanceSharing) == SHARING_MODES
    assert tuple(choices.NodeFailureAction) == NODE_FAILURE_ACTIONS
