"""The evidence hook's independent cross-check of an offloader's claimed evidence (stand-alone).

Runs inside the case's engine process next to ``offload_evidence_hook`` (same directory,
imported without this package's ``runners``; only ``offload`` and the standard library).

Independent cross-check (fail-closed), before anything is written: at ``wrap_modules`` entry
the hook records, per position index, each module's parameter names and bytes
(``numel * element_size``) *before* the offloader sees the module (recorded in the tap
that passes the generator through, so modules are still handed over one at a time, exactly
as ``make_layers`` yields them: the offloader may move layer ``i`` to host before layer
``i+1`` exists). At publication the claimed evidence must agree with those observations:

* ``num_layers`` == modules observed; when G, N > 0, ``selected_layers`` ==
  ``select_offload_layers(observed, G, N)``;
* ``wrapped_layers`` are unique, in range, and equal the observed positions of the module
  objects the offloader itself holds as wrapped (ours: ``wrapped[*].module``; upstream
  prefetch: ``module_offloaders[*].module``); ``wrapped_count`` == that number; for G, N > 0
  every wrapped layer is a selected one;
* ``offloaded_bytes`` == sum over ``wrapped_layers`` of the observed bytes of parameters
  matching ``offload_params`` (``offload.matching.matches_offload_params`` with the
  ``wrap_modules`` prefix; all parameters when empty). Weight processing
  (``process_weights_after_loading``, e.g. quantised/repacked weights on some platforms, or
  deleted scales) may legitimately change what is offloaded after wrapping, so the claim is
  also accepted when it equals the same sum over the matching strided parameters the wrapped
  modules expose *at publication* (read from the modules, not from the offloader). Anything
  else is rejected. On CPU with unquantised weights both sums are equal (tiny model:
  295,936 bytes per layer).

A mismatch publishes nothing and prints ``OFFLOAD_EVIDENCE_ERROR evidence cross-check
failed: <claim>: expected ..., actual ...`` on stderr. ``NoopOffloader`` and unknown classes
(explicit empty evidence) are not cross-checked; UVA gets the layer and byte checks.
"""

from __future__ import annotations

from typing import Any, Sequence

ParamBytes = list[tuple[str, int]]
"""``[(parameter name, numel * element_size)]`` of one module."""


def param_bytes(module: Any) -> ParamBytes | None:
    """``[(name, numel * element_size)]`` of ``module``'s parameters; None if unreadable."""
    try:
        return [(n, int(p.numel()) * int(p.element_size())) for n, p in module.named_parameters()]
    except Exception:  # never raise into vLLM; the cross-check then fails closed
        return None


def live_param_bytes(module: Any) -> ParamBytes | None:
    """As :func:`param_bytes`, now, for strided parameters only (what weight processing left)."""
    import torch

    try:
        return [(n, int(p.numel()) * int(p.element_size())) for n, p in module.named_parameters()
                if getattr(p, "layout", torch.strided) == torch.strided]
    except Exception:
        return None


def held_modules(off: Any) -> list[Any] | None:
    """Module objects the offloader itself holds as wrapped; None when it exposes none."""
    if isinstance(getattr(off, "wrapped", None), list) and hasattr(off, "evidence_state"):
        return [getattr(w, "module", None) for w in off.wrapped]
    if hasattr(off, "module_offloaders"):
        return [getattr(mo, "module", None) for mo in off.module_offloaders]
    return None


def _check_selection(d: dict[str, Any], n_obs: int, g: int, n: int) -> str | None:
    from offload.selection import select_offload_layers

    if d.get("num_layers") != n_obs:
        return f"num_layers: expected {n_obs} (modules observed), actual {d.get('num_layers')!r}"
    selected = tuple(d.get("selected_layers") or ())
    if g > 0 and n > 0:
        try:
            want = select_offload_layers(n_obs, g, n)
        except ValueError as exc:
            return f"selected_layers: expected a valid selection for G={g}, N={n}, actual error {exc}"
        if selected != want:
            return f"selected_layers: expected {list(want)}, actual {list(selected)}"
    return None


def _check_wrapped(off: Any, d: dict[str, Any], seen: list[Any], g: int, n: int) -> str | None:
    n_obs = len(seen)
    selected = tuple(d.get("selected_layers") or ())
    wrapped = tuple(d.get("wrapped_layers") or ())
    if any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n_obs for i in wrapped):
        return f"wrapped_layers: expected indices in [0, {n_obs}), actual {list(wrapped)}"
    if len(set(wrapped)) != len(wrapped):
        return f"wrapped_layers: expected unique indices, actual {list(wrapped)}"
    if g > 0 and n > 0 and not set(wrapped) <= set(selected):
        return f"wrapped_layers: expected a subset of selected_layers {list(selected)}, actual {list(wrapped)}"
    held = held_modules(off)
    if held is not None:
        positions = sorted({i for i, m in enumerate(seen) if any(m is h for h in held)})
        if len(positions) != len(held):
            return (f"wrapped modules: expected every module the offloader holds ({len(held)}) to be an "
                    f"observed one, actual {len(positions)} observed")
        if sorted(wrapped) != positions:
            return f"wrapped_layers: expected {positions} (observed modules held as wrapped), actual {list(wrapped)}"
    if d.get("wrapped_count") != len(wrapped):
        return f"wrapped_count: expected {len(wrapped)} (observed wrapped modules), actual {d.get('wrapped_count')!r}"
    return None


def _check_bytes(d: dict[str, Any], seen: list[Any], observed: Sequence[ParamBytes | None], prefix: str) -> str | None:
    from offload.matching import matches_offload_params

    wrapped = tuple(d.get("wrapped_layers") or ())
    params = tuple(d.get("offload_params") or ())

    def total(per_layer: Sequence[ParamBytes | None]) -> int | None:
        s = 0
        for i in wrapped:
            entries = per_layer[i]
            if entries is None:
                return None
            s += sum(b for name, b in entries if matches_offload_params(name, params, prefix))
        return s

    pre = total(observed)
    live = total([live_param_bytes(m) if i in wrapped else [] for i, m in enumerate(seen)])
    claimed = d.get("offloaded_bytes")
    if pre is None:
        return (f"offloaded_bytes: expected readable parameters of wrapped layers, actual unreadable "
                f"(claimed {claimed!r})")
    if claimed != pre and claimed != live:
        return (f"offloaded_bytes: expected {pre} (observed before wrapping"
                f"{'' if live == pre else f'; {live} observable after weight processing'}), actual {claimed!r}")
    return None


def check_claim(off: Any, d: dict[str, Any], seen: list[Any] | None, observed: Sequence[ParamBytes | None] | None,
                prefix: str) -> str | None:
    """Compare claimed evidence ``d`` of offloader ``off`` with the hook's observations.

    Args:
        seen: the modules ``wrap_modules`` received, in order (None: no call observed).
        observed: per position, :func:`param_bytes` before the offloader saw the module.
        prefix: the ``wrap_modules`` prefix (for ``offload_params`` matching).

    Returns:
        None when consistent, else a message naming the claim, the expected and the actual value.
    """
    if seen is None or observed is None:
        return "wrap_modules: expected an observed wrap_modules call, actual none"
    g, n = int(d.get("offload_group_size") or 0), int(d.get("offload_num_in_group") or 0)
    return (_check_selection(d, len(seen), g, n) or _check_wrapped(off, d, seen, g, n)
            or _check_bytes(d, seen, observed, prefix))
