"""A run's whole plan as recorded: ``plan.json`` with what its choose decisions and sequential looks added.

What is modelled: ``expand_saved_plan``: the runner writes ``plan.json`` before the first case (a sequential phase:
its first look's blocks; a choose run: before its verify phase is decided); ``choose-decisions.jsonl`` adds the cases
a choice decided (``results_schema.records.choice.with_decided``), ``sequential-decisions.jsonl`` and
``serving-looks.jsonl`` the blocks each look added (``with_looks``, ``with_serving_looks``). ``analysis validate``
counts against it, and so does the serving summary (``analysis.serving.summary``).

What is deliberately not modelled: whether the lines agree with the processes (``analysis validate``'s checks
``choice`` and ``sequential``).
"""

from __future__ import annotations

from pathlib import Path

from results_schema.codec.io import read_json, read_jsonl
from results_schema.records.choice import FILE_NAME as DECISIONS, ChoiceDecision, with_decided
from results_schema.records.plan import PLAN_FILE, RunPlan
from results_schema.records.sequential import read_looks, with_looks
from results_schema.records.serving_looks import read_serving_looks, with_serving_looks


def expand_saved_plan(run_dir: Path) -> RunPlan | None:
    """The run's ``plan.json`` (``results_schema.records.plan.RunPlan``, written by the runner) with what was decided
    while the run went (module docstring).

    Returns None when the run directory has no ``plan.json`` (runs from before the runner
    wrote it, or not written by ``runners.matrix``): expected counts are then unknown.

    Raises:
        RecordError, StrictJSONError: ``plan.json`` or a decision or look line does not validate (a ``ValueError``).
    """
    path = run_dir / PLAN_FILE
    if not path.is_file():
        return None
    plan = read_json(path, RunPlan)
    decisions = run_dir / DECISIONS  # a choose run: the verify phase's cases as decided while it ran
    plan = with_decided(plan, read_jsonl(decisions, ChoiceDecision)) if decisions.is_file() else plan
    plan = with_looks(plan, read_looks(run_dir))  # a sequential phase: the blocks its looks added
    return with_serving_looks(plan, read_serving_looks(run_dir))  # a sequential serving phase: the same
