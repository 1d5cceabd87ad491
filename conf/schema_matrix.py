"""Dataclass schemas of a phase: points, explicit cases, serving settings, the phase itself.

Registered in Hydra's ConfigStore by :func:`conf.schema.register_configs` (``base_matrix``);
re-exported by :mod:`conf.schema`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from omegaconf import MISSING
from pydantic import with_config

from offload.faults import OffloadFault
from conf.schema_stack import FORBID_EXTRA, RuntimeConfig, added_field
from results_schema.records.accuracy import DEFAULT_ACCURACY_MANIFEST
from results_schema.records.base import Implementation, OffloadBackend, PhaseKind
from results_schema.records.protocols import DEFAULT_PROTOCOL
from results_schema.records.sequential import DEFAULT_ALPHA, DEFAULT_PAIRING, DEFAULT_SPENDING


@with_config(FORBID_EXTRA)
@dataclass
class PointConfig:
    """One offload point ``(G, N)`` expanded once per implementation of the matrix."""

    g: int = MISSING
    n: int = MISSING
    prefetch_step: int = 1
    params: List[str] = field(default_factory=list)
    backend: OffloadBackend = OffloadBackend.auto


@with_config(FORBID_EXTRA)
@dataclass
class CaseConfig:
    """One explicit case (appended after the generated ones).

    Attributes:
        label: unique in the phase; null = generated (``current_g4_n1``).
        implementation: ``baseline``, ``current``, ``official``, ``sync``, ``overlay``.
        expect_error: regex; the case is expected to fail with an error matching it
            (``ValueError: offload_num_in_group``, ``AssertionError``). It is then
            exempt from the pre-launch validation and its failure record is expected.
        engine_validates: bench phases only: the case process skips its own offload pre-check and
            gives the setting to vLLM's engine as configured (``runners.incase.engine_path``), so the
            engine's own rejection is what is tested (smoke: ``engine_invalid_g2_n3``).
        fault: negative control only: a named corruption of this project's offloader applied in the case
            process after ``post_init`` (``offload.faults``; ``zero_host_copy``), for implementations
            ``current`` / ``sync`` with offload. The case must then fail its comparison
            (``+experiment=negative_control``). Null = none.
        step_delay_ms: speed control only (serving and throughput phases, implementation ``baseline``): every
            forward of the model sleeps this many milliseconds first (``offload.controls``); no byte moves.
            Serving: its outputs join the baselines' floor of the output comparison and its timing is judged
            against the undelayed baselines (expected ``slower``; a warning where it is not). Throughput: a cost
            of known size, judged against the undelayed baselines (``analysis.comparison.decision``), never one
            of them, never on a front or in a recommendation. Null = none.
        in_process: CPU throughput phases only (docs/inprocess.md): run the measured rounds inside this one process
            as A (the offloader's copies off, parameters read in place from its host buffer) and B (normal prefetch)
            rounds in ABBA order: ``abba``, or the A/A controls ``aa`` / ``bb``; a measurement of the copy share,
            never the verdict of record (``runners.planning.inprocess_check`` says where it may run). Null = off.
    """

    implementation: Implementation = MISSING
    label: Optional[str] = None
    group_size: int = 0
    num_in_group: int = 0
    prefetch_step: int = 1
    params: List[str] = field(default_factory=list)
    backend: OffloadBackend = OffloadBackend.auto
    expect_error: Optional[str] = None
    engine_validates: bool = False
    fault: Optional[OffloadFault] = None
    step_delay_ms: Optional[float] = added_field()
    in_process: Optional[str] = added_field()


@with_config(FORBID_EXTRA)
@dataclass
class ServingSLOConfig:
    """Goodput SLO of a serving phase (``results_schema.records.serving_spec.ServingSLO``).

    Attributes:
        ttft_ms: TTFT limit of one request (ms).
        tpot_ms: TPOT limit of one request (ms).
        attainment: fraction of completed requests that must meet both for a rate to meet the SLO.
    """

    ttft_ms: float = 1000.0
    tpot_ms: float = 100.0
    attainment: float = 0.9


@with_config(FORBID_EXTRA)
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


@with_config(FORBID_EXTRA)
@dataclass
class SequentialConfig:
    """A throughput phase that stops each label when its answer is known (``analysis.comparison.sequential``).

    The phase runs in blocks (one process of the baseline and of every open label, ABBA order:
    ``runners.planning.blocks``); after ``looks[k]`` blocks each open label is looked at, and a label that is
    ``slower``, ``faster`` or ``equivalent`` at that look's level stops; the others get the next blocks. The phase's
    ``repeats`` is then unused (the first look's blocks are planned, later ones decided while the run goes).

    Attributes:
        looks: processes per arm at each look, strictly increasing, from 2; the last is the budget. Empty (the
            default) = not sequential: every label ``repeats`` times in rotated order.
        target_pct: the smallest cost that matters (percent; the equivalence margin of every look), > 0.
        alpha: total two-sided alpha over every look, in (0, 1).
        spending: ``pocock`` (Pocock-type, spends early) or ``obrien_fleming`` (O'Brien-Fleming-type).
        pairing: the interval every look uses, declared before the run: ``none`` (the unpaired t of the label's
            processes against the baseline's) or ``block`` (the paired t of the per-block log ratio, label process vs
            the same block's baseline process, over the complete blocks, ``blocks - 1`` df). An added field: left out
            of the saved config (and its hash) while ``none``.
    """

    looks: List[int] = field(default_factory=list)
    target_pct: float = 5.0
    alpha: float = DEFAULT_ALPHA
    spending: str = DEFAULT_SPENDING
    pairing: str = added_field(DEFAULT_PAIRING)


@with_config(FORBID_EXTRA)
@dataclass
class MatrixConfig:
    """One phase: a list of cases, repeats, rounds and a schedule.

    Cases = baseline (if ``baseline``) + every point x every implementation (point
    order, implementations in list order) + ``cases``.

    Attributes:
        name: matrix name (report only).
        kind: ``throughput`` (bench_one), ``ttft`` (bench_one, max_tokens=1 proxy),
            ``stability`` (bench_one, many sequential 1-prompt rounds, every output
            non-empty), ``accuracy`` (``runners.incase.accuracy``), ``serving`` (``runners.incase.serving``:
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
        accuracy_tasks: tasks for ``kind=accuracy`` phases (one ``runners.incase.accuracy run`` process per case
            evaluates all of them).
        accuracy_limit: first N rows per task (null = all rows; the verifier then reports "limited").
        accuracy_manifest: dataset ``manifest.json`` of an accuracy phase (relative = repository root);
            default: the committed fixtures (limited-mode evidence only). The runner checks it, the
            entry of every task and each file's SHA-256 / row count before any process starts.
        accuracy_model: model directory (with ``SHA256SUMS``; relative = repository root) the cases of an
            accuracy phase load instead of the run's model (``+experiment=reproduce``: the committed
            ``eval_models/tiny-answering-qwen2-l4-h128``, trained by ``python -m runners.models.answering_model``).
            Verified against its ``SHA256SUMS`` before any process starts; its ``config.json``
            ``num_hidden_layers`` sizes the phase's points. Null = the run's model.
        accuracy_protocol: registered accuracy protocol (``results_schema.records.protocols``) every case of an
            accuracy phase is scored under; default ``qwen-chat-v1`` (the published protocol). An
            unknown name is a config error before any process starts.
        max_accuracy_drop: tolerance of the accuracy verifier's drop rule, a fraction of accuracy in [0, 1]
            (0.01 = 1 percentage point): an offload case passes it iff baseline accuracy - case accuracy <=
            this, per task. Default 0 (no drop allowed); identity with the baseline is required regardless.
            Outside [0, 1]: a config error (exit 2) before any process starts.
        serving: settings of ``kind=serving`` phases (ignored by other kinds).
        expected_case_s: typical wall seconds of one case process of this phase on the machine the
            matrix was sized on (printed before the first case as the run's expected duration);
            null = unknown (the ETA after each case is the estimate).
        sequential: a throughput phase run in blocks that stops each label when its answer is known
            (``SequentialConfig``; on when its ``looks`` are given: ``phases.<phase>.sequential.looks=[3,4,6]``).
    """

    name: str = MISSING
    kind: PhaseKind = PhaseKind.throughput
    order: int = 0
    baseline: bool = True
    implementations: List[Implementation] = field(default_factory=lambda: [Implementation.current])
    points: List[PointConfig] = field(default_factory=list)
    cases: List[CaseConfig] = field(default_factory=list)
    repeats: int = 1
    repeats_by_label: Dict[str, int] = field(default_factory=dict)
    rotate: bool = True
    cooldown_s: float = 0.0
    case_timeout_s: float = 600.0
    kill_grace_s: float = 10.0
    # backend passed explicitly to every offload case whose point says auto (published:
    # prefetch); labels keep the auto names. null = each point's own backend.
    offload_backend: Optional[OffloadBackend] = None
    # run the labels with the most repeats first (published 1.5B: focus x5, then capacity x3)
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
    accuracy_manifest: str = DEFAULT_ACCURACY_MANIFEST
    accuracy_model: Optional[str] = None
    accuracy_protocol: str = DEFAULT_PROTOCOL
    max_accuracy_drop: float = 0.0
    expected_case_s: Optional[float] = None
    serving: ServingConfig = field(default_factory=ServingConfig)
    sequential: SequentialConfig = added_field(default_factory=SequentialConfig)
