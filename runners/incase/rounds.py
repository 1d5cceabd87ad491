"""The measured rounds of a bench process: the plain loop and the in-process A/B loop.

What is modelled:

* ``run_rounds``: warm-up rounds, then measured rounds until ``window_reached`` (both the minimum round count and the
  minimum measured seconds, like MLPerf LoadGen's ``min_query_count`` and ``min_duration``);
* ``run_inprocess_rounds``: the same window in whole ABBA blocks of two arms (``offload.inprocess``): before every
  round the offloader is switched to the round's mode (``A`` copies off, ``B`` normal prefetch) and its copy count is
  read after it; pair ``k`` (rounds ``2k``, ``2k + 1``) runs the same prompts, so greedy decoding must give both
  rounds of a pair the same tokens (``InProcessRounds.tokens_identical``). Warm-up rounds alternate ``B`` and ``A``
  (both modes warm when there are two or more).

What is deliberately not modelled: the engine (the caller's ``one_round``), statistics (analysis).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from offload.inprocess import round_arms, round_modes, whole_blocks
from results_schema.records.inprocess import InProcessRounds
from results_schema.records.models import RoundResult

OneRound = Callable[[int], tuple[float, list[list[int]], int]]
"""``g -> (elapsed_s, generated ids per request, prompt tokens)``; ``g`` picks the round's prompts."""


def digest_ids(outputs: Sequence[Sequence[int]]) -> str:
    """SHA-256 of generated token ids, request by request (order-sensitive)."""
    h = hashlib.sha256()
    for ids in outputs:
        h.update(",".join(str(int(t)) for t in ids).encode())
        h.update(b";")
    return h.hexdigest()


def window_reached(rounds: int, measured_s: float, min_rounds: int, min_measured_s: float) -> bool:
    """True when the measured window has at least ``min_rounds`` rounds and ``min_measured_s`` seconds.

    The measurement loop runs rounds until this holds (both minima, like MLPerf LoadGen's
    ``min_query_count`` and ``min_duration``), so a fast case is measured for a stated time
    instead of a handful of sub-second rounds.
    """
    return rounds >= min_rounds and measured_s >= min_measured_s


def round_result(index: int, elapsed: float, gen: list[list[int]], prompt_tokens: int) -> RoundResult:
    """The record of measured round ``index`` (tokens counted from ``gen``, tok/s = tokens / ``elapsed`` s)."""
    n_out = sum(len(x) for x in gen)
    return RoundResult(index=index, elapsed_s=elapsed, prompt_tokens=prompt_tokens, output_tokens=n_out,
                       throughput_tok_s=n_out / elapsed, token_digest=digest_ids(gen))


def run_rounds(one_round: OneRound, *, warmup_rounds: int, min_rounds: int, min_measured_s: float,
               window_start: Callable[[], object] | None = None) -> list[RoundResult]:
    """Run warmup rounds, then measured rounds until ``window_reached``.

    Args:
        one_round: ``g -> (elapsed_s, generated ids per request, prompt tokens)`` for global round ``g``
            (warmup rounds first; ``g`` also picks the round's prompts).
        warmup_rounds: rounds run and discarded.
        min_rounds: minimum measured rounds (``workload.measured_rounds``).
        min_measured_s: minimum measured seconds (``workload.min_measured_s``), summed over measured rounds.
        window_start: called once, after the warmup rounds and just before the first measured round (the
            host reading at the start of the measured window, ``runners.incase.host_load.read_host``).

    Returns:
        The measured rounds (index 0..n-1), ``n >= min_rounds``; the last one is the first that
        brought the window to ``min_measured_s`` when more than ``min_rounds`` were needed.
    """
    rounds: list[RoundResult] = []
    measured_s = 0.0
    g = 0
    while g < warmup_rounds or not window_reached(len(rounds), measured_s, min_rounds, min_measured_s):
        if g == warmup_rounds and window_start is not None:
            window_start()
        elapsed, gen, prompt_tokens = one_round(g)
        g += 1
        if g <= warmup_rounds:
            continue
        rounds.append(round_result(len(rounds), elapsed, gen, prompt_tokens))
        measured_s += elapsed
    return rounds


def run_inprocess_rounds(one_round: OneRound, set_mode: Callable[[str], dict[str, Any]], *, design: str,
                         warmup_rounds: int, min_rounds: int, min_measured_s: float,
                         window_start: Callable[[], object] | None = None) -> tuple[list[RoundResult], InProcessRounds]:
    """Warm-up rounds, then measured rounds in whole ABBA blocks until ``window_reached``.

    Args:
        one_round: as ``run_rounds``; called with ``g = warmup_rounds + k`` for both rounds of pair ``k`` (warm-up
            round ``j``: ``g = j``).
        set_mode: ``mode -> state``: switch the offloader to ``A`` / ``B`` and return its state
            (``offload.inprocess.state``: ``in_place``, ``copies_issued``); called before every round and once after
            the last.
        design: ``abba``, ``aa`` or ``bb`` (``offload.inprocess.DESIGNS``).
        warmup_rounds, min_measured_s, window_start: as ``run_rounds``.
        min_rounds: minimum measured rounds, rounded up to whole ABBA blocks (``offload.inprocess.whole_blocks``).

    Returns:
        ``(rounds, in_process)``: the measured rounds (a multiple of 4) and what each did.

    Raises:
        ValueError: an unknown design.
        RuntimeError: the offloader did not report the mode it was switched to.
    """
    for j in range(warmup_rounds):
        _switch(set_mode, "B" if j % 2 == 0 else "A")
        one_round(j)
    if window_start is not None:
        window_start()
    rounds: list[RoundResult] = []
    modes: list[str] = []
    copies: list[int] = []
    measured_s = 0.0
    need = whole_blocks(min_rounds)
    while len(rounds) % 4 or not window_reached(len(rounds), measured_s, need, min_measured_s):
        i = len(rounds)
        mode = round_modes(design, i + 4 - i % 4)[i]
        before = _switch(set_mode, mode)
        elapsed, gen, prompt_tokens = one_round(warmup_rounds + i // 2)
        after = set_mode(mode)
        rounds.append(round_result(i, elapsed, gen, prompt_tokens))
        modes.append(mode)
        copies.append(int(after["copies_issued"]) - int(before["copies_issued"]))
        measured_s += elapsed
    same = all(rounds[k].token_digest == rounds[k + 1].token_digest for k in range(0, len(rounds), 2))
    return rounds, InProcessRounds.model_validate(dict(design=design, arms=round_arms(len(rounds)), modes=tuple(modes),
                                                      copies=tuple(copies), tokens_identical=same))


def _switch(set_mode: Callable[[str], dict[str, Any]], mode: str) -> dict[str, Any]:
    """``set_mode(mode)``, checking the offloader now reports that mode. Raises ``RuntimeError`` otherwise."""
    got = set_mode(mode)
    if bool(got["in_place"]) != (mode == "A"):
        raise RuntimeError(f"in-process switch to mode {mode}: the offloader reports in_place={got['in_place']}")
    return got


def overall_digest(rounds: Sequence[RoundResult], min_rounds: int) -> str:
    """SHA-256 over the per-round digests of the first ``min_rounds`` measured rounds.

    Every case of a run measures at least those rounds with the same prompts, while the number of
    extra rounds a minimum window adds depends on each case's speed: the greedy identity check
    (``analysis.validation.validate``) compares this prefix, so it compares like with like.
    """
    return hashlib.sha256("".join(r.token_digest for r in rounds[:min_rounds]).encode()).hexdigest()
