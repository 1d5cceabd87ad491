"""When the transfer-bound model may be believed: its fit, and an independent copy measurement.

What is modelled: the serial model (``analysis.model.fit``) explains each offload point's throughput
loss by copies of its offloaded layers at one bandwidth ``BW``. That explanation is trusted only
when all of these hold:

* the bandwidth is a real fit (not at an edge of the search grid);
* every fitted point is predicted within ``MAX_POINT_ERROR_PCT`` (and so the RMS error);
* where the run measured the copy independently (``<run_dir>/copy-bench.json``: ``offload_tools.bench``'s
  plain ``Tensor.copy_`` of the model's layer bytes, in the cases' environment), the fitted
  bandwidth is within a factor ``MAX_BENCH_RATIO`` of it, either way.

Why a factor of 2 and not equality: the fitted figure is the copy as it costs *inside* a decode step
(its source and destination compete with the layer weights for the caches; the copied layer may
then be read from cache), the bench's is an isolated copy; the two differ by cache effects of tens
of percent, not by a factor of 2. A fit more than 2x away from the copy says the measured
differences are not explained by the copies (noise, another cost), so no prediction is shown.

What is deliberately not modelled: which other cost explains an untrusted fit.
"""

from __future__ import annotations

from typing import Any

MAX_POINT_ERROR_PCT = 10.0
"""Largest |predicted - measured| / measured (percent) of any fitted point for a trusted model."""

MAX_BENCH_RATIO = 2.0
"""Largest factor (either way) between the fitted copy bandwidth and the in-run copy bench's."""

CACHE_NOTE = ("fitted / bench > 1: a copy inside a decode step costs less than an isolated one (the copied "
              "layer is then read from cache); < 1: it costs more (it competes with the weights for the caches "
              "and memory bandwidth)")
"""What the ratio between the fitted and the bench bandwidth means (printed beside it)."""


def untrusted_reason(m: Any) -> str | None:
    """Why the model ``m`` (``analysis.model.fit.TransferModel``) is not trusted; None when it is.

    Reads ``bandwidth_source``, ``bandwidth_bytes_s``, ``fit_rms_error_pct``, ``max_point_error_pct``
    and ``bench_bandwidth_bytes_s`` (None: no bench in the run, that check is skipped).
    """
    if str(m.bandwidth_source).startswith("grid edge"):
        return f"bandwidth at the {m.bandwidth_source}: the data do not pin it down"
    if m.fit_rms_error_pct is None:
        return "no fitted point"
    worst = m.max_point_error_pct if m.max_point_error_pct is not None else m.fit_rms_error_pct
    if worst > MAX_POINT_ERROR_PCT:
        return f"a fitted point is off by {worst:.1f}% (> {MAX_POINT_ERROR_PCT:g}%)"
    bench = m.bench_bandwidth_bytes_s
    if bench:
        ratio = m.bandwidth_bytes_s / bench
        if not 1 / MAX_BENCH_RATIO <= ratio <= MAX_BENCH_RATIO:
            return (f"fitted copy bandwidth {m.bandwidth_bytes_s / 1e9:.4g} GB/s is {ratio:.3g}x the in-run copy "
                    f"bench's {bench / 1e9:.4g} GB/s (more than {MAX_BENCH_RATIO:g}x apart): the measured "
                    "differences are not explained by the copies")
    return None


def trust_fields(m: Any) -> dict[str, Any]:
    """The trust fields written with a model fit in ``comparison-summary.json`` (``models``)."""
    bench = m.bench_bandwidth_bytes_s
    reason = untrusted_reason(m)
    return {"max_point_error_pct": m.max_point_error_pct, "trusted": reason is None, "untrusted_reason": reason,
            "bench_ratio": (m.bandwidth_bytes_s / bench) if bench else None}


def model_lines(models: dict[str, Any], table: Any) -> list[str]:
    """Console / HTML lines: per fit, bandwidth vs bench with ratio and meaning, trust; then per point
    measured vs predicted (predictions only for a trusted model).

    Args:
        models: ``ComparisonSummary.models`` (``key -> ModelFit`` or dict, or None).
        table: ``ComparisonSummary.model_table`` rows (dicts with ``phase``, ``implementation``, ``label``,
            ``measured_tok_s``, ``predicted_tok_s``, ``error_pct``).
    """
    lines = []
    for key, m in models.items():
        if m is None:
            continue
        d = m if isinstance(m, dict) else m.model_dump()
        bench, ratio = d.get("copy_bench_bandwidth_bytes_s"), d.get("bench_ratio")
        vs = (f"in-run copy bench {bench / 1e9:.4g} GB/s, fitted / bench = {ratio:.3g} ({CACHE_NOTE})"
              if bench and ratio else "no in-run copy bench")
        err = d.get("max_point_error_pct")
        lines.append(f"model {key} ({d['mode']}): copy bandwidth {d['bandwidth_bytes_s'] / 1e9:.4g} GB/s "
                     f"({d['bandwidth']}); {vs}; worst point error "
                     f"{'–' if err is None else f'{err:.1f}%'}")
        step_s = d["num_prompts"] / d["baseline_tok_s"]  # one decode step of the baseline (analysis.model.fit t0)
        copy_s = d["bytes_per_layer"] / d["bandwidth_bytes_s"]
        lines.append(f"model {key}: one layer's copy ({d['bytes_per_layer']:,.0f} B) costs {copy_s * 1e3:.3g} ms "
                     f"= {copy_s / step_s * 100:.1f}% of a baseline decode step ({step_s * 1e3:.3g} ms)")
        trusted = d.get("trusted", d.get("predictions_trusted"))
        lines.append(f"model {key}: " + ("trusted" if trusted else
                                         f"UNTRUSTED: {d.get('untrusted_reason') or 'fit error too large'}; "
                                         "no prediction shown"))
        phase, impl = key.split("/", 1)
        for r in table:
            if r.get("phase") != phase or r.get("implementation") != impl:
                continue
            pred = (f"predicted {r['predicted_tok_s']:.2f} tok/s ({r['error_pct']:+.1f}%)"
                    if trusted and r.get("predicted_tok_s") is not None else "no prediction (untrusted)")
            lines.append(f"  {r['label']}: measured {r['measured_tok_s']:.2f} tok/s, {pred}")
    return lines
