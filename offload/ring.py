"""Static-buffer slot ring of the prefetch offloader (pure integers, no torch).

``M`` wrapped modules run in order ``0..M-1`` on every forward pass and share
``K = min(prefetch_step, M)`` buffer slots: module ``i`` lives in slot ``i % K``.
When module ``i`` has finished, its slot is free and the *next user of that slot in
circular execution order* is refilled:

* ``i + K`` if ``i + K < M`` (same pass),
* otherwise ``i % K`` (the slot's first user, in the next pass).

This is correct for every ``M >= 1`` and ``prefetch_step >= 1``, including ``M`` not
divisible by ``K`` and ``prefetch_step > M``. Upstream vLLM (0.32,
``_get_next_prefetch_index``) allocates ``prefetch_step`` slots even when
``prefetch_step > M`` and then refills ``(i + step) % M``, a module that is already
resident in another slot (a redundant copy into a buffer that may be in use); the
known public bug class is a slot refilled before its current owner ran. Here
``K <= M`` always, and the property "a slot is never refilled before its current owner
ran" is checked by tests for ``M`` in 1..9 and ``prefetch_step`` in 1..4.

Not modelled: modules running out of order (the offloader detects that at run time and
falls back to a synchronous load of the module).
"""

from __future__ import annotations


def num_slots(module_count: int, prefetch_step: int) -> int:
    """Slots per buffer key: ``min(prefetch_step, module_count)`` (0 when nothing is wrapped).

    Raises:
        ValueError: ``prefetch_step < 1`` or ``module_count < 0``.
    """
    if prefetch_step < 1:
        raise ValueError(f"offload_prefetch_step ({prefetch_step}) must be >= 1")
    if module_count < 0:
        raise ValueError(f"module_count ({module_count}) must be >= 0")
    return min(prefetch_step, module_count)


def slot_of(index: int, module_count: int, prefetch_step: int) -> int:
    """Slot of wrapped module ``index``: ``index % K``."""
    return index % num_slots(module_count, prefetch_step)


def next_refill(index: int, module_count: int, prefetch_step: int) -> int:
    """Module to copy into module ``index``'s slot once ``index`` has run.

    Returns:
        ``index + K`` when that is ``< module_count``, else ``index % K``.

    Raises:
        ValueError: ``index`` outside ``0..module_count-1``.
    """
    if not 0 <= index < module_count:
        raise ValueError(f"module index ({index}) must be in 0..{module_count - 1}")
    k = num_slots(module_count, prefetch_step)
    nxt = index + k
    return nxt if nxt < module_count else index % k


def initial_loads(module_count: int, prefetch_step: int) -> tuple[int, ...]:
    """Modules loaded in ``post_init`` before the first forward: ``0..K-1``."""
    return tuple(range(num_slots(module_count, prefetch_step)))


def official_ascend_next_refill(index: int, module_count: int, prefetch_step: int) -> int:
    """vLLM-Ascend 0.23's refill target (``NPUPrefetchOffloader._hook_module_forward``):
    ``(index + prefetch_step) % module_count``, into slot ``target % prefetch_step``.

    Kept for evidence: :func:`official_ascend_violations` predicts where official reads
    another module's weights. (vLLM 0.32's CUDA ``_get_next_prefetch_index`` falls back to
    ``index % prefetch_step`` when the target would change slot, as :func:`next_refill` does.)
    """
    return (index + prefetch_step) % module_count


def official_ascend_violations(module_count: int, prefetch_step: int) -> list[tuple[int, int, int]]:
    """Refills that overwrite a slot before its resident module ran, in one steady-state pass.

    Simulates vLLM-Ascend 0.23's schedule: ``prefetch_step`` slots (its pool allocates
    ``prefetch_step`` even when ``M`` is smaller), module ``j`` in slot ``j % prefetch_step``,
    initial loads ``0..min(step, M)-1``, after module ``i`` runs the refill of
    :func:`official_ascend_next_refill`. Two passes are simulated; the second is returned.

    Returns:
        ``(after_module, refilled_module, evicted_module)`` for every refill whose slot still
        held a module that had not run since it was loaded (``[]`` when the ring is safe,
        e.g. ``M`` a multiple of ``prefetch_step``).

    Raises:
        ValueError: ``module_count < 1`` or ``prefetch_step < 1``.
    """
    if module_count < 1 or prefetch_step < 1:
        raise ValueError(f"module_count ({module_count}) and prefetch_step ({prefetch_step}) must be >= 1")
    resident: dict[int, tuple[int, bool]] = {}  # slot -> (module, ran since loaded)
    for j in range(min(prefetch_step, module_count)):
        resident[j % prefetch_step] = (j, False)
    out: list[tuple[int, int, int]] = []
    for p in range(2):
        for i in range(module_count):
            resident[i % prefetch_step] = (i, True)
            nxt = official_ascend_next_refill(i, module_count, prefetch_step)
            slot = nxt % prefetch_step
            prev = resident.get(slot)
            if p == 1 and prev is not None and not prev[1] and prev[0] != nxt:
                out.append((i, nxt, prev[0]))
            resident[slot] = (nxt, False)
    return out
