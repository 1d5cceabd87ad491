"""Planning of in-process cases (runners.planning.inprocess_check) and the experiment that runs them.

Claims: an in-process case plans on a CPU throughput phase with this project's offloader, an eager model, the engine
core in the case process, no baseline and no sequential looks; each other setting is refused with one line naming
the value and what is allowed; ``+experiment=inprocess`` plans the default's two points and one A/A case in 3
processes each, and every case carries its design into its case file's model.
"""

from __future__ import annotations

import dataclasses

import pytest

from conf.schema_matrix import CaseConfig, MatrixConfig, SequentialConfig
from conf.schema_stack import RuntimeConfig, WorkloadConfig
from results_schema.records.base import Device, Implementation
from runners.errors import PlanError
from runners.kinds.registry import kind as case_kind
from runners.planning.inprocess_check import check_in_process

CPU = RuntimeConfig(name="cpu_measure", device=Device.cpu, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
CASE = CaseConfig(implementation=Implementation.current, group_size=2, num_in_group=1, in_process="abba")
MATRIX = MatrixConfig(name="p", kind="throughput", baseline=False)


def _check(case=CASE, kind="throughput", matrix=MATRIX, workload=None, runtime=CPU) -> None:
    check_in_process("phase 'p', case 'c'", case, case_kind(kind), matrix, workload or WorkloadConfig(), runtime)


def test_an_in_process_case_plans_on_a_cpu_throughput_phase():
    _check()
    _check(dataclasses.replace(CASE, in_process="aa", implementation=Implementation.sync))
    _check(dataclasses.replace(CASE, in_process=None, implementation=Implementation.baseline, group_size=0),
           runtime=RuntimeConfig(name="cuda", device=Device.cuda))  # null: nothing is checked


@pytest.mark.parametrize(("change", "message"), [
    (dict(case=dataclasses.replace(CASE, in_process="ab")), "in_process 'ab': allowed abba, aa, bb or null"),
    (dict(kind="ttft"), "needs a phase kind that allows it"),
    (dict(case=dataclasses.replace(CASE, implementation=Implementation.official)), "implementation current or sync"),
    (dict(case=dataclasses.replace(CASE, group_size=0, num_in_group=0)), "with offload"),
    (dict(runtime=RuntimeConfig(name="cuda", device=Device.cuda, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})),
     "CPU only"),
    (dict(runtime=RuntimeConfig(name="cpu", device=Device.cpu)), "VLLM_ENABLE_V1_MULTIPROCESSING: '0'"),
    (dict(workload=WorkloadConfig(enforce_eager=False)), "eager model"),
    (dict(matrix=dataclasses.replace(MATRIX, baseline=True)), "without a baseline"),
    (dict(matrix=dataclasses.replace(MATRIX, sequential=SequentialConfig(looks=[3, 4]))), "without sequential"),
])
def test_each_other_setting_is_refused_naming_the_value(change, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _check(**change)
