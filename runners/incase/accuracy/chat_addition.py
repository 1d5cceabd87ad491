"""Protocol ``chat-addition-v1``: this project's protocol for the task ``addition`` (generated single-digit sums).

What is modelled: ``qwen-chat-v1``'s GSM8K rendering and number parsing applied, unchanged, to the rows of
``eval_datasets/addition`` (``What is a + b?``, answer ``a + b = s\\n#### s``): system and user turn from the
frozen spec (the same texts as ``qwen-chat-v1``'s GSM8K spec, question as stored), gold and reply read by
:func:`runners.incase.accuracy.qwen_chat.parse_gsm8k` (last number after the last ``####``, decimal normal
form). The texts, pattern and their statement live in ``results_schema.records.protocols`` (``chat-addition-v1``).

What is deliberately not modelled: anything the task's rows do not need (options, fractions, ``\\boxed{}``).
"""

from __future__ import annotations

from results_schema.records.accuracy import ProtocolSpec
from runners.incase.accuracy.datasets import DatasetError, GSM8KRow, Row
from runners.incase.accuracy.qwen_chat import parse_gsm8k, render_number
from runners.incase.accuracy.rendered import Rendered


def parse(spec: ProtocolSpec, text: str) -> str | None:
    """The normalised last number after the last ``####`` of ``text``; None = unparsable."""
    return parse_gsm8k(spec, text)


def render(spec: ProtocolSpec, row: Row) -> Rendered:
    """System turn, user turn and gold of one addition row (``qwen-chat-v1``'s GSM8K rendering).

    Raises:
        DatasetError: the row is not a question/answer row, or its answer has no number.
    """
    if spec.task == "addition" and isinstance(row, GSM8KRow):
        return render_number(spec, row)
    raise DatasetError(f"row {row.index}: a {type(row).__name__} cannot be rendered for task {spec.task}")
