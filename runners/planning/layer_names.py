"""The parameter names of a decoder layer as vLLM's modules carry them, and the check that every
``offload_params`` pattern of a planned case matches one of them.

What is modelled: an ``offload_params`` segment selects a parameter when it is a whole dotted segment of the
parameter's name relative to the wrapped decoder layer (``offload.matching.matches_offload_params``, upstream's
rule), and vLLM names those parameters after its fused modules (``self_attn.qkv_proj``, ``mlp.gate_up_proj``:
``offload_tools.layer_bytes.vllm_param_name``). The names come from the checkpoint's safetensors headers when the
model directory is here (a built tiny model, ``model.path``, an accuracy phase's ``accuracy_model``), else from the
architecture's known shapes (``offload_tools.layer_bytes.layer_param_shapes`` over the tiny model's config or
``model.config_json``: a dry run before the default model is built, a remote host). A pattern that matches no
name cannot take effect (the case would offload nothing and compare equal to its baseline), so the plan refuses
it (``PlanError``, exit 2) before any process starts, naming the pattern and the names it could have matched.

What is deliberately not modelled: parameters outside the decoder layers (embeddings, the LM head: never
wrapped), mixture-of-experts and quantized layouts beyond what the headers hold.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from conf.schema_stack import ModelConfig
from offload.matching import matches_offload_params
from runners.errors import PlanError
from runners.models.accuracy_model import accuracy_model_dir
from runners.cases import PhaseCase
from runners.planning.choose_plan import model_config, model_dir_at_hand
from offload_tools.layer_bytes import (layer_param_names_from_safetensors, layer_param_shapes, safetensors_files,
    vllm_param_name)


@dataclass(frozen=True)
class LayerNames:
    """The parameter names of one decoder layer (relative to it, vLLM's fused names) and where they came from."""

    names: tuple[str, ...]
    source: str


def _from_dir(d: Path) -> LayerNames | None:
    files = safetensors_files(d)
    if not files:
        return None
    try:
        names = layer_param_names_from_safetensors(files)
    except (OSError, ValueError) as exc:
        raise PlanError(f"model {d}: cannot read the safetensors headers ({exc})") from None
    return LayerNames(tuple(sorted(names)), f"weight headers of {d.name}/*.safetensors") if names else None


def _from_config(config: dict, where: str) -> LayerNames:
    try:
        names = layer_param_shapes(config)
    except ValueError as exc:
        raise PlanError(f"offload_params cannot be checked against {where}: {exc}") from None
    return LayerNames(tuple(sorted(names)), f"the architecture's known names ({where})")


def layer_param_names(model: ModelConfig, accuracy_model: str | None = None) -> LayerNames:
    """The parameter names of a decoder layer of the model a case loads.

    Args:
        model: the run's model.
        accuracy_model: an accuracy phase's own model directory (as configured), loaded instead of ``model``.

    Returns:
        From the weight headers when the directory is here, else from the architecture's known names.

    Raises:
        PlanError: no directory, no tiny model and no ``model.config_json`` to name them from; an architecture
            ``offload_tools.layer_bytes`` does not model; unreadable headers.
    """
    if accuracy_model:
        d = accuracy_model_dir(accuracy_model)
        if (found := _from_dir(d)) is not None:
            return found
        try:
            return _from_config(json.loads((d / "config.json").read_text()), f"{d.name}/config.json")
        except (OSError, ValueError) as exc:
            raise PlanError(f"accuracy_model {accuracy_model!r}: cannot read {d}/config.json ({exc})") from None
    here = model_dir_at_hand(model)
    if here is not None and (found := _from_dir(here)) is not None:
        return found
    if here is None and model.source != "tiny" and model.config_json is None:
        raise PlanError(f"model {model.name!r}: offload_params cannot be checked: no model directory at hand "
                        f"(model.path={model.path}) and no model.config_json naming its architecture; give either")
    return _from_config(*model_config(model, here))


def _segments(names: Sequence[str]) -> list[str]:
    """Every whole dotted segment run of ``names`` (``mlp``, ``mlp.down_proj``, ``down_proj.weight``, ...)."""
    out: dict[str, None] = {}
    for name in names:
        parts = name.split(".")
        for i in range(len(parts)):
            for j in range(i + 1, len(parts) + 1):
                out[".".join(parts[i:j])] = None
    return list(out)


def unmatched_pattern_message(pattern: str, found: LayerNames) -> str:
    """Why ``pattern`` matches nothing: the names it could have matched, and the fused or nearest name."""

    hint = ""
    fused = vllm_param_name(f".{pattern}.").strip(".")
    if fused != pattern and any(matches_offload_params(n, (fused,)) for n in found.names):
        hint = f"; vLLM fuses it: use {fused!r}"
    elif close := difflib.get_close_matches(pattern, _segments(found.names), n=3, cutoff=0.6):
        hint = f"; nearest: {', '.join(close)}"
    return (f"offload_params pattern {pattern!r} matches no parameter of a decoder layer, so the setting cannot take "
            f"effect{hint}; a pattern is a whole dotted segment of these names, from {found.source}: "
            f"{', '.join(found.names)}")


def check_offload_params(cases_by_phase: Mapping[str, Sequence[PhaseCase]], model: ModelConfig) -> None:
    """Refuse an ``offload_params`` pattern that matches no parameter name of the model its case loads.

    Names are read once per model and only when some case gives patterns.

    Raises:
        PlanError: naming the phase, the case, the pattern and the names it could have matched
            (:func:`unmatched_pattern_message`), or why the names cannot be known (:func:`layer_param_names`).
    """
    known: dict[str | None, LayerNames] = {}
    for phase, cases in cases_by_phase.items():
        for case in cases:
            if not case.params:
                continue
            key = case.accuracy_model  # an accuracy phase's own model (set by its kind only), else the run's
            if key not in known:
                known[key] = layer_param_names(model, key)
            found = known[key]
            for pattern in case.params:
                if not any(matches_offload_params(n, (pattern,)) for n in found.names):
                    raise PlanError(f"phase {phase!r}, case {case.label!r}: "
                                    f"{unmatched_pattern_message(pattern, found)}")
