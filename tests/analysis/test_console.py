"""Claims about the end-of-run console table (analysis.report.console)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from analysis.report.console import print_summary
from analysis.report.summary import write_summary

from .conftest import make_fixtures


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("console")
    good = make_fixtures.valid_run(base / "good")
    bad = make_fixtures.build_edge(good, base / "bad", "edge_tokens_differ")
    for r in (good, bad):
        write_summary(r)
    return good, bad


def _print(run):
    buf = io.StringIO()
    valid = print_summary(run / "summary", Console(file=buf, width=100, color_system=None))
    return valid, buf.getvalue()


def test_table_has_the_decision_columns_with_the_verdict_last(runs):
    valid, out = _print(runs[0])
    assert valid
    header = next(line for line in out.splitlines() if "label" in line and "tok/s" in line)
    cols = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert cols[:2] == ["label", "G"] and cols[-2:] == ["verdict", "reasons"]
    assert {"released GiB", "KV gain tok", "tok/s", "retention", "95% CI", "tokens"} <= set(cols)
    assert "current_g4_n1" in out and "slower" in out  # the synthetic run's intervals exclude 1
    assert "| phase |" not in out  # the Markdown stays in summary/
    assert out.rstrip().splitlines()[-1].startswith("validation: VALID")


def test_invalid_run_prints_invalid_verdicts_and_every_reason_last(runs):
    valid, out = _print(runs[1])
    assert not valid
    assert "INVALID" in out.splitlines()[0]
    assert "token_digest_differs" in out
    tail = out[out.index("validation: INVALID"):]
    assert "error token_digest_differs" in tail and "failed check" in tail
