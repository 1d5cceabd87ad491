"""Layer selection for layer-group offloading: the one rule every offloader and analysis use.

Rule (vLLM ``vllm/model_executor/offloader/prefetch.py``, ``PrefetchOffloader.wrap_modules``):
layer ``i`` is offloaded iff ``i % group_size >= group_size - num_in_group``, i.e. positions
``G-N .. G-1`` of every run of ``G`` consecutive layers; a partial trailing group contributes
only the positions it has (28 layers, G=5, N=2: nothing from layers 25..27).
"""

from __future__ import annotations

from collections.abc import Sequence

from results_schema.records.value_sets import IMPLEMENTATIONS, OffloadBackend

BACKENDS: tuple[str, ...] = tuple(m.value for m in OffloadBackend)
"""vLLM's ``offload_backend`` values (``results_schema.records.value_sets.OffloadBackend``), as plain strings."""


def validate_offload_params(
    group_size: int,
    num_in_group: int,
    prefetch_step: int = 1,
    backend: str = "auto",
) -> None:
    """Validate vLLM offload parameters.

    Args:
        group_size: ``offload_group_size`` (G), >= 0; 0 disables offload.
        num_in_group: ``offload_num_in_group`` (N), >= 0 and <= G when G > 0.
        prefetch_step: ``offload_prefetch_step``, >= 1 while offload is enabled.
        backend: ``offload_backend``, one of ``auto``, ``prefetch``, ``uva``.

    Raises:
        ValueError: naming the offending value(s) and what is allowed.
    """
    for name, value in (("offload_group_size", group_size), ("offload_num_in_group", num_in_group),
                        ("offload_prefetch_step", prefetch_step)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} ({value!r}) must be an int")
        if value < 0:
            raise ValueError(f"{name} ({value}) must be >= 0")
    if backend not in BACKENDS:
        raise ValueError(f"offload_backend ({backend!r}) must be one of {BACKENDS}")
    if group_size > 0 and num_in_group > group_size:
        raise ValueError(
            f"offload_num_in_group ({num_in_group}) must be <= offload_group_size ({group_size})"
        )
    if group_size > 0 and num_in_group > 0 and prefetch_step < 1:
        raise ValueError(
            f"offload_prefetch_step ({prefetch_step}) must be >= 1 while offload is enabled "
            f"(offload_group_size={group_size}, offload_num_in_group={num_in_group})"
        )


def check_offload_setting(
    implementation: str,
    group_size: int,
    num_in_group: int,
    prefetch_step: int = 1,
    backend: str = "auto",
) -> None:
    """Validate one case's offload setting: the vLLM parameters and what the implementation needs.

    The one validation every caller uses (``runners.planning.plan`` before any process starts,
    ``runners.incase.bench_one`` and ``runners.incase.accuracy`` in the case process).

    Args:
        implementation: one of ``results_schema.records.value_sets.IMPLEMENTATIONS``.
        group_size, num_in_group, prefetch_step, backend: see :func:`validate_offload_params`.

    Raises:
        ValueError: an unknown implementation, invalid parameters (:func:`validate_offload_params`),
            ``baseline`` with ``offload_group_size`` > 0, or another implementation without
            ``offload_group_size`` > 0 and ``offload_num_in_group`` > 0; naming the values.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation {implementation!r} must be one of {IMPLEMENTATIONS}")
    validate_offload_params(group_size, num_in_group, prefetch_step, backend)
    if implementation == "baseline" and group_size != 0:
        raise ValueError(f"implementation baseline needs offload_group_size 0 (got {group_size})")
    if implementation != "baseline" and (group_size == 0 or num_in_group == 0):
        raise ValueError(
            f"implementation {implementation} needs offload_group_size > 0 and offload_num_in_group > 0 "
            f"(got {group_size}, {num_in_group}); use implementation=baseline for no offload"
        )


def case_label(implementation: str, group_size: int, num_in_group: int, prefetch_step: int = 1,
               params: Sequence[str] = (), backend: str = "auto", *, style: str = "record") -> str:
    """The label of an offload setting; the one label format of records, configs and reports.

    Args:
        implementation, group_size, num_in_group, prefetch_step, params, backend: the setting.
        style: ``record`` (file names and records): ``baseline`` or
            ``<impl>_g<G>_n<N>[_p<P>][_params-a+b][_<backend>]``; ``point`` (report tables and
            plots): ``baseline`` or ``(G,N)``, ``(G,N,kP)`` when the prefetch step is not 1.

    Raises:
        ValueError: an unknown ``style``.
    """
    if style == "point":
        if implementation == "baseline" or int(group_size) == 0:
            return "baseline"
        k = int(prefetch_step or 1)
        return f"({int(group_size)},{int(num_in_group)}" + (f",k{k})" if k != 1 else ")")
    if style != "record":
        raise ValueError(f"label style {style!r} must be 'record' or 'point'")
    if implementation == "baseline":
        return "baseline"
    label = f"{implementation}_g{group_size}_n{num_in_group}"
    if prefetch_step != 1:
        label += f"_p{prefetch_step}"
    if params:
        label += "_params-" + "+".join(params)
    if backend != "auto":
        label += f"_{backend}"
    return label


def is_layer_selected(index: int, group_size: int, num_in_group: int) -> bool:
    """Whether decoder layer ``index`` is offloaded: ``index % G >= G - N`` (False when G or N is 0).

    Used incrementally by the offloaders while ``make_layers`` is still creating layers
    (so the total count is not known yet); agrees with :func:`select_offload_layers`.
    """
    if group_size <= 0 or num_in_group <= 0:
        return False
    return index % group_size >= group_size - num_in_group


def select_offload_layers(num_layers: int, group_size: int, num_in_group: int) -> tuple[int, ...]:
    """Return the indices of the decoder layers to offload.

    Args:
        num_layers: number of decoder layers (>= 0).
        group_size: ``offload_group_size`` G; 0 disables offload.
        num_in_group: ``offload_num_in_group`` N; 0 disables offload.

    Returns:
        Sorted tuple of layer indices ``i`` in ``range(num_layers)`` with
        ``i % G >= G - N``; empty when G == 0 or N == 0.

    Raises:
        ValueError: negative values, or ``num_in_group > group_size`` (G > 0).
    """
    if not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(f"num_layers ({num_layers!r}) must be an int >= 0")
    validate_offload_params(group_size, num_in_group)
    if group_size == 0 or num_in_group == 0:
        return ()
    return tuple(i for i in range(num_layers) if is_layer_selected(i, group_size, num_in_group))
