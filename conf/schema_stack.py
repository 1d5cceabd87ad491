"""Dataclass schemas of the software stack, the model, the workload and the executor.

Registered in Hydra's ConfigStore by :func:`conf.schema.register_configs`; re-exported by
:mod:`conf.schema`. A pin whose value is ``???`` is *declared but not provided*; the identity
gate refuses to run until it is given (fail closed, never "NA").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING
from pydantic import ConfigDict, with_config

from conf.choices import ModelSource, NodeFailureAction, PerformanceSharing
from offload.cpu_kernels import CpuKernelPath
from results_schema.records.base import Device, ExecutorKind, PromptMode
from results_schema.records.models import DEFAULT_MIN_MEASURED_S


FORBID_EXTRA = ConfigDict(extra="forbid")

OMIT_WHEN_DEFAULT = "omit_when_default"
"""Field metadata key of ``added_field``: the field was added after configs (and their hashes) were recorded."""


def added_field(default: Any = None, *, default_factory: Any = None) -> Any:
    """A schema field added after a config format was fixed: left out of the plain config while it holds its
    default (``conf.schema.omit_defaults``), so a config that does not use it keeps the bytes and hash it had before
    the field existed; loading it back gives the default."""
    meta = {OMIT_WHEN_DEFAULT: True}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)
"""Pydantic config of every schema dataclass: validating a config (``conf.typed``) refuses unknown keys."""


@with_config(FORBID_EXTRA)
@dataclass
class PinsConfig:
    """Identity pins declared by a runtime (checked where declared, fail closed).

    Attributes:
        tools: executables that must be on PATH (``npu-smi``, ``nvidia-smi``).
        packages: distribution name -> PEP 440 version or specifier (``0.32.0``, ``==0.23.*``).
        package_trees: distribution name -> SHA-256 of its installed file tree (RECORD files).
        wheels: wheel path -> SHA-256 of the file.
        package_wheels: distribution name -> path of the wheel it was installed from (in the runtime): the
            package files of the installed RECORD must equal the wheel's (``runners.identity.probe.wheel_vs_installed``;
            ``*.dist-info/``, scripts and caches excluded); a difference fails the identity gate, naming files.
        source_trees: source checkout path -> SHA-256 of its file tree: bare hex = the project's tree hash
            (``runners.identity.probe.tree_sha256``), ``sha256sum:<hex>`` = the published one (``runners.identity.probe.sha256sum_tree``).
        source_commits: source checkout path -> git commit (``git rev-parse HEAD``).
        files: driver / toolkit file path -> SHA-256 (e.g. CANN ``version.info``).
    """

    tools: List[str] = field(default_factory=list)
    packages: Dict[str, str] = field(default_factory=dict)
    package_trees: Dict[str, str] = field(default_factory=dict)
    wheels: Dict[str, str] = field(default_factory=dict)
    package_wheels: Dict[str, str] = field(default_factory=dict)
    source_trees: Dict[str, str] = field(default_factory=dict)
    source_commits: Dict[str, str] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)


@with_config(FORBID_EXTRA)
@dataclass
class RuntimeConfig:
    """One software stack on one device kind.

    Attributes:
        name: ``cpu``, ``cuda``, ``ascend_latest``, ``ascend_native_v018``.
        device: device kind the model runs on: ``cpu``, ``cuda``, ``npu``.
        env: extra environment for every case process (e.g. ``VLLM_CPU_KVCACHE_SPACE``).
        health_command: argv of the per-phase health gate; null = no gate.
        health_timeout_s: seconds before the health command counts as failed.
        health_expect: regular expression the health output must match besides exit 0 (Ascend:
            ``Health Status\\s*:\\s*OK``); ``{physical_index}`` / ``{chip}`` in ``health_command`` name
            the case device (``runners.identity.health``). Null = exit 0 suffices.
        inherit_pythonpath: append the runner's inherited ``PYTHONPATH`` (CANN's ``set_env.sh`` entries)
            after the evidence hook and the repository in every case (Ascend); false = replaced.
        visible_devices_env: variable naming the visible logical devices
            (``CUDA_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``); null on CPU.
        ray_resource: Ray resource one case asks for: ``GPU`` (num_gpus=1), a custom
            resource name (``NPU``), or null (CPU: num_cpus only).
        pins: identity pins of this stack (observed inside it by ``runners.identity.probe``).
        report_packages: distributions whose versions are recorded in the manifest.
        python: interpreter of this stack (a virtual environment's ``bin/python``, or the path
            inside a container); null = the runner's own interpreter. Cases, pin probes and
            ``runners.pins`` start it; see ``runners.identity.runtimes``.
        command_prefix: argv before the interpreter and the health command (``[docker, exec,
            -i, ctr]``); the case's variables are then passed as ``env K=V`` after it.
        path_map: declared pin path prefix -> where it is on this host (``{/opt/vllm-ascend-v0.18.0:
            /home/me/vllm-ascend}``); pins keep their declared names.
        cpu_kernel_path: CPU runtimes: GEMM kernel path of every case, baseline included
            (``plain``: all decoder linear layers run ``torch.nn.functional.linear`` on plain
            weights, so weight residency is the only difference between cases; ``packed``:
            vLLM's stock oneDNN / sgl-kernel dispatch, allowed only without offload cases).
            See ``offload/cpu_kernels.py``. Null on GPU / NPU runtimes.
        overlay_source_root: implementation ``overlay``: directory of the published source tree whose
            offloader is measured (put on the case's ``PYTHONPATH`` after the evidence hook and the
            repository, before the installed packages, so its ``vllm_ascend`` shadows the installed one;
            its tree hash becomes a required ``pins.source_trees`` pin). Null = overlay unavailable:
            a plan with ``overlay`` cases then stops before any process starts (exit 2).
        overlay_class: the overlay's class, ``module.path:ClassName`` (``offload.overlay``); the module
            must be loaded from ``overlay_source_root``.
    """

    name: str = MISSING
    device: Device = MISSING
    env: Dict[str, str] = field(default_factory=dict)
    health_command: Optional[List[str]] = None
    health_timeout_s: float = 60.0
    # (runners.identity.health): regex the health output must match besides exit 0; PYTHONPATH inheritance
    health_expect: Optional[str] = None
    inherit_pythonpath: bool = False
    visible_devices_env: Optional[str] = None
    ray_resource: Optional[str] = None
    pins: PinsConfig = field(default_factory=PinsConfig)
    report_packages: List[str] = field(default_factory=list)
    python: Optional[str] = None
    command_prefix: List[str] = field(default_factory=list)
    path_map: Dict[str, str] = field(default_factory=dict)
    cpu_kernel_path: Optional[CpuKernelPath] = None
    # the published offloader as implementation ``overlay`` (offload/overlay.py)
    overlay_source_root: Optional[str] = None
    overlay_class: Optional[str] = None


@with_config(FORBID_EXTRA)
@dataclass
class TinyModelConfig:
    """Arguments of ``runners.models.tiny_model.ensure_tiny_model`` (random-weight Qwen2)."""

    num_layers: int = 8
    hidden_size: int = 128
    seed: int = 0


@with_config(FORBID_EXTRA)
@dataclass
class ModelConfig:
    """The model every case of the run loads.

    Attributes:
        name: short name used in reports.
        source: ``tiny`` or ``smollm2`` (built locally into ``cache_dir`` at the identity gate,
            ``runners.models.built``) or ``path`` (a local directory).
        path: model directory for ``source=path`` (``???`` until given).
        num_layers: decoder layers (used to size and check the selection).
        revision: upstream revision of the weights, recorded and pinned when set.
        sha256sums_sha256: pin: SHA-256 of the model's ``SHA256SUMS`` file (``???`` = required, null = record only).
        tiny: builder arguments for ``source=tiny``.
        cache_dir: where built models (``tiny``, ``smollm2``) go (relative = repository root).
        config_json: a ``config.json`` of the model's architecture (relative = repository root), read to size
            offload settings where the model directory is not at hand (a dry run, a remote host); null = the
            model directory's own.
    """

    name: str = MISSING
    source: ModelSource = ModelSource.path
    path: Optional[str] = None
    num_layers: int = MISSING
    revision: Optional[str] = None
    sha256sums_sha256: Optional[str] = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    cache_dir: str = ".cache/models"
    config_json: Optional[str] = added_field()


@with_config(FORBID_EXTRA)
@dataclass
class WorkloadConfig:
    """Offline-throughput workload (fields of ``results_schema.records.models.WorkloadSpec``).

    ``measured_rounds`` is the minimum round count and ``min_measured_s`` the minimum measured
    seconds (default ``results_schema.records.models.DEFAULT_MIN_MEASURED_S``); rounds repeat until both are reached.
    ``enable_prefix_caching`` null = not passed to vLLM (its default). The published
    options (``prompt_mode``, ``prompt_seed_text``, ``ignore_eos``, ``trust_remote_code``,
    ``max_num_seqs``, ``max_num_batched_tokens_factor``) default to the project's workload.
    """

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
    min_measured_s: float = DEFAULT_MIN_MEASURED_S
    enable_prefix_caching: Optional[bool] = False
    prompts_vary_per_round: bool = True
    temperature: float = 0.0
    # published-workload options (conf/workload/published.yaml): see WorkloadSpec
    prompt_mode: PromptMode = PromptMode.random_ids
    prompt_seed_text: Optional[str] = None
    ignore_eos: bool = True
    trust_remote_code: bool = False
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens_factor: Optional[int] = None


@with_config(FORBID_EXTRA)
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
    performance_sharing: PerformanceSharing = PerformanceSharing.per_node
    on_node_failure: NodeFailureAction = NodeFailureAction.stop
    max_node_retries: int = 2


@with_config(FORBID_EXTRA)
@dataclass
class ExecutorConfig:
    """Where case processes run: ``local`` (one after another here) or ``ray`` (one task per case)."""

    name: ExecutorKind = ExecutorKind.local
    ray: RayConfig = field(default_factory=RayConfig)
