"""A few examples of each task as real text: question, gold, the baseline's reply beside each offload case's.

What is modelled: for the first :data:`SAMPLE_EXAMPLES` rows of a task, the question text of the data row (the
``question`` column, any spelling: ``Question`` in GPQA Diamond's title case), the gold answer and, per compared
case, the generated text, the parsed answer, whether it is correct and whether its generated token ids equal the
baseline's (``output_token_sha256``). The baseline is its first run; an offload case with several repeats is shown
by its first run. Texts are cut to :data:`QUESTION_CHARS` / :data:`REPLY_CHARS` characters (``truncated`` says
so). :func:`sample_lines` writes them as Markdown table rows (``|``, ``<``, ``>`` and line breaks escaped); the
HTML report (``analysis.report.html``) escapes them with ``html.escape``.

What is deliberately not modelled: the full prompt after the chat template (its SHA-256 is in the examples file),
GPQA's option texts, examples beyond the first few (the examples JSONL holds every row).
"""

from __future__ import annotations

from collections.abc import Sequence

from results_schema.records.accuracy import AccuracyExample, AccuracyResult, SampleExample, SampleReply, Task

SAMPLE_EXAMPLES = 3
"""Examples shown per task."""
QUESTION_CHARS = 300
"""Longest question text kept (characters)."""
REPLY_CHARS = 400
"""Longest reply text kept (characters)."""

CaseRows = tuple[AccuracyResult, list[AccuracyExample] | None]


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``(text, False)`` when it fits in ``limit`` characters, else its first ``limit - 1`` and ``…`` and True."""
    return (text, False) if len(text) <= limit else (text[:limit - 1] + "…", True)


def question_text(row: dict[str, object]) -> str:
    """The row's question column (``question`` / ``Question`` / ``QUESTION``); empty when there is none."""
    for key, value in row.items():
        if key.strip().lower() == "question" and isinstance(value, str):
            return value
    return ""


def _reply(result: AccuracyResult, ex: AccuracyExample, base: AccuracyExample) -> SampleReply:
    text, truncated = cut(ex.output_text, REPLY_CHARS)
    return SampleReply(label=result.label, implementation=result.implementation, output_text=text,
                       truncated=truncated, parsed=ex.parsed, correct=ex.correct,
                       identical_to_baseline=ex.output_token_sha256 == base.output_token_sha256)


def task_samples(task: Task, base: CaseRows, others: Sequence[CaseRows],
                 count: int = SAMPLE_EXAMPLES) -> tuple[SampleExample, ...]:
    """The first ``count`` examples of ``task``: baseline reply first, then one reply per offload label.

    Args:
        task: the task all the cases ran.
        base: the first baseline run and its examples (None when its examples file was unusable: no samples).
        others: the comparable offload runs and their examples, in report order; a label's later repeats and
            runs without usable examples are left out.
        count: examples to take (fewer when the task has fewer).

    Returns:
        One :class:`SampleExample` per example, in row order.
    """
    base_result, base_rows = base
    if base_rows is None:
        return ()
    shown: dict[str, tuple[AccuracyResult, list[AccuracyExample]]] = {}
    for result, rows in others:
        if rows is not None and result.label not in shown:
            shown[result.label] = (result, rows)
    out = []
    shown_ids = [(r, {x.example_id: x for x in rows}) for r, rows in shown.values()]  # paired by example, not row
    for ex in base_rows[:count]:
        question, q_cut = cut(question_text(ex.row), QUESTION_CHARS)
        replies = [_reply(base_result, ex, ex)]
        replies += [_reply(r, by_id[ex.example_id], ex) for r, by_id in shown_ids if ex.example_id in by_id]
        out.append(SampleExample(task=task, index=ex.index, example_id=ex.example_id, question=question,
                                 question_truncated=q_cut, gold=ex.gold, replies=tuple(replies)))
    return tuple(out)


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: ``\\``, ``|``, ``<``, ``>``, ``&`` escaped, line breaks as ``<br>``."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    return "<br>".join(text.splitlines()) if text else "(empty)"


def _answer(parsed: str | None) -> str:
    return "unparsable" if parsed is None else md_cell(parsed)


def sample_lines(samples: Sequence[SampleExample]) -> list[str]:
    """Markdown: one table of the sampled examples, a row per example and case (question and gold on its first)."""
    if not samples:
        return []
    lines = ["## Examples (first rows of each task: baseline beside offload)", "",
             "| task | # | question | gold | case | reply | parsed | correct | identical to baseline |",
             "|---|---:|---|---:|---|---|---:|---|---|"]
    for s in samples:
        for k, r in enumerate(s.replies):
            head = (f"| {s.task} | {s.index} | {md_cell(s.question)} | {md_cell(s.gold)} " if k == 0
                    else "| | | | ")
            same = "(baseline)" if k == 0 else ("yes" if r.identical_to_baseline else "NO")
            lines.append(f"{head}| {md_cell(r.label)} | {md_cell(r.output_text)} | {_answer(r.parsed)} | "
                         f"{'yes' if r.correct else 'no'} | {same} |")
    return lines + [""]
