"""The ``case.json`` a case process reads, and its offload setting checked before any engine starts.

What is modelled: ``read_case`` (a ``results_schema.records.case.CaseSpec`` of the expected kind) and
``checked_offload`` (``offload.selection.check_offload_setting`` in the case process). The file is
written by the runner (``runners.launching.case_command``).
"""

from __future__ import annotations

from pathlib import Path

from offload.selection import check_offload_setting
from results_schema.records.case import CaseSpec
from results_schema.codec.io import read_json
from results_schema.records.identity import OffloadSetting


def read_case(path: str | Path, kind: str) -> CaseSpec:
    """Read a ``case.json`` of ``kind`` (``bench`` or ``accuracy``) in the case process.

    Raises:
        ValueError: unreadable or invalid file (``results_schema.codec.io.RecordError``), or another kind.
    """
    try:
        case = read_json(path, CaseSpec)
    except OSError as exc:
        raise ValueError(f"--case {path}: {exc.strerror or exc}") from None
    if case.kind != kind:
        raise ValueError(f"--case {path}: kind {case.kind!r}; this process runs kind {kind!r}")
    return case


def checked_offload(case: CaseSpec) -> OffloadSetting:
    """The case's offload setting, validated in the case process (``offload.selection.check_offload_setting``).

    Raises:
        ValueError: naming the invalid value(s) (an ``expect_error`` case ends here, exit 2).
    """
    o = case.offload
    check_offload_setting(case.implementation, o.offload_group_size, o.offload_num_in_group, o.offload_prefetch_step,
                          o.offload_backend)
    return OffloadSetting.model_validate(o.model_dump())
