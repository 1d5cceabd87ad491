"""Generated evaluation rows in the GSM8K and GPQA formats, with answers a small model can learn.

What is modelled: two tasks with known answers, drawn from one seeded ``random.Random``
(same seed -> same rows, byte for byte):

* ``gsm8k``: word problems of one addition or one subtraction of small whole numbers
  (operands 1..13, answers 1..24); the answer is one worked line and a final ``#### N``
  line (the columns ``question`` / ``answer`` of ``openai/gsm8k``).
* ``gpqa``: "which of these numbers is the largest?" with four distinct digits 1..9 as the
  options (GPQA Diamond's title-case columns ``Question``, ``Correct Answer``,
  ``Incorrect Answer 1..3``, ``Record ID``): the answer is computed from the options, so a
  model of this size can learn it (a rule, not a fact); every option is one token, so the
  prompt's layout is fixed. The question text carries the asker's name and a phrasing, so
  the published protocol's option shuffle (seeded by the question text) varies from row to
  row.

The training set (``runners.models.answering_model``) and the held-out evaluation sets
(``write_eval_sets``, materialised through ``runners.incase.accuracy.materialize`` with a hash
manifest) come from this one generator with different seeds; training skips every row
whose question (and, GPQA, option set) is a held-out row's (``held_out_keys``), so the
held-out rows are never seen in training.

A third set, ``single-digit-addition`` (``addition_rows``, ``write_addition_set``), task ``addition``: every sum
``a + b`` of two digits 0..9 (100 rows, ``What is a + b?``, order shuffled by ``random.Random(seed)``), in GSM8K's
columns (an open numeric answer, ``#### s``), scored under the protocol ``chat-addition-v1``; a pretrained 135M
instruct model (SmolLM2) answers it well above chance, where it fails the word problems and letter multiple
choice.

What is deliberately not modelled: anything of the real benchmarks' difficulty. These
sets exist so that an accuracy comparison can fail for a real reason (a model that
answers, whose answers an offload fault changes); a score on them says nothing about
GSM8K or GPQA.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

from results_schema.records.accuracy import DatasetEntry

NAMES = ("Anna", "Ben", "Carl", "Dana", "Emma", "Finn", "Gina", "Hugo", "Ivy", "Jack", "Kate", "Leo",
         "Mia", "Nick", "Olga", "Paul", "Rosa", "Sam", "Tina", "Ugo")
ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "cookies", "coins", "cards", "shells", "stamps",
         "eggs", "toys")
_CHOICE_PHRASES = (
    "{name} wrote four numbers on a card. Which number is the largest?",
    "{name} asks: which of these numbers is the largest?",
    "Which of the following numbers is the largest, according to {name}?",
    "{name} picks the largest number. Which one does {name} pick?",
)
TASKS = ("gsm8k", "gpqa")

EVAL_SEED = 1001
"""Seed of the committed held-out sets (training uses other seeds, ``runners.models.answering_model``)."""
EVAL_ROWS = 64
"""Rows per task of the committed held-out sets."""


def _pronoun(name: str) -> str:
    return "She" if name in ("Anna", "Dana", "Emma", "Gina", "Ivy", "Kate", "Mia", "Olga", "Rosa", "Tina") else "He"


def arithmetic_row(rng: random.Random) -> dict[str, object]:
    """One GSM8K-format row: ``{"question": str, "answer": "<worked line>\n#### N"}`` (one addition or subtraction)."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    who = _pronoun(name)
    if rng.randrange(2) == 0:
        a, b = rng.randint(1, 12), rng.randint(1, 12)
        question = f"{name} has {a} {item}. {who} buys {b} more {item}. How many {item} does {name} have now?"
        answer = f"{name} has {a} + {b} = {a + b} {item} now.\n#### {a + b}"
    else:
        a = rng.randint(2, 13)
        b = rng.randint(1, a - 1)
        question = f"{name} has {a} {item}. {who} gives {b} {item} to a friend. How many {item} does {name} have left?"
        answer = f"{name} has {a} - {b} = {a - b} {item} left.\n#### {a - b}"
    return {"question": question, "answer": answer}


def choice_row(rng: random.Random, record_id: str) -> dict[str, object]:
    """One GPQA-Diamond-format row (title-case columns): four distinct digits 1..9, ``Correct Answer`` the largest."""
    digits = rng.sample(range(1, 10), 4)
    best = max(digits)
    others = [d for d in digits if d != best]
    question = rng.choice(_CHOICE_PHRASES).format(name=rng.choice(NAMES))
    return {"Question": question, "Correct Answer": str(best), "Incorrect Answer 1": str(others[0]),
            "Incorrect Answer 2": str(others[1]), "Incorrect Answer 3": str(others[2]), "Record ID": record_id,
            "High-level domain": "Synthetic", "Subdomain": "largest number"}


def row_key(task: str, raw: dict[str, object]) -> tuple[str, ...]:
    """What makes two generated rows the same question: GSM8K question text; GPQA question and option set.

    (A GPQA row's shown option order is the protocol's, a function of the question text, so the set suffices.)
    """
    if task == "gsm8k":
        return (str(raw["question"]),)
    options = sorted(str(raw[k]) for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                                           "Incorrect Answer 3"))
    return (str(raw["Question"]), str(raw["Correct Answer"]), *options)


def held_out_keys(seed: int = EVAL_SEED, rows: int = EVAL_ROWS) -> dict[str, frozenset[tuple[str, ...]]]:
    """``task -> row_key`` of every held-out row (training skips rows with these keys)."""
    return {t: frozenset(row_key(t, r) for r in generate_rows(t, seed, rows)) for t in TASKS}


def generate_rows(task: str, seed: int, count: int) -> list[dict[str, object]]:
    """``count`` rows of ``task`` (``gsm8k`` or ``gpqa``) from ``random.Random(f"{task}-{seed}")``.

    Raises:
        ValueError: unknown task or ``count`` < 1.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {list(TASKS)}")
    if count < 1:
        raise ValueError(f"count ({count}) must be >= 1")
    rng = random.Random(f"{task}-{seed}")
    if task == "gsm8k":
        return [arithmetic_row(rng) for _ in range(count)]
    return [choice_row(rng, f"recSYN{seed}-{i:05d}") for i in range(count)]


def dataset_name(task: str) -> str:
    """Manifest entry name of the generated set of ``task`` (``gsm8k-synthetic`` / ``gpqa-synthetic``)."""
    return f"{task}-synthetic"


def write_eval_sets(out_dir: Path | str, *, seed: int = EVAL_SEED, rows: int = EVAL_ROWS,
                    tasks: Sequence[str] = TASKS) -> list[DatasetEntry]:
    """Generate each task's held-out rows and materialise them (JSONL + ``manifest.json`` entry).

    Goes through ``runners.incase.accuracy.materialize.materialize`` (``kind='fixture'``: the verifier runs
    in limited mode on them) with ``source='synthetic'`` and ``revision='synthetic-seed<seed>'``.

    Returns:
        The manifest entries written, in ``tasks`` order.
    """
    from runners.incase.accuracy.materialize import materialize

    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            src = Path(tmp) / f"{task}.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in generate_rows(task, seed, rows)), encoding="utf-8")
            entries.append(materialize(task, out_dir, from_file=src, revision=f"synthetic-seed{seed}",
                                       name=dataset_name(task), kind="fixture", source="synthetic"))
    return entries


ADDITION_SEED = 46
"""Seed of the committed ``single-digit-addition`` order (eval_datasets/addition)."""
ADDITION_NAME = "single-digit-addition"


def addition_rows(seed: int = ADDITION_SEED) -> list[dict[str, object]]:
    """All 100 GSM8K-format rows ``What is a + b?`` (a, b in 0..9), answer ``a + b = s\n#### s``, shuffled
    by ``random.Random(seed)``."""
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(seed).shuffle(pairs)
    return [{"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a, b in pairs]


def write_addition_set(out_dir: Path | str, *, seed: int = ADDITION_SEED) -> DatasetEntry:
    """Materialise ``addition_rows`` as ``single-digit-addition`` (task ``addition``, ``kind='fixture'``,
    ``source='generated'``, revision ``addition-seed<seed>``) with its ``manifest.json`` entry."""
    from runners.incase.accuracy.materialize import materialize

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "addition.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in addition_rows(seed)), encoding="utf-8")
        return materialize("addition", out_dir, from_file=src, revision=f"addition-seed{seed}", name=ADDITION_NAME,
                           kind="fixture", source="generated")
