"""Matrix expansion and schedule: composed config -> ordered list of case launches.

What is modelled: the cases of each phase (baseline + points x implementations + explicit cases), their
validation before any process starts (offload parameters through ``offload.selection``, labels, repeats, kinds;
the per-phase effective workload against ``results_schema.models.WorkloadSpec`` and input_len + max_tokens
<= max_model_len), the per-phase effective workload and runtime, and the rotated schedule (in repeat ``r`` the
case order starts at index ``r``, as the seed did).

What is deliberately not modelled: launching, identity, statistics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from conf.choices import PhaseKind
from offload.selection import case_label, check_offload_setting, select_offload_layers
from results_schema.manifest import is_secret_name, looks_like_credential
from results_schema.base import IMPLEMENTATIONS
from runners.models.accuracy_model import phase_layers
from runners.errors import PlanError
from runners.planning.workload_check import _effective_workload, validate_workload

KINDS = tuple(k.value for k in PhaseKind)
BENCH_KINDS = ("throughput", "ttft", "stability")
"""Phase kinds whose cases run ``runners.incase.bench_one`` (the only ones with ``engine_validates``)."""
ACCURACY_BASELINE_RUNS = 2
"""An accuracy phase's baseline runs at least this often (repeat-major: the runs bracket the offload cases), so
the verifier compares them with each other before it blames an offloader (``analysis.accuracy.baselines``)."""
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class PhaseCase:
    """One case of one phase (all repeats share it).

    Attributes:
        phase: phase name (key of ``phases``).
        label: unique within the phase; names log/evidence/record files.
        implementation: ``baseline``, ``current``, ``official``, ``sync``, ``overlay``.
        group_size, num_in_group, prefetch_step, params, backend: offload parameters.
        kind: phase kind (``throughput``, ``ttft``, ``stability``, ``accuracy``).
        repeats: how many times the case runs.
        expect_error: regex the case's failure must match (expected failure), or None.
        engine_validates: the bench process skips its offload pre-check (``runners.incase.engine_path``).
        workload: effective workload fields (``WorkloadSpec`` names).
        runtime: effective runtime config (plain dict).
        timeout_s, kill_grace_s, cooldown_s: process limits of the phase.
        accuracy_tasks: tasks for accuracy phases (one process evaluates all of them).
        accuracy_limit: first N rows per task (smoke accuracy runs), None = all rows.
        accuracy_manifest: dataset manifest of accuracy phases (as configured; resolved by the runner).
        accuracy_protocol: registered accuracy protocol of accuracy phases (None for other kinds).
        accuracy_model: accuracy phases: model directory loaded instead of the run's (as configured), None = the run's.
        fault: negative-control fault applied in the case process (``offload.faults``), None = none.
        max_accuracy_drop: accuracy phases: tolerance of the verifier's drop rule (fraction of accuracy, [0, 1]).
        serving: the phase's ``serving`` settings (``conf.schema_matrix.ServingConfig`` as a dict) for
            ``kind=serving``, else None.
    """

    phase: str
    label: str
    implementation: str
    group_size: int
    num_in_group: int
    prefetch_step: int
    params: tuple[str, ...]
    backend: str
    kind: str
    repeats: int
    expect_error: str | None
    workload: Mapping[str, Any] = field(hash=False, compare=False)
    runtime: Mapping[str, Any] = field(hash=False, compare=False)
    timeout_s: float = 600.0
    kill_grace_s: float = 10.0
    cooldown_s: float = 0.0
    accuracy_tasks: tuple[str, ...] = ()
    accuracy_limit: int | None = None
    accuracy_manifest: str | None = None
    accuracy_protocol: str | None = None
    max_accuracy_drop: float = 0.0
    serving: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    engine_validates: bool = False
    accuracy_model: str | None = None
    fault: str | None = None

    @property
    def offload_requested(self) -> bool:
        """True when the case asks an offloader to move at least one layer."""
        return self.implementation != "baseline" and self.group_size > 0 and self.num_in_group > 0

    @property
    def runtime_name(self) -> str:
        return str(self.runtime["name"])


@dataclass(frozen=True)
class ScheduledCase:
    """One process to launch: a case and its repeat, at a position in the run."""

    index: int
    case: PhaseCase
    repeat: int

    @property
    def key(self) -> tuple[str, str, int]:
        """``(phase, label, repeat)``: the identity used by resume."""
        return (self.case.phase, self.case.label, self.repeat)

    @property
    def stem(self) -> str:
        """File stem of this process's log / evidence / record: ``<label>-r<repeat>``."""
        return f"{self.case.label}-r{self.repeat}"


def _phase_kind(phase: str, matrix: Mapping[str, Any]) -> str:
    kind = matrix.get("kind", "throughput")
    if kind not in KINDS:
        raise PlanError(f"phase {phase!r}: kind {kind!r} must be one of {KINDS}")
    return str(kind)


def _phase_runtime(phase: str, matrix: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The phase's own runtime, else the run's; refuses secret-looking ``env`` entries."""
    eff_runtime = dict(matrix["runtime"]) if matrix.get("runtime") else dict(runtime)
    secret_env = [k for k, v in (eff_runtime.get("env") or {}).items()
                  if is_secret_name(str(k)) or looks_like_credential(str(v))]
    if secret_env:
        raise PlanError(f"phase {phase!r}: runtime.env sets secret-looking variables {secret_env}; the config is "
                        "written to the run directory, so pass secrets through the environment instead")
    return eff_runtime


def _check_serving(phase: str, matrix: Mapping[str, Any]) -> None:
    from runners.planning.serving_spec import validate_serving

    try:
        validate_serving(phase, matrix.get("serving") or {})
    except ValueError as exc:
        raise PlanError(f"phase {phase!r}: {exc}") from None


def _raw_cases(matrix: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Baseline, points x implementations, explicit cases (unvalidated, labels not yet generated)."""
    raw: list[dict[str, Any]] = []
    if matrix.get("baseline", True):
        raw.append(dict(implementation="baseline", group_size=0, num_in_group=0, prefetch_step=1,
                        params=(), backend="auto", label=None, expect_error=None))
    for point in matrix.get("points", ()):
        for impl in matrix.get("implementations", ()):
            raw.append(dict(implementation=impl, group_size=point["g"], num_in_group=point["n"],
                            prefetch_step=point.get("prefetch_step", 1), params=tuple(point.get("params", ())),
                            backend=point.get("backend", "auto"), label=None, expect_error=None))
    for case in matrix.get("cases", ()):
        raw.append(dict(implementation=case["implementation"], group_size=case.get("group_size", 0),
                        num_in_group=case.get("num_in_group", 0), prefetch_step=case.get("prefetch_step", 1),
                        params=tuple(case.get("params", ())), backend=case.get("backend", "auto"),
                        label=case.get("label"), expect_error=case.get("expect_error"),
                        engine_validates=bool(case.get("engine_validates", False)), fault=case.get("fault")))
    _apply_phase_backend(raw, matrix.get("offload_backend"))
    return raw


def _check_offload(where: str, impl: str, r: Mapping[str, Any], num_layers: int) -> None:
    """A case expected to run: valid offload parameters that select at least one layer (offload cases)."""
    try:
        check_offload_setting(impl, r["group_size"], r["num_in_group"], r["prefetch_step"], r["backend"])
    except ValueError as exc:
        raise PlanError(f"{where}: {exc}") from None
    if r.get("fault") is not None and (impl not in ("current", "sync") or not r["group_size"]):
        raise PlanError(f"{where}: fault {r['fault']!r} corrupts this project's offloader: it needs implementation "
                        f"current or sync with offload, not {impl!r} with offload_group_size {r['group_size']}")
    if impl == "baseline":
        return
    if not select_offload_layers(num_layers, r["group_size"], r["num_in_group"]):
        raise PlanError(
            f"{where}: offload_group_size {r['group_size']} / offload_num_in_group "
            f"{r['num_in_group']} selects no layer of the {num_layers}-layer model"
        )


def _checked_label(phase: str, r: Mapping[str, Any], seen: set[str], num_layers: int) -> str:
    """The case's label (generated unless given), after checking the case; adds it to ``seen``."""
    impl = r["implementation"]
    label = r["label"] or case_label(impl, r["group_size"], r["num_in_group"], r["prefetch_step"],
                                     r["params"], r.get("label_backend", r["backend"]))
    where = f"phase {phase!r}, case {label!r}"
    if impl not in IMPLEMENTATIONS:
        raise PlanError(f"{where}: implementation {impl!r} must be one of {IMPLEMENTATIONS}")
    if not _LABEL_RE.match(label):
        raise PlanError(f"{where}: label must match {_LABEL_RE.pattern}")
    if label in seen:
        raise PlanError(f"{where}: duplicate label in the phase")
    seen.add(label)
    if r["expect_error"] is None:
        _check_offload(where, impl, r, num_layers)
    else:
        try:
            re.compile(r["expect_error"])
        except re.error as exc:
            raise PlanError(f"{where}: expect_error is not a valid regex: {exc}") from None
    return str(label)


def check_overlay_runtime(where: str, runtime: Mapping[str, Any]) -> None:
    """An ``overlay`` case's runtime names an absolute source root and a ``module.path:ClassName`` class.

    Raises:
        PlanError: ``runtime.overlay_source_root`` null, relative or holding ``:`` (the ``PYTHONPATH``
            separator), or ``runtime.overlay_class`` malformed; naming the value and what is allowed.
    """
    from offload.overlay import check_class_pattern

    root = runtime.get("overlay_source_root")
    rt = f"runtime {runtime.get('name')!r}"
    if not isinstance(root, str) or not root:
        raise PlanError(f"{where}: implementation overlay needs {rt}.overlay_source_root (now {root!r}): the "
                        "absolute path of the published source tree, e.g. runtime.overlay_source_root="
                        "/opt/published/vllm-ascend (null = overlay unavailable on this runtime)")
    if not root.startswith("/") or ":" in root:
        raise PlanError(f"{where}: {rt}.overlay_source_root={root!r} must be an absolute path without ':'")
    try:
        check_class_pattern(runtime.get("overlay_class"))
    except ValueError as exc:
        raise PlanError(f"{where}: {rt}.{exc}") from None


def _accuracy_tasks(phase: str, matrix: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    if kind != "accuracy":
        return ()
    tasks = tuple(str(t) for t in (matrix.get("accuracy_tasks", ()) or ()))
    if not tasks:
        raise PlanError(f"phase {phase!r}: an accuracy phase needs accuracy_tasks (e.g. [gsm8k])")
    drop = matrix.get("max_accuracy_drop", 0.0)
    if isinstance(drop, bool) or not isinstance(drop, (int, float)) or not 0.0 <= float(drop) <= 1.0:
        raise PlanError(f"phase {phase!r}: max_accuracy_drop = {drop!r} is invalid: must be a fraction of accuracy "
                        "in [0, 1] (0 = no drop allowed, 0.01 = 1 percentage point)")
    return tasks


def _check_process_limits(phase: str, matrix: Mapping[str, Any]) -> None:
    """``case_timeout_s`` > 0, ``kill_grace_s`` >= 0, ``cooldown_s`` >= 0 (seconds; raises ``PlanError`` naming the key)."""
    for key, default, low, op in (("case_timeout_s", 600.0, 0.0, ">"), ("kill_grace_s", 10.0, 0.0, ">="),
                                  ("cooldown_s", 0.0, 0.0, ">=")):
        value = matrix.get(key, default)
        ok = float(value) > low if op == ">" else float(value) >= low  # NaN is never ok
        if not ok:
            raise PlanError(f"phase {phase!r}: {key} = {value!r} is invalid: must be a number of seconds {op} {low:g}")


def expand_phase(phase: str, matrix: Mapping[str, Any], *, workload: Mapping[str, Any],
                 runtime: Mapping[str, Any], num_layers: int) -> list[PhaseCase]:
    """Expand one phase's matrix into validated cases.

    Args:
        phase: phase name.
        matrix: the phase's ``MatrixConfig`` as a plain dict.
        workload: the run's ``WorkloadConfig`` as a plain dict.
        runtime: the run's ``RuntimeConfig`` (the phase's own ``runtime`` wins).
        num_layers: decoder layers of the model (a point that selects no layer is an error).

    Returns:
        Cases in matrix order (baseline, points x implementations, explicit cases). An accuracy phase's
        baseline runs at least ``ACCURACY_BASELINE_RUNS`` times.

    Raises:
        PlanError: unknown kind/implementation, invalid offload parameters (naming the
            values), duplicate labels, repeats for unknown labels, a point that selects
            no layer of the model, an invalid effective workload (``validate_workload``), an accuracy
            phase without tasks or with ``max_accuracy_drop`` outside [0, 1], a negative ``cooldown_s`` /
            ``kill_grace_s`` or a ``case_timeout_s`` <= 0, an ``overlay`` case
            whose runtime names no usable source root or class (:func:`check_overlay_runtime`).
    """
    kind = _phase_kind(phase, matrix)
    eff_runtime = _phase_runtime(phase, matrix, runtime)
    eff_workload = _effective_workload(workload, matrix)
    validate_workload(phase, eff_workload, matrix, kind=kind)
    _check_process_limits(phase, matrix)
    if kind == "serving":
        _check_serving(phase, matrix)
    repeats = int(matrix.get("repeats", 1))
    by_label = dict(matrix.get("repeats_by_label", {}) or {})
    cases: list[PhaseCase] = []
    seen: set[str] = set()
    for r in _raw_cases(matrix):
        label = _checked_label(phase, r, seen, num_layers)
        if r["implementation"] == "overlay":
            check_overlay_runtime(f"phase {phase!r}, case {label!r}", eff_runtime)
        n_rep = int(by_label.get(label, repeats))
        if kind == "accuracy" and r["implementation"] == "baseline":
            n_rep = max(n_rep, ACCURACY_BASELINE_RUNS)
        if n_rep < 1:
            raise PlanError(f"phase {phase!r}, case {label!r}: repeats ({n_rep}) must be >= 1")
        if r.get("engine_validates") and kind not in BENCH_KINDS:
            raise PlanError(f"phase {phase!r}, case {label!r}: engine_validates is a bench-case switch (phase kinds "
                            f"{BENCH_KINDS}); a {kind!r} phase has none")
        tasks = _accuracy_tasks(phase, matrix, kind)
        cases.append(_case(phase, label, r["implementation"], r, kind, n_rep, eff_workload, eff_runtime, matrix,
                           tasks))
    unknown = sorted(set(by_label) - seen)
    if unknown:
        raise PlanError(f"phase {phase!r}: repeats_by_label names unknown labels {unknown}; labels are {sorted(seen)}")
    if not cases:
        raise PlanError(f"phase {phase!r}: the matrix has no case")
    return cases


def _apply_phase_backend(raw: list[dict[str, Any]], backend: Any) -> None:
    """A phase's ``offload_backend`` (published: ``prefetch``) given explicitly to every offload case.

    Cases whose own backend is ``auto`` take it; their generated labels stay those of ``auto``
    (``current_g28_n1``), so ``repeats_by_label`` and reports keep their names."""
    if backend is None or backend == "auto":
        return
    for r in raw:
        if r["implementation"] != "baseline" and r["backend"] == "auto":
            r["backend"], r["label_backend"] = str(backend), "auto"


def _case(phase: str, label: str, impl: str, r: Mapping[str, Any], kind: str, n_rep: int, workload: Mapping[str, Any],
          runtime: Mapping[str, Any], matrix: Mapping[str, Any], tasks: tuple[str, ...]) -> PhaseCase:
    return PhaseCase(
        phase=phase, label=label, implementation=impl, group_size=int(r["group_size"]),
        num_in_group=int(r["num_in_group"]), prefetch_step=int(r["prefetch_step"]),
        params=tuple(str(p) for p in r["params"]), backend=str(r["backend"]), kind=kind, repeats=n_rep,
        expect_error=r["expect_error"], workload=workload, runtime=runtime,
        timeout_s=float(matrix.get("case_timeout_s", 600.0)), kill_grace_s=float(matrix.get("kill_grace_s", 10.0)),
        cooldown_s=float(matrix.get("cooldown_s", 0.0)), accuracy_tasks=tasks,
        accuracy_limit=matrix.get("accuracy_limit"),
        accuracy_manifest=(str(matrix.get("accuracy_manifest") or "eval_datasets/fixtures/manifest.json")
                           if kind == "accuracy" else None),
        accuracy_protocol=(str(matrix.get("accuracy_protocol") or "qwen-chat-v1") if kind == "accuracy" else None),
        max_accuracy_drop=float(matrix.get("max_accuracy_drop", 0.0)) if kind == "accuracy" else 0.0,
        serving=dict(matrix.get("serving") or {}) if kind == "serving" else None,
        engine_validates=bool(r.get("engine_validates", False)),
        accuracy_model=str(matrix["accuracy_model"]) if kind == "accuracy" and matrix.get("accuracy_model") else None,
        fault=str(r["fault"]) if r.get("fault") is not None else None,
    )


def phase_order(phases: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Phase names sorted by ``order`` (stable: ties keep composition order)."""
    names = list(phases)
    return sorted(names, key=lambda n: (int(phases[n].get("order", 0)), names.index(n)))


def expand(cfg: Mapping[str, Any], *, num_layers: int | None = None) -> dict[str, list[PhaseCase]]:
    """Expand every phase of a resolved config (plain dict) into cases, in phase order.

    Raises:
        PlanError: see ``expand_phase``; also a config with no phase.
    """
    phases = cfg.get("phases") or {}
    if not phases:
        raise PlanError("the config has no phase: select a matrix (e.g. +experiment=smoke)")
    layers = int(num_layers if num_layers is not None else cfg["model"]["num_layers"])
    return {name: expand_phase(name, phases[name], workload=cfg["workload"], runtime=cfg["runtime"],
                               num_layers=phase_layers(name, phases[name], layers))
            for name in phase_order(phases)}


def schedule(cases_by_phase: Mapping[str, Sequence[PhaseCase]], *, rotate_by_phase: Mapping[str, bool] | None = None,
             focus_first_by_phase: Mapping[str, bool] | None = None) -> list[ScheduledCase]:
    """Order every process of the run.

    Phases run one after another; within a phase, repeat ``r`` runs the cases that
    still have a repeat ``r`` (``case.repeats > r``) starting at index ``r`` of that
    list, wrapping around (rotated order), unless rotation is off for the phase.
    With ``focus_first`` (the published 1.5B design) the phase's cases are split by their
    repeat count, most repeats first (focus labels, then capacity labels), and each block
    runs completely, scheduled as above, before the next.

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
                for c in active[start:] + active[:start]:
                    out.append(ScheduledCase(index=len(out), case=c, repeat=r))
    return out


def plan(cfg: Mapping[str, Any]) -> list[ScheduledCase]:
    """Expand and schedule a resolved config (plain dict). Raises ``PlanError``."""
    by_phase = expand(cfg)
    rotate = {name: bool(cfg["phases"][name].get("rotate", True)) for name in by_phase}
    focus = {name: bool(cfg["phases"][name].get("focus_first", False)) for name in by_phase}
    return schedule(by_phase, rotate_by_phase=rotate, focus_first_by_phase=focus)
