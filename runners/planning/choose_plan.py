"""Planning of a choose-then-confirm run: the need, the model's layer bytes, the probe's calibration points,
and the verify phase's cases once decided.

What is modelled:

* ``need_bytes``: ``need_gib`` (released bytes) or ``need_kv_gib`` (KV cache gain, taken 1:1 as released bytes),
  exactly one, >= 0, only where the config has a choose phase;
* ``model_sizes``: bytes of every layer from the model's weight headers (safetensors) when the model directory
  exists, else from its ``config.json`` arithmetic (``offload_tools.layer_bytes``: the tiny model's own shapes, the
  directory's ``config.json``, or ``model.config_json`` where no directory is at hand), and the bytes of one
  static prefetch slot from the vLLM (fused) parameter shapes;
* ``choose_need``: the need and the model sizes of a run, computed once per runner process (the plan carries them,
  ``runners.orchestration.run_objects.Plan.choose``; every later use reads them there);
* ``with_choose``: the config the planner expands: a need above the largest release is refused (naming it);
  the probe phase gets ``offload_tools.choice.calibration_settings`` when its points are empty; a need of 0 drops
  the calibration points and the verify phase (offload is unnecessary); the verify phase's points stay empty
  until decided; a sequential verify phase (``choose.verify_looks``) plans the first look's blocks
  (``repeats = verify_looks[0]``) and its design is checked (``results_schema.rules.sequential_rule.check_design``);

What is deliberately not modelled: the choice itself (``offload_tools.choice``) and when it is taken
(``runners.orchestration.choose``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from conf.schema import ChooseConfig, Config
from conf.schema_matrix import MatrixConfig, PointConfig
from conf.schema_stack import ModelConfig
from offload.matching import matches_offload_params
from offload_tools.choice import calibration_settings, largest_release, slot_bytes
from runners.errors import PlanError
from runners.paths import abs_path
from results_schema.records.sequential import DEFAULT_ALPHA, DEFAULT_SPENDING
from results_schema.rules.sequential_rule import check_design
from results_schema.units import GIB
from offload_tools.layer_bytes import (dtype_bytes, layer_bytes_from_config, layer_bytes_from_safetensors,
    layer_param_shapes, safetensors_files)


@dataclass(frozen=True)
class ModelSizes:
    """Bytes of every layer (``layer_bytes[i]``), of one static slot, and where they came from."""

    layer_bytes: tuple[int, ...]
    slot: int
    source: str


def need_bytes(cfg: Config) -> tuple[int, str]:
    """``(bytes, "need_gib=X")`` of the run's need.

    Raises:
        PlanError: neither or both needs given, or a negative need.
    """
    given = [(k, v) for k, v in (("need_gib", cfg.need_gib), ("need_kv_gib", cfg.need_kv_gib)) if v is not None]
    if len(given) != 1:
        raise PlanError("a choose-then-confirm run needs exactly one of need_gib=<GiB to release> or "
                        f"need_kv_gib=<GiB of KV cache to gain>; got {', '.join(k for k, _ in given) or 'neither'}")
    key, value = given[0]
    if value < 0:
        raise PlanError(f"{key}={value:g}: a need must be >= 0 GiB")
    return int(round(float(value) * GIB)), f"{key}={value:g}"


def model_dir_at_hand(model: ModelConfig) -> Path | None:
    """The run's model directory when it is here (a built tiny model, a ``model.path`` with ``config.json``), else None."""
    if model.source == "tiny":
        from runners.models.tiny_model import tiny_model_name

        t = model.tiny
        d = abs_path(model.cache_dir) / tiny_model_name(t.num_layers, t.hidden_size, t.seed)
        return d if (d / "SHA256SUMS").is_file() else None
    if model.path in (None, "???"):
        return None
    d = abs_path(str(model.path))
    return d if (d / "config.json").is_file() else None


def model_config(model: ModelConfig, model_dir: Path | None) -> tuple[dict, str]:
    """``(config.json dict, where it came from)``: the directory's, the tiny model's shapes, or ``model.config_json``.

    Raises:
        PlanError: none of them at hand, or ``model.config_json`` unreadable.
    """
    if model_dir is not None:
        return json.loads((model_dir / "config.json").read_text()), f"{model_dir.name}/config.json"
    if model.source == "tiny":
        from runners.models.tiny_model import tiny_layer_config

        return tiny_layer_config(model.tiny.num_layers, model.tiny.hidden_size), "the tiny model's shapes"
    if model.config_json is None:
        raise PlanError(f"model {model.name!r}: no model directory at hand (model.path={model.path}) and no "
                        "model.config_json: the settings' bytes cannot be sized; give either")
    path = abs_path(model.config_json)
    try:
        return json.loads(path.read_text()), f"model.config_json={model.config_json}"
    except (OSError, ValueError) as exc:
        raise PlanError(f"model.config_json={model.config_json}: cannot read it ({exc})") from None


def model_sizes(model: ModelConfig, dtype: str, params: Sequence[str] = ()) -> ModelSizes:
    """The model's layer and slot bytes (module docstring), loaded in ``dtype``.

    Raises:
        PlanError: no model directory and no ``config.json`` to size it with, or an architecture
            ``offload_tools.layer_bytes`` does not model.
    """

    d = model_dir_at_hand(model)
    config, where = model_config(model, d)
    n = model.num_layers
    try:
        size = dtype_bytes(dtype)
        slot = slot_bytes(size * _numel(s) for name, s in layer_param_shapes(config).items() if matches_offload_params(name, params))
        if d is not None and safetensors_files(d):
            per = layer_bytes_from_safetensors(safetensors_files(d), dtype=dtype, offload_params=params)
            if sorted(per) != list(range(n)):
                raise PlanError(f"model {model.name!r}: weight headers hold layers {sorted(per)}, not 0..{n - 1}")
            return ModelSizes(tuple(per[i] for i in range(n)), slot, f"weight headers ({d.name}/*.safetensors)")
        one = layer_bytes_from_config(config, dtype=dtype, offload_params=params)
    except ValueError as exc:
        raise PlanError(f"model {model.name!r}: {exc}") from None
    return ModelSizes((one,) * n, slot, f"config.json arithmetic ({where})")


def _numel(shape: Sequence[int]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


@dataclass(frozen=True)
class ChooseNeed:
    """What a choose run is sized by, computed once per runner process (``choose_need``).

    Attributes:
        need: bytes the setting must release (``need_bytes``).
        text: where the need came from (``need_gib=X`` / ``need_kv_gib=X``).
        sizes: the model's layer and slot bytes (``model_sizes``), as at hand when the run was planned.
    """

    need: int
    text: str
    sizes: ModelSizes


def choose_need(cfg: Config) -> ChooseNeed | None:
    """The need and the model sizes of a choose run (None: the config has no choose phase); the one place a runner
    computes them (reading the weight headers), so a run (a resume included) does it once.

    Raises:
        PlanError: see ``need_bytes`` and ``model_sizes``.
    """
    if cfg.choose.probe_phase is None:
        return None
    need, text = need_bytes(cfg)
    return ChooseNeed(need, text, model_sizes(cfg.model, cfg.workload.dtype))


VERIFY_KEYS = {"looks": "choose.verify_looks", "target_pct": "choose.verify_target_floor_pct"}
"""The config keys a sequential verify design's looks and target floor come from (``check_design``'s ``keys``)."""


def _check_no_choose(cfg: Config) -> None:
    """Refuse a need or a ``choose.*`` setting on a run without a choose phase (it would be ignored)."""
    if cfg.need_gib is not None or cfg.need_kv_gib is not None:
        raise PlanError("need_gib / need_kv_gib apply to a choose-then-confirm run (+experiment=choose or "
                        "+experiment=qwen7b_choose); this config has no choose.probe_phase")
    unset = ChooseConfig()
    for f in dataclasses.fields(ChooseConfig):
        if getattr(cfg.choose, f.name) != getattr(unset, f.name):
            raise PlanError(f"choose.{f.name}={getattr(cfg.choose, f.name)!r} applies to a choose-then-confirm run "
                            "(+experiment=choose or +experiment=qwen7b_choose); this config has no choose.probe_phase")


def _check_verify_matrix(name: str, m: MatrixConfig) -> None:
    """Refuse what a verify phase's own matrix may not set: its settings (decided while the run goes) and its own
    sequential design (``choose.verify_looks`` makes it sequential, at each decision's target)."""
    if m.points or m.cases:
        raise PlanError(f"phase {name!r}: a verify phase's settings are decided while the run goes; give it no points "
                        "or cases")
    if m.sequential.looks or m.sequential.pairing != "none":
        raise PlanError(f"phase {name!r}: a verify phase is made sequential by choose.verify_looks (each decision's "
                        f"target from its prediction), not by its own sequential.looks ({list(m.sequential.looks)}) "
                        f"or sequential.pairing ({m.sequential.pairing!r}): leave those unset")


def with_choose(cfg: Config, known: ChooseNeed | None = None) -> Config:
    """The config the planner expands (module docstring); unchanged without a choose phase. ``known``: the run's
    ``choose_need`` when already computed (else computed here, once the phases are checked).

    Raises:
        PlanError: a need or a ``choose.*`` setting without a choose phase, a choose phase without a need, unknown
            phase names, budgets below 1, decided points given in the config, a verify phase with its own sequential
            looks or pairing, a bad sequential verify design (named by its ``choose.*`` key), or a need above the
            largest release.
    """
    ch = cfg.choose
    if ch.probe_phase is None:
        _check_no_choose(cfg)
        return cfg
    for key in ("probe_phase", "verify_phase"):
        name = getattr(ch, key)
        if name not in cfg.phases:
            raise PlanError(f"choose.{key}={name!r} is not a phase; phases: {', '.join(cfg.phases)}")
    if ch.probe_phase == ch.verify_phase or min(ch.verify_budget, ch.front_budget) < 1:
        raise PlanError(f"choose: probe and verify phases must differ and budgets be >= 1 (probe {ch.probe_phase!r}, "
                        f"verify {ch.verify_phase!r}, verify_budget {ch.verify_budget}, front_budget {ch.front_budget})")
    _check_verify_matrix(ch.verify_phase, cfg.phases[ch.verify_phase])
    known = known if known is not None else choose_need(cfg)
    assert known is not None  # the config has a probe phase
    need, text, sizes = known.need, known.text, known.sizes
    top = largest_release(cfg.model.num_layers, dict(enumerate(sizes.layer_bytes)), sizes.slot)
    if need > top:
        raise PlanError(f"{text}: more than the largest release of {cfg.model.name}: {top / GIB:.4g} GiB "
                        f"({top:,} B: every layer offloaded, one prefetch slot; {sizes.source})")
    phases = dict(cfg.phases)
    if ch.verify_looks:  # sequential verify: the plan holds the first look's blocks of the baseline (and each setting)
        why = check_design(ch.verify_looks, ch.verify_target_floor_pct, DEFAULT_ALPHA, DEFAULT_SPENDING, keys=VERIFY_KEYS)
        if why is not None:
            raise PlanError(why)
        phases[ch.verify_phase] = dataclasses.replace(phases[ch.verify_phase], repeats=int(ch.verify_looks[0]),
                                                      repeats_by_label={})
    probe = phases[ch.probe_phase]
    if need == 0:
        phases[ch.probe_phase] = dataclasses.replace(probe, points=[], cases=[], repeats_by_label={}, repeats=max(
            2, int(probe.repeats_by_label.get("baseline", probe.repeats))))
        del phases[ch.verify_phase]
    elif not probe.points:
        cal = calibration_settings(cfg.model.num_layers)
        phases[ch.probe_phase] = dataclasses.replace(probe, points=[
            PointConfig(g=s.group_size, n=s.num_in_group, prefetch_step=s.prefetch_step) for s in cal])
    return dataclasses.replace(cfg, phases=phases)
