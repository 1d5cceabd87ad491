"""Registry of accuracy protocols: named, versioned, frozen specs (pure data, no vLLM / torch).

What is modelled: every protocol a run may select (``accuracy_protocol=`` of an accuracy
phase, ``--protocol`` of ``python -m runners.incase.accuracy``), per task, as a frozen
:class:`results_schema.records.accuracy.ProtocolSpec`. A result records the spec and its SHA-256;
the verifier (``analysis.accuracy.verifier``) checks a recorded spec against this registry and
refuses to compare cases whose spec hashes differ. The behaviour of each protocol lives in
``runners.incase.accuracy`` and reads its texts and regexes from here, so the hash covers them.

Registered:

* ``qwen-chat-v1`` (default): the published protocol of the Ascend offload report
  (Qwen2.5-1.5B-Instruct, GSM8K 953/1319, GPQA Diamond 47/198), exactly as defined in
  ``shared/cases/qwen-chat-v1.md``: answer-format prompts, seeded ``random.Random``
  option shuffle, last-number / leading-letter extraction, temperature 0 only,
  ``enforce_eager``, ``max_model_len`` 4096, memory utilisation 0.5.
* ``boxed-chat-v1``: this project's own protocol (``\\boxed{}`` answers, LaTeX-aware
  number normalisation, a per-option SHA-256 option order). Records of the earlier protocol
  registry call it ``qwen-chat-v1``; fractions and text written after the final answer are handled (see
  ``runners.incase.accuracy.scoring``).
* ``boxed-chat-v2``: the next version of the project's own protocol. GSM8K is ``boxed-chat-v1``'s rule unchanged;
  GPQA asks for at most one sentence of reasoning and the letter within ``\\boxed{}`` (``max_tokens`` 64 instead
  of 8, so a sentence fits) and reads the *final* answer rather than the first letter-like token: the last boxed
  letter, else the last stated choice (``final answer: C`` after a discussion, ``not A; the answer is C``, a
  correction at the end), else a reply that is only a letter; a hedge between options (``A or B, I am not
  sure``) is unparsable. ``boxed-chat-v1`` stays frozen (it reads ``The answer is \\boxed{C}`` as unparsable and
  ``Answer: A or B`` as A); ``tests/accuracy/data/gpqa_replies.json`` pins all three GPQA readings.

* ``chat-addition-v1``: this project's own protocol for the task ``addition`` (the generated single-digit
  sums of ``eval_datasets/addition``, ``What is a + b?``); not a published protocol, and the sums are not GSM8K.
  It reuses ``qwen-chat-v1``'s GSM8K rendering and number parsing unchanged (same texts, pattern, sampling
  and engine pins; only the protocol and task names differ, so its SHA-256 differs):

  - system turn: ``You are a precise math problem solver. Follow the requested answer format.``
  - user turn: ``Solve the following math word problem step by step. End your response with a separate final
    line exactly in this format: The answer is <number>. Do not write anything after the final answer
    line.`` + a blank line + ``Question:`` + newline + the row's question as stored (``What is 7 + 1?``);
    both rendered with the model's chat template (``add_generation_prompt=True``).
  - parsing (gold ``a + b = s\\n#### s`` and reply alike): the text after the last ``####`` (the whole reply
    when there is none); the last match of ``[+-]?\\d[\\d,]*(?:\\.\\d+)?``; commas dropped; decimal normal
    form (no exponent, no trailing zeros or dot). No number = unparsable (counted wrong).
  - greedy (temperature 0), at most 512 new tokens, ``enforce_eager``, ``max_model_len`` 4096, memory
    utilisation 0.5.

  The prompt is, byte for byte, what ``qwen-chat-v1``'s GSM8K rendering makes of these rows: the research
  probe that measured SmolLM2-135M-Instruct at 88/100 (0 unparsable; ``docs/measurements/smollm2-2026-12-04.md``)
  used exactly that rendering and parsing, so the number stands under this protocol.

Freezing: a spec never changes under its name. Any change (one character of a prompt,
one regex, one sampling value) is a new name or version; ``tests/accuracy`` pins every
registered spec's SHA-256, so an edit here fails the tests until it is given a new name.

What is deliberately not modelled: protocols defined at run time (a run can only select a
registered protocol).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from results_schema.records.accuracy import EngineSettings, ProtocolSpec, SamplingSettings

DEFAULT_PROTOCOL = "qwen-chat-v1"
"""Protocol used when a run does not select one."""

TASKS = ("gsm8k", "gpqa", "addition")
"""Every task a protocol may define (``results_schema.records.accuracy_types.Task``)."""


class UnknownProtocolError(ValueError):
    """A protocol name (or task) that is not registered; the message lists the registered ones."""


# ----------------------------------------------------------------------------- qwen-chat-v1

QWEN_NUMBER = r"[+-]?\d[\d,]*(?:\.\d+)?"
"""qwen-chat-v1 GSM8K: a signed number with optional thousands commas and decimal part (last match wins)."""

_LETTER_END = r"(?=$|[.,:;!?\n])"
QWEN_LETTER_PATTERNS = (
    r"(?:the\s+)?answer\s*(?:is|:)\s*(?:\(([A-D])\)|\[([A-D])\]|([A-D]))" + _LETTER_END,
    r"(?:\(([A-D])\)|\[([A-D])\])" + _LETTER_END,
    r"([A-D])" + _LETTER_END,
)
"""qwen-chat-v1 GPQA: tried in order with ``re.match`` (start-anchored), ``re.IGNORECASE``, on the stripped reply."""

QWEN_SHUFFLE = ("random.Random(int.from_bytes(hashlib.sha256(f'{seed}{question}'.encode('utf-8')).digest(), "
                "'big')).shuffle([correct, incorrect_1, incorrect_2, incorrect_3])")

_QWEN_ENGINE = EngineSettings(enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.5)

QWEN_NUMBER_SYSTEM = "You are a precise math problem solver. Follow the requested answer format."
"""qwen-chat-v1 GSM8K system turn (also chat-addition-v1's)."""
QWEN_NUMBER_USER = (
    "Solve the following math word problem step by step. End your response with a separate final line "
    "exactly in this format: The answer is <number>. Do not write anything after the final answer line."
    "\n\nQuestion:\n{question}"
)
"""qwen-chat-v1 GSM8K user turn template (also chat-addition-v1's)."""

_QWEN = {
    "gsm8k": ProtocolSpec(
        name="qwen-chat-v1",
        task="gsm8k",
        system_message=QWEN_NUMBER_SYSTEM,
        user_template=QWEN_NUMBER_USER,
        option_shuffle=None,
        shuffle_seed=None,
        chat_template="model",
        answer_extraction=(
            "qwen-chat-v1/gsm8k: text after the last '####' (whole text when none); last match of the pattern; "
            "commas dropped; decimal normal form (no exponent, no trailing zeros or dot); no match = unparsable"
        ),
        extraction_patterns=(QWEN_NUMBER,),
        sampling=SamplingSettings(temperature=0.0, max_tokens=512),
        engine=_QWEN_ENGINE,
    ),
    "gpqa": ProtocolSpec(
        name="qwen-chat-v1",
        task="gpqa",
        system_message="You are a precise expert multiple-choice question solver.",
        user_template=(
            "Select the single best answer to the following multiple-choice question. Return only one capital "
            "letter: A, B, C, or D. Do not include an explanation."
            "\n\nQuestion:\n{question}\n\nChoices:\nA. {A}\nB. {B}\nC. {C}\nD. {D}\n\nAnswer:"
        ),
        option_shuffle=QWEN_SHUFFLE,
        shuffle_seed="0",
        chat_template="model",
        answer_extraction=(
            "qwen-chat-v1/gpqa: reply stripped; patterns tried in order, start-anchored, case-insensitive; "
            "first match gives the letter, upper-cased; none = unparsable"
        ),
        extraction_patterns=QWEN_LETTER_PATTERNS,
        sampling=SamplingSettings(temperature=0.0, max_tokens=8),
        engine=_QWEN_ENGINE,
    ),
}

# ----------------------------------------------------------------------------- boxed-chat-v1

BOXED_CONTINUATION = (
    r"(?im)^[ \t>*#_]*(?:question|problem|q|human|user|instruction|example)(?:[ \t]*#?\d+)?[ \t]*[:.)]"
    r"|^[ \t>*#_]*(?:another|next|new)[ \t]+(?:question|problem|example)\b"
    r"|<\|(?:im_start|im_end|endoftext|eot_id|end)\|>"
)
"""boxed-chat-v1: where text the model keeps writing after its answer starts (a new turn, another example)."""
BOXED_NUMBER = (
    r"(?<![\w./])(?P<sign>[-+\u2212\u2013])?(?:[$\u20ac\u00a3]\s?)?"
    r"(?:(?P<whole>\d+)[ \t]+(?=\d+[ \t]*/[ \t]*\d))?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[ \t]*/[ \t]*(?P<den>\d+(?:\.\d+)?)(?![\d/]))?(?!\d)(?![ \t]*/[ \t]*\d)"
)
"""boxed-chat-v1: a number token; ``a/b`` is one token (a fraction), never one of its parts."""
BOXED_FRAC = r"(?:(?P<whole>\d+)\s*)?\\[dt]?frac\s*(?:\{\s*(?P<n1>-?\d+)\s*\}|(?P<n2>\d))\s*(?:\{\s*(?P<d1>-?\d+)\s*\}|(?P<d2>\d))"
"""boxed-chat-v1: LaTeX fraction, optionally a mixed number (``3\\frac{1}{2}`` = 3.5, ``\\frac12`` = 0.5)."""
BOXED_MARKERS = (r"####\s*(?P<tail>.*)", r"(?i:final answer|the answer)\s*(?:is|:|=)\s*(?P<tail>.*)")
BOXED_LETTER = (
    r"^\s*(?:[*_`#>]+\s*)*"
    r"(?P<prefix>(?i:(?:the\s+)?(?:correct\s+|final\s+|best\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:=-]?\s*))?"
    r"(?:[*_`]+\s*)*"
    r"(?:\((?P<paren>[A-Da-d])\)|\[(?P<bracket>[A-Da-d])\]"
    r"|(?P<bare>[A-D])(?=[.):,;*_`\]]|\s|$))"
)

_BOXED_ENGINE = EngineSettings(max_model_len=2048, dtype="bfloat16", enforce_eager=True,
                               enable_prefix_caching=False, max_num_seqs=64, seed=0)


def _boxed_sampling(max_tokens: int) -> SamplingSettings:
    """Greedy sampling of the boxed-chat protocols with every knob passed explicitly."""
    return SamplingSettings(temperature=0.0, max_tokens=max_tokens, top_p=1.0, top_k=0, seed=0)


_BOXED = {
    "gsm8k": ProtocolSpec(
        name="boxed-chat-v1",
        task="gsm8k",
        system_message="Please reason step by step, and put your final answer within \\boxed{}.",
        user_template="{question}",
        option_shuffle=None,
        shuffle_seed=None,
        chat_template="model",
        answer_extraction=(
            "boxed-chat-v1/gsm8k: cut at the first continuation (a new turn or example after the first line); "
            "then the last \\boxed{} (nested braces), else the last '#### N' / 'the answer is N' line, else the "
            "last number; fractions and mixed numbers are one value; LaTeX, currency, separators, sign normalised"
        ),
        extraction_patterns=(BOXED_CONTINUATION, BOXED_NUMBER, BOXED_FRAC, *BOXED_MARKERS),
        sampling=_boxed_sampling(512),
        engine=_BOXED_ENGINE,
    ),
    "gpqa": ProtocolSpec(
        name="boxed-chat-v1",
        task="gpqa",
        system_message=("You are answering a multiple-choice science question. "
                        "Reply with only the letter (A, B, C or D) of the correct option."),
        user_template="{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}\n\nAnswer with the letter only.",
        option_shuffle="sorted(range(4), key=lambda i: hashlib.sha256(f'{seed}\\x1f{question}\\x1f{i}'.encode()).digest())",
        shuffle_seed="0",
        chat_template="model",
        answer_extraction=(
            "boxed-chat-v1/gpqa: an explicit leading choice (optional markdown and 'Answer:'-style prefix); "
            "a bare letter must be upper case and not an article ('A bird'); none = unparsable"
        ),
        extraction_patterns=(BOXED_LETTER,),
        sampling=_boxed_sampling(8),
        engine=_BOXED_ENGINE,
    ),
}

# ----------------------------------------------------------------------------- boxed-chat-v2

BOXED_V2_BOXED_LETTER = r"\\(?:boxed|fbox)\s*\{\s*(?:\\text(?:bf)?\s*\{\s*)?[(\[]?\s*(?P<letter>[A-Da-d])\s*[)\]]?\s*\}?\s*\}"
"""boxed-chat-v2 GPQA: a boxed letter, ``\\boxed{C}``, ``\\boxed{(C)}``, ``\\boxed{\\text{C}}`` (the last one wins)."""
BOXED_V2_MARKER = (
    r"(?i:\b(?:final\s+answer(?:\s+is)?|(?:correct|best|right)\s+(?:answer|option|choice)(?:\s+is)?"
    r"|answer(?:\s+is|\s+would\s+be|\s+should\s+be)?|(?:option|choice)\s+is|i\s+(?:choose|chose|pick|select)"
    r"|i(?:'ll|\s+will)\s+go\s+with|correction|actually,?\s+it(?:'s|\s+is)))"
    r"\s*[:=\-]?\s*(?:[*_`]+\s*)*"
    r"(?:\((?P<paren>[A-Da-d])\)|\[(?P<bracket>[A-Da-d])\]|(?P<bare>[A-D])(?![A-Za-z]))"
)
"""boxed-chat-v2 GPQA: a stated choice (``Final answer: C``, ``the answer is (C)``, ``I choose C``, ``Correction:
D``); the last one in the reply wins."""
BOXED_V2_ONLY_LETTER = r"^\s*(?:[*_`#>]+\s*)*(?:\((?P<paren>[A-Da-d])\)|\[(?P<bracket>[A-Da-d])\]|(?P<bare>[A-D]))[.)]?\s*(?:[*_`]+)?\s*$"
"""boxed-chat-v2 GPQA: a reply that is only a letter (``C``, ``(C)``, ``**C.**``)."""
BOXED_V2_HEDGE = r"^\s*[)\]*_`]*\s*(?:,\s*)?(?:or|and/or|/)\s*(?:option\s+|choice\s+)?[(\[]?[A-D](?![A-Za-z])"
"""boxed-chat-v2 GPQA: right after the chosen letter, another option offered beside it (``A or B``, ``A/B``):
a hedge, unparsable."""

_BOXED_V2 = {
    # boxed-chat-v1's GSM8K rule, prompt, sampling and engine under the new name (by construction, not a copy)
    "gsm8k": ProtocolSpec(**{
        **dict(_BOXED["gsm8k"]),
        "name": "boxed-chat-v2",
        "answer_extraction": "boxed-chat-v2/gsm8k: boxed-chat-v1's GSM8K rule unchanged (" +
                             _BOXED["gsm8k"].answer_extraction.split(": ", 1)[1] + ")",
    }),
    "gpqa": ProtocolSpec(
        name="boxed-chat-v2",
        task="gpqa",
        system_message=("You are answering a multiple-choice science question. Think briefly, then give the letter "
                        "(A, B, C or D) of the one correct option within \\boxed{}."),
        user_template=("{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}\n\n"
                       "At most one sentence of reasoning, then your final answer as \\boxed{{X}}."),
        option_shuffle=_BOXED["gpqa"].option_shuffle,
        shuffle_seed="0",
        chat_template="model",
        answer_extraction=(
            "boxed-chat-v2/gpqa: cut at the first continuation; the final answer, not the first letter-like token: "
            "the last \\boxed{} letter, else the last stated choice ('final answer: X', 'the answer is (X)', "
            "'I choose X', 'correction: X'), else a reply that is only a letter; a letter offered beside another "
            "('A or B', 'A/B') or a box holding anything but one letter = unparsable"
        ),
        extraction_patterns=(BOXED_CONTINUATION, BOXED_V2_BOXED_LETTER, BOXED_V2_MARKER, BOXED_V2_ONLY_LETTER,
                             BOXED_V2_HEDGE),
        sampling=_boxed_sampling(64),
        engine=_BOXED_ENGINE,
    ),
}

# ----------------------------------------------------------------------------- chat-addition-v1

_ADDITION = {
    # qwen-chat-v1's GSM8K spec under this protocol's own name and task: the same system and user text, pattern,
    # sampling and engine by construction, not by a copy that could drift
    "addition": ProtocolSpec(**{
        **dict(_QWEN["gsm8k"]),  # validated again under the new name and task
        "name": "chat-addition-v1",
        "task": "addition",
        "answer_extraction": (
            "chat-addition-v1/addition (qwen-chat-v1's GSM8K rule): text after the last '####' (whole text when "
            "none); last match of the pattern; commas dropped; decimal normal form (no exponent, no trailing zeros "
            "or dot); no match = unparsable"
        ),
    }),
}

REGISTRY: Mapping[str, Mapping[str, ProtocolSpec]] = MappingProxyType({
    "qwen-chat-v1": MappingProxyType(_QWEN),
    "boxed-chat-v1": MappingProxyType(_BOXED),
    "boxed-chat-v2": MappingProxyType(_BOXED_V2),
    "chat-addition-v1": MappingProxyType(_ADDITION),
})
"""name -> task -> frozen spec."""


def registered_names() -> tuple[str, ...]:
    """Registered protocol names, sorted."""
    return tuple(sorted(REGISTRY))


def check_protocol(name: str) -> str:
    """Return ``name`` when it is registered.

    Raises:
        UnknownProtocolError: naming the value and the registered names.
    """
    if name not in REGISTRY:
        raise UnknownProtocolError(
            f"unknown accuracy protocol {name!r}; registered: {', '.join(registered_names())}")
    return name


def protocols_of(task: str) -> tuple[str, ...]:
    """Registered protocol names that define ``task``, sorted (empty for an unknown task)."""
    return tuple(name for name in registered_names() if task in REGISTRY[name])


def protocol_spec(name: str, task: str) -> ProtocolSpec:
    """The frozen spec of protocol ``name`` for ``task`` (a protocol defines only some of ``TASKS``).

    Raises:
        UnknownProtocolError: unknown protocol, or a task the protocol does not define (the message names the
            value, the protocol's tasks and the protocols that do define the task).
    """
    specs = REGISTRY[check_protocol(name)]
    if task not in specs:
        where = protocols_of(task)
        hint = (f"; task {task!r} is defined by protocol {', '.join(where)}" if where else
                f"; known tasks: {', '.join(TASKS)}")
        raise UnknownProtocolError(f"unknown task {task!r} for protocol {name!r}; expected one of {sorted(specs)}"
                                   + hint)
    return specs[task]


def default_protocol(task: str) -> str:
    """The protocol a ``task`` dataset is checked under when none is named: ``DEFAULT_PROTOCOL`` where it defines
    the task, else the first registered protocol that does.

    Raises:
        UnknownProtocolError: no registered protocol defines ``task``.
    """
    where = protocols_of(task)
    if not where:
        raise UnknownProtocolError(f"unknown task {task!r}; known tasks: {', '.join(TASKS)}")
    return DEFAULT_PROTOCOL if DEFAULT_PROTOCOL in where else where[0]
