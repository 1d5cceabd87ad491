"""The reading benchmark runs end to end (2 run directories; ``python -m tests.support.bench`` prints the
200-directory figures). It asserts no time: a speed target is the ratio the script prints."""

from __future__ import annotations

from tests.support.bench import DESIGN_PHASES, main


def test_bench_reads_every_line_and_prints_a_ratio(capsys):
    assert main(["--runs", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    lines = 2 * sum(n for _phase, n, _rounds in DESIGN_PHASES)
    assert lines == 218
    assert f"lines: {lines} in 6 files of 2 run directories" in out and "ratio:" in out
