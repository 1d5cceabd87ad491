"""Device-backend logic through a fake stream/event boundary (tests/offload/fakes.py).

Claims, for every count of wrapped modules M in 1..9 and prefetch_step in 1..4, over
several forward passes, with wrapped layers alone and interleaved with resident layers:
the compute stream waits on the right module's copy-done event before each wrapped layer,
no slot is refilled while the module that owns it has not yet run, and each layer sees
exactly its own weights whether the side-stream copies run as early (eager) or as late
(lazy) as the events allow.
"""

from __future__ import annotations

import pytest
import torch

from offload.prefetch import CurrentPrefetchOffloader, SyncOffloader
from offload import ring
from tests.offload.fakes import FakeBackend, ProbeLayer

PASSES = 3


def build(num_layers: int, group_size: int, num_in_group: int, step: int, mode: str, cls=CurrentPrefetchOffloader):
    log: list = []
    fake = FakeBackend(mode)
    off = cls(group_size, num_in_group, step, backend_factory=lambda device: fake)
    layers = off.wrap_modules(ProbeLayer(i, log) for i in range(num_layers))
    # what weight processing would do after loading: nothing here; post_init packs + hooks
    off.post_init()
    return off, fake, layers, log


def run_passes(layers, log, passes: int = PASSES):
    x = torch.zeros(())
    for _ in range(passes):
        for layer in layers:
            x = layer(x)
    return x


def expected_output(num_layers: int, passes: int = PASSES) -> float:
    per_pass = sum(8 * (i + 1) - 3 * (i + 1) for i in range(num_layers))
    return float(per_pass * passes)


GRID = [(m, s) for m in range(1, 10) for s in range(1, 5)]


@pytest.mark.parametrize("mode", ["eager", "lazy"])
@pytest.mark.parametrize(("m", "step"), GRID)
@pytest.mark.parametrize("interleaved", [False, True], ids=["all_wrapped", "interleaved"])
def test_every_layer_sees_its_own_weights_for_every_module_count_and_prefetch_step(m, step, mode, interleaved):
    num_layers, g = (2 * m, 2) if interleaved else (m, 1)
    off, fake, layers, log = build(num_layers, g, 1, step, mode)
    assert len(off.wrapped) == m
    out = run_passes(layers, log)
    assert float(out) == expected_output(num_layers)
    for _, layer, _, w, b in log:
        assert (w, b) == (layer + 1, -(layer + 1)), f"layer {layer} read another module's weights"
    assert off.fallback_loads == 0


@pytest.mark.parametrize(("m", "step"), GRID)
def test_compute_waits_on_the_right_event_before_each_wrapped_layer(m, step):
    off, fake, layers, log = build(m, 1, 1, step, "lazy")
    event_of = {w.done_event.id: w.index for w in off.wrapped}
    # interleave the forward log into the trace to see what happened right before each layer
    merged: list[tuple] = []
    trace_len = 0
    x = torch.zeros(())
    for _ in range(PASSES):
        for i, layer in enumerate(layers):
            before = len(fake.trace)
            x = layer(x)
            window = fake.trace[before:]
            # the first wait in this call must be compute waiting on module i's done event
            waits = [t for t in window if t[0] == "wait_event" and t[1] == "compute"]
            assert waits, f"module {i}: compute stream never waited"
            assert event_of[waits[0][2]] == i, f"module {i}: waited on module {event_of[waits[0][2]]}'s event"
            # and that wait came before any copy issued after the layer ran (the refill)
            first_wait = window.index(waits[0])
            assert all(t[0] != "copy" for t in window[:first_wait])
    del merged, trace_len


@pytest.mark.parametrize(("m", "step"), GRID)
def test_no_slot_is_refilled_before_its_current_owner_has_run(m, step):
    off, fake, layers, log = build(m, 1, 1, step, "eager")
    k = ring.num_slots(m, step)
    slot_ptr = {w.index: w.runs[0][0].data_ptr() for w in off.wrapped}
    owner: dict[int, tuple[int, bool]] = {}  # slot ptr -> (module, has run since load)
    index_of_ptr_copy: list[int] = []

    # replay: post_init's initial loads are in the trace already; walk trace + forwards in order
    def on_copy(module: int) -> None:
        ptr = slot_ptr[module]
        prev = owner.get(ptr)
        assert prev is None or prev[1], f"slot of module {module} refilled before module {prev[0]} ran"
        owner[ptr] = (module, False)

    # initial loads
    copies = [t for t in fake.trace if t[0] == "copy"]
    initial = ring.initial_loads(m, step)
    assert len(copies) == len(initial)
    for j in initial:
        on_copy(j)
    x = torch.zeros(())
    for _ in range(PASSES):
        for i, layer in enumerate(layers):
            before = len(fake.trace)
            x = layer(x)
            ptr = slot_ptr[i]
            assert owner[ptr][0] == i, f"module {i} ran while its slot held module {owner[ptr][0]}"
            owner[ptr] = (i, True)
            new_copies = [t for t in fake.trace[before:] if t[0] == "copy"]
            nxt = ring.next_refill(i, m, step)
            if nxt == i:  # the slot serves only module i: never copied again
                assert new_copies == []
                owner[ptr] = (i, False)
                continue
            assert len(new_copies) == 1
            on_copy(nxt)
            index_of_ptr_copy.append(new_copies[0][2])
    assert len({slot_ptr[w.index] for w in off.wrapped}) == k


@pytest.mark.parametrize(("m", "step"), GRID)
def test_refill_copy_is_ordered_after_the_layer_by_a_fork_event(m, step):
    off, fake, layers, log = build(m, 1, 1, step, "lazy")
    x = torch.zeros(())
    for i, layer in enumerate(layers):
        before = len(fake.trace)
        x = layer(x)
        window = fake.trace[before:]
        if ring.next_refill(i, m, step) == i:
            assert not [t for t in window if t[0] == "copy"]  # a slot serving one module is loaded once
            continue
        copy_at = next(n for n, t in enumerate(window) if t[0] == "copy")
        # record(fork on compute) -> wait_event(copy stream, fork) -> copy -> record(done on copy)
        rec = window[copy_at - 2]
        wait = window[copy_at - 1]
        assert rec[0] == "record" and rec[2] == "compute"
        assert wait[0] == "wait_event" and wait[1].startswith("copy") and wait[2] == rec[1]
        assert window[copy_at + 1][0] == "record" and window[copy_at + 1][2].startswith("copy")


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_static_buffers_hold_min_of_prefetch_step_and_module_count_slots(step):
    for m in range(1, 10):
        off, *_ = build(m, 1, 1, step, "eager")
        per_module = off.wrapped[0].offloaded_bytes
        k = min(step, m)
        assert off.buffer_pool.num_slots == k
        assert off.evidence_state()["static_buffer_bytes"] == k * off.buffer_pool.arena_bytes
        assert off.buffer_pool.arena_bytes >= per_module


def test_out_of_order_execution_falls_back_to_a_synchronous_load_instead_of_stale_weights():
    off, fake, layers, log = build(4, 1, 1, 2, "lazy")
    x = layers[2](torch.zeros(()))  # slot of module 2 still holds module 0
    assert log[-1][3] == 3.0
    assert off.fallback_loads == 1


@pytest.mark.parametrize("mode", ["eager", "lazy"])
@pytest.mark.parametrize("m", range(1, 10))
def test_sync_reference_loads_each_layer_on_the_compute_stream_right_before_it_runs(m, mode):
    off, fake, layers, log = build(m, 1, 1, 3, mode, cls=SyncOffloader)
    assert off.buffer_pool.num_slots == 1
    assert not [t for t in fake.trace if t[0] == "copy"]  # nothing prefetched
    out = run_passes(layers, log)
    assert float(out) == expected_output(m)
    copies = [t for t in fake.trace if t[0] == "copy"]
    assert copies and all(t[1] == "compute" for t in copies)
    assert off._slot_owner == [None]  # released in finally


def test_graph_capture_protocol_skips_pre_capture_waits_and_joins_in_capture_prefetches():
    off, fake, layers, log = build(3, 1, 1, 1, "lazy")
    off.sync_prev_onload()
    fake.is_capturing = lambda: True  # type: ignore[method-assign]
    before = len(fake.trace)
    layers[0](torch.zeros(()))  # module 0 was loaded before capture: no wait inside capture
    window = fake.trace[before:]
    first_copy = next(n for n, t in enumerate(window) if t[0] == "copy")
    assert not [t for t in window[:first_copy] if t[0] == "wait_event" and t[1] == "compute"]
    assert off.wrapped[1].in_capture
    off.join_after_forward()
    assert fake.trace[-1][0] == "wait_event" and fake.trace[-1][2] == off.wrapped[1].done_event.id
    assert not off.wrapped[1].in_capture


def test_shutdown_joins_the_copy_stream():
    off, fake, layers, log = build(3, 1, 1, 2, "lazy")
    off.shutdown()
    assert ("synchronize", off.copy_stream.name) in fake.trace
    assert not off.copy_stream.queue
