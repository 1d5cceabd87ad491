"""Launch half of a serving case: a scheduled case -> its ``ServingCaseSpec`` and the argv of its process.

What is modelled:
* ``build_spec``: the ``ServingCaseSpec`` (``cases/<phase>/<stem>.serving-case.json``, ``runners.paths.CasePaths``)
  of a scheduled serving case: engine options, load, SLO, limits, server command and its files.
* ``serving_argv``: the argv of its process (``python -m runners.incase.serving --case FILE --run-dir DIR``, or the
  run's ``serving_command`` before ``--case``).
* ``rotated``: the rate order of a repeat (the configured order, rotated by the repeat index).

What is deliberately not modelled: the phase's settings checked before any process starts (the serving kind,
``runners.kinds.serving``), the measurement itself (``runners.incase.serving.driver``), the case's end
(``runners.outcome.serving``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conf.schema_stack import WorkloadConfig
from conf.typed import plain
from results_schema.records.identity import OffloadSetting
from results_schema.records.models import WorkloadSpec
from results_schema.records.serving_spec import ServingCaseSpec, ServingEngine, ServingLimits, ServingLoad, ServingSLO
from runners.cases import ScheduledCase
from runners.incase.bench_one import optional_engine_kwargs
from runners.paths import CasePaths

DEFAULT_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def spec_rates(values: Any) -> tuple[float | None, ...]:
    """Configured request rates (req/s) as a spec holds them: ``.inf`` (all requests at t=0) -> None."""
    return tuple(None if math.isinf(float(v)) and float(v) > 0 else float(v) for v in values)


def rotated(rates: tuple[float | None, ...], repeat: int) -> tuple[float | None, ...]:
    """The rate order of repeat ``repeat``: the configured order started at index ``repeat % len(rates)``.

    A server warms up over a sweep, so a fixed ascending order always serves the high rates warm;
    rotating gives every rate every position over ``len(rates)`` repeats (the order is in the case's
    spec and record: ``ServingLoad.request_rates_rps``). ``(1, 4, 16)`` in repeat 1 -> ``(4, 16, 1)``.
    """
    k = repeat % len(rates) if rates else 0
    return rates[k:] + rates[:k]


def _engine_options(w: WorkloadConfig) -> dict[str, Any]:
    """The workload's optional engine options as the API server gets them: the same ones ``vllm.LLM`` gets
    (``runners.incase.bench_one.optional_engine_kwargs``); prefix caching null = not passed."""

    return {"enable_prefix_caching": None, **optional_engine_kwargs(WorkloadSpec(**plain(w)))}


def build_spec(sc: ScheduledCase, *, model_dir: Path, run_dir: Path, python: str) -> ServingCaseSpec:
    """The ``ServingCaseSpec`` of a scheduled serving case (its phase's ``serving`` settings set); ``python`` runs
    the API server unless the phase names ``serving.server_command``."""
    c = sc.case
    w = c.workload
    s = c.serving
    assert s is not None  # a serving case has its phase's settings (runners.plan)
    p = CasePaths.of(run_dir, c.phase, sc.stem)
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
                         request_rates_rps=rotated(spec_rates(s.request_rates), sc.repeat)),
        slo=ServingSLO(ttft_ms=s.slo.ttft_ms, tpot_ms=s.slo.tpot_ms, attainment=s.slo.attainment),
        limits=ServingLimits(health_timeout_s=s.health_timeout_s, health_poll_s=s.health_poll_s,
                             rate_timeout_s=s.rate_timeout_s, stop_grace_s=s.stop_grace_s),
        server_command=tuple(s.server_command or (python, "-m", DEFAULT_SERVER_MODULE)),
        record_path=str(p.serving_record), requests_dir=str(p.out_dir), server_log_path=str(p.server_log))


def serving_argv(paths: CasePaths, python: str, command: Sequence[str] | None = None) -> tuple[str, ...]:
    """The argv of a serving case's process, reading its spec (``paths.serving_spec``): ``command`` (the run's
    ``serving_command``) or ``[python, -m, runners.incase.serving]``, then ``--case PATH --run-dir DIR``."""
    prefix = tuple(command) if command else (python, "-m", "runners.incase.serving")
    return (*prefix, "--case", str(paths.serving_spec), "--run-dir", str(paths.run_dir))
