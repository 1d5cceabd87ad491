"""Host memory per offloaded / released byte: per label, sources named, the bytes the offloader's own storage
explains (CPU: packed copies + static slots, the freed originals kept by the allocator), flagged beyond them, CPU
meaning stated."""

from __future__ import annotations

import pytest
import random
from types import SimpleNamespace

import pandas as pd

from pathlib import Path

from rich.console import Console

from analysis.report.console import print_host_memory
from analysis.report.host_memory import (CPU_HOST_NOTE, CPU_MEASUREMENT_DOC, RSS_AFTER, RSS_PEAK, flag_reason,
                                         host_memory_lines, host_memory_table)
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
    assert flag_reason(t.reset_index().set_index("label").loc["current_g2_n1"].to_dict()) in md
    assert CPU_HOST_NOTE in md and "rss_after_load_bytes" in md


def _one_slot_of_four(cr: CaseRun, device: str = "cpu") -> CaseRun:
    """The default's (2,1) shape: 4 layers offloaded, one static slot of one layer (released = 3 layers)."""
    off = cr.evidence.offloaded_bytes
    ev = cr.evidence.model_copy(update={"static_buffer_bytes": off // 4, "released_bytes": off - off // 4,
                                        "device": device})
    return cr.model_copy(update={"evidence": ev})


def test_on_cpu_the_packed_copies_and_the_slot_are_explained_and_only_bytes_beyond_them_are_flagged():
    # what every default run measured: host delta = offloaded + one slot (the freed originals stay in glibc's heap),
    # 1.25 host B per offloaded B; the old rule flagged it as an offloader cost, a live third copy was not told apart
    probe = _one_slot_of_four(_cr("current_g2_n1", "current", 2, 1, None))
    off, static = probe.evidence.offloaded_bytes, probe.evidence.static_buffer_bytes
    base = _cr("baseline", "baseline", 0, 0, 1_000_000)
    retained = _one_slot_of_four(_cr("current_g2_n1", "current", 2, 1, 1_000_000 + off + static))
    p4 = _one_slot_of_four(_cr("current_g4_n1", "current", 4, 1, None)).evidence
    third_copy = _one_slot_of_four(_cr("current_g4_n1", "current", 4, 1,
                                       1_000_000 + 2 * p4.offloaded_bytes + p4.static_buffer_bytes))
    t = host_memory_table(_data(base, retained, third_copy)).set_index("label")
    row = t.loc["current_g2_n1"]
    assert row["host_per_offloaded"] == (off + static) / off > 1.2
    assert row["explained_host_bytes"] == off + static and row["excess_per_offloaded"] == 0
    assert not row["flagged"] and flag_reason(row.to_dict()) == ""
    big = t.loc["current_g4_n1"]
    assert big["excess_per_offloaded"] == 1.0 and big["flagged"]
    assert "beyond the packed copies + static slots" in flag_reason(big.to_dict())


def test_on_an_accelerator_the_pinned_copies_are_explained_and_more_than_1_2_per_offloaded_byte_is_flagged():
    probe = _one_slot_of_four(_cr("current_g2_n1", "current", 2, 1, None), "cuda")
    off, static = probe.evidence.offloaded_bytes, probe.evidence.static_buffer_bytes
    base = _one_slot_of_four(_cr("baseline", "baseline", 0, 0, 1_000_000), "cuda")
    costly = _one_slot_of_four(_cr("current_g2_n1", "current", 2, 1, 1_000_000 + off + static), "cuda")
    row = host_memory_table(_data(base, costly)).set_index("label").loc["current_g2_n1"]
    assert row["explained_host_bytes"] == off and row["flagged"]
    assert flag_reason(row.to_dict()) == "> 1.2 host B per offloaded B"


def test_the_console_prints_the_explained_bytes_and_no_flag_for_retained_originals_on_cpu(tmp_path):
    probe = _one_slot_of_four(_cr("current_g2_n1", "current", 2, 1, None))
    off, static = probe.evidence.offloaded_bytes, probe.evidence.static_buffer_bytes
    rows = host_memory_table(_data(_cr("baseline", "baseline", 0, 0, 1_000_000), _one_slot_of_four(
        _cr("current_g2_n1", "current", 2, 1, 1_000_000 + off + static)))).to_dict("records")
    cs = SimpleNamespace(host_memory=rows, rows=[SimpleNamespace(runtime="cpu")])
    console = Console(record=True, width=4000)
    print_host_memory(cs, console)  # type: ignore[arg-type]
    text = console.export_text()
    assert f"explained {off + static:,} B" in text and "FLAG" not in text and CPU_HOST_NOTE in text


def test_the_cpu_note_names_a_measurement_page_that_exists():
    assert CPU_MEASUREMENT_DOC in CPU_HOST_NOTE
    assert (Path(__file__).resolve().parents[2] / CPU_MEASUREMENT_DOC).is_file()


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
