"""Where and when each case ran, and what each cluster node was: placement is evidence.

What is modelled:
* ``CasePlacement``: one line of ``<phase>-placements.jsonl`` per case *attempt*: the
  node (hostname, Ray node id, IP), the device (accelerator ids Ray granted), start and
  end wall times (Unix seconds, from the node's clock when the case ran to the end,
  from the driver's clock when the node was lost), the sharing rule the executor
  applied and how the attempt ended. A node lost mid-case leaves an attempt with
  ``outcome="node_lost"`` and its cause; the retry is a further attempt.
* ``NodeIdentity``: one line of ``cluster-manifest.jsonl`` per node and identity-gate
  session: the same pins as the driver's gate, observed in that node's runtime, and
  whether the node was used or excluded.

What is deliberately not modelled: the overlap rule itself (``analysis.validation.placement``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from results_schema.records.dispatch import FileKind
from results_schema.records.manifest import PinCheck
from results_schema.records.base import ExecutorKind, NonNegFloat, NonNegInt, StrictModel
from results_schema.records.identity import CaseKey

Sharing = Literal["sequential", "per_node", "per_accelerator"]
"""How performance cases may share a node: ``sequential`` (local executor: one case at a
time on this host), ``per_node`` (Ray default: at most one performance case per node at a
time), ``per_accelerator`` (Ray opt-in: one case per accelerator, cases share the node's
host links and host memory bandwidth)."""

PlacementOutcome = Literal["finished", "node_lost", "task_error"]


class CasePlacement(CaseKey):
    """One case attempt: which node and device ran it, from when to when, under which rule (after its
    ``CaseKey``)."""

    attempt: NonNegInt = Field(description="Attempt index (0 = first; retries after a lost node count up).")
    kind: Literal["performance", "accuracy"] = Field(
        description="performance: timings are the result (placement rule applies); accuracy: outputs only.")
    executor: ExecutorKind = Field(description="Executor that placed the case.")
    sharing: Sharing = Field(description="Sharing rule in force for performance cases (see ``Sharing``).")
    hostname: str = Field(description="Host name of the node that ran the case process.")
    node_id: str = Field(description="Ray node id (hex); 'local:<hostname>' for the local executor.")
    node_ip: str | None = Field(default=None, description="Node IP address as Ray knows it; null for local.")
    device: str = Field(description="Device of the case: 'cpu' or '<resource>:<ids>' (e.g. 'GPU:3').")
    accelerator_ids: tuple[str, ...] = Field(default=(), description="Accelerator ids Ray granted the task.")
    start_unix_s: NonNegFloat = Field(description="Wall time the case process started (Unix seconds).")
    end_unix_s: NonNegFloat = Field(description="Wall time the case process ended (Unix seconds).")
    times_from: Literal["node", "driver"] = Field(
        description="node: measured on the node around the case process; driver: the node was lost, times are "
        "the driver's submission and detection times (an upper bound of the attempt).")
    outcome: PlacementOutcome = Field(description="finished (the case process ended; its record says how), "
                                      "node_lost (node or worker died mid-case), task_error (Ray task failed).")
    cause: str | None = Field(default=None, description="Why the attempt did not finish (Ray error), else null.")
    pid: NonNegInt | None = Field(default=None, description="PID of the case process on its node, when known.")

    @model_validator(mode="after")
    def _check_times(self) -> "CasePlacement":
        if self.end_unix_s < self.start_unix_s:
            raise ValueError(f"end_unix_s ({self.end_unix_s}) < start_unix_s ({self.start_unix_s})")
        if (self.outcome == "finished") != (self.cause is None):
            raise ValueError(f"cause must be set exactly when outcome is not finished (outcome {self.outcome!r})")
        return self

    @property
    def wall_s(self) -> float:
        return self.end_unix_s - self.start_unix_s


class NodeIdentity(StrictModel):
    """The identity gate's view of one node, observed in that node's runtime."""

    schema_version: Literal[1] = Field(default=1, description="Schema version of this record (always 1).")
    checked_utc: str = Field(description="ISO-8601 UTC time of the check (driver clock).")
    node_id: str = Field(description="Ray node id (hex).")
    hostname: str = Field(description="Host name reported by the node.")
    node_ip: str | None = Field(default=None, description="Node IP address as Ray knows it.")
    resources: dict[str, float] = Field(description="Ray resources the node advertises (CPU, GPU, NPU, custom).")
    python_version: str = Field(description="sys.version on the node.")
    pins: tuple[PinCheck, ...] = Field(description="Every declared pin of every runtime of the run, observed on the node.")
    offload_tree_sha256: str = Field(description="SHA-256 of offload/ as the node's workers import it.")
    case_code_sha256: str = Field(description="SHA-256 of the case code on the node: the project files a case process "
                                  "imports (runners.identity.case_code).")
    model_sha256sums_sha256: str | None = Field(description="SHA-256 of the model's SHA256SUMS on the node; null if absent.")
    problems: tuple[str, ...] = Field(description="Every difference from the driver's identity (empty = same stack).")
    action: Literal["used", "excluded", "stopped_run"] = Field(
        description="used: passed; excluded: failed and left out (on_node_failure=exclude); stopped_run: failed and "
        "stopped the run (on_node_failure=stop).")

    @model_validator(mode="after")
    def _check_action(self) -> "NodeIdentity":
        if (self.action == "used") != (not self.problems):
            raise ValueError(f"action {self.action!r} contradicts problems {self.problems}")
        return self


FILE_KINDS: list[FileKind] = [
    FileKind("*-placements.jsonl", "results_schema.records.placement:CasePlacement", jsonl=True),
    FileKind("cluster-manifest.jsonl", "results_schema.records.placement:NodeIdentity", jsonl=True),
]
