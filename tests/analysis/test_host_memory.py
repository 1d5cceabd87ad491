"""Host memory per offloaded / released byte: per label, sources named, > 1.2 flagged, CPU meaning stated."""

from __future__ import annotations

import pytest
import random
from types import SimpleNamespace

import pandas as pd

from analysis.report.host_memory import CPU_HOST_NOTE, RSS_AFTER, RSS_PEAK, host_memory_lines, host_memory_table
from analysis.report.summary import write_summary
from results_schema.codec.io import read_json
from results_schema.records.models import CaseRun
from results_schema.records.summary import ComparisonSummary
from tests.support.synthetic import SynthCase, make_case_run

from .conftest import FIXTURES


def _cr(label: str, impl: str, g: int, n: int, after: int | None, repeat: int = 0) -> CaseRun:
    cr = make_case_run("p", SynthCase(label, impl, g, n), repeat, random.Random(repeat))
    return cr.model_copy(update={"record": cr.record.model_copy(update={"rss_after_load_bytes": after})})


def _data(*crs: CaseRun) -> SimpleNamespace:
    return SimpleNamespace(case_runs=[(None, i + 1, c) for i, c in enumerate(crs)])


def test_host_bytes_per_offloaded_byte_against_the_baseline_and_the_flag():
    base = _cr("baseline", "baseline", 0, 0, 1_000_000)
    probe = _cr("current_g4_n1", "current", 4, 1, None)
    off = probe.evidence.offloaded_bytes
    cheap = _cr("current_g4_n1", "current", 4, 1, 1_000_000 + off)          # 1.0 host byte per offloaded byte
    costly = _cr("current_g2_n1", "current", 2, 1, 1_000_000 + 3 * _cr("x", "current", 2, 1, None).evidence.offloaded_bytes)
    t = host_memory_table(_data(base, cheap, costly)).set_index("label")
    assert t.loc["current_g4_n1", "host_per_offloaded"] == 1.0 and not t.loc["current_g4_n1", "flagged"]
    assert t.loc["current_g2_n1", "host_per_offloaded"] == 3.0 and t.loc["current_g2_n1", "flagged"]
    rel = t.loc["current_g4_n1", "released_bytes"]
    assert t.loc["current_g4_n1", "host_per_released"] == off / rel
    assert pd.isna(t.loc["baseline", "host_per_offloaded"]) and t.loc["baseline", "host_delta_bytes"] == 0
    assert set(t["host_source"]) == {RSS_AFTER}
    md = "\n".join(host_memory_lines(t.reset_index().to_dict("records"), cpu=True))
    assert "> 1.2 host B per offloaded B" in md and CPU_HOST_NOTE in md and "rss_after_load_bytes" in md


def test_records_without_load_window_rss_fall_back_to_the_process_peak_and_say_so():
    t = host_memory_table(_data(_cr("baseline", "baseline", 0, 0, None), _cr("c", "current", 4, 1, 5)))
    assert set(t["host_source"]) == {RSS_PEAK}


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_the_real_default_run_summary_shows_host_bytes_per_offloaded_byte_per_label(tmp_path):
    write_summary(FIXTURES / "real_tiny_run", out_dir=tmp_path)
    cs = read_json(tmp_path / "comparison-summary.json", ComparisonSummary)
    labels = {r["label"] for r in cs.host_memory}
    assert labels == {"baseline", "current_g8_n1", "current_g4_n1", "current_g4_n2", "current_g2_n1"}
    assert all(r["host_source"] == RSS_PEAK for r in cs.host_memory)  # recorded before the load-window RSS
    md = (tmp_path / "comparison-summary.md").read_text()
    assert "## Host memory per offloaded / released byte" in md and CPU_HOST_NOTE in md
    page = (tmp_path / "report.html").read_text()
    assert 'id="host-memory"' in page and "host B / offloaded B" in page
