"""One rule for which log lines carry a case's markers: the runner's live checks and the offline validation."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from analysis.validation.records import scan_log
from conf.schema_stack import RuntimeConfig
from results_schema.records.base import Device
from results_schema.codec.io import RecordError, parse_line, write_json
from results_schema.rules.log_rule import BENCH_RESULT, OFFLOAD_EVIDENCE, kv_cache_gib_values, marked_lines
from results_schema.records.models import RuntimeEvidence
from runners.outcome.case_checks import CheckFailed, check_evidence
from tests.support.synthetic import SynthCase, make_case_run

EV = make_case_run("p", SynthCase("current_g4_n1", "current", 4, 1), 0, random.Random(0)).evidence
JSON = EV.model_dump_json()


@pytest.mark.parametrize(("line", "payload"), [
    (f"OFFLOAD_EVIDENCE {JSON}", JSON),
    (f"(EngineCore pid=1) OFFLOAD_EVIDENCE {JSON}", JSON),
    (f"(EngineCore_DP0 pid=7) (Worker pid=8) OFFLOAD_EVIDENCE {JSON}", JSON),
    (f"OFFLOAD_EVIDENCE {JSON} extra", f"{JSON} extra"),  # kept whole: the parse then fails
    (f"[rank0]: OFFLOAD_EVIDENCE {JSON}", None),  # a traceback line torch.distributed re-printed
    (f"INFO 12-03 printing OFFLOAD_EVIDENCE {JSON}", None),  # quoted by a logger
    (f"x (EngineCore pid=1) OFFLOAD_EVIDENCE {JSON}", None),  # text before the process tag
    (f"OFFLOAD_EVIDENCE_ERROR boom {JSON}", None),  # another marker that starts alike
])
def test_a_marker_counts_at_the_line_start_or_behind_process_tags_only(line: str, payload: str | None) -> None:
    assert marked_lines(f"before\n{line}\r\nafter\n", OFFLOAD_EVIDENCE) == ([payload] if payload else [])


def _live(log_text: str, tmp_path: Path) -> RuntimeEvidence:
    case = SimpleNamespace(implementation="current", group_size=4, num_in_group=1, prefetch_step=1, params=(),
                           runtime=RuntimeConfig(name="cpu", device=Device.cpu))
    side = tmp_path / "ev.json"
    write_json(side, EV)
    return check_evidence(SimpleNamespace(case=case), log_text, side)


def _offline(log_text: str) -> RuntimeEvidence:
    """What ``analysis validate``'s log check accepts: exactly one line, parsing as the evidence."""
    lines = scan_log(log_text)[1]
    if len(lines) != 1:
        raise ValueError(f"{len(lines)} lines")
    return parse_line(lines[0], RuntimeEvidence, path="log")


@pytest.mark.parametrize(("log_text", "accepted"), [
    (f"OFFLOAD_EVIDENCE {JSON}\n", True),
    (f"OFFLOAD_EVIDENCE {JSON}\n[rank0]: OFFLOAD_EVIDENCE {JSON}\n", True),
    (f"INFO printing OFFLOAD_EVIDENCE {JSON}\n", False),
    (f"OFFLOAD_EVIDENCE {JSON} extra\n", False),
    (f"(EngineCore pid=1) OFFLOAD_EVIDENCE {JSON}\nOFFLOAD_EVIDENCE {JSON}\n", False),
])
def test_the_runner_and_the_validation_accept_the_same_logs(log_text: str, accepted: bool, tmp_path: Path) -> None:
    """A review found the two counting different lines ('[rank0]: ...' 0 live, 1 offline; '... extra' 1 live,
    0 offline): each log is now accepted by both, with the same evidence, or refused by both."""
    try:
        live = _live(log_text, tmp_path)
    except CheckFailed:
        live = None
    try:
        offline = _offline(log_text)
    except (ValueError, RecordError):
        offline = None
    assert live == offline
    assert (live == EV) is accepted


def test_both_markers_are_read_by_the_validation() -> None:
    log = f"{BENCH_RESULT}{{}}\n(EngineCore pid=1) {OFFLOAD_EVIDENCE}{JSON}\nTraceback (most recent call last):\n"
    bench, ev, tb = scan_log(log)
    assert (bench, ev, tb) == (["{}"], [JSON], True)


def test_kv_cache_line_is_one_pattern_for_the_count_and_the_parse() -> None:
    log = ("INFO [gpu_worker.py:1] Available KV cache memory: 1,024.5 GiB\n"
           "(EngineCore pid=1) Available KV cache memory: \u22120.87 GiB\n"
           "the Available KV cache memory line is missing\n")
    assert kv_cache_gib_values(log) == [1024.5, -0.87]  # a mention without a value is not a KV line
    assert kv_cache_gib_values("no such line") == []
