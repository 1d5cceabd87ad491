"""The reports' example tables: question, gold, the baseline's reply beside each offload case's, escaped."""

from __future__ import annotations

from analysis.accuracy.samples import cut, md_cell, question_text, sample_lines
from analysis.report.html import accuracy_section
from results_schema.records.accuracy import AccuracyVerification, SampleExample, SampleReply


def _reply(label: str, text: str, parsed: str | None, *, same: bool = True) -> SampleReply:
    return SampleReply(label=label, implementation="baseline" if label == "baseline" else "current", output_text=text,
                       truncated=False, parsed=parsed, correct=parsed == "8", identical_to_baseline=same)


def _report(*samples: SampleExample) -> AccuracyVerification:
    return AccuracyVerification(mode="limited", mode_note="LIMITED", limit=100, run_dir="/r", passed=True, cases=(),
                                checks=(), samples=samples)


SAMPLE = SampleExample(task="addition", index=0, example_id="row-0", question="What is 7 + 1?",
                       question_truncated=False, gold="8",
                       replies=(_reply("baseline", "7 + 1 = 8\nThe answer is 8.", "8"),
                                _reply("current_g2_n1", "<script>x</script> | 9", "9", same=False)))


def test_html_shows_each_example_baseline_beside_offload_escaped() -> None:
    page = accuracy_section([("summary/accuracy-verification.json", _report(SAMPLE))])
    table = page[page.index('<table id="accuracy-samples-summary/accuracy-verification.json">'):]
    assert "<h3>Examples: baseline beside offload</h3>" in page and "<script>" not in page
    assert ("<tr><td>addition</td><td class=\"num\">0</td><td>What is 7 + 1?</td><td>8</td><td>baseline</td>"
            "<td>7 + 1 = 8<br>The answer is 8.</td><td>8</td><td>yes</td><td>(baseline)</td></tr>") in table
    assert ("<tr><td></td><td></td><td></td><td></td><td>current_g2_n1</td>"
            "<td>&lt;script&gt;x&lt;/script&gt; | 9</td><td>9</td><td>no</td><td>NO</td></tr>") in table


def test_html_and_markdown_leave_out_the_table_without_samples() -> None:
    assert "accuracy-samples" not in accuracy_section([("a.json", _report())])
    assert sample_lines(()) == []


def test_markdown_rows_escape_table_syntax_and_mark_unparsable() -> None:
    unparsable = SAMPLE.model_copy(update={"replies": (_reply("baseline", "", None),)})
    lines = sample_lines((SAMPLE, unparsable))
    assert lines[2].startswith("| task | # | question | gold | case | reply | parsed | correct |")
    assert lines[4] == "| addition | 0 | What is 7 + 1? | 8 | baseline | 7 + 1 = 8<br>The answer is 8. | 8 | yes | (baseline) |"
    assert lines[5] == "| | | | | current_g2_n1 | &lt;script&gt;x&lt;/script&gt; \\| 9 | 9 | no | NO |"
    assert lines[6] == "| addition | 0 | What is 7 + 1? | 8 | baseline | (empty) | unparsable | no | (baseline) |"
    assert md_cell("a`b\\c") == "a\\`b\\\\c"


def test_long_texts_are_cut_and_the_question_column_is_found_in_any_case() -> None:
    assert cut("x" * 500, 300) == ("x" * 299 + "…", True) and cut("short", 300) == ("short", False)
    assert question_text({"Question": "Which?", "Correct Answer": "4"}) == "Which?"
    assert question_text({"answer": "#### 1"}) == ""
