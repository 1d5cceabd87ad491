"""Matrix side of a serving phase: config -> checked settings -> ``ServingCaseSpec`` and argv.

What is modelled:
* ``validate_serving``: the phase's ``serving`` settings checked across values before any process
  starts (a rate given, each rate once), naming the field, the value and what is allowed; each
  number's own range is ``conf.ranges``'.
* ``write_case_spec``: ``cases/<phase>/<stem>.serving-case.json`` from a scheduled case, and
  the argv of its process (``python -m runners.incase.serving --case FILE --run-dir DIR``).
* ``paths_of``: the files of one serving case process.
* ``rotated``: the rate order of a repeat (the configured order, rotated by the repeat index).

What is deliberately not modelled: the measurement itself (``runners.incase.serving.driver``), the
case's end (``runners.outcome.serving``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from conf.schema_matrix import ServingConfig
from conf.schema_stack import WorkloadConfig

from results_schema.codec.io import write_json
from results_schema.records.identity import OffloadSetting
from results_schema.records.serving_spec import ServingCaseSpec, ServingEngine, ServingLimits, ServingLoad, ServingSLO
from runners.planning.cases import ScheduledCase
from conf.typed import plain
from results_schema.records.models import WorkloadSpec
from runners.incase.bench_one import optional_engine_kwargs

DEFAULT_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _rates(values: Any) -> tuple[float | None, ...]:
    return tuple(None if math.isinf(float(v)) and float(v) > 0 else float(v) for v in values)


def rotated(rates: tuple[float | None, ...], repeat: int) -> tuple[float | None, ...]:
    """The rate order of repeat ``repeat``: the configured order started at index ``repeat % len(rates)``.

    A server warms up over a sweep, so a fixed ascending order always serves the high rates warm;
    rotating gives every rate every position over ``len(rates)`` repeats (the order is in the case's
    spec and record: ``ServingLoad.request_rates_rps``). ``(1, 4, 16)`` in repeat 1 -> ``(4, 16, 1)``.
    """
    k = repeat % len(rates) if rates else 0
    return rates[k:] + rates[:k]


def validate_serving(phase: str, serving: ServingConfig) -> None:
    """Check a serving phase's settings across values before any process starts: at least one request rate,
    each rate once, a ``server_command`` that is null or non-empty. Each number's own range (rates > 0 or
    ``.inf``, SLO limits, attainment, counts, timeouts) is ``conf.ranges``' (``runners.planning.plan`` checks it
    first).

    Raises:
        ValueError: naming ``phases.<phase>.serving.<field>``, its value and what is allowed.
    """
    where = f"phases.{phase}.serving"
    rates = list(serving.request_rates)
    if not rates:
        raise ValueError(f"{where}.request_rates is empty: give at least one rate in req/s (> 0; .inf = all at t=0)")
    if len(set(_rates(rates))) != len(rates):
        raise ValueError(f"{where}.request_rates {rates} repeats a rate: each rate once")
    cmd = serving.server_command
    if cmd is not None and not cmd:
        raise ValueError(f"{where}.server_command = {cmd!r}: must be a non-empty list of strings or null")


def paths_of(run_dir: Path, phase: str, stem: str) -> dict[str, Path]:
    """Files of one serving case process (see ``results_schema.records.serving``)."""
    return {
        "spec": run_dir / "cases" / phase / f"{stem}.serving-case.json",
        "record": run_dir / "records" / phase / f"{stem}.serving.json",
        "requests_dir": run_dir / "records" / phase / stem,
        "server_log": run_dir / "logs" / phase / f"{stem}.server.log",
    }


def _engine_options(w: WorkloadConfig) -> dict[str, Any]:
    """The workload's optional engine options as the API server gets them: the same ones ``vllm.LLM`` gets
    (``runners.incase.bench_one.optional_engine_kwargs``); prefix caching null = not passed."""

    return {"enable_prefix_caching": None, **optional_engine_kwargs(WorkloadSpec(**plain(w)))}


def build_spec(sc: ScheduledCase, *, model_dir: Path, run_dir: Path, python: str) -> ServingCaseSpec:
    """The ``ServingCaseSpec`` of a scheduled serving case (its phase's ``serving`` settings set)."""
    c = sc.case
    w = c.workload
    s = c.serving
    assert s is not None  # a serving case has its phase's settings (runners.plan)
    p = paths_of(run_dir, c.phase, sc.stem)
    offload = (OffloadSetting(offload_group_size=0, offload_num_in_group=0) if c.implementation == "baseline" else
               OffloadSetting(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                              offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params),
                              offload_backend=c.backend))
    return ServingCaseSpec(
        phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat, runtime=c.runtime_name,
        device=str(c.runtime.device), model=str(model_dir), offload=offload,
        engine=ServingEngine(dtype=w.dtype, max_model_len=w.max_model_len, enforce_eager=w.enforce_eager,
                             gpu_memory_utilization=w.gpu_memory_utilization, seed=w.seed, **_engine_options(w)),
        load=ServingLoad(backend="openai", endpoint="/v1/completions", dataset="random",
                         num_prompts=w.num_prompts, input_len=w.input_len, output_len=w.max_tokens, seed=w.seed,
                         num_warmups=s.num_warmups, burstiness=s.burstiness, max_concurrency=s.max_concurrency,
                         temperature=w.temperature, ignore_eos=True,
                         request_rates_rps=rotated(_rates(s.request_rates), sc.repeat)),
        slo=ServingSLO(ttft_ms=s.slo.ttft_ms, tpot_ms=s.slo.tpot_ms, attainment=s.slo.attainment),
        limits=ServingLimits(health_timeout_s=s.health_timeout_s, health_poll_s=s.health_poll_s,
                             rate_timeout_s=s.rate_timeout_s, stop_grace_s=s.stop_grace_s),
        server_command=tuple(s.server_command or (python, "-m", DEFAULT_SERVER_MODULE)),
        record_path=str(p["record"]), requests_dir=str(p["requests_dir"]), server_log_path=str(p["server_log"]))


def write_case_spec(sc: ScheduledCase, *, model_dir: Path, run_dir: Path, python: str = sys.executable) -> tuple[str, ...]:
    """Write the case's spec file and return the argv of its process."""
    spec = build_spec(sc, model_dir=model_dir, run_dir=run_dir, python=python)
    path = paths_of(run_dir, sc.case.phase, sc.stem)["spec"]
    write_json(path, spec)
    return (python, "-m", "runners.incase.serving", "--case", str(path), "--run-dir", str(run_dir))
