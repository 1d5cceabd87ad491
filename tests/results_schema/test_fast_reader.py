"""The reader's one-pass path accepts exactly what the hook-based path accepts (duplicates, non-finite, types)."""

from __future__ import annotations

import json

import pytest

from results_schema.records.case_outcome import CpuKernelEvidence
from results_schema.codec.fast_json import fast_parse as _fast_parse
from results_schema.codec.io import RecordError, parse_line
from results_schema.records.case_outcome import CaseFailure

FAILURE = {"phase": "p", "label": "l", "implementation": "current", "repeat": 0, "failure_type": "timeout",
           "exit_code": 1, "error_message": "m", "log_tail": [], "log_path": "x", "duration_s": 1.5}


def _line(**over) -> bytes:
    return json.dumps({**FAILURE, **over}).encode()


def test_valid_line_takes_the_one_pass_path_and_equals_the_full_path():
    fast = _fast_parse(_line(), CaseFailure)
    assert fast is not None and fast == parse_line(_line(), CaseFailure)


def test_duplicate_key_with_a_colon_inside_a_string_is_refused_naming_the_key():
    raw = _line(error_message="a: b: c").replace(b'"exit_code": 1', b'"exit_code": 1, "exit_code": 2')
    assert _fast_parse(raw, CaseFailure) is None
    with pytest.raises(RecordError, match="exit_code: duplicate key 'exit_code'"):
        parse_line(raw, CaseFailure)


def test_duplicate_key_inside_a_dict_field_is_refused():
    raw = b'{"path": "plain", "layers": 4, "kernels": {"onednn": 2, "onednn": 4}}'
    assert _fast_parse(raw, CpuKernelEvidence) is None
    with pytest.raises(RecordError, match="duplicate key 'onednn'"):
        parse_line(raw, CpuKernelEvidence)


def test_nan_in_a_string_is_text_and_nan_as_a_number_is_refused():
    assert parse_line(_line(error_message="loss NaN, Infinity"), CaseFailure).error_message == "loss NaN, Infinity"
    with pytest.raises(RecordError, match="duration_s: non-finite JSON constant NaN"):
        parse_line(_line().replace(b"1.5", b"NaN"), CaseFailure)
    with pytest.raises(RecordError, match="out of range"):
        parse_line(_line().replace(b"1.5", b"1e400"), CaseFailure)


def test_integral_float_for_an_integer_goes_to_the_full_path_and_is_the_integer():
    raw = _line().replace(b'"repeat": 0', b'"repeat": 0.0')
    assert _fast_parse(raw, CaseFailure) is None
    assert parse_line(raw, CaseFailure).repeat == 0


def test_a_string_is_never_a_number_on_either_path():
    with pytest.raises(RecordError, match="repeat"):
        parse_line(_line(repeat="0"), CaseFailure)


def test_reading_a_file_pauses_the_cyclic_collector_and_restores_its_state(tmp_path):
    import gc

    from results_schema.codec.io import gc_paused, scan_jsonl

    path = tmp_path / "p-failures.jsonl"
    path.write_bytes(_line() + b"\n" + b"{not json\n")
    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            good, errors = scan_jsonl(path, CaseFailure)
            assert len(good) == 1 and len(errors) == 1 and gc.isenabled() is state
        gc.enable()
        with pytest.raises(RuntimeError), gc_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
