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

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf


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
        health_expect: regular expression the health output must match besides exit 0 (Ascend:
            ``Health Status\\s*:\\s*OK``); ``{physical_index}`` / ``{chip}`` in ``health_command`` name
            the case device (``runners.health``). Null = exit 0 suffices.
        inherit_pythonpath: append the runner's inherited ``PYTHONPATH`` (CANN's ``set_env.sh`` entries)
            after the evidence hook and the repository in every case (Ascend); false = replaced.
        visible_devices_env: variable naming the visible logical devices
            (``CUDA_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``); null on CPU.
        ray_resource: Ray resource one case asks for: ``GPU`` (num_gpus=1), a custom
            resource name (``NPU``), or null (CPU: num_cpus only).
        pins: identity pins of this stack (observed inside it by ``runners.probe``).
        report_packages: distributions whose versions are recorded in the manifest.
        python: interpreter of this stack (a virtual environment's ``bin/python``, or the path
            inside a container); null = the runner's own interpreter. Cases, pin probes and
            ``runners.pins`` start it; see ``runners.runtimes``.
        command_prefix: argv before the interpreter and the health command (``[docker, exec,
            -i, ctr]``); the case's variables are then passed as ``env K=V`` after it.
        path_map: declared pin path prefix -> where it is on this host (``{/opt/vllm-ascend-v0.18.0:
            /home/me/vllm-ascend}``); pins keep their declared names.
        cpu_kernel_path: CPU runtimes: GEMM kernel path of every case, baseline included
            (``plain``: all decoder linear layers run ``torch.nn.functional.linear`` on plain
            weights, so weight residency is the only difference between cases; ``packed``:
            vLLM's stock oneDNN / sgl-kernel dispatch, allowed only without offload cases).
            See ``offload/cpu_kernels.py``. Null on GPU / NPU runtimes.
    """

    name: str = MISSING
    device: str = MISSING
    env: Dict[str, str] = field(default_factory=dict)
    health_command: Optional[List[str]] = None
    health_timeout_s: float = 60.0
    # issue 15 (runners.health): regex the health output must match besides exit 0; PYTHONPATH inheritance
    health_expect: Optional[str] = None
    inherit_pythonpath: bool = False
    visible_devices_env: Optional[str] = None
    ray_resource: Optional[str] = None
    pins: PinsConfig = field(default_factory=PinsConfig)
    report_packages: List[str] = field(default_factory=list)
    python: Optional[str] = None
    command_prefix: List[str] = field(default_factory=list)
    path_map: Dict[str, str] = field(default_factory=dict)
    cpu_kernel_path: Optional[str] = None


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


DEFAULT_MIN_MEASURED_S = 3.0
"""Default minimum measured window per case (seconds): measured rounds repeat until both
``measured_rounds`` and this many seconds are reached, as MLPerf LoadGen's ``min_duration``
(600 s for its formal runs) does. 3 s keeps the embedded CPU default (5 cases, ~0.15 s rounds)
at ~20 rounds per case for ~15 s of extra wall time; ``conf/workload/seed.yaml`` asks 10 s.
``analysis validate`` warns about records measured for less (``short_measurement_window``)."""


@dataclass
class WorkloadConfig:
    """Offline-throughput workload (fields of ``results_schema.models.WorkloadSpec``).

    ``measured_rounds`` is the minimum round count and ``min_measured_s`` the minimum measured
    seconds (default ``DEFAULT_MIN_MEASURED_S``); rounds repeat until both are reached.
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
    # published-workload options (issue 15; conf/workload/published.yaml): see WorkloadSpec
    prompt_mode: str = "random_ids"
    prompt_seed_text: Optional[str] = None
    ignore_eos: bool = True
    trust_remote_code: bool = False
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens_factor: Optional[int] = None


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
class ServingSLOConfig:
    """Goodput SLO of a serving phase (``results_schema.serving.ServingSLO``).

    Attributes:
        ttft_ms: TTFT limit of one request (ms).
        tpot_ms: TPOT limit of one request (ms).
        attainment: fraction of completed requests that must meet both for a rate to meet the SLO.
    """

    ttft_ms: float = 1000.0
    tpot_ms: float = 100.0
    attainment: float = 0.9


@dataclass
class ServingConfig:
    """Settings of a ``kind: serving`` phase (one API server per case, vLLM's serving benchmark per rate).

    Requests per rate, input and output lengths come from the phase's effective workload
    (``num_prompts``, ``input_len``, ``max_tokens``); engine arguments (dtype, max_model_len,
    enforce_eager, gpu_memory_utilization, seed, enable_prefix_caching) too.

    Attributes:
        request_rates: sweep of request rates (req/s, > 0; ``.inf`` = every request at t = 0).
        max_concurrency: client-side cap on in-flight requests; null = none (a cap that limits
            makes the achieved rate differ from the configured one: both are recorded).
        num_warmups: warm-up requests per rate, excluded from every metric.
        burstiness: gamma shape of inter-arrival gaps (1 = Poisson).
        slo: goodput SLO.
        health_timeout_s: longest wait for ``GET /health`` to return 200.
        health_poll_s: seconds between two polls.
        rate_timeout_s: longest benchmark run of one rate.
        stop_grace_s: SIGTERM -> SIGKILL grace for the server's process tree.
        server_command: argv prefix of the server; null = ``[<python>, -m, vllm.entrypoints.openai.api_server]``
            (tests substitute a fake server here).
    """

    request_rates: List[float] = field(default_factory=lambda: [1.0, 4.0])
    max_concurrency: Optional[int] = None
    num_warmups: int = 2
    burstiness: float = 1.0
    slo: ServingSLOConfig = field(default_factory=ServingSLOConfig)
    health_timeout_s: float = 300.0
    health_poll_s: float = 0.5
    rate_timeout_s: float = 300.0
    stop_grace_s: float = 30.0
    server_command: Optional[List[str]] = None


@dataclass
class MatrixConfig:
    """One phase: a list of cases, repeats, rounds and a schedule.

    Cases = baseline (if ``baseline``) + every point x every implementation (point
    order, implementations in list order) + ``cases``.

    Attributes:
        name: matrix name (report only).
        kind: ``throughput`` (bench_one), ``ttft`` (bench_one, max_tokens=1 proxy),
            ``stability`` (bench_one, many sequential 1-prompt rounds, every output
            non-empty), ``accuracy`` (``runners.accuracy``), ``serving`` (``runners.serving``:
            an OpenAI-compatible API server per case, vLLM's serving benchmark over ``serving.request_rates``).
        order: phases run in ascending order (ties: composition order).
        repeats: repeats per case.
        repeats_by_label: label -> repeats, overriding ``repeats``.
        rotate: repeat r starts at case index r (rotated order); false = same order.
        cooldown_s: sleep between two case processes.
        case_timeout_s: wall limit of one case process (TERM, then KILL after ``kill_grace_s``).
        offload_backend: ``offload_backend`` given to every offload case whose point/case says ``auto``
            (published designs: ``prefetch``); generated labels stay unchanged. null = as the points say.
        focus_first: schedule the labels with the most repeats completely first (published 1.5B design:
            the focus labels x5, then the capacity labels x3); false = all labels interleaved.
        runtime: phase-specific runtime (e.g. the native stack); null = the run's runtime.
        num_prompts ... max_tokens: workload overrides for this phase; null = workload's.
        accuracy_tasks: tasks for ``kind=accuracy`` phases (one ``runners.accuracy run`` process per case
            evaluates all of them).
        accuracy_limit: first N rows per task (null = all rows; the verifier then reports "limited").
        accuracy_manifest: dataset ``manifest.json`` of an accuracy phase (relative = repository root);
            default: the committed fixtures (limited-mode evidence only). The runner checks it, the
            entry of every task and each file's SHA-256 / row count before any process starts.
        accuracy_protocol: registered accuracy protocol (``results_schema.protocols``) every case of an
            accuracy phase is scored under; default ``qwen-chat-v1`` (the published protocol). An
            unknown name is a config error before any process starts.
        serving: settings of ``kind=serving`` phases (ignored by other kinds).
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
    # issue 15: backend passed explicitly to every offload case whose point says auto (published:
    # prefetch); labels keep the auto names. null = each point's own backend.
    offload_backend: Optional[str] = None
    # issue 15: run the labels with the most repeats first (published 1.5B: focus x5, then capacity x3)
    focus_first: bool = False
    runtime: Optional[RuntimeConfig] = None
    num_prompts: Optional[int] = None
    input_len: Optional[int] = None
    max_tokens: Optional[int] = None
    warmup_rounds: Optional[int] = None
    measured_rounds: Optional[int] = None
    min_measured_s: Optional[float] = None
    accuracy_tasks: List[str] = field(default_factory=list)
    accuracy_limit: Optional[int] = None
    accuracy_manifest: str = "eval_datasets/fixtures/manifest.json"
    accuracy_protocol: str = "qwen-chat-v1"
    serving: ServingConfig = field(default_factory=ServingConfig)


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
        required_pins: scalar pins this experiment requires (``model.sha256sums_sha256``,
            ``model.revision``, ``offload_tree_sha256``): null counts as ``???`` (fail closed). Needed
            because OmegaConf keeps a schema default when an overlay merges ``???`` onto it.
        bench_command: argv prefix of one case process; null = ``[<runtime python>, -m, <bench_module>]``.
        bench_module: module a case process runs with its runtime's interpreter (tests: a fake bench).
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
    required_pins: List[str] = field(default_factory=list)
    bench_command: Optional[List[str]] = None
    bench_module: str = "runners.bench_one"
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


# --------------------------------------------------------------------------- checks of a composed config

class ConfigError(ValueError):
    """A composed config the runner must refuse (unknown key, bad name, untypeable pin); exit code 2."""


_TEXT_KEY = re.compile(
    r"^(?:phases\.[^.]+\.)?runtime\.(?:env|pins\.(?:packages|package_trees|wheels|source_trees|source_commits|files))"
    r"(?:\.(?P<name>.+))?$"
)
"""Keys whose values are text exactly as typed: runtime environment values and identity pins."""

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A run id / experiment name: one path component, no separator, not ``.``/``..``, at most 128 characters."""


def keep_typed_text(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Give pins and environment values set on the command line the text the user typed.

    Hydra's override grammar turns ``vllm=0.10`` into the float 0.1, ``FLAG=true`` into
    True, ``X=1e5`` into 100000.0; the ``Dict[str, str]`` schema then stores ``"0.1"``,
    ``"True"``, ``"100000.0"``. For every override of a key under ``runtime.env`` or
    ``runtime.pins.<kind>`` (also ``phases.<p>.runtime...``) whose parsed value is not a
    string, the node is set to the raw text after the first ``=`` of the override.
    A quoted value (``vllm='0.10'``) is already a string and is kept as Hydra parsed it.

    Args:
        cfg: the composed config (modified in place).
        overrides: the command-line overrides, as Hydra received them
            (``HydraConfig.get().overrides.task``).

    Raises:
        ConfigError: a whole dict or list of pins/env given in one override with an
            unquoted non-string value (its text cannot be recovered; set one key per
            override or quote the value).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for ov in OverridesParser.create().parse_overrides(list(overrides)):
        match = _TEXT_KEY.match(ov.key_or_group)
        if match is None or ov.is_delete():
            continue
        value = ov.value()
        if match.group("name") is None or "." in match.group("name"):
            leaves = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
            if any(not isinstance(v, str) for v in leaves):
                raise ConfigError(
                    f"{ov.input_line!r}: values of {ov.key_or_group} must be given one key per override "
                    f"({ov.key_or_group}.NAME=VALUE) or quoted, so that they keep the text you typed")
            continue
        if isinstance(value, str):
            continue
        raw = ov.input_line.split("=", 1)[1].strip()
        OmegaConf.update(cfg, ov.key_or_group, raw, merge=False)


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse every key the schema does not declare (keys added with ``+`` included).

    Hydra applies ``+key=value`` with the struct flag lifted, so a misspelt
    ``+phases.same_runtime.repeatz=2`` would otherwise be saved and ignored. Every node
    typed by a dataclass of this module must hold only that dataclass's fields;
    ``Dict[str, <dataclass>]`` nodes (``phases``) are checked entry by entry.

    Raises:
        ConfigError: naming the dotted key, the keys allowed there, and the closest one.
    """
    _check_node(cfg, "")


def _check_node(node: Any, where: str) -> None:
    if isinstance(node, ListConfig):
        for i in range(len(node)):
            child = node._get_node(i)
            if isinstance(child, (DictConfig, ListConfig)):
                _check_node(child, f"{where}[{i}]")
        return
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
        return
    obj_type = OmegaConf.get_type(node)
    known = {f.name for f in fields(obj_type)} if is_dataclass(obj_type) else None
    for key in node.keys():
        path = f"{where}.{key}" if where else str(key)
        if known is not None and key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {path!r} ({obj_type.__name__} has no field {key!r}{hint}; "
                              f"known: {', '.join(sorted(known))})")
        child = node._get_node(key)
        if isinstance(child, (DictConfig, ListConfig)):
            _check_node(child, path)


def check_name(key: str, value: Any) -> None:
    """Refuse a ``run_id`` / ``experiment_name`` that is not a single safe path component.

    Raises:
        ConfigError: ``value`` is absolute, holds a separator or ``..``, or has other characters
            than ``[A-Za-z0-9._-]`` (see ``NAME_PATTERN``).
    """
    if value is None:
        return
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ConfigError(f"{key}={value!r} is not a name: use 1-128 characters of [A-Za-z0-9._-] starting with "
                          f"a letter or digit (no '/', no '..'; the run directory is <results_root>/"
                          f"<experiment_name>/<run_id>)")


def checked_plain_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The composed ``cfg`` checked against the schema, as a resolved plain dict.

    Steps: pins and environment values keep their typed text (``keep_typed_text``);
    unknown keys are refused on every dataclass-typed node (``check_known_keys``; a
    whole ``OmegaConf.to_object`` is not used because it refuses ``???`` pins, which
    must stay declared-but-missing for the identity gate, and because it silently
    sets unknown keys as attributes); ``run_id`` and ``experiment_name`` are names.

    Raises:
        ConfigError: any of the above, with the key named.
    """
    keep_typed_text(cfg, overrides)
    check_known_keys(cfg)
    for key in ("run_id", "experiment_name"):
        check_name(key, OmegaConf.select(cfg, key, throw_on_missing=False))
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]


def checked_saved_config(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A run directory's saved ``config.yaml`` (plain dict) checked against ``Config``.

    Raises:
        ConfigError: unknown key or a value of the wrong type (naming the key).
    """
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), dict(saved))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"saved config: {exc.msg if hasattr(exc, 'msg') else exc}".splitlines()[0]) from None
    check_known_keys(merged)
    for key in ("run_id", "experiment_name"):
        check_name(key, OmegaConf.select(merged, key, throw_on_missing=False))
    return OmegaConf.to_container(merged, resolve=True, throw_on_missing=False)  # type: ignore[return-value]
