"""``accuracy-verification.csv``: the accuracy verifier's cases as a table (one row per case x task).

What is modelled: the rows of ``AccuracyVerification.cases`` (``results_schema.records.accuracy_report.CaseSummary``)
in report order, with vLLM's offload parameter names, written next to the JSON and Markdown reports by
``analysis.accuracy.verifier.write_report``. ``accuracy`` and ``drop_vs_baseline`` are fractions (0.01 = 1
percentage point), printed with ``repr`` precision; ``verdict`` is ``pass`` or ``fail`` (any failed check of
that case and task); ``judged_by`` is how the task's offload cases were judged (``identity`` when the
baseline runs agree or there is one, ``noise_floor`` when they disagree); ``paired_lost``, ``paired_gained`` and
``mcnemar_p`` are the paired exact McNemar comparison of a case judged against the noise floor (empty otherwise). The file is derived from the JSON report, so ``python -m results_schema check``
does not check it (no dispatch entry: a directory walk skips it).

What is deliberately not modelled: the checks (``analysis.accuracy.verifier``), the report's check list.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from results_schema.records.accuracy import AccuracyVerification, CaseSummary
from results_schema.codec.files import write_text_atomic

REPORT_CSV = "accuracy-verification.csv"

CSV_COLUMNS = ("label", "implementation", "offload_group_size", "offload_num_in_group", "offload_prefetch_step",
               "offload_backend", "task", "num_examples", "correct", "accuracy", "drop_vs_baseline", "paired_lost",
               "paired_gained", "mcnemar_p", "verdict", "judged_by")
"""Header of the CSV, in column order."""


def paired_cell(c: CaseSummary) -> str:
    """``lost / gained (p = ...)`` for a case judged against the noise floor, else ``-``."""
    if c.mcnemar_p is None:
        return "-"
    return f"{c.paired_lost} / {c.paired_gained} (p = {c.mcnemar_p:.4g})"


def _blank(value: int | None) -> str:
    return "" if value is None else str(value)


def render_csv(report: AccuracyVerification) -> str:
    """The CSV text (header + one row per ``report.cases`` entry, ``\\n`` line ends)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    judged = {a.task: a.judged_by for a in report.baselines}
    for c in report.cases:
        writer.writerow([c.label, c.implementation, c.offload_group_size, c.offload_num_in_group,
                         c.offload_prefetch_step, c.offload_backend, c.task, c.num_examples, c.correct,
                         repr(c.accuracy), repr(c.drop_vs_baseline), _blank(c.paired_lost), _blank(c.paired_gained),
                         "" if c.mcnemar_p is None else repr(c.mcnemar_p), c.verdict, judged.get(c.task, "")])
    return buf.getvalue()


def write_csv(path: Path, report: AccuracyVerification) -> Path:
    """Write :func:`render_csv` to ``path`` atomically; returns ``path``."""
    write_text_atomic(path, render_csv(report))
    return path
