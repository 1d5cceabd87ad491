"""What a choose-then-confirm run prints about its size before it measures: the verify stage's bound (a run) and
the scale on paper (a dry run) beside the full design and every candidate measured.

What is deliberately not modelled: the choice (``runners.orchestration.choose``).
"""

from __future__ import annotations

from typing import NamedTuple

from omegaconf import DictConfig, OmegaConf

from conf.schema import Config
from conf.schema_matrix import MatrixConfig
from runners.orchestration.choose_decide import REFIT_BUDGET
from runners.orchestration.choose_verify import has_verify
from runners.planning.choose_plan import ChooseNeed
from offload_tools.choice import distinct_settings, released_bytes
from runners.paths import REPO_ROOT
from runners.planning.plan import expand_phase


class StageProcesses(NamedTuple):
    """Processes each stage of a choose run's verify phase runs at most, at ``per_arm`` processes per arm
    (``stage_processes``).

    Attributes:
        verify: the decided settings (``choose.verify_budget``) and the baseline.
        refit: what a refit adds: its settings (``REFIT_BUDGET``), plus a baseline of its own in a sequential verify
            phase (each series runs its own blocks: ``LookDecision.first_block``).
        front: what a model still wrong adds: its measured front (``choose.front_budget``), plus its own baseline in
            a sequential verify phase.
    """

    verify: int
    refit: int
    front: int


def stage_processes(cfg: Config, per_arm: int) -> StageProcesses:
    """The verify phase's stages at ``per_arm`` processes per arm (the fixed phase's ``repeats``, or a sequential
    series' blocks at a look): the one count the run's bound line and the dry run's scale print."""
    ch = cfg.choose
    own_baseline = 1 if ch.verify_looks else 0
    return StageProcesses((ch.verify_budget + 1) * per_arm, (REFIT_BUDGET + own_baseline) * per_arm,
                          (ch.front_budget + own_baseline) * per_arm)


def verify_stage_line(cfg: Config, has_verify: bool) -> str:
    """What the verify stage will run at most: decided after the probe, so printed as a bound (``has_verify``
    False: a need of 0, no verify stage)."""
    ch = cfg.choose
    if not has_verify:
        return "then no verify stage: a need of 0 is met by the baseline (offload unnecessary)"
    m = cfg.phases[ch.verify_phase]
    if ch.verify_looks:
        return _sequential_verify_line(cfg)
    s = stage_processes(cfg, m.repeats)
    eta = f", ~{s.verify * m.expected_case_s / 60:.1f} min" if m.expected_case_s else ""
    return (f"then the verify stage, decided after the probe: at most {ch.verify_budget} setting(s) + the baseline, "
            f"{m.repeats} processes each = {s.verify} processes{eta}; a refit adds {s.refit} (a model still "
            f"wrong: the measured front, at most {s.front} more)")


def _sequential_verify_line(cfg: Config) -> str:
    """``verify_stage_line`` of a sequential verify phase (``choose.verify_looks``): per decision, its settings and the
    baseline in ABBA blocks, from the first look's blocks to the budget's."""
    ch = cfg.choose
    m = cfg.phases[ch.verify_phase]
    lo, hi = stage_processes(cfg, int(ch.verify_looks[0])), stage_processes(cfg, int(ch.verify_looks[-1]))
    case_s = m.expected_case_s
    eta = f", ~{lo.verify * case_s / 60:.1f}-{hi.verify * case_s / 60:.1f} min" if case_s else ""
    return (f"then the verify stage, decided after the probe: at most {ch.verify_budget} setting(s) + the baseline in "
            f"ABBA blocks, looked at after {', '.join(map(str, ch.verify_looks))} blocks, each setting stopped once its "
            f"verdict is conclusive at the target its decision declares (the predicted gap to the runner-up, at least "
            f"{ch.verify_target_floor_pct:g}%): {lo.verify} processes when every setting stops at the first look, at "
            f"most {hi.verify}{eta}; a refit starts its own series ({lo.refit}-{hi.refit} more; a model still wrong: "
            f"the measured front, at most {hi.front} more)")


def dry_run_lines(cfg: Config, probe_items: int, known: ChooseNeed) -> list[str]:
    """A dry run's scale on paper: the probe, the largest verify stage (with a refit and a front), the full design of
    ``choose.compare_matrix`` and every candidate measured with the verify design; durations where known
    (``known``: the plan's need and model sizes, ``choose_need``)."""

    ch = cfg.choose
    m = cfg.phases[str(ch.verify_phase)] if has_verify(cfg, known) else None  # a need of 0 drops the phase
    probe = cfg.phases[str(ch.probe_phase)]
    lines = []

    def eta(n: int, case_s: float | None) -> str:
        return f" (~{n * case_s / 60:.1f} min at {case_s:g} s per process)" if case_s else " (expected_case_s unknown)"

    lines.append(f"choose: probe {probe_items} processes{eta(probe_items, probe.expected_case_s)}; a contended one "
                 f"is re-measured, at most {ch.probe_remeasures} more per label")
    if m is None:
        return [*lines, "choose: no verify stage (a need of 0 is met by the baseline)"]
    need, text, sizes = known.need, known.text, known.sizes
    layer = dict(enumerate(sizes.layer_bytes))
    settings = distinct_settings(cfg.model.num_layers)
    cands = sum(1 for s in settings if released_bytes(s, layer, sizes.slot, cfg.model.num_layers) >= need)
    per_arm = int(ch.verify_looks[-1]) if ch.verify_looks else m.repeats  # sequential: the budget's blocks
    stages = stage_processes(cfg, per_arm)
    verify, refit = stages.verify, stages.verify + stages.refit
    lines.append(f"choose: verify at most {verify} processes ({ch.verify_budget} settings + baseline x {per_arm})"
                 f"{eta(verify, m.expected_case_s)}; with one refit {refit}: the run at most {probe_items + refit} "
                 f"processes{eta(probe_items + refit, m.expected_case_s)}; a model still wrong adds its measured front, "
                 f"at most {stages.front} more")
    lines.append(f"choose: {text}: {cands} of {len(settings)} distinct settings meet it (layer bytes: {sizes.source}); "
                 f"measuring every candidate with the verify design: {(cands + 1) * m.repeats} processes"
                 f"{eta((cands + 1) * m.repeats, m.expected_case_s)}")
    if ch.compare_matrix:
        full, matrix = compare_design(cfg, ch.compare_matrix)
        lines.append(f"choose: the full design conf/matrix/{ch.compare_matrix}.yaml: {full} processes"
                     f"{eta(full, matrix.expected_case_s)}")
    return lines


def compare_design(cfg: Config, name: str) -> tuple[int, MatrixConfig]:
    """``(processes, typed matrix)`` of ``conf/matrix/<name>.yaml`` as the planner expands it for this run's model,
    workload and runtime (``runners.planning.plan.expand_phase``): the file over the schema's defaults
    (``conf.schema_matrix.MatrixConfig``); its Hydra ``defaults`` list (a runtime of its own) is not composed.

    Raises:
        PlanError: the design does not plan for this run's model (``expand_phase``).
    """
    doc = OmegaConf.load(REPO_ROOT / "conf" / "matrix" / f"{name}.yaml")
    assert isinstance(doc, DictConfig)  # a matrix file is a mapping
    body = {k: v for k, v in doc.items() if k != "defaults"}
    matrix = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(MatrixConfig), body))
    assert isinstance(matrix, MatrixConfig)
    cases = expand_phase(name, matrix, workload=cfg.workload, runtime=cfg.runtime, num_layers=cfg.model.num_layers)
    return sum(c.repeats for c in cases), matrix
