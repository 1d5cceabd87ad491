"""Planning check of an in-process case (``CaseConfig.in_process``, ``offload.inprocess``).

What is modelled: the conditions under which a case may run its measured rounds as A and B rounds inside one
process (docs/inprocess.md): a phase kind that allows it (``CaseKind.in_process``: throughput), this project's
offloader with offload (``current`` / ``sync``), a CPU runtime whose engine core runs in the case process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the case switches the offloader through ``LLM.collective_rpc``), an eager
model, no sequential looks and no baseline in the phase (the pairs of an in-process case share prompts, so its token
digests are not a baseline's, and it is never compared with one).

What is deliberately not modelled: the switch itself (``offload.inprocess``), the estimate
(``analysis.comparison.inprocess``).
"""

from __future__ import annotations

from conf.schema_matrix import CaseConfig, MatrixConfig
from conf.schema_stack import RuntimeConfig, WorkloadConfig
from offload.inprocess import DESIGNS
from runners.errors import PlanError
from runners.incase.import_heap import ENGINE_IN_PROCESS_ENV, engine_in_process
from runners.kinds.base import CaseKind



def check_in_process(where: str, r: CaseConfig, kind: CaseKind, matrix: MatrixConfig, workload: WorkloadConfig,
                     runtime: RuntimeConfig) -> None:
    """Refuse an ``in_process`` case outside the conditions of the module docstring (nothing to do when null).

    Raises:
        PlanError: naming the value and what is allowed.
    """
    design = r.in_process
    if design is None:
        return
    if design not in DESIGNS:
        raise PlanError(f"{where}: in_process {design!r}: allowed {', '.join(DESIGNS)} or null")
    why = _refusal(r, kind, matrix, workload, runtime)
    if why:
        raise PlanError(f"{where}: in_process {design!r} {why}")


def _refusal(r: CaseConfig, kind: CaseKind, matrix: MatrixConfig, workload: WorkloadConfig,
             runtime: RuntimeConfig) -> str:
    impl = str(r.implementation)
    if not kind.in_process:
        return f"needs a phase kind that allows it (throughput), not {kind.name!r}"
    if impl not in ("current", "sync") or r.group_size < 1 or r.num_in_group < 1:
        return (f"needs implementation current or sync with offload (group_size, num_in_group >= 1), not {impl!r} "
                f"({r.group_size}, {r.num_in_group})")
    if str(runtime.device) != "cpu":
        return f"is CPU only (runtime {runtime.name!r} runs on {str(runtime.device)!r})"
    if not _engine_in_process(runtime.env):
        return (f"needs the engine core in the case process: runtime {runtime.name!r} must set "
                f"{ENGINE_IN_PROCESS_ENV}: '0' (e.g. runtime cpu_measure)")
    if not workload.enforce_eager:
        return "needs an eager model (workload.enforce_eager: true): a compiled graph keeps its own weight views"
    if matrix.sequential.looks or matrix.baseline:
        return (f"needs a phase without sequential looks ({list(matrix.sequential.looks)}) and without a baseline "
                f"(baseline: {matrix.baseline}): it is never compared with one")
    return ""


def _engine_in_process(env: dict[str, str]) -> bool:
    """The runtime's environment runs the engine core in the case process (as vLLM reads the switch); a value
    vLLM would refuse (not an integer) is not."""
    try:
        return engine_in_process(env)
    except ValueError:
        return False
