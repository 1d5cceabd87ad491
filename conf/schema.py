"""Dataclass schemas of every config group, registered in Hydra's ConfigStore.

What is modelled: the typed shape of a run -- runtime (software stack, device,
pins, health gate), model, workload, executor, and a dict of phases, each phase
one matrix of cases. Experiments (``conf/experiment/*.yaml``) are global
overlays that pick group options and add phases (``/matrix@phases.<name>``).

What is deliberately not modelled here: case expansion, validation of offload
parameters, scheduling (``runners.planning.plan``); identity checks (``runners.identity.pin_checks``).
This module holds schemas only.

Conventions: a pin whose value is ``???`` is *declared but not provided*; the
identity gate refuses to run until it is given (fail closed, never "NA").
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING as MISSING_FIELD, dataclass, field, fields, is_dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from pydantic import with_config

from conf.schema_matrix import (
    MatrixConfig,
)
from results_schema.records.base import Implementation
from results_schema.records.choice import DEFAULT_VERIFY_TARGET_FLOOR_PCT
from conf.schema_stack import (
    FORBID_EXTRA,
    OMIT_WHEN_DEFAULT,
    ExecutorConfig,
    added_field,
    ModelConfig,
    RuntimeConfig,
    WorkloadConfig,
)


EMBEDDED_EXPERIMENT = "default"
"""``experiment_name`` of the embedded default (``python -m runners.matrix`` with no ``+experiment``; there is
no ``conf/experiment/default.yaml``)."""


def experiment_override(experiment_name: str) -> str:
    """The ``+experiment=NAME`` override that composes ``experiment_name`` again; "" for the embedded default."""
    return "" if experiment_name == EMBEDDED_EXPERIMENT else f"+experiment={experiment_name}"


@with_config(FORBID_EXTRA)
@dataclass
class ChooseConfig:
    """Choose-then-confirm settings (``runners.orchestration.choose``; active when ``probe_phase`` is set).

    Attributes:
        probe_phase: the phase that probes (baselines for the step time and the noise floor, the calibration
            settings of ``offload_tools.choice.calibration_settings`` when its ``points`` are empty); null = no choice.
        verify_phase: the phase the decided settings are measured in (its ``points`` are decided while the
            run goes; its baseline runs ``repeats`` times, as every decided setting does).
        verify_budget: settings one choice verifies at most (the predicted best class and the next classes whose
            interval reaches it).
        front_budget: settings measured from the predicted front when a refitted model still misses.
        implementation: whose settings are chosen.
        compare_matrix: a ``conf/matrix`` file whose full design a dry run prints beside this one's process count
            (e.g. ``same_runtime``, the published 63-process design); null = none.
        probe_remeasures: fresh processes the probe may run per label (the baseline, each calibration setting) to
            replace processes measured beside foreign work (``BenchRecord.host_load.contended``) before anything is
            predicted; 0 = none: a contended probe process that leaves the probe short stops the choice at once.
        verify_looks: empty (the default) = the verify phase runs every decided setting ``repeats`` times, rotated
            with as many baselines; set = sequential (``docs/choose.md``): each decision's settings run in ABBA blocks
            with the baseline and are looked at after ``verify_looks[k]`` blocks (processes per arm, strictly
            increasing, from 2; the last is the budget), Pocock-type spending of 5%; a setting stops once its verdict
            against the baseline is conclusive at the decision's target (``verify_target_floor_pct``).
        verify_target_floor_pct: the smallest target of a sequential verify phase (percent, > 0): each decision's
            target is the predicted gap between its best setting and the runner-up
            (``offload_tools.choice.verify_target``), never below this floor.
    """

    probe_phase: Optional[str] = None
    verify_phase: str = "verify"
    verify_budget: int = 2
    front_budget: int = 2
    implementation: Implementation = Implementation.current
    compare_matrix: Optional[str] = "same_runtime_cpu"
    probe_remeasures: int = added_field(2)
    verify_looks: List[int] = added_field(default_factory=list)
    verify_target_floor_pct: float = added_field(DEFAULT_VERIFY_TARGET_FLOOR_PCT)


@with_config(FORBID_EXTRA)
@dataclass
class Config:
    """Root config of ``python -m runners.matrix``.

    Attributes:
        experiment_name: results subdirectory (``results/<experiment_name>/<run_id>``).
        results_root: where run directories are created (relative = repository root).
        run_id: run directory name; null = ``<UTC time>-<random hex>``.
        resume: an existing run directory to resume (its saved config is used).
        dry_run: print the schedule and exit without launching anything.
        formal: stop at the first unexpected case failure (completed evidence kept).
        offload_tree_sha256: pin of the project's ``offload/`` tree (null = record only).
        required_pins: scalar pins this experiment requires (``model.sha256sums_sha256``,
            ``model.revision``, ``offload_tree_sha256``): null counts as ``???`` (fail closed). Needed
            because OmegaConf keeps a schema default when an overlay merges ``???`` onto it.
        bench_command: argv prefix of one case process; null = ``[<runtime python>, -m, <bench_module>]``.
        bench_module: module a case process runs with its runtime's interpreter (tests: a fake bench).
        accuracy_command: argv prefix of one accuracy case process (followed by ``run ...``);
            null = ``[<python>, -m, runners.incase.accuracy]`` (tests substitute a fake engine here).
        serving_command: argv prefix of one serving case process (followed by ``--case PATH --run-dir DIR``);
            null = ``[<python>, -m, runners.incase.serving]`` (tests substitute a fake case here).
        analyze: call ``analysis.report.summary.write_summary`` at the end (and, when the run has accuracy
            phases, the accuracy verifier ``analysis.accuracy.verifier``, report in ``summary/``).
        progress: show a live progress bar (plain lines are always printed).
        need_gib: choose-then-confirm: device memory the setting must release (GiB = 2**30 B); null unless set.
        need_kv_gib: the alternative need: KV cache gain (GiB), taken 1:1 as released bytes; null unless set.
        choose: choose-then-confirm settings (``ChooseConfig``).
    """

    runtime: RuntimeConfig = MISSING
    model: ModelConfig = MISSING
    workload: WorkloadConfig = MISSING
    executor: ExecutorConfig = MISSING
    phases: Dict[str, MatrixConfig] = field(default_factory=dict)
    experiment_name: str = EMBEDDED_EXPERIMENT
    results_root: str = "results"
    run_id: Optional[str] = None
    resume: Optional[str] = None
    dry_run: bool = False
    formal: bool = False
    offload_tree_sha256: Optional[str] = None
    required_pins: List[str] = field(default_factory=list)
    bench_command: Optional[List[str]] = None
    bench_module: str = "runners.incase.bench_one"
    accuracy_command: Optional[List[str]] = None
    analyze: bool = True
    progress: bool = True
    need_gib: Optional[float] = added_field()
    need_kv_gib: Optional[float] = added_field()
    choose: ChooseConfig = added_field(default_factory=ChooseConfig)
    serving_command: Optional[List[str]] = added_field()


def register_configs() -> None:
    """Register ``base_config`` and ``base_<group>`` schemas (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="runtime", name="base_runtime", node=RuntimeConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="workload", name="base_workload", node=WorkloadConfig)
    cs.store(group="matrix", name="base_matrix", node=MatrixConfig)
    cs.store(group="executor", name="base_executor", node=ExecutorConfig)


# --------------------------------------------------------------------------- checks of a composed config

class ConfigError(ValueError):
    """A composed config the runner must refuse (unknown key, bad name, untypeable pin); exit code 2."""


_TEXT_KEY = re.compile(
    r"^(?:phases\.[^.]+\.)?runtime\.(?:env|pins\.(?:packages|package_trees|wheels|package_wheels|source_trees|source_commits|files))"
    r"(?:\.(?P<name>.+))?$"
)
"""Keys whose values are text exactly as typed: runtime environment values and identity pins."""

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A run id / experiment name: one path component, no separator, not ``.``/``..``, at most 128 characters."""


def keep_typed_text(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Give pins and environment values set on the command line the text the user typed.

    Hydra's override grammar turns ``vllm=0.10`` into the float 0.1, ``FLAG=true`` into
    True, ``X=1e5`` into 100000.0; the ``Dict[str, str]`` schema then stores ``"0.1"``,
    ``"True"``, ``"100000.0"``. For every override of a key under ``runtime.env`` or
    ``runtime.pins.<kind>`` (also ``phases.<p>.runtime...``) whose parsed value is not a
    string, the node is set to the raw text after the first ``=`` of the override.
    A quoted value (``vllm='0.10'``) is already a string and is kept as Hydra parsed it.

    Args:
        cfg: the composed config (modified in place).
        overrides: the command-line overrides, as Hydra received them
            (``HydraConfig.get().overrides.task``).

    Raises:
        ConfigError: a whole dict or list of pins/env given in one override with an
            unquoted non-string value (its text cannot be recovered; set one key per
            override or quote the value).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for ov in OverridesParser.create().parse_overrides(list(overrides)):
        match = _TEXT_KEY.match(ov.key_or_group)
        if match is None or ov.is_delete():
            continue
        value = ov.value()
        if match.group("name") is None or "." in match.group("name"):
            leaves = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
            if any(not isinstance(v, str) for v in leaves):
                raise ConfigError(
                    f"{ov.input_line!r}: values of {ov.key_or_group} must be given one key per override "
                    f"({ov.key_or_group}.NAME=VALUE) or quoted, so that they keep the text you typed")
            continue
        if isinstance(value, str):
            continue
        assert ov.input_line is not None  # parsed from command-line text
        raw = ov.input_line.split("=", 1)[1].strip()
        OmegaConf.update(cfg, ov.key_or_group, raw, merge=False)


def nearest(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """The hint of every refusal of an unknown key, option or value: ``"; did you mean 'x'"`` for the candidate
    closest to ``word`` (``prefix`` + it; ``difflib`` ratio at least 0.5), or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.5)
    return f"; did you mean {prefix + close[0]!r}" if close else ""


def unknown_key(key: str, known: Iterable[str], owner: str) -> str:
    """The one message refusing an unknown config key (a YAML key, a command-line override, a saved config).

    Args:
        key: the dotted key as given (``phases.same_runtime.repeatz``).
        known: the keys allowed at that place (the fields of its dataclass).
        owner: what holds them (the dataclass's name, or the node's dotted key).

    Returns:
        ``unknown key 'workload.num_promts'; did you mean 'workload.num_prompts'; allowed keys of workload:
        dtype, ...`` (the hint from :func:`nearest`, with the key's parent path).
    """
    parent, _, leaf = key.rpartition(".")
    names = sorted(known)
    return (f"unknown key {key!r}{nearest(leaf, names, f'{parent}.' if parent else '')}; "
            f"allowed keys of {owner}: {', '.join(names)}")


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse every key the schema does not declare (keys added with ``+`` included).

    Hydra applies ``+key=value`` with the struct flag lifted, so a misspelt
    ``+phases.same_runtime.repeatz=2`` would otherwise be saved and ignored. Every node
    typed by a dataclass of this module must hold only that dataclass's fields;
    ``Dict[str, <dataclass>]`` nodes (``phases``) are checked entry by entry.

    Raises:
        ConfigError: naming the dotted key, the keys allowed there, and the closest one.
    """
    _check_node(cfg, "")


def _check_node(node: Any, where: str) -> None:
    if isinstance(node, ListConfig):
        for i in range(len(node)):
            child = node._get_node(i)
            if isinstance(child, (DictConfig, ListConfig)):
                _check_node(child, f"{where}[{i}]")
        return
    if not isinstance(node, DictConfig) or node._is_none() or node._is_missing():
        return
    obj_type = OmegaConf.get_type(node)
    known = {f.name for f in fields(obj_type)} if is_dataclass(obj_type) else None
    for key in node.keys():
        name = str(key)
        path = f"{where}.{name}" if where else name
        if known is not None and key not in known:
            assert obj_type is not None  # known comes from a dataclass type
            raise ConfigError(unknown_key(path, known, obj_type.__name__))
        child = node._get_node(key)
        if isinstance(child, (DictConfig, ListConfig)):
            _check_node(child, path)


def check_name(key: str, value: Any) -> None:
    """Refuse a ``run_id`` / ``experiment_name`` that is not a single safe path component.

    Raises:
        ConfigError: ``value`` is absolute, holds a separator or ``..``, or has other characters
            than ``[A-Za-z0-9._-]`` (see ``NAME_PATTERN``).
    """
    if value is None:
        return
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise ConfigError(f"{key}={value!r} is not a name: use 1-128 characters of [A-Za-z0-9._-] starting with "
                          f"a letter or digit (no '/', no '..'; the run directory is <results_root>/"
                          f"<experiment_name>/<run_id>)")


def checked_plain_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The composed ``cfg`` checked against the schema, as a resolved plain dict.

    Steps: pins and environment values keep their typed text (``keep_typed_text``);
    unknown keys are refused on every dataclass-typed node (``check_known_keys``; a
    whole ``OmegaConf.to_object`` is not used because it refuses ``???`` pins, which
    must stay declared-but-missing for the identity gate, and because it silently
    sets unknown keys as attributes); ``run_id`` and ``experiment_name`` are names.

    Raises:
        ConfigError: any of the above, with the key named.
    """
    keep_typed_text(cfg, overrides)
    check_known_keys(cfg)
    for key in ("run_id", "experiment_name"):
        check_name(key, OmegaConf.select(cfg, key, throw_on_missing=False))
    return _plain(cfg)


def checked_saved_config(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A run directory's saved ``config.yaml`` (plain dict) checked against ``Config``.

    Raises:
        ConfigError: unknown key or a value of the wrong type (naming the key).
    """
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), dict(saved))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"saved config: {exc.msg if hasattr(exc, 'msg') else exc}".splitlines()[0]) from None
    assert isinstance(merged, DictConfig)  # merged onto the structured Config
    check_known_keys(merged)
    for key in ("run_id", "experiment_name"):
        check_name(key, OmegaConf.select(merged, key, throw_on_missing=False))
    return _plain(merged)


def _plain(cfg: DictConfig) -> dict[str, Any]:
    """Resolved plain dict of ``cfg``: choice fields as their strings, ``???`` kept as the string ``???``."""
    out = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False, enum_to_str=True)
    assert isinstance(out, dict)
    return omit_defaults({str(k): v for k, v in out.items()})


def omit_defaults(data: dict[str, Any], schema: type | None = None) -> dict[str, Any]:
    """``data`` (a plain config of ``schema``, default ``Config``) without the fields marked ``added_field`` that hold
    their default, at any depth (nested schemas, lists and string-keyed maps of them): a config that does not use
    them keeps the bytes and hash it had before they existed; loading it back (``checked_saved_config``) gives the
    defaults. The marked fields are the schema's own record of what was added (``need_gib``, ``need_kv_gib``,
    ``choose``, ``model.config_json``, a case's ``step_delay_ms``, ``serving_command``)."""
    cls = Config if schema is None else schema
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if f.metadata.get(OMIT_WHEN_DEFAULT) and value == _plain_default(f):
            del data[f.name]
            continue
        _omit_nested(value, hints[f.name])
    return data


def _omit_nested(value: Any, tp: Any) -> None:
    """``omit_defaults`` inside ``value`` where its type ``tp`` holds schemas (``Optional``, ``List``, ``Dict``)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if is_dataclass(tp) and isinstance(value, dict):
        omit_defaults(value, tp)  # type: ignore[arg-type]
    elif origin is typing.Union and len(args) == 1:
        _omit_nested(value, args[0])
    elif origin is list and args and isinstance(value, list):
        for v in value:
            _omit_nested(v, args[0])
    elif origin is dict and len(args) == 2 and isinstance(value, dict):
        for v in value.values():
            _omit_nested(v, args[1])


def _plain_default(f: Any) -> Any:
    """The plain value of field ``f``'s default (a schema default as its plain dict, choice fields as strings)."""
    if f.default_factory is not MISSING_FIELD:
        value = f.default_factory()
        return OmegaConf.to_container(OmegaConf.structured(value), enum_to_str=True) if is_dataclass(value) else value
    return f.default
