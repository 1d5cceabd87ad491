"""``offload_params`` segment matching, exactly as upstream vLLM does it (pure, no torch).

vLLM (``vllm/model_executor/offloader/prefetch.py`` ``PrefetchOffloader.wrap_modules`` and
``uva.py``) keeps a parameter when ``f".{segment}." in f".{prefix}{name}."`` for any
requested segment, where ``name`` is the parameter name *relative to the wrapped decoder
layer* (``mlp.down_proj.weight``) and ``prefix`` is the optional ``wrap_modules`` prefix
(empty for ``make_layers``). An empty segment set keeps every parameter.

So for ``mlp.experts.w2_weight``: ``experts`` and ``experts.w2_weight`` match, ``expert``
and ``w2`` do not; ``w2_weight`` does not match ``w2_weight_scale``.

Not modelled: regular expressions or globbing (vLLM has none).
"""

from __future__ import annotations

from collections.abc import Iterable


def matches_offload_params(name: str, segments: Iterable[str], prefix: str = "") -> bool:
    """Whether parameter ``name`` is selected by the ``offload_params`` ``segments``.

    Args:
        name: dotted parameter name relative to the wrapped module, e.g. ``mlp.gate_up_proj.weight``.
        segments: requested dotted segments; empty means "all parameters".
        prefix: ``wrap_modules`` prefix (without trailing dot), prepended before matching.

    Returns:
        True when ``segments`` is empty or one of them is a whole-segment substring of
        ``prefix.name`` (upstream's ``f".{p}." in f".{prefix}{name}."``).
    """
    segments = tuple(segments)
    if not segments:
        return True
    full = f".{prefix}.{name}." if prefix else f".{name}."
    return any(f".{seg}." in full for seg in segments)


def select_param_names(names: Iterable[str], segments: Iterable[str], prefix: str = "") -> list[str]:
    """Filter ``names`` (in order) with :func:`matches_offload_params`."""
    segments = tuple(segments)
    return [n for n in names if matches_offload_params(n, segments, prefix)]
