"""Step time of a prefetch offloader from its event protocol: an event model and closed-form bounds.

What is modelled. A forward step runs ``num_layers`` layers of ``t_layer`` seconds each on the
compute stream (``t_layer = t_base / num_layers``, ``t_base`` the un-offloaded step). Wrapped
module ``i`` (the ``i``-th offloaded layer) waits until its bytes are in its slot; after it ran,
its slot is refilled with the next user (the protocol's ring). Copies take ``c = b / BW`` seconds
each and run one at a time in issue order (one copy stream, one copy engine). A refill starts when
its slot's last reader has finished and the copy engine is free. The step boundary depends on
the protocol:

* ``captured_join`` (upstream's, and ours without external events) under CUDA graphs, and any
  protocol when the step ends with a device-wide synchronisation: the step ends only when every
  copy issued in it is done, so the refill whose consumer is in the next step is not overlapped;
* ``crossing`` (ours), and eager steps timed on the compute stream only: the step ends with its
  last layer; copies carry over into the next step up to their consumer.
* ``deferred`` (ours in graphs, whenever the host waits for a step's output before it replays the
  next one, as vLLM's synchronous loop waits for the sampled tokens and the GPU check's timed loop
  does): the refill whose consumer is in the next step is issued by the host in
  ``sync_prev_onload`` before the next replay, so it starts with the next step, not when its
  slot's last reader ends (``deferred_boundary``; with a device-wide sync per step together with
  ``joined_boundary``). The copy engine then idles over the layers after the last offloaded one:
  with one slot and copies longer than the compute between offloaded layers the step is
  ``M_c * (c + t_layer) + tail * t_layer``, ``tail`` the layers after the last offloaded layer
  (0 when the last layer is offloaded, as at every point of the H200 table but G = 8, where
  28 = 3 * 8 + 4 leaves layers 24..27 after layer 23). A host that runs ahead of the device
  (async scheduling) issues the refill while the step still runs: then the crossing boundary
  above applies.

Ring: :mod:`offload.ring` (vLLM 0.32's ``_get_next_prefetch_index`` picks the same targets, so
upstream's protocol has the same refills); ``skip_resident``: a slot that serves one module is
never refilled (ours), else every refill is copied, also a module onto itself (upstream's, and
ours before the skip).

:func:`simulate_step_s` returns the steady-state step time (mean of steps 20..39 of a simulated
run). :func:`bound_step_s` is the closed-form lower bound for a crossing boundary: ``M_c`` modules
copied per step (modules whose slot serves more than one module; all ``M`` without the skip),
with one slot ``max(t_base, M_c * (c + t_layer))`` (the slot cannot be refilled while its layer
runs), with more slots ``max(t_base, M_c * c)``: while a layer runs the copy engine serves another
slot, so in the steady state it never idles (the event model reaches this; the ``+ t_layer`` of a
first estimate, ``M_c * c + t_layer``, is the latency of one step alone, not the period). For a
joined or deferred boundary the bound is the event model.

Not modelled: host launch overhead (eager steps are launch-bound: ``t_base`` then measures the
host, not the device), copy/compute bandwidth contention, uneven layer times.
"""

from __future__ import annotations

from offload import ring

WARMUP_STEPS = 20
MEASURED_STEPS = 20


def boundary(copy_protocol: str, mode: str, step_sync: str) -> dict[str, bool]:
    """``joined_boundary`` / ``deferred_boundary`` of a run (module docstring).

    Args:
        copy_protocol: ``captured_join``, ``crossing``, ``synchronous`` or ``compute_stream``.
        mode: ``eager``, ``graph`` or ``compile`` (compile: no graphs, as eager).
        step_sync: ``stream`` or ``device``.
    """
    device = step_sync == "device"
    if mode != "graph":  # eager refills are issued inline, after their slot's last reader
        return {"joined_boundary": device, "deferred_boundary": False}
    if copy_protocol == "crossing":  # the owed refill waits for the host's next sync_prev_onload
        return {"joined_boundary": device, "deferred_boundary": True}
    return {"joined_boundary": True, "deferred_boundary": False}


def copied_per_step(m: int, prefetch_step: int, skip_resident: bool) -> int:
    """Modules copied each step: with ``skip_resident`` those whose slot serves more than one module, else all."""
    if not skip_resident:
        return m
    return sum(1 for i in range(m) if ring.next_refill(i, m, prefetch_step) != i)


def simulate_step_s(num_layers: int, offloaded: list[int] | tuple[int, ...], t_base: float, copy_s: float,
                    prefetch_step: int = 1, *, skip_resident: bool = True, joined_boundary: bool = False,
                    deferred_boundary: bool = False) -> float:
    """Steady-state seconds per step of the event model (module docstring).

    Args:
        num_layers: layers per step (all of them, offloaded or not).
        offloaded: indices of the offloaded layers (sorted ascending).
        t_base: un-offloaded step seconds.
        copy_s: seconds per layer copy (``bytes_per_layer / bandwidth``).
        prefetch_step: ``offload_prefetch_step``.
        skip_resident: a slot serving one module is never refilled.
        joined_boundary: the step ends only when every copy issued in it is done.
        deferred_boundary: a refill into the first user of its slot (consumer in the next step)
            starts with the next step instead of after its slot's last reader.

    Raises:
        ValueError: ``num_layers < 1``, a negative time or an offloaded index out of range.
    """
    if num_layers < 1 or t_base < 0 or copy_s < 0 or prefetch_step < 1:
        raise ValueError(f"num_layers ({num_layers}) >= 1, t_base ({t_base}) and copy_s ({copy_s}) >= 0 and "
                         f"prefetch_step ({prefetch_step}) >= 1 required")
    if any(not 0 <= x < num_layers for x in offloaded):
        raise ValueError(f"offloaded layers {list(offloaded)} must lie in 0..{num_layers - 1}")
    m = len(offloaded)
    if m == 0:
        return t_base
    nxt = [ring.next_refill(i, m, prefetch_step) for i in range(m)]
    initial = ring.initial_loads(m, prefetch_step)
    module_of = {layer: i for i, layer in enumerate(sorted(offloaded))}
    t_layer = t_base / num_layers
    ready = [0.0 if i in initial else float("inf") for i in range(m)]
    copy_free = 0.0
    t = 0.0
    starts: list[float] = []
    deferred: list[int] = []
    for _ in range(WARMUP_STEPS + MEASURED_STEPS):
        starts.append(t)
        for j in deferred:  # issued by the host before this step's replay
            copy_free = max(t, copy_free) + copy_s
            ready[j] = copy_free
        deferred.clear()
        for layer in range(num_layers):
            i = module_of.get(layer)
            if i is None:
                t += t_layer
                continue
            t = max(t, ready[i]) + t_layer
            j = nxt[i]
            if j == i and skip_resident:
                continue  # the slot serves only this module
            if deferred_boundary and j < i:
                deferred.append(j)
                continue
            copy_free = max(t, copy_free) + copy_s
            ready[j] = copy_free
        if joined_boundary:
            t = max(t, copy_free)
    return (t - starts[WARMUP_STEPS]) / MEASURED_STEPS


def bound_step_s(num_layers: int, offloaded: list[int] | tuple[int, ...], t_base: float, copy_s: float,
                 prefetch_step: int = 1, *, skip_resident: bool = True, joined_boundary: bool = False,
                 deferred_boundary: bool = False) -> float:
    """Closed-form bound of a step (module docstring); the event model for a joined or deferred boundary.

    Raises:
        ValueError: as :func:`simulate_step_s`.
    """
    if joined_boundary or deferred_boundary:
        return simulate_step_s(num_layers, offloaded, t_base, copy_s, prefetch_step, skip_resident=skip_resident,
                               joined_boundary=joined_boundary, deferred_boundary=deferred_boundary)
    m = len(offloaded)
    if m == 0:
        return t_base
    mc = copied_per_step(m, prefetch_step, skip_resident)
    if mc == 0:
        return t_base
    t_layer = t_base / num_layers
    if min(prefetch_step, m) == 1:
        return max(t_base, mc * (copy_s + t_layer))
    return max(t_base, mc * copy_s)
