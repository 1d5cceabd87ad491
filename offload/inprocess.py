"""In-process A/B rounds on CPU: the installed offloader's copies switched off (A) and on (B) between rounds.

What is modelled: a measurement of the copy share of one offload setting inside one CPU case process, where rounds
a few seconds apart share most of the host's state (its speed drifts over tens of seconds: fresh processes pair
poorly, rounds of one process pair well). The offloader stays installed in both modes, so the wrapped layers keep
the plain kernels, the forward hooks and the custom ops of :mod:`offload.ops`:

* ``B`` (:data:`COPIES`): normal prefetch: each offloaded layer's parameters are views into its static slot, filled
  by one copy per contiguous run before the layer runs (:mod:`offload.prefetch`);
* ``A`` (:data:`IN_PLACE`): copies off: each offloaded layer's parameters are views into the offloader's packed host
  buffer (``Wrapped.host``: the same bytes, shape, stride and dtype, read in place); the wait / refill ops run and
  return without issuing a copy (``CurrentPrefetchOffloader.in_place_skips`` counts them).

:func:`set_in_place` flips the mode between rounds: it first waits for every pending copy (``shutdown``, which
joins the copy stream; on CPU the copies are synchronous), then re-points every offloaded parameter. The slots are
not touched in ``A``, so a later ``B`` round resumes the ring where the last ``B`` round left it.

The order of the measured rounds (:func:`round_arms`): ABBA repeated (A B B A A B B A ...), so a host that drifts
linearly over four rounds moves both arms alike; pair ``k`` is rounds ``2k`` and ``2k + 1`` (one A and one B,
alternating which runs first). Designs (:data:`DESIGNS`): ``abba`` (the A/B measurement), ``aa`` and ``bb`` (A/A
controls: both rounds of every pair in the same mode, the arms still labelled by their ABBA position).

Deliberately not modelled, and why it is never the verdict of record: the ``A`` rounds read the offloader's host
buffer, not vLLM's own allocation of a plain baseline, and rounds of one process are not independent replicates of a
process (they share its memory layout and placement). On CUDA / NPU "in place" would mean reading pinned host memory
over the bus or keeping device copies, and graphs capture the copies: the switch refuses every device but CPU.
"""

from __future__ import annotations

from typing import Any

IN_PLACE = "A"
"""Arm / mode: copies off, parameters read in place from the host buffer."""

COPIES = "B"
"""Arm / mode: normal prefetch (copies on, parameters in the slots)."""

DESIGNS = ("abba", "aa", "bb")
"""In-process designs: ``abba`` (A/B), ``aa`` / ``bb`` (A/A controls in one mode)."""

ABBA = (IN_PLACE, COPIES, COPIES, IN_PLACE)
"""The repeating order of the arms over measured rounds."""


def check_design(design: str) -> str:
    """``design`` when it is one of :data:`DESIGNS`.

    Raises:
        ValueError: naming the value and the allowed ones.
    """
    if design not in DESIGNS:
        raise ValueError(f"in_process design {design!r} is not one of {', '.join(DESIGNS)}")
    return design


def round_arms(n: int) -> tuple[str, ...]:
    """Arm (``A`` / ``B``) of each of ``n`` measured rounds: ABBA repeated.

    Raises:
        ValueError: ``n`` not a multiple of 4 (whole ABBA blocks: the order cancels a linear drift only over a block).
    """
    if n < 0 or n % 4:
        raise ValueError(f"in-process rounds ({n}) must be a multiple of 4 (whole ABBA blocks)")
    return tuple(ABBA[i % 4] for i in range(n))


def round_modes(design: str, n: int) -> tuple[str, ...]:
    """Offloader mode of each of ``n`` measured rounds: the arm (``abba``), all ``A`` (``aa``) or all ``B`` (``bb``).

    Raises:
        ValueError: an unknown design or ``n`` not a multiple of 4.
    """
    arms = round_arms(n)
    if check_design(design) == "abba":
        return arms
    mode = IN_PLACE if design == "aa" else COPIES
    return tuple(mode for _ in arms)


def whole_blocks(rounds: int) -> int:
    """The smallest multiple of 4 that is ``>= rounds`` (and >= 4): measured rounds of an in-process case."""
    return max(4, -(-int(rounds) // 4) * 4)


def set_in_place(off: Any, in_place: bool) -> None:
    """Switch ``off`` (a ``CurrentPrefetchOffloader`` or ``SyncOffloader`` after ``post_init``) between rounds.

    Args:
        off: the installed offloader.
        in_place: True = mode ``A`` (copies off, parameters -> the packed host buffer); False = mode ``B``
            (normal prefetch, parameters -> their slots).

    Raises:
        ValueError: the offloader runs on a device other than CPU, on an asynchronous backend, or has not run
            ``post_init`` / wrapped nothing (naming what it found).
    """
    if off.device_type != "cpu" or off.backend is None or off.backend.asynchronous:
        kind = off.device_type or "none"
        raise ValueError(f"the in-process A/B switch is CPU only: this offloader runs on device {kind!r} "
                         f"(backend {getattr(off.backend, 'name', None)!r}); on CUDA/NPU in place would read host "
                         "memory over the bus and graphs capture the copies")
    if not off.post_init_called or not off.wrapped or off.buffer_pool is None:
        raise ValueError(f"the in-process A/B switch needs an offloader after post_init with wrapped layers "
                         f"(post_init {off.post_init_called}, wrapped {len(off.wrapped)})")
    from offload.host_storage import resolve  # imports torch (this module is imported before vLLM starts)

    off.shutdown()  # no copy in flight while the parameters move (CPU: copies are synchronous)
    pool = off.buffer_pool
    for w in off.wrapped:
        for name in w.param_names:
            resolve(w.module, name).data = w.host[name] if in_place else pool.view(w.slot, w.keys[name])
    off.in_place = bool(in_place)


def state(off: Any) -> dict[str, Any]:
    """``{"in_place": bool, "copies_issued": int, "in_place_skips": int}`` of ``off`` (what a round changed)."""
    return {"in_place": bool(off.in_place), "copies_issued": int(off.copies_issued),
            "in_place_skips": int(off.in_place_skips)}


def installed_offloader() -> Any:
    """The offloader vLLM installed in this process, when it is this package's (``current`` / ``sync``).

    Raises:
        ValueError: vLLM's global offloader is not ours (e.g. the engine core runs in another process, or the case
            does not offload).
    """
    from vllm.model_executor.offloader.base import get_offloader

    from offload.prefetch import CurrentPrefetchOffloader

    off = get_offloader()
    if not isinstance(off, CurrentPrefetchOffloader):
        raise ValueError(f"the in-process A/B switch needs this project's offloader in this process; vLLM's offloader "
                         f"here is {type(off).__name__} (the engine core must run in the case process: "
                         "VLLM_ENABLE_V1_MULTIPROCESSING=0)")
    return off


def worker_set_mode(worker: Any, mode: str) -> dict[str, Any]:
    """``LLM.collective_rpc`` target: switch the worker's installed offloader to ``mode`` (``A`` / ``B``).

    Args:
        worker: the vLLM worker (``collective_rpc`` passes it; unused: the offloader is process-global).
        mode: :data:`IN_PLACE` or :data:`COPIES`.

    Returns:
        :func:`state` after the switch.

    Raises:
        ValueError: an unknown mode, or as :func:`installed_offloader` / :func:`set_in_place`.
    """
    if mode not in (IN_PLACE, COPIES):
        raise ValueError(f"in-process mode {mode!r} is not {IN_PLACE!r} or {COPIES!r}")
    off = installed_offloader()
    set_in_place(off, mode == IN_PLACE)
    return state(off)


def worker_state(worker: Any) -> dict[str, Any]:
    """``LLM.collective_rpc`` target: :func:`state` of the worker's installed offloader."""
    return state(installed_offloader())
