"""Planning of a choose-then-confirm run (``runners.planning.choose_plan``): the probe gets the calibration settings,
a need of 0 drops the verify phase, and a need the model cannot meet, a need without a choose experiment, two needs
or a negative one are refused before any process starts (in-process and through the CLI)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conf.schema import Config, ConfigError
from offload_tools.choice import calibration_settings, largest_release
from runners.errors import EXIT_CONFIG, PlanError
from runners.orchestration.choose_lines import dry_run_lines, verify_stage_line
from runners.planning.choose_plan import GIB, choose_need, model_sizes, need_bytes, with_choose
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg

REPO_ROOT = Path(__file__).resolve().parents[2]


def _items(*overrides: str) -> list[tuple[str, str, int]]:
    return [(sc.case.phase, sc.case.label, sc.repeat) for sc in plan(compose_cfg(*overrides))]


def _largest_gib(cfg: Config) -> str:
    """The largest release of ``cfg``'s model, as the refusal prints it (GiB, 4 significant digits)."""
    sizes = model_sizes(cfg.model, cfg.workload.dtype)
    top = largest_release(cfg.model.num_layers, dict(enumerate(sizes.layer_bytes)), sizes.slot)
    return f"{top / GIB:.4g} GiB"


def test_a_need_plans_the_probe_as_two_baselines_and_the_two_calibration_settings_twice_each() -> None:
    items = _items("+experiment=choose", "need_gib=0.05")
    every, half = calibration_settings(8)
    assert [i for i in items if i[0] == "probe"] == [("probe", "baseline", 0), ("probe", every.label(), 0),
                                                     ("probe", half.label(), 0), ("probe", every.label(), 1),
                                                     ("probe", half.label(), 1), ("probe", "baseline", 1)]
    assert (every.label(), half.label()) == ("current_g1_n1", "current_g2_n1_p3")
    # the verify phase's settings are decided while the run goes: planned, only its baselines are (sequential: the
    # first look's 3 blocks; the fixed design: its 4 repeats)
    assert [i for i in items if i[0] == "verify"] == [("verify", "baseline", r) for r in range(3)]
    fixed = _items("+experiment=choose", "need_gib=0.05", "choose.verify_looks=[]")
    assert [i for i in fixed if i[0] == "verify"] == [("verify", "baseline", r) for r in range(4)]


@pytest.mark.parametrize("override", ["choose.verify_looks=[3,3]", "choose.verify_looks=[4,3]"])
def test_verify_looks_not_strictly_increasing_are_refused_naming_the_key_typed(override: str) -> None:
    looks = override.split("=")[1].replace(",", ", ")
    with pytest.raises(PlanError, match=rf"^choose\.verify_looks {re.escape(looks)}: .*strictly increasing$"):
        plan(compose_cfg("+experiment=choose", "need_gib=0.05", override))


@pytest.mark.parametrize(("override", "named"), [
    ("choose.verify_target_floor_pct=0", "choose.verify_target_floor_pct=0.0: must be a finite number > 0 (%)"),
    ("choose.verify_target_floor_pct=-5", "choose.verify_target_floor_pct=-5.0: must be a finite number > 0 (%)"),
    ("choose.verify_target_floor_pct=nan", "choose.verify_target_floor_pct=nan: must be a finite number > 0 (%)"),
    ("choose.verify_looks=[1]", "choose.verify_looks[0]=1: must be a whole number >= 2 (processes per arm)"),
])
def test_a_verify_design_number_out_of_its_range_is_refused_naming_the_key_typed(override: str, named: str) -> None:
    """The floor and the looks take the sequential rule's ranges (``conf.ranges``), named as the user typed them."""
    with pytest.raises(ConfigError) as exc:
        compose_cfg("+experiment=choose", "need_gib=0.05", override)
    assert str(exc.value) == named


@pytest.mark.parametrize("override", ["phases.verify.sequential.looks=[3,4,6]",
                                      "phases.verify.sequential.pairing=block"])
def test_the_verify_phases_own_sequential_settings_are_refused_pointing_to_choose_verify_looks(override: str) -> None:
    with pytest.raises(PlanError, match=r"^phase 'verify': .*choose\.verify_looks"):
        plan(compose_cfg("+experiment=choose", "need_gib=0.05", override))


def test_a_kv_need_plans_as_a_released_bytes_need_of_the_same_size() -> None:
    kv = compose_cfg("+experiment=choose", "need_kv_gib=0.05")
    assert need_bytes(kv) == (round(0.05 * GIB), "need_kv_gib=0.05")
    assert [(sc.case.phase, sc.case.label, sc.repeat) for sc in plan(kv)] == _items("+experiment=choose",
                                                                                    "need_gib=0.05")


def test_a_need_of_0_plans_two_baselines_and_no_verify_phase() -> None:
    cfg = compose_cfg("+experiment=choose", "need_gib=0")
    assert [(sc.case.phase, sc.case.label, sc.repeat) for sc in plan(cfg)] == [("probe", "baseline", 0),
                                                                               ("probe", "baseline", 1)]
    assert "verify" not in with_choose(cfg).phases


def test_a_need_above_the_largest_release_is_refused_naming_it() -> None:
    cfg = compose_cfg("+experiment=choose", "need_gib=50")
    top = re.escape(_largest_gib(cfg))
    with pytest.raises(PlanError, match=rf"need_gib=50: more than the largest release of tiny-qwen2-l8-h1024: "
                                        rf"{top} \(.* B: every layer offloaded, one prefetch slot; "):
        plan(cfg)


def test_the_largest_release_is_the_models_own() -> None:
    """The hidden-128 tiny model releases at most about 2 MB: a need the default model meets is refused for it."""
    cfg = compose_cfg("+experiment=choose", "model=tiny", "need_gib=0.05")
    assert _largest_gib(cfg) == "0.001929 GiB"
    with pytest.raises(PlanError, match=r"more than the largest release of tiny-qwen2-l8: 0\.001929 GiB"):
        plan(cfg)


@pytest.mark.parametrize("need", ["need_gib=1", "need_kv_gib=1"])
def test_a_need_without_a_choose_experiment_is_refused(need: str) -> None:
    with pytest.raises(PlanError, match=r"need_gib / need_kv_gib apply to a choose-then-confirm run "
                                        r"\(\+experiment=choose or \+experiment=qwen7b_choose\)"):
        plan(compose_cfg(need))


def test_both_needs_at_once_are_refused() -> None:
    with pytest.raises(PlanError, match="needs exactly one of need_gib=.*; got need_gib, need_kv_gib"):
        plan(compose_cfg("+experiment=choose", "need_gib=0.05", "need_kv_gib=0.05"))


def test_a_choose_experiment_without_a_need_is_refused() -> None:
    with pytest.raises(PlanError, match="needs exactly one of .*; got neither"):
        plan(compose_cfg("+experiment=choose"))


@pytest.mark.parametrize("need", ["need_gib=-1.0", "need_kv_gib=-0.5", "need_gib=nan", "need_gib=inf"])
def test_a_need_that_is_negative_nan_or_infinite_is_a_config_error(need: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{need}: must be a finite number >= 0 \(GiB\)$"):
        compose_cfg("+experiment=choose", need)


def test_decided_points_given_to_the_verify_phase_are_refused() -> None:
    with pytest.raises(PlanError, match="phase 'verify': a verify phase's settings are decided while the run goes"):
        plan(compose_cfg("+experiment=choose", "need_gib=0.05", "phases.verify.points=[{g: 2, n: 1}]"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runners.matrix", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.heavy  # a runner process (about 2 s)
def test_cli_need_above_the_largest_release_exits_2_in_one_line_naming_it() -> None:
    top = _largest_gib(compose_cfg("+experiment=choose", "need_gib=50"))
    r = _cli("+experiment=choose", "need_gib=50", "dry_run=true")
    out = r.stdout + r.stderr
    assert r.returncode == EXIT_CONFIG, out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
    assert f"need_gib=50: more than the largest release of tiny-qwen2-l8-h1024: {top} " in " ".join(out.split())


@pytest.mark.heavy  # a runner process (about 2 s)
def test_cli_dry_run_of_qwen7b_choose_prints_its_scale_beside_the_published_design() -> None:
    if not (REPO_ROOT / "conf" / "experiment" / "qwen7b_choose.yaml").is_file():
        pytest.skip("conf/experiment/qwen7b_choose.yaml does not exist (yet)")
    r = _cli("+experiment=qwen7b_choose", "need_gib=3", "dry_run=true")
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out
    assert "Traceback" not in out
    assert "choose: probe 4 processes" in out and "a contended one is re-measured, at most 2 more per label" in out
    assert "choose: verify at most 9 processes (2 settings + baseline x 3)" in out
    assert "choose: need_gib=3: " in out and " of 1090 distinct settings meet it (layer bytes: " in out
    assert "choose: the full design conf/matrix/same_runtime.yaml: 63 processes" in out


def test_a_dry_run_of_a_need_of_0_says_there_is_no_verify_stage_and_prints_no_verify_scale() -> None:
    cfg = compose_cfg("+experiment=choose", "need_gib=0")
    lines = dry_run_lines(cfg, 2, choose_need(cfg))
    assert lines[-1] == "choose: no verify stage (a need of 0 is met by the baseline)", lines
    assert not any("verify at most" in line or "measuring every candidate" in line for line in lines), lines


@pytest.mark.parametrize("override", ["choose.verify_looks=[3,4,6]", "choose.verify_target_floor_pct=10",
                                      "choose.verify_budget=3"])
def test_a_choose_setting_on_a_run_without_a_choose_phase_is_refused_not_ignored(override: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(PlanError, match=rf"^{re.escape(key)}=.* applies to a choose-then-confirm run .*no "
                                        r"choose\.probe_phase$"):
        plan(compose_cfg("model=tiny", override))


@pytest.mark.parametrize(("override", "verify", "refit", "front"), [
    ("choose.verify_looks=[]", 12, 4, 8),  # fixed: 2 settings + the baseline, 4 processes each; no series baseline
    ("choose.verify_looks=[3,4,6]", 18, 12, 18),  # sequential, at the budget's 6 blocks: a series runs its baseline
])
def test_the_run_line_and_the_dry_run_state_the_same_verify_refit_and_front_counts(
        override: str, verify: int, refit: int, front: int) -> None:
    """``+experiment=choose``'s header: verify at most 18 processes, a refit's own series 6 to 12 more."""
    cfg = compose_cfg("+experiment=choose", "need_gib=0.05", override)
    dry = " ".join(dry_run_lines(cfg, 2, choose_need(cfg)))
    assert f"verify at most {verify} processes" in dry and f"with one refit {verify + refit}:" in dry, dry
    assert f"adds its measured front, at most {front} more" in dry, dry
    line = verify_stage_line(cfg, True)
    assert f"the measured front, at most {front} more)" in line, line
    fixed = override.endswith("[]")
    assert f"= {verify} processes" in line if fixed else f"at most {verify}" in line, line
    assert f"a refit adds {refit} (" in line if fixed else f"a refit starts its own series (6-{refit} more;" in line, line
