"""The engine path of a bench case: its offload setting goes to vLLM's engine arguments as configured.

What is modelled: a case with ``engine_validates: true`` (the smoke experiment's
``engine_invalid_g2_n3``). The bench process skips its own pre-check
(``offload.selection.check_offload_setting``, which refuses ``offload_num_in_group >
offload_group_size`` before vLLM is imported, exit 2) and builds ``vllm.LLM`` with the
setting, so what is tested is what the engine itself does with it. The engine path has
three outcomes, each written as one marker line in the case log:

* the engine constructor raises: ``ENGINE_REJECTED <json>`` with the exception's qualified
  type, its message (lines joined by `` | ``), the innermost frame outside pydantic where it
  was raised (``raised_in``, ``module:line function``) and that module's top-level package
  (``component``: ``vllm`` for vLLM's own config validation, ``offload`` for this project's
  factory, ``vllm_ascend``...), then the exception propagates (traceback, non-zero exit).
  ``runners.outcome.bench`` makes it a ``CaseFailure`` of type ``engine_rejected`` whose message
  is :func:`rejection_message`, so an ``expect_error`` can name the component, the type and
  the message (an unrelated crash does not match);
* the engine accepts a setting the project's check refuses: ``ENGINE_ACCEPTED_INVALID <json>``
  and :class:`EngineAcceptedInvalid` is raised before anything is measured (failure type
  ``engine_accepted_invalid``: a finding, never an expected rejection);
* the engine accepts a valid setting: the case runs as any other.

vLLM 0.32.0 (CPU) rejects N > G in the front-end process, in
``EngineArgs.create_engine_config`` (``vllm/engine/arg_utils.py``) building
``vllm.config.offload.OffloadConfig``, whose pydantic validator raises
``pydantic_core.ValidationError: 1 validation error for OffloadConfig`` / ``Value error,
offload_num_in_group (3) must be <= offload_group_size (2)``: before the engine-core process
starts, so no offloader factory (vLLM's or this project's) runs.

What is deliberately not modelled: accuracy and serving cases (the plan refuses the flag there).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from offload.selection import check_offload_setting
from results_schema.records.case import CaseSpec

REJECTED = "ENGINE_REJECTED "
ACCEPTED_INVALID = "ENGINE_ACCEPTED_INVALID "
_SKIPPED_PACKAGES = ("pydantic", "pydantic_core", "importlib", "functools", "contextlib")


class EngineAcceptedInvalid(RuntimeError):
    """The engine built a model with an offload setting the project's check refuses."""


def project_verdict(case: CaseSpec) -> str | None:
    """The project's own check of the case's setting: its ``ValueError`` message, None when valid."""
    o = case.offload
    try:
        check_offload_setting(case.implementation, o.offload_group_size, o.offload_num_in_group,
                              o.offload_prefetch_step, o.offload_backend)
    except ValueError as exc:
        return str(exc)
    return None


def raised_in(tb: TracebackType | None) -> tuple[str, str]:
    """``(component, "module:line function")`` of the innermost frame outside pydantic / importlib.

    ``component`` is the frame's top-level package (``vllm``, ``offload``, ``__main__``);
    ``("unknown", "")`` without a traceback.
    """
    found = ("unknown", "")
    while tb is not None:
        frame = tb.tb_frame
        module = str(frame.f_globals.get("__name__", "?"))
        if module.split(".")[0] not in _SKIPPED_PACKAGES:
            found = (module.split(".")[0], f"{module}:{tb.tb_lineno} {frame.f_code.co_name}")
        tb = tb.tb_next
    return found


def _one_line(text: str) -> str:
    return " | ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())


def build(ctor: Callable[..., Any], kwargs: Mapping[str, Any], case: CaseSpec) -> Any:
    """Build the engine with ``ctor(**kwargs)`` on the engine path; print the marker line of the outcome.

    Raises:
        Exception: whatever ``ctor`` raised (after ``ENGINE_REJECTED``).
        EngineAcceptedInvalid: ``ctor`` returned although :func:`project_verdict` refuses the setting.
    """
    ours = project_verdict(case)
    try:
        engine = ctor(**kwargs)
    except Exception as exc:
        component, where = raised_in(exc.__traceback__)
        info = {"component": component, "raised_in": where,
                "error_type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": _one_line(str(exc)),
                "project_check": ours}
        print(REJECTED + json.dumps(info, sort_keys=True), file=sys.stderr, flush=True)
        raise
    if ours is not None:
        print(ACCEPTED_INVALID + json.dumps({"project_check": ours}, sort_keys=True), file=sys.stderr, flush=True)
        raise EngineAcceptedInvalid(f"the engine accepted an offload setting the project refuses: {ours}")
    return engine


@dataclass(frozen=True)
class EngineOutcome:
    """What the case log says about the engine path: ``engine_rejected`` or ``engine_accepted_invalid``."""

    failure_type: str
    message: str


def rejection_message(info: Mapping[str, Any]) -> str:
    """``engine rejected the offload setting (component C, raised in W): TYPE: MESSAGE``."""
    return (f"engine rejected the offload setting (component {info.get('component')}, raised in "
            f"{info.get('raised_in')}): {info.get('error_type')}: {info.get('message')}")


def _marker(log_text: str, prefix: str) -> dict[str, Any] | None:
    for line in log_text.splitlines():
        m = re.search(re.escape(prefix) + r"(\{.*\})\s*$", line)
        if m:
            try:
                data = json.loads(m.group(1))
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def engine_outcome(log_text: str) -> EngineOutcome | None:
    """The engine path's outcome named in a case log (first marker line), None without one."""
    accepted = _marker(log_text, ACCEPTED_INVALID)
    if accepted is not None:
        return EngineOutcome("engine_accepted_invalid", "the engine accepted an offload setting the project's "
                             f"check refuses ({accepted.get('project_check')}): no engine-side rejection")
    rejected = _marker(log_text, REJECTED)
    if rejected is not None:
        return EngineOutcome("engine_rejected", rejection_message(rejected))
    return None
