"""Implementation ``overlay`` in the runner: the plan refuses it without a usable source root / class
(exit 2, before any process), the case environment puts the root on ``PYTHONPATH`` after the hook and
the repository, the root becomes a required ``source_trees`` pin, and the evidence class is checked."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_module

from conf.schema import checked_plain_config
from conf.schema_stack import RuntimeConfig
from conf.typed import load_config, validate_as
from offload.selection import select_offload_layers
from results_schema.rules.evidence_rule import evidence_problems
from tests.support.synthetic import SynthCase, make_case_run
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.paths import EVIDENCE_HOOK_DIR, REPO_ROOT
from runners.errors import PlanError
from tests.runners.test_plan import matrix, typed_expand
from tests.runners.helpers import TINY_DEFAULT

ROOT = str(REPO_ROOT / "tests" / "fixtures" / "overlay_src")
CLS = "overlay_emulation.prefetch:StaleRingOffloader"


def _runtime(**kw):
    return dict(name="cpu", device="cpu", env={}, overlay_source_root=ROOT, overlay_class=CLS) | kw


def _typed_runtime(**kw):
    return validate_as(RuntimeConfig, _runtime(**kw))


def _expand(runtime):
    return typed_expand(matrix(implementations=["overlay"]), runtime=runtime)


def test_overlay_cases_expand_with_a_source_root_and_class():
    cases = _expand(_runtime())
    assert [c.label for c in cases] == ["baseline", "overlay_g4_n1", "overlay_g2_n1"]


@pytest.mark.parametrize(("kw", "needle"), [
    ({"overlay_source_root": None}, "implementation overlay needs runtime 'cpu'.overlay_source_root (now None)"),
    ({"overlay_source_root": "rel/path"}, "overlay_source_root='rel/path' must be an absolute path"),
    ({"overlay_source_root": "/a:/b"}, "overlay_source_root='/a:/b' must be an absolute path without ':'"),
    ({"overlay_class": None}, "overlay_class None must be 'module.path:ClassName'"),
    ({"overlay_class": "a.b.C"}, "overlay_class 'a.b.C' must be 'module.path:ClassName'"),
])
def test_overlay_without_a_usable_root_or_class_is_a_plan_error_naming_the_value(kw, needle):
    with pytest.raises(PlanError, match="case 'overlay_g4_n1'") as exc:
        _expand(_runtime(**kw))
    assert needle in str(exc.value)


def test_the_cpu_default_has_no_overlay_and_other_implementations_do_not_need_one():
    assert len(typed_expand(matrix(), runtime=_runtime(overlay_source_root=None))) == 3


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_matrix_with_overlay_cases_and_no_source_root_exits_2_before_any_process(tmp_path):
    r = subprocess.run([sys.executable, "-m", "runners.matrix", *TINY_DEFAULT, f"results_root={tmp_path}",
                        "progress=false", "phases.same_runtime.implementations=[overlay]"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "overlay_source_root (now None)" in out and "Traceback" not in out
    assert not any(tmp_path.iterdir())  # no run directory: nothing started


def _env(impl, runtime, base=None):
    sc = SimpleNamespace(case=SimpleNamespace(implementation=impl, runtime=runtime, fault=None, step_delay_ms=0.0))
    return case_env(sc, run_dir=Path("/run"), paths=CasePaths.of(Path("/run"), "p", "x-r0"), base_env=base or {})


def test_overlay_case_env_puts_the_root_after_hook_and_repo_and_names_the_class():
    env = _env("overlay", _typed_runtime(inherit_pythonpath=True), {"PYTHONPATH": "/cann/python",
                                                            "OFFLOAD_OVERLAY_CLASS": "inherited:Nope"})
    assert env["PYTHONPATH"] == f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}:{ROOT}:/cann/python"
    assert env["OFFLOAD_IMPL"] == "overlay" and env["OFFLOAD_OVERLAY_CLASS"] == CLS
    assert env["OFFLOAD_OVERLAY_SOURCE_ROOT"] == ROOT


def test_overlay_root_follows_the_runtime_path_map_and_other_cases_get_no_overlay():
    env = _env("overlay", _typed_runtime(overlay_source_root="/opt/pub", path_map={"/opt/pub": "/home/me/pub"}))
    assert env["PYTHONPATH"].endswith(":/home/me/pub") and env["OFFLOAD_OVERLAY_SOURCE_ROOT"] == "/home/me/pub"
    env = _env("current", _typed_runtime(), {"OFFLOAD_OVERLAY_CLASS": "inherited:Nope"})
    assert env["PYTHONPATH"] == f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}"
    assert "OFFLOAD_OVERLAY_CLASS" not in env and "OFFLOAD_OVERLAY_SOURCE_ROOT" not in env


def test_overlay_source_root_is_declared_as_a_required_source_tree_pin():
    overrides = [f"runtime.overlay_source_root={ROOT}", f"runtime.overlay_class={CLS}"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        typed = load_config(compose("config", overrides=overrides), overrides)
        default = load_config(compose("config"))
    assert typed.runtime.pins.source_trees == {ROOT: "???"}
    assert default.runtime.pins.source_trees == {}
    assert (default.runtime.overlay_source_root, default.runtime.overlay_class) == (None, None)


def test_ascend_runtimes_default_to_the_published_class_name():
    for rt in ("ascend_latest", "ascend_native_v018"):
        with initialize_config_module(config_module="conf", version_base="1.3"):
            plain = checked_plain_config(compose("config", overrides=[f"runtime={rt}"]))
        assert plain["runtime"]["overlay_class"] == ("vllm_ascend.model_executor.offloader.prefetch:"
                                                     "AscendPrefetchOffloader")
        assert plain["runtime"]["overlay_source_root"] is None


def test_runner_refuses_evidence_of_another_class_than_the_runtimes_overlay_class():
    cr = make_case_run("p", SynthCase("overlay_g4_n1", "current", 4, 1), 0, random.Random(0))

    def problems(cls: str) -> list:
        ev = cr.evidence.model_copy(update={"implementation": "overlay", "offloader_class": cls})
        return evidence_problems(ev, implementation="overlay", setting=cr.record.offload, overlay_class=CLS,
                                 select=select_offload_layers)

    assert problems("overlay_emulation.prefetch.StaleRingOffloader") == []
    (p,) = problems("vllm_ascend.x.NPUPrefetchOffloader")
    assert p.failure_type == "evidence_mismatch" and p.code == "wrong_offloader_class"
    assert "ran offloader 'vllm_ascend.x.NPUPrefetchOffloader'" in p.message


def test_pins_tool_writes_an_overlay_tree_override_the_runner_accepts():
    from runners.pins import override_for
    from runners.identity.probe import tree_sha256

    sha = tree_sha256(ROOT)
    ov = override_for("runtime", "source_trees", ROOT, sha)
    assert ov == f"++runtime.pins.source_trees={{{ROOT}:'{sha}'}}"
    overrides = [f"runtime.overlay_source_root={ROOT}", f"runtime.overlay_class={CLS}", ov]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        typed = load_config(compose("config", overrides=overrides), overrides)
    assert typed.runtime.pins.source_trees == {ROOT: sha}
