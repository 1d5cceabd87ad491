"""What a choose-then-confirm run prints about its size before it measures: the verify stage's bound (a run) and
the scale on paper (a dry run) beside the full design and every candidate measured.

What is deliberately not modelled: the choice (``runners.orchestration.choose``).
"""

from __future__ import annotations

from conf.schema import Config
from runners.orchestration.choose import REFIT_BUDGET
from runners.planning.choose_plan import model_sizes, need_bytes
from offload_tools.choice import distinct_settings, released_bytes
from runners.paths import REPO_ROOT


def verify_stage_line(cfg: Config, has_verify: bool) -> str:
    """What the verify stage will run at most: decided after the probe, so printed as a bound (``has_verify``
    False: a need of 0, no verify stage)."""
    ch = cfg.choose
    if not has_verify:
        return "then no verify stage: a need of 0 is met by the baseline (offload unnecessary)"
    m = cfg.phases[ch.verify_phase]
    n = (ch.verify_budget + 1) * m.repeats
    eta = f", ~{n * m.expected_case_s / 60:.1f} min" if m.expected_case_s else ""
    return (f"then the verify stage, decided after the probe: at most {ch.verify_budget} setting(s) + the baseline, "
            f"{m.repeats} processes each = {n} processes{eta}; a refit adds {REFIT_BUDGET * m.repeats} (a model still "
            f"wrong: the measured front, at most {ch.front_budget * m.repeats} more)")


def dry_run_lines(cfg: Config, probe_items: int) -> list[str]:
    """A dry run's scale on paper: the probe, the largest verify stage (with a refit and a front), the full design of
    ``choose.compare_matrix`` and every candidate measured with the verify design; durations where known."""
    from omegaconf import DictConfig, OmegaConf

    ch, m = cfg.choose, cfg.phases.get(cfg.choose.verify_phase)
    probe = cfg.phases[str(ch.probe_phase)]
    lines = []

    def eta(n: int, case_s: float | None) -> str:
        return f" (~{n * case_s / 60:.1f} min at {case_s:g} s per process)" if case_s else " (expected_case_s unknown)"

    lines.append(f"choose: probe {probe_items} processes{eta(probe_items, probe.expected_case_s)}")
    if m is None:
        return [*lines, "choose: no verify stage (a need of 0 is met by the baseline)"]
    need, text = need_bytes(cfg)
    sizes = model_sizes(cfg.model, cfg.workload.dtype)
    layer = dict(enumerate(sizes.layer_bytes))
    settings = distinct_settings(cfg.model.num_layers)
    cands = sum(1 for s in settings if released_bytes(s, layer, sizes.slot, cfg.model.num_layers) >= need)
    verify = (ch.verify_budget + 1) * m.repeats
    refit = verify + REFIT_BUDGET * m.repeats
    most = refit + ch.front_budget * m.repeats
    lines.append(f"choose: verify at most {verify} processes ({ch.verify_budget} settings + baseline x {m.repeats})"
                 f"{eta(verify, m.expected_case_s)}; with one refit {refit}: the run at most {probe_items + refit} "
                 f"processes{eta(probe_items + refit, m.expected_case_s)}; a model still wrong adds its measured front, "
                 f"at most {most - refit} more")
    lines.append(f"choose: {text}: {cands} of {len(settings)} distinct settings meet it (layer bytes: {sizes.source}); "
                 f"measuring every candidate with the verify design: {(cands + 1) * m.repeats} processes"
                 f"{eta((cands + 1) * m.repeats, m.expected_case_s)}")
    if ch.compare_matrix:
        doc = OmegaConf.load(REPO_ROOT / "conf" / "matrix" / f"{ch.compare_matrix}.yaml")
        assert isinstance(doc, DictConfig)  # a matrix file is a mapping
        full = (int(bool(doc.get("baseline", True))) + len(doc.points) * len(doc.get("implementations", ["current"]))) \
            * int(doc.get("repeats", 1))
        lines.append(f"choose: the full design conf/matrix/{ch.compare_matrix}.yaml: {full} processes"
                     f"{eta(full, doc.get('expected_case_s'))}")
    return lines
