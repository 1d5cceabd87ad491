"""Slot ring: K = min(prefetch_step, M) slots, refill target = next user of the slot."""

from __future__ import annotations

import pytest

from offload import ring


@pytest.mark.parametrize("m", range(1, 10))
@pytest.mark.parametrize("step", range(1, 5))
def test_each_refill_targets_the_next_user_of_the_same_slot_in_execution_order(m, step):
    k = ring.num_slots(m, step)
    order = list(range(m)) * 3
    for pos, i in enumerate(order[:m]):
        nxt = ring.next_refill(i, m, step)
        assert ring.slot_of(nxt, m, step) == ring.slot_of(i, m, step)
        later_users = [j for j in order[pos + 1 :] if ring.slot_of(j, m, step) == ring.slot_of(i, m, step)]
        assert nxt == later_users[0]
    assert k <= m


@pytest.mark.parametrize("m", range(1, 10))
@pytest.mark.parametrize("step", range(1, 5))
def test_simulated_passes_never_refill_an_unconsumed_slot(m, step):
    resident = {}  # slot -> (module, consumed)
    for j in ring.initial_loads(m, step):
        s = ring.slot_of(j, m, step)
        assert s not in resident
        resident[s] = (j, False)
    for _ in range(4):
        for i in range(m):
            s = ring.slot_of(i, m, step)
            assert resident[s] == (i, False)
            resident[s] = (i, True)
            nxt = ring.next_refill(i, m, step)
            assert resident[ring.slot_of(nxt, m, step)][1]
            resident[ring.slot_of(nxt, m, step)] = (nxt, False)


def test_prefetch_step_larger_than_module_count_uses_one_slot_per_module():
    assert ring.num_slots(3, 4) == 3
    assert [ring.next_refill(i, 3, 4) for i in range(3)] == [0, 1, 2]


def test_module_count_not_divisible_by_prefetch_step_wraps_to_the_slot_head():
    # M=5, step=2: slots 0,1,0,1,0 -> module 4 (slot 0) refills module 0, module 3 refills 1
    assert [ring.next_refill(i, 5, 2) for i in range(5)] == [2, 3, 4, 1, 0]


def test_rejects_prefetch_step_below_one_and_bad_index():
    with pytest.raises(ValueError, match=r"offload_prefetch_step \(0\) must be >= 1"):
        ring.num_slots(3, 0)
    with pytest.raises(ValueError, match=r"module index \(3\) must be in 0..2"):
        ring.next_refill(3, 3, 1)
