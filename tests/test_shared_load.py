"""scripts/shared_load.py: the load runs for the whole command, stops when it ends (exit, error, Ctrl-C, a SIGKILL of
the script) with no load process left, its record says what ran, and what it burns is foreign work to a case
(``runners.incase.host_load``: contended)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf.schema import Config
from results_schema.records.host_load import CONTENDED_CORES, HostLoad
from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "shared_load.py"
shared_load = load_script("shared_load")


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie waiting for a reaper that is not ours)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())


def _wait_for(path: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def _cmd(*args: str) -> list[str]:
    return [sys.executable, str(SCRIPT), *args]


@pytest.mark.parametrize("argv, names", [
    (["--procs", "0", "--", "true"], "argument --procs: '0'"), (["--procs", "x", "--", "true"], "--procs: 'x'"),
    (["--kind", "gpu", "--", "true"], "--kind 'gpu'"), (["--mem-mib", "0", "--", "true"], "--mem-mib: '0'"),
    ([], "no command"), (["--", "no-such-command-here"], "'no-such-command-here'")])
def test_bad_input_is_one_line_and_exit_2_before_any_process(argv: list[str], names: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        shared_load.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("shared_load.py: ") and names in err[0]


def test_an_existing_record_path_is_refused_and_left_as_it_was(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "earlier.shared-load.json"
    rec.write_text("an earlier record\n")
    with pytest.raises(SystemExit) as e:
        shared_load.main(["--record", str(rec), "--", "true"])
    assert e.value.code == 2 and rec.read_text() == "an earlier record\n"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"shared_load.py: --record {rec}: exists (a record is never overwritten: name a new path)"


def test_mem_buffers_above_the_available_memory_are_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       8000000 kB\nMemAvailable:    2097152 kB\n")
    assert shared_load.available_mib(meminfo) == 2048
    assert shared_load.available_mib(tmp_path / "absent") is None
    have = shared_load.available_mib()
    assert have is not None and have > 0
    procs, mib = shared_load.MAX_PROCS, shared_load.MAX_MEM_MIB  # 2 TiB of buffers: more than this host has
    assert 2 * procs * mib > have
    with pytest.raises(SystemExit) as e:
        shared_load.main(["--kind", "mem", "--procs", str(procs), "--mem-mib", str(mib), "--", "true"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"shared_load.py: --kind mem --procs {procs} --mem-mib {mib}: {2 * procs * mib} MiB")
    assert line.endswith("MiB, /proc/meminfo MemAvailable)") and "above the host's available memory (" in line


@pytest.mark.heavy  # two load processes for ~1 s plus three interpreters (about 1.5 s)
def test_the_load_runs_while_the_command_runs_and_the_record_lands_beside_the_new_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    code = ("import os, sys, time; os.makedirs(sys.argv[1] + '/aa_paired/run1'); time.sleep(1.0); sys.exit(3)")
    p = subprocess.run(_cmd("--procs", "2", "--results-root", str(results), "--", sys.executable, "-c", code,
                            str(results)), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr  # the command's exit status
    rec_path = results / "aa_paired" / "run1.shared-load.json"
    rec = json.loads(rec_path.read_text())
    assert list(results.glob(".shared-load-*")) == []  # the running record moved beside the run
    assert (rec["schema"], rec["kind"], rec["procs"], rec["exit_code"]) == ("shared-load/1", "cpu", 2, 3)
    assert rec["run_dirs"] == [str(results / "aa_paired" / "run1")] and rec["stopped_utc"]
    assert len(rec["loads"]) == 2 and all(not x["ended_early"] and x["cpu_s"] > 0 for x in rec["loads"])
    assert rec["load_cpu_s"] == pytest.approx(sum(x["cpu_s"] for x in rec["loads"]), abs=0.01)
    assert rec["load_wall_s"] >= 1.0 and rec["load_cores"] == pytest.approx(rec["load_cpu_s"] / rec["load_wall_s"],
                                                                             abs=0.01)
    assert all(_gone(x["pid"]) for x in rec["loads"])
    assert f"record {rec_path}" in p.stderr.strip().splitlines()[-1]


def test_the_results_root_is_the_runners_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository root: a relative root is still the runner's (repository root)
    assert shared_load.parse_args(["--", "true"]).results_root == ROOT / Config.results_root
    assert shared_load.parse_args(["--results-root", "r", "--", "true"]).results_root == ROOT / "r"
    other = tmp_path / "elsewhere"
    assert shared_load.parse_args(["--", "true", "x", f"results_root={other}"]).results_root == other
    assert shared_load.parse_args(["--", "true", f"++results_root={other}"]).results_root == other
    with pytest.raises(SystemExit) as e:
        shared_load.main(["--results-root", "results", "--", "true", f"results_root={other}"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"shared_load.py: --results-root results and the command's results_root={other} differ: give one "
                    "(the record goes beside the run directory the runner creates)")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for argv, names in (([f"--results-root={a_file / 'results'}"], f"--results-root {a_file / 'results'}: {a_file} "
                                                                      "is not a folder (the runner's results_root"),
                        (["--record", str(a_file / "r.json")], f"--record {a_file / 'r.json'}: {a_file} is not a "
                                                               "folder")):
        with pytest.raises(SystemExit) as e:
            shared_load.main([*argv, "--", "true"])
        assert e.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"shared_load.py: {names}"), line
    assert a_file.read_text() == ""


@pytest.mark.heavy  # one load process and two interpreters (about 1 s)
def test_the_record_lands_beside_a_run_under_the_commands_results_root_started_elsewhere(tmp_path: Path) -> None:
    results = tmp_path / "other" / "results"
    code = "import os, sys; os.makedirs(sys.argv[1].split('=', 1)[1] + '/aa_paired/run1')"
    p = subprocess.run(_cmd("--", sys.executable, "-c", code, f"results_root={results}"), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rec = json.loads((results / "aa_paired" / "run1.shared-load.json").read_text())
    assert rec["results_root"] == str(results) and rec["run_dirs"] == [str(results / "aa_paired" / "run1")]
    assert not (tmp_path / "results").exists() and "WARNING" not in p.stderr


@pytest.mark.heavy  # one load process and two interpreters (about 1 s)
def test_a_record_already_beside_the_new_run_is_kept_and_the_warning_names_where_this_one_is(tmp_path: Path) -> None:
    results = tmp_path / "results"
    earlier = results / "aa_paired" / "run1.shared-load.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier record\n")
    code = "import os, sys; os.makedirs(sys.argv[1] + '/aa_paired/run1')"
    p = subprocess.run(_cmd("--results-root", str(results), "--", sys.executable, "-c", code, str(results)),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert earlier.read_text() == "an earlier record\n"
    (kept,) = results.glob(".shared-load-*.json")
    assert json.loads(kept.read_text())["run_dirs"] == [str(results / "aa_paired" / "run1")]
    warning, last = p.stderr.strip().splitlines()[-2:]
    assert warning == (f"shared_load: WARNING: {earlier} exists (kept as it was): the record stays at {kept} "
                       "(scripts/contention_pairing.py reads a run as loaded only with <RUN_DIR>.shared-load.json "
                       "beside it)")
    assert last.endswith(f"record {kept}")


@pytest.mark.heavy  # a case-like command reads the host over 1.5 s beside one mem load (about 3 s)
def test_what_the_load_burns_is_foreign_work_to_a_case_and_makes_it_contended(tmp_path: Path) -> None:
    out = tmp_path / "host_load.json"
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
            "from runners.incase.host_load import read_host, window_load; time.sleep(0.5); a = read_host(); "
            "time.sleep(1.5); w = window_load(a, read_host()); "
            "open(sys.argv[2], 'w').write(w.record().model_dump_json())")
    p = subprocess.run(_cmd("--procs", "1", "--kind", "mem", "--mem-mib", "64", "--record", str(tmp_path / "r.json"),
                            "--", sys.executable, "-c", code, str(ROOT), str(out)), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    hl = HostLoad.model_validate_json(out.read_text())
    # the case (this sleeping command) and its runner (the script) used almost nothing; the load's core is foreign
    assert hl.case_cpu_s + hl.runner_cpu_s < 0.3, hl
    assert hl.foreign_cores > CONTENDED_CORES and hl.contended, hl


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path: Path, sleep_s: float) -> tuple[subprocess.Popen, dict, int]:
    """The script in its own session (as a terminal's foreground job) with a command that sleeps; waits until the
    command runs. Returns (script process, the running record, the command's pid)."""
    rec, pid_file = tmp_path / "r.json", tmp_path / "cmd.pid"
    # written whole, then renamed: _wait_for sees the file only with the pid in it (an open-then-write file can be seen
    # empty while the command waits for a core beside the two load processes)
    code = (f"import os, time; open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid())); "
            f"os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r}); time.sleep({sleep_s})")
    # SIGINT at its default, as a terminal's foreground job has it: a test process started in the background of a
    # non-interactive shell (as CI starts it) ignores SIGINT, exec keeps an ignored signal ignored, and the command
    # would sleep through the Ctrl-C (seen in CI: "command exit 0" after 30 s)
    with open(tmp_path / "err.txt", "w") as err:  # a file, not a pipe: the orphaned command would hold a pipe open
        proc = subprocess.Popen(_cmd("--procs", "2", "--record", str(rec), "--", sys.executable, "-c", code),
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=_sigint_default)
    _wait_for(pid_file)
    return proc, json.loads(rec.read_text()), int(pid_file.read_text())


@pytest.mark.heavy  # two load processes for ~1 s (about 1.5 s)
def test_ctrl_c_ends_the_command_then_the_load_and_the_exit_status_is_the_commands(tmp_path: Path) -> None:
    proc, running, cmd_pid = _start(tmp_path, 30)
    assert running["stopped_utc"] is None and len(running["pids"]) == 2
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: SIGINT to the terminal's foreground process group
    proc.wait(timeout=30)
    # python's KeyboardInterrupt exit (it re-raises SIGINT), passed on as 128 + 2
    assert proc.returncode == 128 + signal.SIGINT, (tmp_path / "err.txt").read_text()
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["signals_received"] == ["SIGINT"] and rec["exit_code"] == 130 and rec["stopped_utc"]
    assert all(not x["ended_early"] for x in rec["loads"])  # the terminal's SIGINT did not reach the load
    assert _gone(cmd_pid) and all(_gone(pid) for pid in running["pids"])


@pytest.mark.heavy  # a killed script's load ends by itself (about 1.5 s)
def test_a_sigkilled_script_leaves_no_load_process_behind(tmp_path: Path) -> None:
    proc, running, cmd_pid = _start(tmp_path, 30)
    try:
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 5.0
        while not all(_gone(pid) for pid in running["pids"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(pid) for pid in running["pids"])
    finally:
        if not _gone(cmd_pid):  # the command itself is the user's, orphaned as it would be without the script
            os.kill(cmd_pid, signal.SIGKILL)
