"""scripts/contention_pairing.py on a fake-bench ``+experiment=aa_paired`` run with contended processes: every
comparison the report makes is ``decide_paired`` on all four blocks, the contended processes included (the report
withholds those rows), at the report's level and target; the per-block numbers, the per-arm load and the
loaded-vs-quiet summary with its declared criteria are printed.

The run is ``tests/runners/test_aa_paired_run.py``'s design (its ``FAKE_SLOW`` block factors) with ``FAKE_CONTENDED``
marking block 2's baseline, every ``current_g2_n1`` process and block 4's control as contended (the fake bench's
stand-in for the host-load sampler: 0.7 foreign cores). A copy of the run, without a shared-load record, stands in for
a quiet run (same numbers: the summary's plumbing, not a measurement)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.comparison.verdict_rule import decide_paired
from runners.errors import EXIT_OK
from tests.runners.helpers import compose_real, fake_blocks_overrides
from tests.runners.test_aa_paired_run import SLOW
from tests.runners.test_aa_paired_run import _values as run_values
from tests.shared_runs import run_matrix
from tests.scripts_module import load_script

ROOT = Path(__file__).resolve().parents[1]
cp = load_script("contention_pairing")

CONTROL = "control_delay_2_6ms"
CONTENDED = {("baseline", 1), *(("current_g2_n1", r) for r in range(4)), (CONTROL, 3)}
"""(label, repeat) of the processes the fake bench records as contended."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, share_host_measurements: object) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("contention")
    busy = ",".join(f"{label}-r{r}" for label, r in sorted(CONTENDED))
    ov = fake_blocks_overrides(root, SLOW, "+experiment=aa_paired", "model=tiny",
                               "phases.same_runtime.sequential.looks=[4]",  # the script's logic on 4 blocks (20 processes)
                               f'+phases.same_runtime.runtime.env.FAKE_CONTENDED="{busy}"')
    assert run_matrix(compose_real(*ov), ov) == EXIT_OK
    loaded, quiet = root / "aa_paired" / "t", root / "aa_paired" / "q"
    shutil.copytree(loaded, quiet)
    Path(str(loaded) + cp.RECORD_SUFFIX).write_text(json.dumps({
        "schema": "shared-load/1", "kind": "cpu", "procs": 1, "load_cores": 0.98, "load_wall_s": 30.0,
        "started_utc": "2026-12-05T16:00:00+00:00", "stopped_utc": "2026-12-05T16:00:30+00:00"}))
    return loaded, quiet


@pytest.mark.heavy(seconds=17)  # one fake-bench run of 20 processes with analysis (about 40 s)
def test_every_comparison_is_decide_paired_on_all_blocks_with_the_contended_processes(runs: tuple[Path, Path]) -> None:
    run = cp.read_run(runs[0])
    _, vals = run_values(runs[0])
    got = {(c.kind, c.a, c.b): c for c in run.comparisons}
    assert set(got) == {("A/A", "baseline_twin", "baseline"), ("A/A", "current_g2_n1_twin", "current_g2_n1"),
                        ("control", CONTROL, "baseline"), ("control", CONTROL, "baseline_twin"),
                        ("offload", "current_g2_n1", "baseline"), ("offload", "current_g2_n1_twin", "baseline")}
    for (_kind, a, b), c in got.items():
        d = decide_paired([vals[a][k] for k in range(4)], [vals[b][k] for k in range(4)], margin_pct=5.0,
                          confidence=0.95)
        assert c.blocks == [1, 2, 3, 4] and c.same_as_report
        assert (c.decision.verdict, c.decision.ci_low_pct, c.decision.ci_high_pct) == (
            d.verdict, pytest.approx(d.ci_low_pct), pytest.approx(d.ci_high_pct))
        hit = [int((a, k) in CONTENDED) + int((b, k) in CONTENDED) for k in range(4)]
        assert c.pair_contended == hit
        # the report withholds a row resting on a contended process; this script decides it all the same
        assert (c.reported == "withheld") == (sum(hit) > 0) and c.decision.verdict != "withheld"
    assert sum(c.reported == "withheld" for c in got.values()) == 6
    arms = run.arms.set_index("label")
    assert arms.loc["current_g2_n1", "contended"] == 4 and arms.loc["baseline_twin", "contended"] == 0
    assert arms.loc["current_g2_n1", "foreign_cores"] == pytest.approx(0.7)  # the fake's sampler: 0.7 cores
    assert arms.loc["current_g2_n1", "foreign_share"] == pytest.approx(0.35)  # of its 2 cores


@pytest.mark.heavy  # shares the run above
def test_the_printout_has_a_table_per_run_and_the_declared_criteria(runs: tuple[Path, Path],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cp.main([str(p) for p in runs]) == 0
    out = capsys.readouterr().out
    assert out.count("| comparison | kind | blocks | paired verdict, contended included |") == 2
    assert "loaded: 1 cpu load process(es), 0.98 cores" in out and "quiet (no shared-load record beside it)" in out
    assert "| current_g2_n1_twin vs current_g2_n1 | A/A | 4 | equivalent |" in out
    assert ("C0 the load was seen: loaded runs 6 of 20 processes contended (all needed), quiet runs 6 of 20 (none "
            "allowed): NOT met") in out
    assert "C1 A/A calls under load, contended included: 0 of 2 (at most 1): met" in out
    assert "C2 control `slower` under load: 2 of 2 (at least 1): met" in out
    assert "## Summary: load cpu x1 (1 run(s): t) vs quiet (1: q)" in out
    assert ("C3 the load's shift of current_g2_n1 vs baseline (per-block ratios a/b, 4 loaded vs 4 quiet blocks, decide; "
            "`equivalent` needed): ") in out
    assert f"C3 the load's shift of {CONTROL} vs baseline (" in out and f"shift of {CONTROL} vs baseline_twin" not in out
    # the copy has the same numbers: every comparison's centres lie in the other's intervals, the SD ratio is 1
    assert "| current_g2_n1 vs baseline | offload | slower (" in out and "| 1 of 1 | 1 of 1 |" in out
    assert "Not all met: a verdict resting on a contended process stays withheld." in out
    assert "WARNING" not in out


def test_no_run_directory_and_an_unpaired_run_are_one_line_and_exit_2(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cp.main([str(tmp_path / "nowhere")])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("contention_pairing.py: ") and "nowhere: not a run directory" in line
    with pytest.raises(SystemExit) as e:
        cp.main([str(ROOT / "tests" / "fixtures" / "synthetic_run")])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "synthetic_run: no phase paired by block" in line


def test_a_run_given_twice_and_a_run_with_a_bad_record_line_are_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "synthetic_run", run)
    with pytest.raises(SystemExit) as e:
        cp.main([str(run), str(tmp_path / "run" / ".." / "run")])  # the same run: it would count as two
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"contention_pairing.py: {tmp_path / 'run' / '..' / 'run'}: given twice (also as {run}): each run " \
                   "directory counts once"
    with (run / "same_runtime-runs.jsonl").open("a") as f:
        f.write('{"truncated": \n')  # a line load_run sets aside: the run would be read without that process
    with pytest.raises(SystemExit) as e:
        cp.main([str(run)])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"contention_pairing.py: {run}: 1 record line(s) do not validate, first ")
    assert line.endswith("(`python -m analysis validate RUN_DIR` names them all)")


def test_no_run_dir_and_an_unfinished_or_unreadable_load_record_are_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cp.main([])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("contention_pairing.py: ") and "RUN_DIR" in line
    rec = tmp_path / ("run" + cp.RECORD_SUFFIX)
    assert cp.read_load(rec) is None  # no record: a quiet run
    finished = {"schema": "shared-load/1", "kind": "cpu", "procs": 1, "started_utc": "2026-12-05T16:00:00+00:00",
                "stopped_utc": "2026-12-05T16:00:30+00:00"}
    rec.write_text(json.dumps(finished))
    assert cp.read_load(rec) == finished
    no_kind = {k: v for k, v in finished.items() if k != "kind"}  # the run's heading reads it
    for text, names in ((json.dumps(dict(finished, stopped_utc=None)), "not a finished shared-load/1 record"),
                        (json.dumps(no_kind), "not a finished shared-load/1 record (schema shared-load/1 and kind, "
                                              "procs, started_utc, stopped_utc set needed)"),
                        ("{", "not a readable JSON record")):
        rec.write_text(text)
        with pytest.raises(SystemExit) as e:
            cp.read_load(rec)
        assert e.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"contention_pairing.py: {rec}: {names}")


def test_a_run_named_by_a_load_record_left_in_the_results_root_is_refused_not_read_as_quiet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "results"
    run = root / "aa_paired" / "run1"
    shutil.copytree(ROOT / "tests" / "fixtures" / "synthetic_run", run)
    stray = root / ".shared-load-20261205T160000Z-123.json"  # where shared_load.py leaves it when it cannot move it
    record = {"schema": "shared-load/1", "kind": "cpu", "procs": 1, "started_utc": "2026-12-05T16:00:00+00:00",
              "stopped_utc": "2026-12-05T16:10:00+00:00", "cwd": str(tmp_path)}
    stray.write_text(json.dumps(dict(record, run_dirs=["results/aa_paired/other"])))  # another run's: not this one's
    with pytest.raises(SystemExit) as e:
        cp.main([str(run)])
    assert e.value.code == 2 and "no phase paired by block" in capsys.readouterr().err  # this run: no record named it
    for named in ("results/aa_paired/run1", str(run)):  # relative to the record's cwd, or absolute
        stray.write_text(json.dumps(dict(record, run_dirs=["results/aa_paired/other", named])))
        with pytest.raises(SystemExit) as e:
            cp.main([str(run)])
        assert e.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == (f"contention_pairing.py: {run}: the shared-load record {stray} names this run but is not "
                        f"beside it (a loaded run would be read as quiet): move it to {run}{cp.RECORD_SUFFIX}, or out "
                        "of the results root if no load ran beside this run")
