"""Dataclass schemas of every config group, registered in Hydra's ConfigStore.

What is modelled: the typed shape of a run -- runtime (software stack, device,
pins, health gate), model, workload, executor, and a dict of phases, each phase
one matrix of cases. Experiments (``conf/experiment/*.yaml``) are global
overlays that pick group options and add phases (``/matrix@phases.<name>``).

What is deliberately not modelled here: case expansion, validation of offload
parameters, scheduling (``runners.plan``); identity checks (``runners.identity``).
This module holds schemas only.

Conventions: a pin whose value is ``???`` is *declared but not provided*; the
identity gate refuses to run until it is given (fail closed, never "NA").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class PinsConfig:
    """Identity pins declared by a runtime (checked where declared, fail closed).

    Attributes:
        tools: executables that must be on PATH (``npu-smi``, ``nvidia-smi``).
        packages: distribution name -> PEP 440 version or specifier (``0.32.0``, ``==0.23.*``).
        package_trees: distribution name -> SHA-256 of its installed file tree (RECORD files).
        wheels: wheel path -> SHA-256 of the file.
        source_trees: source checkout path -> SHA-256 of its file tree.
        source_commits: source checkout path -> git commit (``git rev-parse HEAD``).
        files: driver / toolkit file path -> SHA-256 (e.g. CANN ``version.info``).
    """

    tools: List[str] = field(default_factory=list)
    packages: Dict[str, str] = field(default_factory=dict)
    package_trees: Dict[str, str] = field(default_factory=dict)
    wheels: Dict[str, str] = field(default_factory=dict)
    source_trees: Dict[str, str] = field(default_factory=dict)
    source_commits: Dict[str, str] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)


@dataclass
class RuntimeConfig:
    """One software stack on one device kind.

    Attributes:
        name: ``cpu``, ``cuda``, ``ascend_latest``, ``ascend_native_v018``.
        device: device kind the model runs on: ``cpu``, ``cuda``, ``npu``.
        env: extra environment for every case process (e.g. ``VLLM_CPU_KVCACHE_SPACE``).
        health_command: argv of the per-phase health gate; null = no gate.
        health_timeout_s: seconds before the health command counts as failed.
        visible_devices_env: variable naming the visible logical devices
            (``CUDA_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``); null on CPU.
        ray_resource: Ray resource one case asks for: ``GPU`` (num_gpus=1), a custom
            resource name (``NPU``), or null (CPU: num_cpus only).
        pins: identity pins of this stack.
        report_packages: distributions whose versions are recorded in the manifest.
    """

    name: str = MISSING
    device: str = MISSING
    env: Dict[str, str] = field(default_factory=dict)
    health_command: Optional[List[str]] = None
    health_timeout_s: float = 60.0
    visible_devices_env: Optional[str] = None
    ray_resource: Optional[str] = None
    pins: PinsConfig = field(default_factory=PinsConfig)
    report_packages: List[str] = field(default_factory=list)


@dataclass
class TinyModelConfig:
    """Arguments of ``runners.tiny_model.ensure_tiny_model`` (random-weight Qwen2)."""

    num_layers: int = 8
    hidden_size: int = 128
    seed: int = 0


@dataclass
class ModelConfig:
    """The model every case of the run loads.

    Attributes:
        name: short name used in reports.
        source: ``tiny`` (built locally into ``cache_dir``) or ``path`` (a local directory).
        path: model directory for ``source=path`` (``???`` until given).
        num_layers: decoder layers (used to size and check the selection).
        revision: upstream revision of the weights, recorded and pinned when set.
        sha256sums_sha256: pin: SHA-256 of the model's ``SHA256SUMS`` file (``???`` = required, null = record only).
        tiny: builder arguments for ``source=tiny``.
        cache_dir: where tiny models are built (relative = repository root).
    """

    name: str = MISSING
    source: str = "path"
    path: Optional[str] = None
    num_layers: int = MISSING
    revision: Optional[str] = None
    sha256sums_sha256: Optional[str] = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    cache_dir: str = ".cache/models"


@dataclass
class WorkloadConfig:
    """Offline-throughput workload (fields of ``results_schema.models.WorkloadSpec``)."""

    num_prompts: int = 8
    input_len: int = 128
    max_tokens: int = 64
    max_model_len: int = 512
    seed: int = 0
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    gpu_memory_utilization: float = 0.5
    warmup_rounds: int = 1
    measured_rounds: int = 3
    enable_prefix_caching: bool = False
    prompts_vary_per_round: bool = True
    temperature: float = 0.0


@dataclass
class PointConfig:
    """One offload point ``(G, N)`` expanded once per implementation of the matrix."""

    g: int = MISSING
    n: int = MISSING
    prefetch_step: int = 1
    params: List[str] = field(default_factory=list)
    backend: str = "auto"


@dataclass
class CaseConfig:
    """One explicit case (appended after the generated ones).

    Attributes:
        label: unique in the phase; null = generated (``current_g4_n1``).
        implementation: ``baseline``, ``current``, ``official``, ``sync``.
        expect_error: regex; the case is expected to fail with an error matching it
            (``ValueError: offload_num_in_group``, ``AssertionError``). It is then
            exempt from the pre-launch validation and its failure record is expected.
    """

    implementation: str = MISSING
    label: Optional[str] = None
    group_size: int = 0
    num_in_group: int = 0
    prefetch_step: int = 1
    params: List[str] = field(default_factory=list)
    backend: str = "auto"
    expect_error: Optional[str] = None


@dataclass
class MatrixConfig:
    """One phase: a list of cases, repeats, rounds and a schedule.

    Cases = baseline (if ``baseline``) + every point x every implementation (point
    order, implementations in list order) + ``cases``.

    Attributes:
        name: matrix name (report only).
        kind: ``throughput`` (bench_one), ``ttft`` (bench_one, max_tokens=1 proxy),
            ``stability`` (bench_one, many sequential 1-prompt rounds, every output
            non-empty), ``accuracy`` (``runners.accuracy``).
        order: phases run in ascending order (ties: composition order).
        repeats: repeats per case.
        repeats_by_label: label -> repeats, overriding ``repeats``.
        rotate: repeat r starts at case index r (rotated order); false = same order.
        cooldown_s: sleep between two case processes.
        case_timeout_s: wall limit of one case process (TERM, then KILL after ``kill_grace_s``).
        runtime: phase-specific runtime (e.g. the native stack); null = the run's runtime.
        num_prompts ... max_tokens: workload overrides for this phase; null = workload's.
        accuracy_tasks: tasks for ``kind=accuracy`` phases (one ``runners.accuracy run`` process per case
            evaluates all of them).
        accuracy_limit: first N rows per task (null = all rows; the verifier then reports "limited").
        accuracy_manifest: dataset ``manifest.json`` of an accuracy phase (relative = repository root);
            default: the committed fixtures (limited-mode evidence only). The runner checks it, the
            entry of every task and each file's SHA-256 / row count before any process starts.
    """

    name: str = MISSING
    kind: str = "throughput"
    order: int = 0
    baseline: bool = True
    implementations: List[str] = field(default_factory=lambda: ["current"])
    points: List[PointConfig] = field(default_factory=list)
    cases: List[CaseConfig] = field(default_factory=list)
    repeats: int = 1
    repeats_by_label: Dict[str, int] = field(default_factory=dict)
    rotate: bool = True
    cooldown_s: float = 0.0
    case_timeout_s: float = 600.0
    kill_grace_s: float = 10.0
    runtime: Optional[RuntimeConfig] = None
    num_prompts: Optional[int] = None
    input_len: Optional[int] = None
    max_tokens: Optional[int] = None
    warmup_rounds: Optional[int] = None
    measured_rounds: Optional[int] = None
    accuracy_tasks: List[str] = field(default_factory=list)
    accuracy_limit: Optional[int] = None
    accuracy_manifest: str = "eval_datasets/fixtures/manifest.json"


@dataclass
class RayConfig:
    """Ray executor settings.

    Attributes:
        address: cluster address; null = start a private head on loopback for this run.
        num_cpus_per_case: CPUs one case task asks for.
        head_num_cpus: CPUs of a private head (null = Ray's detection).
        object_store_memory_bytes: object store of a private head (small: only outcomes travel).
        performance_sharing: ``per_node`` (default: at most one performance case per node at a
            time) or ``per_accelerator`` (opt-in: one per accelerator; cases share the node's host
            links, flagged in the summary). Accuracy cases always run in parallel.
        on_node_failure: a node failing the per-node identity or health gate ``stop``s the run
            (default) or is ``exclude``d.
        max_node_retries: times a case is retried on another node after its node was lost.
    """

    address: Optional[str] = None
    num_cpus_per_case: float = 1.0
    head_num_cpus: Optional[int] = None
    object_store_memory_bytes: int = 100_000_000
    performance_sharing: str = "per_node"
    on_node_failure: str = "stop"
    max_node_retries: int = 2


@dataclass
class ExecutorConfig:
    """Where case processes run: ``local`` (one after another here) or ``ray`` (one task per case)."""

    name: str = "local"
    ray: RayConfig = field(default_factory=RayConfig)


@dataclass
class Config:
    """Root config of ``python -m runners.matrix``.

    Attributes:
        experiment_name: results subdirectory (``results/<experiment_name>/<run_id>``).
        results_root: where run directories are created (relative = repository root).
        run_id: run directory name; null = ``<UTC time>-<random hex>``.
        resume: an existing run directory to resume (its saved config is used).
        dry_run: print the schedule and exit without launching anything.
        formal: stop at the first unexpected case failure (completed evidence kept).
        offload_tree_sha256: pin of the project's ``offload/`` tree (null = record only).
        bench_command: argv prefix of one case process; null = ``[<python>, -m, runners.bench_one]``.
        accuracy_command: argv prefix of one accuracy case process (followed by ``run ...``);
            null = ``[<python>, -m, runners.accuracy]`` (tests substitute a fake engine here).
        analyze: call ``analysis.report.write_summary`` at the end (and, when the run has accuracy
            phases, the accuracy verifier ``analysis.accuracy``, report in ``summary/``).
        progress: show a live progress bar (plain lines are always printed).
    """

    runtime: RuntimeConfig = MISSING
    model: ModelConfig = MISSING
    workload: WorkloadConfig = MISSING
    executor: ExecutorConfig = MISSING
    phases: Dict[str, MatrixConfig] = field(default_factory=dict)
    experiment_name: str = "default"
    results_root: str = "results"
    run_id: Optional[str] = None
    resume: Optional[str] = None
    dry_run: bool = False
    formal: bool = False
    offload_tree_sha256: Optional[str] = None
    bench_command: Optional[List[str]] = None
    accuracy_command: Optional[List[str]] = None
    analyze: bool = True
    progress: bool = True


def register_configs() -> None:
    """Register ``base_config`` and ``base_<group>`` schemas (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="runtime", name="base_runtime", node=RuntimeConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="workload", name="base_workload", node=WorkloadConfig)
    cs.store(group="matrix", name="base_matrix", node=MatrixConfig)
    cs.store(group="executor", name="base_executor", node=ExecutorConfig)
