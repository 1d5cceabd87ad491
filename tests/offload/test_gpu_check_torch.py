"""The torch-only GPU check (offload_tools.gpu_check_torch) on the CPU backend, at small shapes.

Claims: the one command runs eager and torch.compile (Inductor, fullgraph: the offload hooks
are opaque custom ops, a traced stream call would break the graph) through the real
offloader, prints one ``GPU_CHECK_TORCH`` JSON summary with every documented field, the
offloaded stack's outputs are bitwise equal to the un-offloaded stack's, and a corrupted
host copy makes the check fail (exit 1, ``ok`` false); a point whose estimate does not fit the budget is
listed as not run with the reason (exit 1); the check's offloaders keep torch's pinned host cache. At full scale the synthetic layer
has Qwen2.5-7B's 466,115,584 bytes (arithmetic only; nothing is allocated).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from offload_tools import gpu_check_torch as chk

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--device", "cpu", "--layers", "4", "--width-divisor", "32", "--steps", "2", "--tokens", "8"]


def _summary(out: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith("GPU_CHECK_TORCH "))
    return json.loads(line.split(" ", 1)[1])


def test_full_scale_layer_has_qwen25_7b_bytes():
    s = chk.Shapes.qwen25_7b()
    assert (s.hidden, s.intermediate, s.heads, s.kv_heads, s.head_dim, s.layers) == (3584, 18944, 28, 4, 128, 28)
    assert s.layer_params() * 2 == chk.QWEN25_7B_LAYER_BYTES_BF16 == 466_115_584


@pytest.mark.heavy(seconds=18)  # torch.compile (Inductor) on CPU (6 s CPU)
def test_cpu_run_prints_summary_and_outputs_are_bitwise_equal_in_eager_and_compiled_modes(capsys, tmp_path):
    out_file = tmp_path / "summary.json"
    rc = chk.main([*SMALL, "--points", "4,1", "2,1", "1,1", "--compile-points", "2,1", "--out", str(out_file)])
    s = _summary(capsys.readouterr().out)
    assert rc == 0 and s["ok"] is True and s["all_bitwise_equal"] is True
    assert json.loads(out_file.read_text()) == s
    assert s["modes"] == ["eager", "compile"]  # graph is cuda-only
    assert s["goal_met"] is None  # not judged on cpu (synchronous copies)
    assert s["h2d_bandwidth_bytes_s"] > 0 and s["bytes_per_layer"] == chk.Shapes.qwen25_7b(4, 32).layer_params() * 2
    pts = {(p["group_size"], p["num_in_group"]): p for p in s["points"]}
    assert set(pts) == {(4, 1), (2, 1), (1, 1)}
    assert pts[(2, 1)]["offloaded_layers"] == [1, 3]
    assert pts[(2, 1)]["offloaded_bytes"] == 2 * s["bytes_per_layer"]
    cur = {k: p["protocols"]["current"] for k, p in pts.items()}
    assert cur[(1, 1)]["pinned_host_bytes"] >= 4 * s["bytes_per_layer"]
    assert cur[(1, 1)]["copy_protocol"] == "synchronous"  # the CPU backend: copies block
    assert set(cur[(2, 1)]["modes"]) == {"eager", "compile"} and set(cur[(4, 1)]["modes"]) == {"eager"}
    for p in cur.values():
        for m in p["modes"].values():
            assert m["bitwise_equal"] is True and m["fallback_loads"] == 0 and m["stale_reads"] == 0
            if m["copied_per_step"]:
                assert m["ceiling_step_s"] == max(m["baseline_step_s"], m["transfer_s"])
                assert m["ceiling_ratio"] == pytest.approx(m["ceiling_step_s"] / m["step_s"])
            else:  # a slot serving one module is never refilled: nothing copied, no ceiling
                assert m["ceiling_step_s"] is None and m["ceiling_note"] == "ceiling n/a: nothing copied"
            assert m["bound_ratio"] == pytest.approx(m["bound_step_s"] / m["step_s"])
            assert len(m["step_times_s"]) == 2 and m["step_s"] == pytest.approx(statistics.median(m["step_times_s"]))
            assert m["meets_goal"] is None
    assert cur[(1, 1)]["modes"]["eager"]["copied_per_step"] == 4 and cur[(4, 1)]["modes"]["eager"]["copied_per_step"] == 0
    for p in pts.values():  # the un-offloaded stack timed before and after the protocols, same function
        assert p["order"][0] == p["order"][-1] == "baseline"
        for mode, b in p["baseline"].items():
            assert len(b["step_times_s"]) == 4 and b["bitwise_equal"] is True
            assert p["protocols"]["current"]["modes"][mode]["baseline_step_s"] == statistics.median(b["step_times_s"])
    assert s["complete"] is True and s["not_run"] == [] and s["step_clock"] == "perf_counter"
    assert s["timing_judged"] is False  # cpu: copies are synchronous, shared host


def test_both_protocols_run_in_abba_order_bitwise_equal_with_speedups(capsys, tmp_path):
    out_file = tmp_path / "both.json"
    rc = chk.main([*SMALL, "--points", "4,1", "2,1", "--modes", "eager", "--protocols", "current", "upstream",
                   "--out", str(out_file)])
    s = json.loads(out_file.read_text())
    assert rc == 0 and s["ok"] is True and s["all_bitwise_equal"] is True and s["protocols"] == ["current", "upstream"]
    assert [p["order"] for p in s["points"]] == [["baseline", "current", "upstream", "baseline"],
                                                 ["baseline", "upstream", "current", "baseline"]]
    for p in s["points"]:
        assert p["protocols"]["upstream"]["offloader_class"].endswith("UpstreamProtocolOffloader")
        for proto in ("current", "upstream"):
            assert p["protocols"][proto]["modes"]["eager"]["bitwise_equal"] is True
        assert p["speedup"]["eager"] == pytest.approx(p["protocols"]["upstream"]["modes"]["eager"]["step_s"]
                                                      / p["protocols"]["current"]["modes"]["eager"]["step_s"])
    capsys.readouterr()
    rc = chk.main([*SMALL, "--points", "2,1", "--modes", "eager", "--protocols", "current", "upstream",
                   "--negative-control"])
    s = _summary(capsys.readouterr().out)
    assert rc == 1 and s["all_bitwise_equal"] is False
    assert all(not p["modes"]["eager"]["bitwise_equal"] for p in s["points"][0]["protocols"].values())


def test_negative_control_corrupted_host_copy_fails_the_check(capsys):
    rc = chk.main([*SMALL, "--points", "2,1", "--modes", "eager"])
    assert rc == 0
    capsys.readouterr()
    rc = chk.main([*SMALL, "--points", "2,1", "--modes", "eager", "--negative-control"])
    s = _summary(capsys.readouterr().out)
    assert rc == 1 and s["ok"] is False and s["all_bitwise_equal"] is False
    assert s["points"][0]["protocols"]["current"]["modes"]["eager"]["bitwise_equal"] is False


def test_a_point_whose_estimate_does_not_fit_the_budget_is_listed_as_not_run_with_the_reason(capsys, tmp_path):
    out_file = tmp_path / "budget.json"
    rc = chk.main([*SMALL, "--points", "4,1", "2,1", "--modes", "eager", "--budget-s", "1e-6", "--out", str(out_file)])
    s = json.loads(out_file.read_text())
    assert rc == 1 and s["ok"] is False and s["points"] == [] and s["complete"] is True
    assert [(p["group_size"], p["num_in_group"]) for p in s["not_run"]] == [(4, 1), (2, 1)]
    assert all(p["reason"].startswith("not started: predicted ") and "s left of the 1e-06 s point budget" in p["reason"]
               for p in s["not_run"])
    assert "GPU_CHECK_NOT_RUN (2,1): not started: predicted" in capsys.readouterr().out


def test_the_check_keeps_the_pinned_host_cache_across_offloaders(monkeypatch):
    """The offloader empties torch's pinned cache after post_init; the check's backend does not (reuse)."""
    from offload.backend import StreamBackend

    off, _ = chk._setup_point(chk.parse_args([*SMALL]), 2, 1, chk.Shapes.qwen25_7b(4, 32),
                              chk.build_reference(chk.Shapes.qwen25_7b(4, 32), torch.device("cpu"), torch.bfloat16))
    assert off._backend_factory is chk.keep_host_cache
    emptied = []
    monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: emptied.append(1), raising=False)
    monkeypatch.setattr(chk, "backend_for_device", lambda device: StreamBackend("cuda", ns=object(), pin=False))
    StreamBackend("cuda", ns=object(), pin=False).release_host_cache()
    assert emptied == [1]  # what an offloader in a serving process does
    chk.keep_host_cache(torch.device("cuda")).release_host_cache()
    assert emptied == [1]


BAD_ARGUMENTS = [
    (["--points", "2,3"], "need G >= 1 and 1 <= N <= G"),
    (["--points", "x"], "must be G,N"),
    (["--layers", "0"], "--layers (0) must be >= 1"),
    (["--width-divisor", "256"], "--width-divisor (256) must be <= 128"),
    (["--protocols", "current", "current"], "each protocol at most once"),
    (["--step-sync", "host"], "invalid choice: 'host'"),
    (["--budget-s", "0"], "--budget-s (0.0) must be > 0"),
]

_EACH_IN_ONE_PROCESS = """
import contextlib, io, json, sys
import offload_tools.gpu_check_torch as c
out = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = c.main(["--device", "cpu", *args])
        except SystemExit as exc:
            code = exc.code
    out.append([code, err.getvalue()])
print(json.dumps({"results": out, "vllm_loaded": "vllm" in sys.modules}))
"""


@pytest.fixture(scope="module")
def bad_argument_results() -> list[tuple[int, str]]:
    """``(exit code, stderr)`` of ``main`` for each of :data:`BAD_ARGUMENTS`, in one child process (one torch
    import instead of six); an exception other than ``SystemExit`` ends the child with a traceback. A bad
    argument is refused before the offloaders, and so vLLM, are imported."""
    proc = subprocess.run([sys.executable, "-c", _EACH_IN_ONE_PROCESS, json.dumps([a for a, _ in BAD_ARGUMENTS])],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["vllm_loaded"] is False
    return [(int(code), err) for code, err in found["results"]]


@pytest.mark.heavy  # one process that imports torch and checks six argument lists (2 s CPU)
@pytest.mark.parametrize(("index", "needle"), [(i, n) for i, (_, n) in enumerate(BAD_ARGUMENTS)])
def test_bad_arguments_exit_2_with_a_message_and_no_traceback(index, needle, bad_argument_results):
    code, err = bad_argument_results[index]
    assert code == 2 and needle in err and "Traceback" not in err


@pytest.mark.heavy  # a process that imports torch (not vLLM) before checking arguments (2 s CPU)
def test_the_module_entry_point_exits_2_on_bad_arguments_with_no_traceback():
    args, needle = BAD_ARGUMENTS[0]
    proc = subprocess.run([sys.executable, "-m", "offload_tools.gpu_check_torch", "--device", "cpu", *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.heavy  # measured 2.2 s in the fast tier (its budget is 2 minutes)
def test_runs_where_vllm_cannot_be_imported():
    """The H200 host has no vLLM: block the import and run the check end to end."""
    code = ("import sys; sys.modules['vllm'] = None; import offload_tools.gpu_check_torch as c; "
            f"rc = c.main({SMALL + ['--points', '2,1', '--modes', 'eager']!r}); "
            "print('LOADED', sorted(m for m in ('analysis', 'runners', 'hydra', 'pandas') if m in sys.modules)); "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED []" in proc.stdout
    assert _summary(proc.stdout)["all_bitwise_equal"] is True
