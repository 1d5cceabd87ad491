"""The benchmark script runs end to end (small N; the 100k figure is printed by ``python -m tests.support.bench``)."""

from __future__ import annotations

from tests.support.bench import main


def test_bench_prints_a_ratio(capsys):
    assert main(["--records", "300", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "ratio:" in out and "records: 300" in out
