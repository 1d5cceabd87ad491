"""Generated evaluation rows in the GSM8K and GPQA formats, with answers a small model can learn.

What is modelled: two tasks with known answers, drawn from one seeded ``random.Random``
(same seed -> same rows, byte for byte):

* ``gsm8k``: word problems of one addition or one subtraction of small whole numbers
  (operands 1..13, answers 1..24); the answer is one worked line and a final ``#### N``
  line (the columns ``question`` / ``answer`` of ``openai/gsm8k``).
* ``gpqa``: "which of these is the <category> <word>?" with that word and three words of
  three other categories as options (a reading task: find the named word, answer its letter) (GPQA Diamond's title-case columns ``Question``,
  ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``). The question text carries
  the asker's name and a phrasing, so the published protocol's option shuffle (seeded by
  the question text) varies from row to row.

The training set (``runners.models.answering_model``) and the held-out evaluation sets
(``write_eval_sets``, materialised through ``runners.incase.accuracy.materialize`` with a hash
manifest) come from this one generator with different seeds.

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

from results_schema.accuracy import DatasetEntry

NAMES = ("Anna", "Ben", "Carl", "Dana", "Emma", "Finn", "Gina", "Hugo", "Ivy", "Jack", "Kate", "Leo",
         "Mia", "Nick", "Olga", "Paul", "Rosa", "Sam", "Tina", "Ugo")
ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "cookies", "coins", "cards", "shells", "stamps",
         "eggs", "toys")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "fruit": ("apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "melon"),
    "animal": ("dog", "cat", "horse", "tiger", "rabbit", "mouse", "sheep", "goat", "lion", "zebra"),
    "color": ("red", "blue", "green", "yellow", "purple", "brown", "black", "white", "pink", "gray"),
    "tool": ("hammer", "saw", "drill", "wrench", "shovel", "rake", "chisel", "pliers", "axe", "file"),
    "vehicle": ("car", "bus", "truck", "train", "boat", "plane", "bicycle", "tram", "ship", "taxi"),
    "instrument": ("piano", "violin", "guitar", "drum", "flute", "trumpet", "harp", "cello", "organ", "banjo"),
    "metal": ("iron", "copper", "silver", "gold", "zinc", "tin", "lead", "nickel", "cobalt", "chrome"),
    "country": ("France", "Spain", "Italy", "Japan", "Brazil", "Canada", "Egypt", "Peru", "Chile", "Kenya"),
}
_CHOICE_PHRASES = (
    "{name} is sorting words into groups. Which of the following words is the {cat} {word}?",
    "{name} asks: which one of these is the {cat} {word}?",
    "Which of the following is the {cat} {word}, according to {name}?",
    "{name} wants to find the {cat} {word}. Which word should {name} pick?",
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
    """One GPQA-Diamond-format row (title-case columns); ``Correct Answer`` is the word of the asked category."""
    cats = rng.sample(sorted(CATEGORIES), 4)
    cat = cats[0]
    words = [rng.choice(CATEGORIES[c]) for c in cats]
    question = rng.choice(_CHOICE_PHRASES).format(name=rng.choice(NAMES), cat=cat, word=words[0])
    return {"Question": question, "Correct Answer": words[0], "Incorrect Answer 1": words[1],
            "Incorrect Answer 2": words[2], "Incorrect Answer 3": words[3], "Record ID": record_id,
            "High-level domain": "Synthetic", "Subdomain": cat}


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
