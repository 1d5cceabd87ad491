"""What stops a serving case: one fault, the first one wins (``ServingFault`` in the case's record).

What is modelled: ``Fault``, the exception that carries a ``results_schema.records.serving.ServingFault`` out of
the sweep (``runners.incase.serving.driver``); the server's death during a rate (``server_died``); a rate whose
requests failed (``failed_requests_fault``, naming each request by its id, ``REQUEST_ID_PREFIX`` + its index).

What is deliberately not modelled: when each is raised (the driver, ``runners.incase.serving.rate_records``), how a
fault ends the case in the matrix (``runners.outcome.serving``).
"""

from __future__ import annotations

from typing import Any

from results_schema.records.case_outcome import ServingFaultCause
from results_schema.records.serving import ServingFault, ServingRequests
from runners.incase.serving.bench_args import REQUEST_ID_PREFIX


class Fault(Exception):
    """A serving fault (first one wins); carries the ``ServingFault`` fields."""

    def __init__(self, cause: ServingFaultCause, message: str, *, rate_index: int | None = None,
                 server_exit_code: int | None = None) -> None:
        super().__init__(message)
        self.fault = ServingFault(cause=cause, message=message, rate_index=rate_index,
                                  server_exit_code=server_exit_code)


def server_died(cp: Any, rc: int, rate_index: int) -> Fault:
    """``server_died``: the API server process ``cp`` exited with ``rc`` while rate ``rate_index`` ran."""
    return Fault("server_died", f"the API server (pid {cp.pid}) exited with code {rc} during rate {rate_index}",
                 rate_index=rate_index, server_exit_code=rc)


def failed_requests_fault(index: int, requests: ServingRequests) -> Fault | None:
    """``request_failed`` naming every failed request of a rate with its error (None when every request completed).

    A failed request has no TTFT, TPOT or output digest, so the rate's percentiles and its output comparison rest
    on fewer requests than the load asked for: the case fails rather than report them as if the load had run.
    The error is the last line of what vLLM's benchmark recorded (an HTTP reason, or an exception's traceback).
    """
    failed = [(i, r.error) for i, r in enumerate(requests.requests) if not r.success]
    if not failed:
        return None
    named = "; ".join(f"{REQUEST_ID_PREFIX}{i}: {_last_line(err) or 'no error text'}" for i, err in failed[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return Fault("request_failed", f"rate {index} ({requests.request_rate_rps or 'inf'} req/s): {len(failed)} of "
                 f"{len(requests.requests)} requests failed: {named}{more}", rate_index=index)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""

