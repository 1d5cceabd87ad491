"""Rules of the per-process request, latency and load-memory fields of ``BenchRecord``.

What is modelled: the published ``bench_one`` wrote, per case process, the request count,
requests per second, the P50 / P95 latency of its measured rounds, and RSS / NPU HBM before,
at the peak of and after model load. ``BenchRecord`` carries them as optional fields
(omitted when null, so records written before them keep their bytes); the functions here
are the rules a record with them must satisfy, each raising ``ValueError`` that names the
values:

* ``requests`` = ``workload.num_prompts`` x measured rounds actually run (one round is one
  ``LLM.generate`` call over all prompts, every prompt one request);
* ``requests_per_s`` = ``requests / elapsed_s`` within ``REL_TOL``;
* ``round_latency_p50_s`` / ``round_latency_p95_s`` = the 50th / 95th percentile of the
  measured rounds' ``elapsed_s`` by linear interpolation between order statistics
  (``percentile_linear``: numpy's default ``method="linear"``, Hyndman & Fan type 7), within
  ``REL_TOL``; so P50 <= P95;
* a before / peak / after triple is all set or all null, and the peak is >= before and >= after
  (the same sampler takes the before and after samples and keeps the maximum of every sample);
  the process-lifetime ``peak_rss_bytes`` is >= the load-window RSS peak;
* device memory values name their source, and a reason why device memory is missing
  (``device_memory_error``) never comes with values (a source without values needs that reason).

What is deliberately not modelled: how the values are sampled (``runners.incase.memory_sampler``,
``runners.incase.device_memory``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from results_schema.records.base import rel_close


def percentile_linear(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``) by linear interpolation (numpy ``method="linear"``, type 7).

    Position ``h = (n - 1) * q / 100`` in the sorted values; the result interpolates between
    the values at ``floor(h)`` and ``ceil(h)``. Raises ``ValueError`` on an empty sequence or ``q``
    outside [0, 100].
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q ({q}) must be within [0, 100]")
    xs = sorted(values)
    h = (len(xs) - 1) * q / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def check_requests(requests: int | None, requests_per_s: float | None, *, num_prompts: int, rounds: int,
                   elapsed_s: float) -> None:
    """``requests`` = ``num_prompts`` x ``rounds``; ``requests_per_s`` = ``requests / elapsed_s`` (req/s)."""
    if (requests is None) != (requests_per_s is None):
        raise ValueError(f"requests ({requests}) and requests_per_s ({requests_per_s}) are set together or not at all")
    if requests is None or requests_per_s is None:
        return
    if requests != num_prompts * rounds:
        raise ValueError(f"requests ({requests}) != workload.num_prompts ({num_prompts}) x measured rounds ({rounds})")
    if not rel_close(requests_per_s, requests / elapsed_s):
        raise ValueError(f"requests_per_s ({requests_per_s}) != requests / elapsed_s ({requests} / {elapsed_s})")


def check_round_latency(p50: float | None, p95: float | None, round_elapsed_s: Sequence[float]) -> None:
    """P50 / P95 round latency equal ``percentile_linear`` of the measured rounds' ``elapsed_s`` (seconds)."""
    if (p50 is None) != (p95 is None):
        raise ValueError(f"round_latency_p50_s ({p50}) and round_latency_p95_s ({p95}) are set together or not at all")
    if p50 is None or p95 is None:
        return
    if p50 > p95:
        raise ValueError(f"round_latency_p50_s ({p50}) > round_latency_p95_s ({p95})")
    for name, got, q in (("round_latency_p50_s", p50, 50.0), ("round_latency_p95_s", p95, 95.0)):
        want = percentile_linear(round_elapsed_s, q)
        if not rel_close(got, want):
            raise ValueError(f"{name} ({got}) != the linear-interpolation P{q:g} of the measured rounds' elapsed_s "
                             f"({want})")


def check_before_peak_after(what: str, before: int | None, peak: int | None, after: int | None) -> None:
    """All three set or none; ``peak >= before`` and ``peak >= after`` (bytes)."""
    values = (before, peak, after)
    if all(v is None for v in values):
        return
    if before is None or peak is None or after is None:
        raise ValueError(f"{what} before / peak / after load ({before} / {peak} / {after}) are set together or not "
                         f"at all")
    if peak < before or peak < after:
        raise ValueError(f"{what} peak during load ({peak}) is below its before ({before}) or after ({after}) sample: "
                         f"the peak is the maximum of every sample, both of these included")


def check_device_memory(values: Sequence[int | None], source: str | None, error: str | None) -> None:
    """Device memory values come with their ``source``; ``error`` (why they are missing) never comes with values."""
    have = any(v is not None for v in values)
    if have and source is None:
        raise ValueError("device memory before / peak / after load need device_memory_source")
    if not have and source is not None and error is None:
        raise ValueError(f"device_memory_source ({source!r}) without device memory values nor device_memory_error")
    if have and error is not None:
        raise ValueError(f"device_memory_error ({error!r}) together with device memory values")
