"""What a case's offload evidence must show: one rule, checked live by the runner and offline by the validation.

What is modelled: ``evidence_problems`` compares one ``RuntimeEvidence`` with the case it describes
and returns every problem, in this order:

1. the evidence's ``implementation`` is the case's;
2. the offloader class is the implementation's (``EXPECTED_OFFLOADER_CLASS``; ``overlay``: the
   runtime's ``overlay_class``, written ``module.path:ClassName``; unknown: not checked);
3. G, N and ``offload_params`` (order ignored) are the requested ones; with offload requested,
   ``offload_prefetch_step`` too;
4. with offload requested: ``post_init`` ran (the weights were re-synced after loading), at least
   one module was wrapped and bytes were offloaded; without: nothing was wrapped or offloaded;
5. with offload requested: the selected layers are the selection rule's for the evidence's layer
   count (``select``: ``offload.selection.select_offload_layers``, passed in by the caller since
   this package imports no other of the project) and the layer count is ``config.json``'s
   (``config_layers``), each when given.

Offload is requested when the implementation is not ``baseline`` and G > 0 and N > 0.

The runner (``runners.outcome.case_checks.check_evidence``) stops at the first problem (the case's
``CaseFailure`` has its ``failure_type``); the validation (``analysis.validation.records.check_evidence``)
records every problem as an issue of its ``check`` with its ``code``.

What is deliberately not modelled: where the evidence comes from (sidecar file, log line) and
agreement between repeats of a label (offline only: it needs every repeat).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from results_schema.records.case_outcome import FailureType
from results_schema.records.models import RuntimeEvidence
from results_schema.records.identity import OffloadSetting

EXPECTED_OFFLOADER_CLASS: dict[str, re.Pattern[str]] = {
    "baseline": re.compile(r"^vllm\.model_executor\.offloader\.base\.NoopOffloader$"),
    "current": re.compile(r"^offload\.[\w.]*CurrentPrefetchOffloader$"),
    "sync": re.compile(r"^offload\.[\w.]*SyncOffloader$"),
    "official": re.compile(
        r"^(vllm\.model_executor\.offloader\.prefetch\.PrefetchOffloader"
        r"|vllm\.model_executor\.offloader\.uva\.UVAOffloader"
        r"|vllm_ascend\.[\w.]*NPUPrefetchOffloader)$"
    ),
}
"""Offloader class each implementation must show in its evidence (fully qualified name)."""

EvidenceCheck = Literal["evidence_agreement", "offloader_class", "non_empty_evidence"]


@dataclass(frozen=True)
class EvidenceProblem:
    """One way the evidence does not describe its case.

    Attributes:
        check: the validation check it belongs to (``analysis.validation.validate.CHECKS``).
        code: the validation issue code.
        failure_type: the runner's ``CaseFailure.failure_type``.
        message: what differs, with both values.
    """

    check: EvidenceCheck
    code: str
    failure_type: FailureType
    message: str


def expected_class(implementation: str, overlay_class: str | None) -> re.Pattern[str] | None:
    """The class pattern of an implementation (``overlay``: its ``overlay_class``); None = not checked."""
    if implementation == "overlay":
        return re.compile("^" + re.escape(overlay_class.replace(":", ".")) + "$") if overlay_class else None
    return EXPECTED_OFFLOADER_CLASS.get(implementation)


def offload_requested(implementation: str, setting: OffloadSetting) -> bool:
    """True when the case asks an offloader to move at least one layer."""
    return implementation != "baseline" and setting.enabled


def _agreement(ev: RuntimeEvidence, implementation: str, setting: OffloadSetting,
               overlay_class: str | None) -> list[EvidenceProblem]:
    out = []
    if ev.implementation != implementation:
        out.append(EvidenceProblem("evidence_agreement", "evidence_mismatch", "evidence_mismatch",
                                   f"implementation requested {implementation!r}, evidence shows {ev.implementation!r}"))
    pat = expected_class(implementation, overlay_class)
    if pat is not None and not pat.match(ev.offloader_class):
        out.append(EvidenceProblem("offloader_class", "wrong_offloader_class", "evidence_mismatch",
                                   f"implementation {implementation!r} ran offloader {ev.offloader_class!r}, "
                                   f"expected one matching {pat.pattern!r}"))
    pairs: list[tuple[str, object, object]] = [
        ("offload_group_size", setting.offload_group_size, ev.offload_group_size),
        ("offload_num_in_group", setting.offload_num_in_group, ev.offload_num_in_group),
        ("offload_params", tuple(sorted(setting.offload_params)), tuple(sorted(ev.offload_params)))]
    if offload_requested(implementation, setting):
        pairs.append(("offload_prefetch_step", setting.offload_prefetch_step, ev.offload_prefetch_step))
    out += [EvidenceProblem("evidence_agreement", "evidence_mismatch", "evidence_mismatch",
                            f"{name} requested {want!r}, evidence shows {got!r}")
            for name, want, got in pairs if want != got]
    return out


def _work(ev: RuntimeEvidence, implementation: str, setting: OffloadSetting) -> list[EvidenceProblem]:
    g, n = setting.offload_group_size, setting.offload_num_in_group
    if not offload_requested(implementation, setting):
        if ev.wrapped_count or ev.offloaded_bytes:
            return [EvidenceProblem("non_empty_evidence", "unexpected_offload_evidence", "evidence_mismatch",
                                    f"no offload requested but evidence shows {ev.wrapped_count} wrapped module(s), "
                                    f"{ev.offloaded_bytes} bytes")]
        return []
    out = []
    if not ev.post_init_called:
        out.append(EvidenceProblem("non_empty_evidence", "no_post_init", "no_offload_evidence",
                                   f"the offloader ({ev.offloader_class}) never ran post_init: its weights were not "
                                   "re-synced after loading, the evidence is rejected"))
    if ev.wrapped_count == 0 or ev.offloaded_bytes == 0:
        out.append(EvidenceProblem("non_empty_evidence", "empty_offload_evidence", "no_offload_evidence",
                                   f"offload requested (G={g}, N={n}) but the evidence shows {ev.wrapped_count} "
                                   f"wrapped module(s) and {ev.offloaded_bytes} offloaded bytes "
                                   f"(offloader {ev.offloader_class})"))
    return out


def _selection(select: Callable[[int, int, int], Sequence[int]] | None, num_layers: int,
               setting: OffloadSetting) -> tuple[int, ...] | None:
    if select is None:
        return None
    try:
        return tuple(select(num_layers, setting.offload_group_size, setting.offload_num_in_group))
    except ValueError:
        return None


def evidence_problems(ev: RuntimeEvidence, *, implementation: str, setting: OffloadSetting,
                      overlay_class: str | None = None,
                      select: Callable[[int, int, int], Sequence[int]] | None = None,
                      config_layers: int | None = None) -> list[EvidenceProblem]:
    """Every problem of ``ev`` as evidence of a case (the rule in the module docstring); [] = it describes it.

    Args:
        ev: the case's evidence.
        implementation: the case's implementation.
        setting: the requested offload setting.
        overlay_class: the runtime's ``overlay_class`` (``overlay`` cases); None = class not checked.
        select: the selection rule ``(num_layers, G, N) -> layers``; None = selection not checked (nor
            when it refuses G and N with ``ValueError``).
        config_layers: ``num_hidden_layers`` of the model's ``config.json``; None = not checked.
    """
    out = _agreement(ev, implementation, setting, overlay_class) + _work(ev, implementation, setting)
    if not offload_requested(implementation, setting):
        return out
    expected_layers = _selection(select, ev.num_layers, setting)
    if expected_layers is not None and tuple(ev.selected_layers) != expected_layers:
        out.append(EvidenceProblem("evidence_agreement", "selection_mismatch", "evidence_mismatch",
                                   f"evidence selected layers {list(ev.selected_layers)}, the selection rule gives "
                                   f"{list(expected_layers)} for {ev.num_layers} layers, "
                                   f"G={setting.offload_group_size}, N={setting.offload_num_in_group}"))
    if config_layers is not None and ev.num_layers != config_layers:
        out.append(EvidenceProblem("evidence_agreement", "num_layers_mismatch", "evidence_mismatch",
                                   f"evidence saw {ev.num_layers} layers, config.json has {config_layers}"))
    return out


def config_num_layers(model: str | Path | None) -> int | None:
    """``num_hidden_layers`` of ``<model>/config.json``: the ``config_layers`` both callers of
    :func:`evidence_problems` pass (the runner for every finished case, the validation for the run's model).

    Returns:
        The layer count; None when ``model`` is None or empty or not a directory with a readable ``config.json`` holding
        an integer ``num_hidden_layers`` (a hub name, a model the host cannot read): the check is then skipped.
    """
    if not model:
        return None
    try:
        n = json.loads((Path(model) / "config.json").read_text()).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) else None
