"""Serving phase faults and plumbing with a fake API server (no engine): readiness, teardown, records.

The real-server test (killed mid-sweep) is ``tests/e2e/test_serving_kill.py``. Two tests here (the speed controls'
outputs, and offload outputs that differ under load) replace the whole case process with
``tests/runners/fake_serving.py``: their claim is the outputs analysis of a run, not the driver (so the control's
hook runs in the fake case, not behind the driver in a server); the other matrix tests run the driver and its
benchmark client against ``tests/runners/fake_server.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from conf.schema import ConfigError

from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.serving import ServingCaseResult, ServingRequests, ServingRun
from results_schema.records.serving_spec import ServingCaseSpec, ServingEngine, ServingLimits, ServingLoad, ServingSLO
from results_schema.records.identity import OffloadSetting
from runners.incase.serving import server as srv
from runners.incase.serving.driver import run_case
from tests.runners.helpers import compose_cfg
from tests.shared_runs import run_matrix

REPO = Path(__file__).resolve().parents[2]
FAKE_SERVER = Path(__file__).with_name("fake_server.py")
FAKE_SERVING = Path(__file__).with_name("fake_serving.py")


def _env(mode: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "FAKE_SERVER_MODE": mode}


def _spec(tmp_path: Path, *, health_timeout_s: float = 5.0, rates=(4.0,)) -> ServingCaseSpec:
    return ServingCaseSpec(
        phase="serving", label="baseline", implementation="baseline", repeat=0, runtime="cpu", device="cpu",
        model=str(tmp_path / "model"), offload=OffloadSetting(offload_group_size=0, offload_num_in_group=0),
        engine=ServingEngine(dtype="bfloat16", max_model_len=256, enforce_eager=True, gpu_memory_utilization=0.5,
                             seed=0, enable_prefix_caching=False),
        load=ServingLoad(backend="openai", endpoint="/v1/completions", dataset="random", num_prompts=4, input_len=32,
                         output_len=4, seed=0, num_warmups=0, burstiness=1.0, max_concurrency=None, temperature=0.0,
                         ignore_eos=True, request_rates_rps=rates),
        slo=ServingSLO(ttft_ms=500.0, tpot_ms=100.0, attainment=0.9),
        limits=ServingLimits(health_timeout_s=health_timeout_s, health_poll_s=0.2, rate_timeout_s=60.0,
                             stop_grace_s=2.0),
        server_command=(sys.executable, str(FAKE_SERVER)), record_path=str(tmp_path / "r.serving.json"),
        requests_dir=str(tmp_path / "req"), server_log_path=str(tmp_path / "server.log"))


def _run(tmp_path: Path, mode: str, monkeypatch, **kw) -> ServingCaseResult:
    for k, v in _env(mode).items():
        monkeypatch.setenv(k, v)
    return run_case(_spec(tmp_path, **kw), tmp_path)


@pytest.mark.heavy  # 3 s
def test_server_that_never_becomes_healthy_is_a_fault_and_is_stopped(tmp_path, monkeypatch):
    res = _run(tmp_path, "never_healthy", monkeypatch, health_timeout_s=3.0)
    assert res.fault is not None and res.fault.cause == "server_never_healthy"
    assert "health_timeout_s=3" in res.fault.message
    assert not psutil.pid_exists(res.server.pid) or psutil.Process(res.server.pid).status() == psutil.STATUS_ZOMBIE
    assert res.teardown.left_after_kill == () and res.teardown.port_free
    assert res.rates == ()


def test_server_that_exits_before_healthy_names_its_exit_code(tmp_path, monkeypatch):
    res = _run(tmp_path, "exit", monkeypatch, health_timeout_s=30.0)
    assert res.fault.cause == "server_exited_before_healthy"
    assert res.fault.server_exit_code == 3
    assert "Engine core initialization failed" in (tmp_path / "server.log").read_text()


@pytest.mark.heavy  # 4 s CPU
def test_stop_tree_reports_a_child_left_behind_and_kills_it(tmp_path):
    port = srv.free_port()
    cp = srv.start_server([sys.executable, str(FAKE_SERVER), "--model", "m", "--port", str(port)], _env("orphan"),
                          tmp_path / "server.log", tmp_path)
    h = srv.wait_healthy(cp, port, timeout_s=30, poll_s=0.1)
    assert h.healthy
    deadline = time.monotonic() + 10
    while "orphan ready" not in (tmp_path / "server.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [cp.pid] + [p.pid for p in psutil.Process(cp.pid).children(recursive=True)]
    report = srv.stop_tree(cp, port, grace_s=1.0)
    assert report.escalated_to_sigkill
    assert any("python" in s for s in report.left_after_sigterm)
    assert report.left_after_kill == ()
    assert report.port_free
    for pid in tree:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.heavy  # 4 s CPU
def test_clean_server_stops_on_sigterm_without_escalation(tmp_path):
    port = srv.free_port()
    cp = srv.start_server([sys.executable, str(FAKE_SERVER), "--model", "m", "--port", str(port)], _env("ok"),
                          tmp_path / "server.log", tmp_path)
    assert srv.wait_healthy(cp, port, timeout_s=30, poll_s=0.1).healthy
    assert not srv.port_is_free(port)
    report = srv.stop_tree(cp, port, grace_s=10.0)
    assert not report.escalated_to_sigkill and report.left_after_sigterm == () and report.port_free


def _matrix(tmp_path: Path, *extra: str) -> tuple[int, Path]:
    overrides = [f"results_root={tmp_path}", "run_id=t", "progress=false", "+experiment=serving", "model=tiny",
                 "phases.serving.points=[]", "phases.serving.cases=[]", "~phases.serving.repeats_by_label.control_delay_20ms",
                 "phases.serving.sequential.looks=[]", "phases.serving.sequential.pairing=none",  # a fixed design
                 "phases.serving.repeats=1", "phases.serving.num_prompts=4", "phases.serving.max_tokens=4",
                 "phases.serving.serving.request_rates=[8.0]", "phases.serving.serving.num_warmups=0",
                 f"phases.serving.serving.server_command=[{sys.executable},{FAKE_SERVER}]", *extra]
    cfg = compose_cfg(*overrides)
    return run_matrix(cfg, overrides), tmp_path / "serving" / "t"


@pytest.mark.heavy(seconds=15)  # a serving matrix with the fake server and the benchmark client (13 s CPU)
def test_matrix_serving_phase_with_fake_server_writes_valid_records(tmp_path, monkeypatch):
    code, run_dir = _matrix(tmp_path)
    assert code == 0
    lines = read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)
    assert len(lines) == 1
    r = lines[0]
    assert r.evidence.offloader_class.endswith("NoopOffloader") and r.rate.completed == 4
    assert r.rate.output_tokens_min == r.rate.output_tokens_max == 4
    assert r.engine.enable_prefix_caching is False and 1 <= r.rate.distinct_prompts <= 4
    reqs = read_json(run_dir / r.rate.requests_path, ServingRequests)
    assert all(x.prompt_tokens == x.dataset_prompt_tokens for x in reqs.requests)
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is True
    assert (run_dir / "summary" / "serving-latency.png").is_file()
    assert (run_dir / "summary" / "serving-front.png").is_file()


@pytest.mark.heavy(seconds=11)  # a serving matrix (14 s CPU)
def test_server_token_count_drift_fails_the_case(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PROMPT_TOKENS_FACTOR", "5")  # a tokenizer mismatch: 5x the sampled prompt length
    code, run_dir = _matrix(tmp_path)
    assert code == 1
    (f,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert f.failure_type == "token_count_mismatch" and "prompt tokens [160" in f.error_message
    assert not (run_dir / "serving-serving.jsonl").exists()
    assert json.loads((run_dir / "summary" / "serving-summary.json").read_text())["valid"] is False


@pytest.mark.heavy(seconds=14)  # a serving matrix (14 s CPU)
def test_a_failed_request_is_named_with_its_error_and_fails_the_case(tmp_path, monkeypatch, capsys):
    """The server answers one request with HTTP 500 (a fault injected at the driver's HTTP boundary): the rate is
    recorded (its requests file holds the error), the console names the request and its error, the case fails."""
    monkeypatch.setenv("FAKE_SERVER_MODE", "fail_one")
    code, run_dir = _matrix(tmp_path)
    out = capsys.readouterr().out
    assert code == 1
    (f,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert f.failure_type == "request_failed"
    assert "rate 0 (8.0 req/s): 1 of 4 requests failed: req-1: Internal Server Error" in f.error_message
    assert "request_failed" in out and "req-1: Internal Server Error" in out
    result = read_json(next((run_dir / "records" / "serving").glob("*.serving.json")), ServingCaseResult)
    assert result.fault is not None and result.fault.cause == "request_failed" and result.rates[0].failed == 1
    reqs = read_json(run_dir / result.rates[0].requests_path, ServingRequests)
    assert [r.success for r in reqs.requests] == [True, False, True, True]
    assert not (run_dir / "serving-serving.jsonl").exists()


@pytest.mark.heavy(seconds=10)  # a serving matrix, 3 fake case processes
def test_offload_outputs_that_differ_under_load_fail_the_run_with_exit_6_naming_rate_and_requests(tmp_path,
                                                                                                 monkeypatch):
    """Each case process is ``tests/runners/fake_serving.py`` (the claim is the run's outputs analysis and exit code,
    not the driver): the offload case's token ids are the fake server's shifted ones (``FAKE_TOKEN_SHIFT_IMPL``)."""
    monkeypatch.setenv("FAKE_TOKEN_SHIFT_IMPL", "current")  # the offload server streams other token ids
    code, run_dir = _matrix(tmp_path, "phases.serving.points=[{g: 4, n: 1}]", "phases.serving.repeats=2",
                            "+phases.serving.repeats_by_label.current_g4_n1=1",
                            "phases.serving.serving.request_rates=[8.0,16.0]",
                            f"serving_command=[{sys.executable},{FAKE_SERVING}]")
    assert code == 6
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    assert summary["valid"] is False
    err = [e for e in summary["errors"] if e.startswith("outputs under load")]
    assert len(err) == 2 and "serving/current_g4_n1-r0 at 8 req/s (position 0" in err[0]
    assert "output tokens of 4 of 4 requests differ" in err[0] and "requests [0, 1, 2, 3]" in err[0]
    rows = {(o["label"], o["repeat"], o["rate_rps"]): o for o in summary["outputs"]}
    assert rows[("baseline", 1, 8.0)]["status"] == "identical" and rows[("baseline", 1, 8.0)]["position"] == 1
    assert rows[("current_g4_n1", 0, 16.0)]["status"] == "differs"
    md = (run_dir / "summary" / "serving-summary.md").read_text()
    assert "Outputs under load" in md and "(n 4)" in md


_CONTROL = ("phases.serving.cases=[{implementation: baseline, label: control_delay_5ms, step_delay_ms: 5.0}]",
            "phases.serving.points=[{g: 4, n: 1}]", "phases.serving.repeats=2", "phases.serving.num_prompts=8")


@pytest.mark.heavy(seconds=15)  # a serving matrix of 6 fake serving case processes (no client, no server)
def test_a_speed_control_that_turns_the_same_tokens_holds_an_offload_mismatch_in_the_floor_one_that_turns_nothing_not(
        tmp_path, monkeypatch):
    """Offload turns the tokens of the even requests at every rate. Run: the two speed-control processes turn the same
    tokens (``FAKE_TOKEN_SHIFT_DELAYED``: each case process is ``tests/runners/fake_serving.py``, which runs the
    control's hook and streams the fake server's token ids), so the four baseline processes disagree there and the
    floor holds the offload mismatch (exit 0). Then the same records with the controls' outputs those of an undelayed
    baseline (what the fake streams without ``FAKE_TOKEN_SHIFT_DELAYED``; no second run), judged by the
    production check (``analysis.serving.summary.validate_serving``): the four agree, the mismatch is an error. That
    such an error exits 6: ``test_offload_outputs_that_differ_under_load_fail_the_run_with_exit_6_naming_rate_and_requests``."""
    from analysis.serving.summary import load_serving, validate_serving

    monkeypatch.setenv("FAKE_TOKEN_SHIFT_IMPL", "current")  # offload turns the tokens of some requests ...
    monkeypatch.setenv("FAKE_TOKEN_SHIFT_DELAYED", "1")  # ... and so does a server that is only slower
    monkeypatch.setenv("FAKE_TOKEN_SHIFT_EVEN", "1")
    code, run_dir = _matrix(tmp_path, *_CONTROL, f"serving_command=[{sys.executable},{FAKE_SERVING}]")
    assert code == 0
    lines = read_jsonl(run_dir / "serving-serving.jsonl", ServingRun)
    assert sorted(r.step_delay_ms for r in lines if r.label == "control_delay_5ms") == [5.0, 5.0]
    log = (run_dir / "logs" / "serving" / "control_delay_5ms-r0.server.log").read_text()
    assert "OFFLOAD_CONTROL applied step_delay_ms=5" in log and "OFFLOAD_CONTROL acted step_delay_ms=5" in log
    summary = json.loads((run_dir / "summary" / "serving-summary.json").read_text())
    rows = [o for o in summary["outputs"] if o["label"] == "current_g4_n1"]
    assert rows and all(o["status"] == "within_baseline_noise" and o["floor"] and not o["mismatched"]
                        and o["baselines"] == 4 and o["controls"] == 2 for o in rows)
    assert [v for v in summary["baseline_verdicts"] if v["label"] == "control_delay_5ms"]  # judged, not a floor
    assert not [e for e in validate_serving(load_serving(run_dir)).errors if e.startswith("outputs under load")]

    baseline = {r.rate.request_rate_rps: read_json(run_dir / r.rate.requests_path, ServingRequests)
                for r in lines if r.label == "baseline" and r.repeat == 0}
    for r in lines:
        if r.label == "control_delay_5ms":
            path = run_dir / r.rate.requests_path
            doc = json.loads(path.read_text())
            base = baseline[r.rate.request_rate_rps].requests
            assert [q["output_token_ids_sha256"] for q in doc["requests"]] != [q.output_token_ids_sha256 for q in base]
            for q, b in zip(doc["requests"], base, strict=True):
                q["output_token_ids_sha256"] = b.output_token_ids_sha256
            path.write_text(json.dumps(doc))
    err = [e for e in validate_serving(load_serving(run_dir)).errors if e.startswith("outputs under load")]
    assert err and all("the 4 baseline processes (2 of them speed controls) agree" in e for e in err)
    assert all("serving/current_g4_n1-r" in e for e in err)


def test_a_step_delay_outside_a_serving_baseline_exits_2_before_any_process(tmp_path):
    code, run_dir = _matrix(tmp_path, "phases.serving.cases=[{implementation: current, group_size: 4, "
                            "num_in_group: 1, step_delay_ms: 5.0}]")
    assert code == 2 and not run_dir.exists()
    for ms in ("-1.0", "20000.0"):  # refused when the config is typed (exit 2), at both ends of the range
        with pytest.raises(ConfigError, match=rf"^phases\.serving\.cases\[0\]\.step_delay_ms={ms}: must be a "
                                              r"number in \(0, 10000\] \(ms\)$"):
            _matrix(tmp_path, f"phases.serving.cases=[{{implementation: baseline, label: c, step_delay_ms: {ms}}}]")
    ok_case = "phases.serving.cases=[{implementation: baseline, label: c, step_delay_ms: 5.0}]"
    code, run_dir = _matrix(tmp_path, ok_case, "workload.enforce_eager=false")
    assert code == 2 and not run_dir.exists()  # a CUDA-graph replay runs no hook: refused before any process
    code, run_dir = _matrix(tmp_path, ok_case, "phases.serving.baseline=false")
    assert code == 2 and not run_dir.exists()  # a control needs the undelayed baseline it is judged against


def test_invalid_serving_settings_are_config_errors_before_any_process(tmp_path):
    """Refused when the config is typed (``conf.ranges``; the entry points exit 2 with this one line)."""
    with pytest.raises(ConfigError, match=r"^phases\.serving\.serving\.request_rates\[0\]=0\.0: must be a finite "
                                          r"number > 0 \(req/s\) or \.inf \(every request at t = 0\)$"):
        _matrix(tmp_path, "phases.serving.serving.request_rates=[0.0]")
    with pytest.raises(ConfigError, match=r"^phases\.serving\.serving\.slo\.attainment=1\.5: must be a number in "
                                          r"\(0, 1\]$"):
        _matrix(tmp_path, "phases.serving.serving.slo.attainment=1.5")
    assert not (tmp_path / "serving").exists()


@pytest.mark.heavy(seconds=14)  # a serving matrix (14 s CPU)
def test_server_leaving_a_child_behind_is_a_failure_record_and_nothing_survives(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SERVER_MODE", "orphan")
    code, run_dir = _matrix(tmp_path, "phases.serving.serving.stop_grace_s=1.0")
    assert code == 1
    (f,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert f.failure_type == "server_left_processes" and "after SIGTERM" in f.error_message
    log = (run_dir / "logs" / "serving" / "baseline-r0.server.log").read_text()
    orphan = int(log.split("orphan child pid ")[1].split()[0])
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE


@pytest.mark.heavy(seconds=12)  # a serving matrix with the fake server (13 s CPU)
def test_streams_broken_by_a_dying_server_are_its_death_not_failed_requests(tmp_path, monkeypatch):
    """The server cuts every stream, then is killed 1 s later (a dying process's sockets close before its exit can
    be waited for): the case fails as ``server_died`` with the kill's code, not as ``request_failed``. A driver that
    reads the exit once, without waiting ``DEATH_GRACE_S``, sees a live server here and calls it ``request_failed``."""
    monkeypatch.setenv("FAKE_SERVER_MODE", "break_then_die")
    code, run_dir = _matrix(tmp_path)
    assert code == 1
    (f,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert f.failure_type == "server_died" and "exited with code -9 during rate 0" in f.error_message, f
    result = read_json(run_dir / "records" / "serving" / "baseline-r0.serving.json", ServingCaseResult)
    assert result.teardown.left_after_kill == () and result.teardown.port_free


@pytest.mark.heavy(seconds=19)  # 13 s CPU
def test_fake_server_killed_mid_sweep_is_server_died(tmp_path, monkeypatch):
    import re
    import threading

    monkeypatch.setenv("FAKE_TOKEN_GAP_S", "0.5")  # 4 tokens: each request lasts ~2 s
    run_dir = tmp_path / "serving" / "t"
    log = run_dir / "logs" / "serving" / "baseline-r0.log"

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if log.is_file() and "SERVING rate 0" in log.read_text():
                time.sleep(1.0)
                pid = int(re.search(r"SERVING server pid (\d+)", log.read_text()).group(1))
                os.kill(pid, 9)
                return
            time.sleep(0.1)

    t = threading.Thread(target=killer)
    t.start()
    code, run_dir = _matrix(tmp_path)
    t.join()
    assert code == 1
    (f,) = read_jsonl(run_dir / "serving-failures.jsonl", CaseFailure)
    assert f.failure_type == "server_died" and "exited with code -9 during rate 0" in f.error_message
    result = read_json(run_dir / "records" / "serving" / "baseline-r0.serving.json", ServingCaseResult)
    assert result.teardown.server_exited_before_stop and result.teardown.left_after_kill == ()
    assert result.teardown.port_free


@pytest.mark.heavy  # measured 2.5 s in the fast tier (its budget is 2 minutes)
def test_server_argv_parses_with_vllms_own_api_server_parser(tmp_path):
    """The fake server ignores flags; vLLM's parser must accept every one and see the offload setting."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from runners.incase.serving.bench_args import server_argv

    spec = _spec(tmp_path).model_copy(update={"offload": OffloadSetting(
        offload_group_size=4, offload_num_in_group=1, offload_prefetch_step=2, offload_params=("mlp",))})
    argv = server_argv(spec, 12345)
    assert argv[:2] == [sys.executable, str(FAKE_SERVER)]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[2:])
    assert (args.offload_group_size, args.offload_num_in_group, args.offload_prefetch_step) == (4, 1, 2)
    assert set(args.offload_params) == {"mlp"}
    assert args.enable_prefix_caching is False and args.port == 12345 and args.host == "127.0.0.1"
    assert args.max_model_len == 256 and args.enforce_eager is True


@pytest.mark.heavy  # measured 0.6 s in the fast tier (its budget is 2 minutes)
def test_benchmark_argv_parses_with_vllms_own_bench_parser(tmp_path):
    from runners.incase.serving.bench_args import bench_argv, parse_bench_args

    a = parse_bench_args(bench_argv(_spec(tmp_path), 12345, None))
    assert a.request_rate == float("inf") and a.endpoint == "/v1/completions" and a.ignore_eos
    assert a.goodput == ["ttft:500.0", "tpot:100.0"] and a.metric_percentiles == "50,90,99"
    assert parse_bench_args(bench_argv(_spec(tmp_path), 1, 4.0)).request_rate == 4.0


@pytest.mark.heavy  # measured 14.5 s in the fast tier: imports vLLM's API-server parser (its budget is 2 minutes)
def test_published_serving_phase_passes_the_published_engine_options_to_the_server(tmp_path):
    """qwen7b's serving phase: float16, trust_remote_code, max_num_seqs 8, max_num_batched_tokens = 512 x 8 and
    prefix caching NOT passed (vLLM's default), parsed by vLLM's own API-server parser."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from runners.planning.plan import plan
    from runners.incase.serving.bench_args import server_argv
    from runners.launching.serving_case import build_spec
    from tests.runners.helpers import compose_cfg

    items = plan(compose_cfg("+experiment=qwen7b", "model.path=/models/q"))
    sc = next(sc for sc in items if sc.case.kind == "serving" and sc.case.offload_requested)
    argv = server_argv(build_spec(sc, model_dir=Path("/models/q"), run_dir=tmp_path, python="python"), 12345)
    assert "--enable-prefix-caching" not in argv and "--no-enable-prefix-caching" not in argv
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[3:])
    assert args.dtype == "float16" and args.trust_remote_code is True
    assert args.max_num_seqs == 8 and args.max_num_batched_tokens == 512 * 8 and args.enable_prefix_caching is None
    assert args.offload_backend == "prefetch"
    tiny = plan(compose_cfg("+experiment=serving"))  # the project's CPU serving design keeps its explicit flag
    spec = build_spec(tiny[0], model_dir=Path("/m"), run_dir=tmp_path, python="python")
    assert "--no-enable-prefix-caching" in server_argv(spec, 1) and "--trust-remote-code" not in server_argv(spec, 1)
