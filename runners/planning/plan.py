"""Matrix expansion and schedule: composed config -> ordered list of case launches.

What is modelled: the cases of each phase (baseline + points x implementations + explicit cases), their
validation before any process starts (offload parameters through ``offload.selection``, ``offload_params``
patterns against the model's layer parameter names through ``runners.planning.layer_names``, labels, repeats, and
each phase's own settings through its kind, ``runners.kinds``, which gives the kind's fields of every case;
the per-phase effective workload against ``results_schema.records.models.WorkloadSpec`` and input_len + max_tokens
<= max_model_len), the per-phase effective workload and runtime, and the rotated schedule (in repeat ``r`` the
case order starts at index ``r``, as the seed did).

What is deliberately not modelled: launching, identity, statistics.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence, cast

from conf.ranges import check_numbers
from conf.schema import Config, ConfigError
from conf.schema_matrix import CaseConfig, MatrixConfig
from conf.schema_stack import RuntimeConfig, WorkloadConfig
from offload.selection import case_label, check_offload_setting, select_offload_layers
from results_schema.records.base import Implementation, OffloadBackend
from results_schema.records.inprocess import InProcessDesign
from results_schema.records.manifest import is_secret_name, looks_like_credential
from results_schema.rules.floor_rule import is_floor_baseline, is_offload_label, is_speed_control
from results_schema.rules.sequential_rule import check_design
from runners.errors import PlanError
from runners.planning.blocks import block_order
from runners.cases import PhaseCase, ScheduledCase
from runners.kinds.base import CaseKind
from runners.kinds.registry import bench_kinds, control_kinds, kind as case_kind, sequential_kinds
from runners.planning.choose_plan import ChooseNeed, with_choose
from runners.planning.inprocess_check import check_in_process
from runners.planning.layer_names import check_offload_params
from runners.planning.workload_check import _effective_workload, validate_workload
from offload.overlay import check_class_pattern

_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def _phase_runtime(phase: str, matrix: MatrixConfig, runtime: RuntimeConfig) -> RuntimeConfig:
    """The phase's own runtime, else the run's; refuses secret-looking ``env`` entries."""
    eff_runtime = matrix.runtime or runtime
    secret_env = [k for k, v in eff_runtime.env.items()
                  if is_secret_name(str(k)) or looks_like_credential(str(v))]
    if secret_env:
        raise PlanError(f"phase {phase!r}: runtime.env sets secret-looking variables {secret_env}; the config is "
                        "written to the run directory, so pass secrets through the environment instead")
    return eff_runtime


def _raw_cases(matrix: MatrixConfig) -> list[CaseConfig]:
    """Baseline, points x implementations, explicit cases (unvalidated, labels not yet generated)."""
    raw: list[CaseConfig] = []
    if matrix.baseline:
        raw.append(CaseConfig(implementation=Implementation.baseline))
    for point in matrix.points:
        for impl in matrix.implementations:
            raw.append(CaseConfig(implementation=impl, group_size=point.g, num_in_group=point.n,
                                  prefetch_step=point.prefetch_step, params=list(point.params), backend=point.backend))
    raw += [dataclasses.replace(case) for case in matrix.cases]
    return raw


def _effective_backend(case: CaseConfig, phase_backend: OffloadBackend | None) -> OffloadBackend:
    """A phase's ``offload_backend`` (published: ``prefetch``) given explicitly to every offload case whose own
    backend is ``auto``; generated labels stay those of ``auto`` (``current_g28_n1``), so ``repeats_by_label``
    and reports keep their names."""
    if phase_backend is not None and phase_backend != "auto" and case.implementation != "baseline" \
            and case.backend == "auto":
        return OffloadBackend(phase_backend)
    return OffloadBackend(case.backend)


def _check_offload(where: str, r: CaseConfig, backend: OffloadBackend, num_layers: int) -> None:
    """A case expected to run: valid offload parameters that select at least one layer (offload cases)."""
    impl = str(r.implementation)
    try:
        check_offload_setting(impl, r.group_size, r.num_in_group, r.prefetch_step, backend)
    except ValueError as exc:
        raise PlanError(f"{where}: {exc}") from None
    if r.fault is not None and (impl not in ("current", "sync") or not r.group_size):
        raise PlanError(f"{where}: fault {str(r.fault)!r} corrupts this project's offloader: it needs implementation "
                        f"current or sync with offload, not {impl!r} with offload_group_size {r.group_size}")
    if impl == "baseline":
        return
    if not select_offload_layers(num_layers, r.group_size, r.num_in_group):
        raise PlanError(
            f"{where}: offload_group_size {r.group_size} / offload_num_in_group "
            f"{r.num_in_group} selects no layer of the {num_layers}-layer model"
        )


def _checked_label(phase: str, r: CaseConfig, backend: OffloadBackend, seen: set[str], num_layers: int) -> str:
    """The case's label (generated unless given), after checking the case; adds it to ``seen``."""
    impl = str(r.implementation)
    label = r.label or case_label(impl, r.group_size, r.num_in_group, r.prefetch_step, tuple(r.params),
                                  str(r.backend))
    where = f"phase {phase!r}, case {label!r}"
    if not _LABEL_RE.match(label):
        raise PlanError(f"{where}: label must match {_LABEL_RE.pattern}")
    if label in seen:
        raise PlanError(f"{where}: duplicate label in the phase")
    seen.add(label)
    if r.expect_error is None:
        _check_offload(where, r, backend, num_layers)
    else:
        try:
            re.compile(r.expect_error)
        except re.error as exc:
            raise PlanError(f"{where}: expect_error is not a valid regex: {exc}") from None
    return str(label)


def check_overlay_runtime(where: str, runtime: RuntimeConfig) -> None:
    """An ``overlay`` case's runtime names an absolute source root and a ``module.path:ClassName`` class.

    Raises:
        PlanError: ``runtime.overlay_source_root`` null, relative or holding ``:`` (the ``PYTHONPATH``
            separator), or ``runtime.overlay_class`` malformed; naming the value and what is allowed.
    """

    root = runtime.overlay_source_root
    rt = f"runtime {runtime.name!r}"
    if not isinstance(root, str) or not root:
        raise PlanError(f"{where}: implementation overlay needs {rt}.overlay_source_root (now {root!r}): the "
                        "absolute path of the published source tree, e.g. runtime.overlay_source_root="
                        "/opt/published/vllm-ascend (null = overlay unavailable on this runtime)")
    if not root.startswith("/") or ":" in root:
        raise PlanError(f"{where}: {rt}.overlay_source_root={root!r} must be an absolute path without ':'")
    try:
        check_class_pattern(runtime.overlay_class)
    except ValueError as exc:
        raise PlanError(f"{where}: {rt}.{exc}") from None


def _check_ranges(phase: str, matrix: MatrixConfig, runtime: RuntimeConfig) -> None:
    """Every number of the phase's matrix (its serving settings, points, cases and own runtime) and of the run's
    runtime inside its range: the one range table, ``conf.ranges`` (also checked when a config is typed; here
    again for a matrix typed without it, e.g. by ``conf.typed.validate_as``).

    Raises:
        PlanError: ``"phases.p.cooldown_s=-3.0: must be a finite number >= 0 (s)"`` (the dotted key, the value
            and what is allowed), at the first number outside its range.
    """
    try:
        check_numbers(matrix, f"phases.{phase}")
        if matrix.runtime is None:
            check_numbers(runtime, "runtime")
    except ConfigError as exc:
        raise PlanError(str(exc)) from None


def _repeats(phase: str, label: str, r: CaseConfig, matrix: MatrixConfig, kind: CaseKind) -> int:
    """Process count of one case: ``repeats_by_label`` else ``repeats`` (>= 1: ``conf.ranges``), as the kind counts
    it (an accuracy baseline at least ``runners.kinds.accuracy.ACCURACY_BASELINE_RUNS``). Raises ``PlanError`` for
    ``engine_validates`` outside bench kinds."""
    n_rep = kind.repeats(int(matrix.repeats_by_label.get(label, matrix.repeats)), r)
    if r.engine_validates and not kind.bench:
        raise PlanError(f"phase {phase!r}, case {label!r}: engine_validates is a bench-case switch (phase kinds "
                        f"{bench_kinds()}); a {kind.name!r} phase has none")
    return n_rep


def _check_step_delay(where: str, r: CaseConfig, kind: CaseKind, matrix: MatrixConfig,
                      workload: WorkloadConfig) -> None:
    """A speed control (``step_delay_ms``) is a baseline of a phase whose kind allows one (``speed_control``:
    serving, throughput; its verdict against the undelayed baselines is judged there, ``analysis.serving.stats``,
    ``analysis.comparison.decision``) that also runs the undelayed baseline,
    with an eager workload (a CUDA-graph replay runs no forward hook); the delay's range (0, MAX_STEP_DELAY_MS] ms
    is ``conf.ranges``'.

    Raises:
        PlanError: naming the value and what is allowed.
    """
    ms = r.step_delay_ms
    if ms is None:
        return
    if not kind.speed_control or str(r.implementation) != "baseline":
        raise PlanError(f"{where}: step_delay_ms {ms!r} is the speed control: it needs a phase of kind "
                        f"{' or '.join(control_kinds())} and implementation baseline, not a {kind.name!r} phase with "
                        f"implementation {str(r.implementation)!r}")
    if not matrix.baseline:
        raise PlanError(f"{where}: step_delay_ms {ms!r} is a speed control, judged against the phase's undelayed "
                        "baseline: set baseline: true")
    if not workload.enforce_eager:
        raise PlanError(f"{where}: step_delay_ms {ms!r} needs an eager model (workload.enforce_eager: true): a "
                        "CUDA-graph replay runs no forward hook")


def expand_phase(phase: str, matrix: MatrixConfig, *, workload: WorkloadConfig,
                 runtime: RuntimeConfig, num_layers: int) -> list[PhaseCase]:
    """Expand one phase's matrix into validated cases.

    Args:
        phase: phase name.
        matrix: the phase's matrix.
        workload: the run's workload (the phase's overrides win).
        runtime: the run's runtime (the phase's own ``runtime`` wins).
        num_layers: decoder layers of the model (a point that selects no layer is an error).

    Returns:
        Cases in matrix order (baseline, points x implementations, explicit cases). An accuracy phase's
        baseline runs at least ``ACCURACY_BASELINE_RUNS`` times.

    Raises:
        PlanError: invalid offload parameters (naming the values), duplicate labels, repeats for unknown
            labels, a point that selects no layer of the model, an invalid effective workload
            (``validate_workload``), an accuracy phase without tasks, an unregistered protocol or task, any
            number of the matrix or runtime outside its ``conf.ranges`` range (``max_accuracy_drop`` outside
            [0, 1], a negative ``cooldown_s``, a ``case_timeout_s`` <= 0, ...), an ``overlay`` case whose
            runtime names no usable source root or class (:func:`check_overlay_runtime`).
    """
    kind = case_kind(matrix.kind)
    eff_runtime = _phase_runtime(phase, matrix, runtime)
    eff_workload = _effective_workload(workload, matrix)
    validate_workload(phase, eff_workload, matrix, engine=kind.engine_workload)
    _check_ranges(phase, matrix, runtime)
    fields = kind.phase_fields(phase, matrix)
    cases: list[PhaseCase] = []
    seen: set[str] = set()
    for r in _raw_cases(matrix):
        backend = _effective_backend(r, matrix.offload_backend)
        label = _checked_label(phase, r, backend, seen, num_layers)
        if r.implementation == "overlay":
            check_overlay_runtime(f"phase {phase!r}, case {label!r}", eff_runtime)
        n_rep = _repeats(phase, label, r, matrix, kind)
        _check_step_delay(f"phase {phase!r}, case {label!r}", r, kind, matrix, eff_workload)
        check_in_process(f"phase {phase!r}, case {label!r}", r, kind, matrix, eff_workload, eff_runtime)
        cases.append(_case(phase, label, r, backend, kind, n_rep, eff_workload, eff_runtime, matrix, fields))
    if matrix.sequential.looks:
        cases = _sequential_cases(phase, matrix, kind, cases)
    elif matrix.sequential.pairing != "none":
        raise PlanError(f"phase {phase!r}: sequential.pairing {matrix.sequential.pairing!r} needs sequential.looks "
                        "(a paired look); without looks the phase runs its fixed repeats under the fixed rule: set "
                        "looks or leave pairing none")
    unknown = sorted(set(matrix.repeats_by_label) - seen)
    if unknown:
        raise PlanError(f"phase {phase!r}: repeats_by_label names unknown labels {unknown}; labels are {sorted(seen)}")
    if not cases:
        raise PlanError(f"phase {phase!r}: the matrix has no case")
    return cases


def _sequential_cases(phase: str, matrix: MatrixConfig, kind: CaseKind,
                      cases: list[PhaseCase]) -> list[PhaseCase]:
    """A sequential phase's cases with the first look's blocks as their repeats (later blocks are decided while the
    run goes: ``runners.orchestration.sequential``). Raises ``PlanError`` naming a bad design value, a kind without
    sequential looks (``CaseKind.sequential``: throughput, serving), a phase without a baseline, an expected-failure
    case, ``repeats_by_label`` or ``focus_first`` (a serving phase: ``_serving_sequential_cases``'s rules)."""
    seq = matrix.sequential
    why = check_design(list(seq.looks), seq.target_pct, seq.alpha, str(seq.spending), str(seq.pairing))
    if why is not None:
        raise PlanError(f"phase {phase!r}: {why}")
    if not kind.sequential or not matrix.baseline or len(cases) < 2:
        raise PlanError(f"phase {phase!r}: sequential needs kind={' or '.join(sequential_kinds())} (got "
                        f"{kind.name!r}), baseline: true (got {matrix.baseline}) and at least one label beside the "
                        "baseline")
    if any(c.expect_error is not None for c in cases):
        raise PlanError(f"phase {phase!r}: sequential phases hold no expected-failure case (expect_error)")
    if kind.floor_looks:
        return _serving_sequential_cases(phase, matrix, cases)
    if matrix.repeats_by_label or matrix.focus_first:
        raise PlanError(f"phase {phase!r}: sequential phases decide each label's processes by their looks; "
                        f"repeats_by_label ({dict(matrix.repeats_by_label)}) and focus_first ({matrix.focus_first}) "
                        "must stay unset")
    return [dataclasses.replace(c, repeats=int(seq.looks[0])) for c in cases]


def _serving_sequential_cases(phase: str, matrix: MatrixConfig, cases: list[PhaseCase]) -> list[PhaseCase]:
    """A sequential serving phase's cases: every floor baseline (a baseline without a step delay) and every offload
    label ``looks[0]`` times (the first look's blocks; later ones are decided while the run goes:
    ``runners.orchestration.serving_sequential``), a speed control its fixed repeats (it is not looked at).

    Raises:
        PlanError: naming the value and what is allowed: a pairing other than ``block`` (each label process is judged
            against the floor baselines of its own block), fewer than two floor baselines or no offload label,
            ``repeats_by_label`` naming anything but a speed control, a speed control with more repeats than
            ``looks[0]``, ``focus_first``.
    """
    seq = matrix.sequential
    first = int(seq.looks[0])
    if str(seq.pairing) != "block":
        raise PlanError(f"phase {phase!r}: sequential.pairing {str(seq.pairing)!r}: a serving phase's looks pair each "
                        "label process with the floor baselines of its own block; the only allowed value is 'block'")
    floor = [c.label for c in cases if is_floor_baseline(c.implementation, c.step_delay_ms)]
    controls = {c.label: c.repeats for c in cases if is_speed_control(c.implementation, c.step_delay_ms)}
    labels = [c.label for c in cases if is_offload_label(c.implementation)]
    if len(floor) < 2 or not labels:
        raise PlanError(f"phase {phase!r}: a sequential serving phase needs at least 2 floor baselines (baselines "
                        f"without step_delay_ms: {floor}) and at least 1 offload label ({labels})")
    others = sorted(set(matrix.repeats_by_label) - set(controls))
    over = {lb: n for lb, n in controls.items() if n > first}
    if others or over or matrix.focus_first:
        raise PlanError(f"phase {phase!r}: a sequential serving phase's looks decide each label's blocks: "
                        f"repeats_by_label may name only speed controls (step_delay_ms; named: {others}), each at most "
                        f"looks[0] = {first} (over: {over}), and focus_first ({matrix.focus_first}) must stay unset")
    return [c if c.label in controls else dataclasses.replace(c, repeats=first) for c in cases]


def _case(phase: str, label: str, r: CaseConfig, backend: OffloadBackend, kind: CaseKind, n_rep: int,
          workload: WorkloadConfig, runtime: RuntimeConfig, matrix: MatrixConfig, fields: dict[str, Any]) -> PhaseCase:
    """One case; ``fields``: the kind's (``CaseKind.phase_fields``)."""
    return PhaseCase(
        phase=phase, label=label, implementation=Implementation(r.implementation), group_size=r.group_size,
        num_in_group=r.num_in_group, prefetch_step=r.prefetch_step, params=tuple(str(p) for p in r.params),
        backend=backend, kind=kind.name, repeats=n_rep, expect_error=r.expect_error, workload=workload,
        runtime=runtime, timeout_s=matrix.case_timeout_s, kill_grace_s=matrix.kill_grace_s,
        cooldown_s=matrix.cooldown_s, accuracy_limit=matrix.accuracy_limit, engine_validates=r.engine_validates,
        fault=None if r.fault is None else str(r.fault), step_delay_ms=float(r.step_delay_ms or 0.0),
        in_process=cast("InProcessDesign | None", r.in_process), **fields,  # checked by check_in_process
    )


def phase_order(phases: Mapping[str, MatrixConfig]) -> list[str]:
    """Phase names sorted by ``order`` (stable: ties keep composition order)."""
    names = list(phases)
    return sorted(names, key=lambda n: (phases[n].order, names.index(n)))


def expand(cfg: Config, *, num_layers: int | None = None, choose: ChooseNeed | None = None) -> dict[str, list[PhaseCase]]:
    """Expand every phase of a config into cases, in phase order (``choose``: the run's ``choose_need`` when
    already computed).

    Raises:
        PlanError: see ``expand_phase``; also a config with no phase, or an ``offload_params`` pattern that
            matches no parameter of the model its case loads (``runners.planning.layer_names``).
    """
    if not cfg.phases:
        raise PlanError("the config has no phase: select a matrix (e.g. +experiment=smoke)")
    cfg = with_choose(cfg, choose)
    layers = num_layers if num_layers is not None else cfg.model.num_layers
    by_phase = {name: expand_phase(name, cfg.phases[name], workload=cfg.workload, runtime=cfg.runtime,
                                   num_layers=case_kind(cfg.phases[name].kind).num_layers(name, cfg.phases[name],
                                                                                          layers))
                for name in phase_order(cfg.phases)}
    check_offload_params(by_phase, cfg.model)
    return by_phase


def schedule(cases_by_phase: Mapping[str, Sequence[PhaseCase]], *, rotate_by_phase: Mapping[str, bool] | None = None,
             focus_first_by_phase: Mapping[str, bool] | None = None,
             blocks_by_phase: Mapping[str, bool] | None = None) -> list[ScheduledCase]:
    """Order every process of the run.

    Phases run one after another; within a phase, repeat ``r`` runs the cases that
    still have a repeat ``r`` (``case.repeats > r``) starting at index ``r`` of that
    list, wrapping around (rotated order), unless rotation is off for the phase.
    With ``focus_first`` (the published 1.5B design) the phase's cases are split by their
    repeat count, most repeats first (focus labels, then capacity labels), and each block
    runs completely, scheduled as above, before the next. A phase in ``blocks_by_phase`` (sequential) runs
    repeat ``r`` as block ``r + 1`` in ABBA order (``runners.planning.blocks.block_order``: the baseline, the first
    case, first in odd blocks and last in even ones).

    Returns:
        The launches, ``index`` numbering them from 0.
    """
    out: list[ScheduledCase] = []
    for phase, cases in cases_by_phase.items():
        rotate = True if rotate_by_phase is None else rotate_by_phase.get(phase, True)
        focus_first = bool((focus_first_by_phase or {}).get(phase, False))
        blocks = ([[c for c in cases if c.repeats == n] for n in sorted({c.repeats for c in cases}, reverse=True)]
                  if focus_first else [list(cases)])
        for block in blocks:
            max_rep = max((c.repeats for c in block), default=0)
            for r in range(max_rep):
                active = [c for c in block if c.repeats > r]
                start = (r % len(active)) if rotate else 0
                order = (block_order(active[0], active[1:], r + 1) if (blocks_by_phase or {}).get(phase)
                         else active[start:] + active[:start])
                for c in order:
                    out.append(ScheduledCase(index=len(out), case=c, repeat=r))
    return out


def plan(cfg: Config, choose: ChooseNeed | None = None) -> list[ScheduledCase]:
    """Expand and schedule a config (``choose``: the run's ``choose_need`` when already computed). Raises ``PlanError``."""
    by_phase = expand(cfg, choose=choose)
    rotate, focus = ({name: getattr(cfg.phases[name], k) for name in by_phase} for k in ("rotate", "focus_first"))
    blocks = {name: bool(cfg.phases[name].sequential.looks) for name in by_phase}
    return schedule(by_phase, rotate_by_phase=rotate, focus_first_by_phase=focus, blocks_by_phase=blocks)
