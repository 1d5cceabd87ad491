"""The cross-field validators of ``CaseRun`` and the models inside it, applied to columns of many rows at once.

What is modelled: ``refused_rows(table)`` marks every row of a ``RecordTable[CaseRun]``
(``results_schema.reading.columns``) that one of these ``mode="after"`` validators would refuse, each rule
ported expression for expression (same comparisons, same float operations in the same order, so the
same outcome bit for bit; ``math.isclose`` in ``_rel_close``):

* ``OffloadSetting._check_cross_fields``: ``offload_num_in_group <= offload_group_size`` when G > 0;
* ``RuntimeEvidence._check_counts``: ``wrapped_count == len(wrapped_layers)``, wrapped layers a subset of
  the selected ones, ``released_bytes == offloaded_bytes - static_buffer_bytes``;
* ``RoundResult._check_throughput``: ``throughput_tok_s`` = ``output_tokens / elapsed_s`` (``rel_close``);
* ``MeasurementWindow._check_reached``: ``reached`` = ``measured_s >= min_measured_s and rounds >= min_rounds``;
* ``BenchRecord._check_published_metrics``: ``results_schema.records.load_metrics``' request, round-latency
  (``percentile_linear``, vectorised per round count), before / peak / after and device-memory rules;
* ``BenchRecord._check_totals``: round count vs ``measured_rounds`` and ``min_measured_s``, token and
  second sums over the rounds (Python's ``sum``, per row, as the validator), round indices, throughput,
  and the window's agreement with the record.

A row is also marked when it holds an integer that the int64 arithmetic here cannot prove exactly
(beyond ``2**62``, or ``num_prompts`` / a round's ``output_tokens`` beyond ``2**40``): marked rows go to
the full reader (``results_schema.records.io.parse_line``), which decides and names the error, so marking is
always safe and the port only has to never pass a row a validator refuses.

``PORTED`` names the validators ported here and ``RULES_DIGEST`` is the SHA-256 of their source and of
the helpers they call: ``rules_current()`` is False when a validator was added, removed or edited since,
and then ``results_schema.reading.table_scan`` reads every line through the full reader (slow, never lax) until
this port is updated (``tests/results_schema/test_table_scan.py`` fails meanwhile).

What is deliberately not modelled: error messages (the full reader's); per-field constraints (the
derived msgspec struct checks them while decoding).
"""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel

from results_schema.records import base, load_metrics
from results_schema.records.base import REL_TOL
from results_schema.reading.columns import RecordTable
from results_schema.records.models import CaseRun

__all__ = ["PORTED", "RULES_DIGEST", "refused_rows", "rules_current", "validators_of"]

PORTED = ("OffloadSetting._check_cross_fields", "RuntimeEvidence._check_counts", "RoundResult._check_throughput",
          "MeasurementWindow._check_reached", "BenchRecord._check_published_metrics", "BenchRecord._check_totals")
"""Qualified names of the ``mode="after"`` validators reachable from ``CaseRun``, all ported below."""

_HELPERS: tuple[Callable[..., Any], ...] = (
    base.rel_close, load_metrics.percentile_linear, load_metrics.check_requests, load_metrics.check_round_latency,
    load_metrics.check_before_peak_after, load_metrics.check_device_memory)

RULES_DIGEST = "0759f7ae0eb95463b12ec19c99eca442038ced26a9931fde6156572901427dda"
"""SHA-256 of the sources of the ``PORTED`` validators and ``_HELPERS`` when the port was written."""

_INT64_SAFE = 2**62
_SUM_SAFE = 2**40


def _nested_models(ann: Any) -> Iterator[type[BaseModel]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        yield ann
    for a in getattr(ann, "__args__", ()) or ():
        yield from _nested_models(a)
    meta = getattr(ann, "__metadata__", None)
    if meta is not None:
        yield from _nested_models(getattr(ann, "__origin__", None))


def validators_of(model: type[BaseModel]) -> dict[str, Callable[..., Any]]:
    """``{qualified name: function}`` of every model validator of ``model`` and of every model inside it."""
    out: dict[str, Callable[..., Any]] = {}
    seen: set[type[BaseModel]] = set()
    todo = [model]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for d in cls.__pydantic_decorators__.model_validators.values():
            out[d.func.__qualname__] = d.func
        for f in cls.model_fields.values():
            todo.extend(_nested_models(f.annotation))
    return out


def current_digest() -> str | None:
    """SHA-256 of the sources of the validators reachable from ``CaseRun`` and of ``_HELPERS``; None if unreadable."""
    found = validators_of(CaseRun)
    h = hashlib.sha256()
    try:
        for name in sorted(found):
            h.update(name.encode() + b"\n" + inspect.getsource(found[name]).encode())
        for fn in _HELPERS:
            h.update(inspect.getsource(fn).encode())
    except (OSError, TypeError):
        return None
    return h.hexdigest()


_CURRENT: list[bool] = []


def rules_current() -> bool:
    """True when the validators reachable from ``CaseRun`` are exactly ``PORTED`` with the source they had."""
    if not _CURRENT:
        _CURRENT.append(set(validators_of(CaseRun)) == set(PORTED) and current_digest() == RULES_DIGEST)
    return _CURRENT[0]


# ------------------------------------------------------------------------------------------------ helpers


def _rel_close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)`` element by element (CPython's formula)."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(b - a)
        close = (diff <= np.abs(REL_TOL * b)) | (diff <= np.abs(REL_TOL * a)) | (diff <= 1e-9)
    return (a == b) | (np.isfinite(a) & np.isfinite(b) & close)


def _floats(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(float64 values with None as 0.0, mask of None)``."""
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    arr = np.array([0.0 if v is None else v for v in values] if null.any() else values, dtype=np.float64)
    return arr, null


def _ints(values: list[Any], safe: int = _INT64_SAFE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(int64 values with None and unsafe ones as 0, mask of None, mask of |value| > safe)``."""
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    big = np.fromiter((v is not None and not -safe <= v <= safe for v in values), dtype=bool, count=len(values))
    clean = [0 if v is None or not -safe <= v <= safe else v for v in values] if null.any() or big.any() else values
    return np.array(clean, dtype=np.int64), null, big


def _flags(values: list[Any]) -> np.ndarray:
    return np.fromiter(values, dtype=bool, count=len(values))


class _Cols:
    """Columns of one table as numpy arrays, each read once."""

    def __init__(self, table: RecordTable[Any]) -> None:
        self.table = table
        self.refused = np.zeros(len(table), dtype=bool)

    def floats(self, path: str) -> tuple[np.ndarray, np.ndarray]:
        return _floats(self.table.column(path))

    def ints(self, path: str, safe: int = _INT64_SAFE) -> tuple[np.ndarray, np.ndarray]:
        arr, null, big = _ints(self.table.column(path), safe)
        self.refused |= big
        return arr, null


# ------------------------------------------------------------------------------------------------ rules


def _offload_setting(c: _Cols) -> np.ndarray:
    g, _ = c.ints("record.offload.offload_group_size")
    n, _ = c.ints("record.offload.offload_num_in_group")
    return (g > 0) & (n > g)


def _runtime_evidence(c: _Cols) -> np.ndarray:
    wrapped = c.table.column("evidence.wrapped_layers")
    selected = c.table.column("evidence.selected_layers")
    count, _ = c.ints("evidence.wrapped_count")
    lengths = np.fromiter(map(len, wrapped), dtype=np.int64, count=len(wrapped))
    subset: dict[tuple[Any, Any], bool] = {}
    not_subset = []
    for w, s in zip(wrapped, selected, strict=True):
        key = (w, s)
        ok = subset.get(key)
        if ok is None:
            ok = subset[key] = set(w) <= set(s)
        not_subset.append(not ok)
    released, _ = c.ints("evidence.released_bytes")
    offloaded, _ = c.ints("evidence.offloaded_bytes")
    static, _ = c.ints("evidence.static_buffer_bytes")
    return (count != lengths) | _flags(not_subset) | (released != offloaded - static)


class _Rounds(NamedTuple):
    bad: np.ndarray  # per row: a round's RoundResult._check_throughput fails (or holds an unsafe integer)
    out_of_order: np.ndarray  # per row: round indices are not 0..n-1
    counts: np.ndarray  # rounds per row
    starts: np.ndarray  # position of each row's first round in ``elapsed``
    elapsed: np.ndarray  # elapsed_s of every round, rows one after another
    tokens: np.ndarray  # per row: sum of the rounds' output_tokens
    groups: list[Any]  # per row: its rounds (structs or models)


def _rounds(c: _Cols) -> _Rounds:
    """``RoundResult._check_throughput`` and what the record rules need of the rounds."""
    sub, count_list = c.table.explode("record.rounds")
    counts = np.array(count_list, dtype=np.int64)
    starts = np.zeros(len(counts), dtype=np.int64)
    if len(counts):
        np.cumsum(counts[:-1], out=starts[1:])
    parent = np.repeat(np.arange(len(counts)), counts)
    rc = _Cols(sub)
    out, _ = rc.ints("output_tokens", _SUM_SAFE)
    elapsed, _ = rc.floats("elapsed_s")
    thr, _ = rc.floats("throughput_tok_s")
    index, _ = rc.ints("index")
    with np.errstate(over="ignore", divide="ignore"):
        bad_round = ~_rel_close(thr, out / elapsed) | rc.refused
    position = np.arange(len(sub), dtype=np.int64) - starts[parent]
    bad = np.zeros(len(counts), dtype=bool)
    np.logical_or.at(bad, parent, bad_round)
    out_of_order = np.zeros(len(counts), dtype=bool)
    np.logical_or.at(out_of_order, parent, index != position)
    tokens = np.zeros(len(counts), dtype=np.int64)
    np.add.at(tokens, parent, out)
    return _Rounds(bad, out_of_order, counts, starts, elapsed, tokens, c.table.column("record.rounds"))


def _window_reached(c: _Cols) -> np.ndarray:
    """``MeasurementWindow._check_reached`` on the rows that have a window."""
    measured, null = c.floats("record.window.measured_s")
    rounds, _ = c.ints("record.window.rounds")
    min_s, _ = c.floats("record.window.min_measured_s")
    min_rounds, _ = c.ints("record.window.min_rounds")
    reached = _flags([False if v is None else v for v in c.table.column("record.window.reached")])
    want = (measured >= min_s) & (rounds >= min_rounds)
    return ~null & (reached != want)


def _percentile(grid: np.ndarray, n: int, q: float) -> np.ndarray:
    """``load_metrics.percentile_linear`` of each row of ``grid`` (rows of ``n`` values, sorted ascending)."""
    h = (n - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return grid[:, lo] + (h - lo) * (grid[:, hi] - grid[:, lo])


def _round_latency(c: _Cols, r: _Rounds) -> np.ndarray:
    """``load_metrics.check_round_latency``: P50 / P95 set together, P50 <= P95, each the rounds' percentile."""
    p50, n50 = c.floats("record.round_latency_p50_s")
    p95, n95 = c.floats("record.round_latency_p95_s")
    both = ~n50 & ~n95
    bad = (n50 != n95) | (both & (p50 > p95))
    for n in np.unique(r.counts[both]).tolist():
        rows = both & (r.counts == n)
        if n == 0:
            bad |= rows  # percentile of no values: ValueError
            continue
        grid = np.sort(r.elapsed[r.starts[rows][:, None] + np.arange(n)], axis=1)
        for got, q in ((p50, 50.0), (p95, 95.0)):
            bad[rows] |= ~_rel_close(got[rows], _percentile(grid, n, q))
    return bad


def _requests(c: _Cols, r: _Rounds, elapsed_s: np.ndarray) -> np.ndarray:
    """``load_metrics.check_requests``: set together; requests = num_prompts x rounds; requests_per_s = ratio."""
    req, req_null = c.ints("record.requests")
    rps, rps_null = c.floats("record.requests_per_s")
    prompts, _ = c.ints("record.workload.num_prompts", _SUM_SAFE)
    both = ~req_null & ~rps_null
    with np.errstate(over="ignore"):
        ratio = req / elapsed_s
    return (req_null != rps_null) | (both & ((req != prompts * r.counts) | ~_rel_close(rps, ratio)))


def _before_peak_after(c: _Cols, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``load_metrics.check_before_peak_after`` of ``record.<prefix>_{before,peak,after}_load_bytes``;
    also the peak column and whether any of the three is set."""
    before, nb = c.ints(f"record.{prefix}_before_load_bytes")
    peak, np_ = c.ints(f"record.{prefix}_peak_load_bytes")
    after, na = c.ints(f"record.{prefix}_after_load_bytes")
    any_null, all_null = nb | np_ | na, nb & np_ & na
    bad = (any_null & ~all_null) | (~any_null & ((peak < before) | (peak < after)))
    return bad, peak, ~all_null


def _published_metrics(c: _Cols, r: _Rounds, elapsed_s: np.ndarray) -> np.ndarray:
    """``BenchRecord._check_published_metrics``."""
    bad = _requests(c, r, elapsed_s) | _round_latency(c, r)
    rss_bad, rss_peak, rss_set = _before_peak_after(c, "rss")
    process_peak, _ = c.ints("record.peak_rss_bytes")
    bad |= rss_bad | (rss_set & (process_peak < rss_peak))
    dev_bad, _, have = _before_peak_after(c, "device_memory")
    no_source = _flags([v is None for v in c.table.column("record.device_memory_source")])
    no_error = _flags([v is None for v in c.table.column("record.device_memory_error")])
    return bad | dev_bad | (have & no_source) | (~have & ~no_source & no_error) | (have & ~no_error)


def _totals(c: _Cols, r: _Rounds, elapsed_s: np.ndarray) -> np.ndarray:
    """``BenchRecord._check_totals``."""
    want, _ = c.ints("record.workload.measured_rounds")
    min_s, min_null = c.floats("record.workload.min_measured_s")
    bad = r.counts < want
    for i in np.flatnonzero(r.counts > want).tolist():
        before_last = sum(x.elapsed_s for x in r.groups[i][:-1])
        bad[i] |= bool(min_null[i]) or before_last >= min_s[i]
    output_tokens, _ = c.ints("record.output_tokens")
    bad |= (r.tokens != output_tokens) | r.out_of_order
    get = attrgetter("elapsed_s")
    sums = np.array([sum(map(get, g)) for g in r.groups], dtype=np.float64)
    thr, _ = c.floats("record.throughput_tok_s")
    with np.errstate(over="ignore"):
        bad |= ~_rel_close(elapsed_s, sums) | ~_rel_close(thr, output_tokens / elapsed_s)
    w_measured, w_null = c.floats("record.window.measured_s")
    w_rounds, _ = c.ints("record.window.rounds")
    w_min_rounds, _ = c.ints("record.window.min_rounds")
    w_min_s, _ = c.floats("record.window.min_measured_s")
    disagree = (~_rel_close(w_measured, elapsed_s) | (w_rounds != r.counts) | (w_min_rounds != want)
                | (w_min_s != np.where(min_null, 0.0, min_s)))
    return bad | (~w_null & disagree)


def refused_rows(table: RecordTable[CaseRun]) -> np.ndarray:
    """A boolean mask over the rows of ``table``: True where a ``PORTED`` validator would refuse the row, or where
    the row holds an integer this port cannot handle exactly (see the module docstring). False rows pass every
    cross-field validator of ``CaseRun`` (per-field constraints are the decoder's)."""
    if table.model is not CaseRun:
        raise TypeError(f"refused_rows checks CaseRun rows, not {table.model.__name__}")
    c = _Cols(table)
    if not len(table):
        return c.refused
    r = _rounds(c)
    c.refused |= r.counts >= 2**22  # token sums stay below 2**62
    elapsed_s, _ = c.floats("record.elapsed_s")
    bad = _offload_setting(c) | _runtime_evidence(c) | r.bad | _window_reached(c)
    bad |= _published_metrics(c, r, elapsed_s) | _totals(c, r, elapsed_s)
    return bad | c.refused
