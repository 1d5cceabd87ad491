"""Catalog columns derived from the ``results_schema`` models: one column per leaf field, typed from it.

What is modelled: ``derive(model, ...)`` walks a pydantic model's fields (nested models flattened,
optionally under a prefix) and gives one ``Column`` per leaf field: its path in the model, its column
name and its DuckDB type, read from the field's annotation (``Annotated`` / ``Optional`` / ``Literal``
unwrapped): ``int`` -> BIGINT, ``float`` -> DOUBLE, ``str`` and a ``StrEnum`` -> VARCHAR, ``bool`` -> BOOLEAN,
``tuple[X, ...]`` of scalars -> ``X[]``, a dict or a tuple of models -> VARCHAR holding canonical JSON.
``row(columns, model)`` reads those paths from a validated model instance (a missing optional nested
model gives NULL for its leaves). Every derived column is nullable: a record written before a field
existed parses with the field's default (null) and loads as NULL in a column that keeps its type.

The tables built this way (``TABLE_MODELS``): ``cases`` (``CaseRun`` less its evidence and rounds),
``rounds`` (``RoundResult``), ``evidence`` (``RuntimeEvidence``), ``failures`` (``CaseFailure``),
``serving_results`` (``ServingRun``), ``accuracy_cases`` (``AccuracyCaseRun``, one row per task: its
``results`` item, an ``AccuracyTaskOutcome``, flattened beside the case's fields) and ``accuracy_verdicts``
(``AccuracyVerification``; its case, check and baseline rows as JSON text, its example texts left in the
report files), ``choices`` (``ChoiceDecision``
less its predictions; its points, fits, checks and chosen settings as JSON text, ``decided_phase_*`` its decided
phase), ``choice_predictions`` (``PredictedSetting``), and from ``summary/serving-summary.json``
``serving_baseline_verdicts`` (``BaselineVerdictRow``), ``serving_outputs`` (``OutputCheckRow``) and
``serving_percentiles`` (``PercentileRow``). A new model field is a new column with no edit here.

What is deliberately not modelled: schema migration of an existing catalog file (a catalog built by an
older version is rebuilt: ``analysis.catalog.store.connect`` compares the column lists).
"""

from __future__ import annotations

import json
import types
from enum import StrEnum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from analysis.load import OFFLOAD_COLUMNS, ROUND_RENAME
from results_schema.records.accuracy import AccuracyCaseRun, AccuracyVerification
from results_schema.records.case_outcome import CaseFailure
from results_schema.records.choice import ChoiceDecision, PredictedSetting
from results_schema.records.models import CaseRun, RoundResult, RuntimeEvidence
from results_schema.records.serving import ServingRun
from results_schema.records.serving_summary import BaselineVerdictRow, OutputCheckRow, PercentileRow

SCALARS: dict[type, str] = {bool: "BOOLEAN", int: "BIGINT", float: "DOUBLE", str: "VARCHAR"}


@dataclass(frozen=True)
class Column:
    """One catalog column: the model path it comes from, its name, its DuckDB type."""

    path: tuple[str, ...]
    name: str
    sql: str
    convert: Callable[[Any], Any] | None = None
    from_item: bool = False
    """The path starts at one item of the layout's ``items`` tuple (``row(..., item=...)``), not at the row model."""


@dataclass(frozen=True)
class Layout:
    """How one model maps onto a table.

    Attributes:
        model: the pydantic model of one row (or of the part of a row the model gives).
        bare: nested model paths (dotted) whose leaves keep their own name (no prefix).
        prefixes: nested model paths (dotted) whose leaves are named ``prefix + leaf``.
        rename: dotted leaf path -> column name (names kept from earlier catalog versions).
        convert: dotted leaf path -> function applied to the value (e.g. join a tuple).
        elsewhere: dotted paths stored in another table (skipped here).
        items: a top-level field holding a tuple of models: the table has one row per item, the item
            model's fields flattened into it (no prefix) beside the row model's other fields.
    """

    model: type[BaseModel]
    bare: frozenset[str] = frozenset()
    prefixes: Mapping[str, str] = field(default_factory=dict)
    rename: Mapping[str, str] = field(default_factory=dict)
    convert: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    elsewhere: frozenset[str] = frozenset()
    items: str | None = None


def _join(v: tuple[str, ...]) -> str:
    return ",".join(v)


@dataclass(frozen=True)
class _AnyOf:
    """A union of several non-None types (after unwrapping each)."""

    options: tuple[Any, ...]


def _unwrap(ann: Any) -> Any:
    """Strip ``Annotated`` and ``None`` from a union; a union of several types becomes ``_AnyOf``."""
    while get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    if get_origin(ann) in (Union, types.UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        return _unwrap(args[0]) if len(args) == 1 else _AnyOf(tuple(_unwrap(a) for a in args))
    return ann


def sql_type(ann: Any) -> str:
    """DuckDB type of a leaf annotation (see the module docstring).

    Raises:
        TypeError: an annotation this mapping does not know (so a new kind of field is never dropped).
    """
    ann = _unwrap(ann)
    origin = get_origin(ann)
    if ann in SCALARS:
        return SCALARS[ann]
    if origin is Literal:
        return SCALARS[type(get_args(ann)[0])]
    if isinstance(ann, type) and issubclass(ann, StrEnum):
        return "VARCHAR"
    if isinstance(ann, _AnyOf):
        kinds = {sql_type(a) for a in ann.options}
        return kinds.pop() if len(kinds) == 1 else "DOUBLE" if kinds <= {"BIGINT", "DOUBLE"} else "VARCHAR"
    if origin in (tuple, list):
        inner = _unwrap(get_args(ann)[0])
        if isinstance(inner, type) and issubclass(inner, BaseModel) or get_origin(inner) is dict:
            return "VARCHAR"
        return sql_type(inner) + "[]"
    if origin is dict or ann is dict:
        return "VARCHAR"
    raise TypeError(f"no catalog column type for annotation {ann!r} (add it to analysis.catalog.columns.sql_type)")


def _json_text(v: Any) -> str:
    def plain(x: Any) -> Any:
        return x.model_dump(mode="json") if isinstance(x, BaseModel) else x
    if isinstance(v, (tuple, list)):
        v = [plain(x) for x in v]
    return json.dumps(plain(v), sort_keys=True, allow_nan=False, separators=(",", ":"))


def derive(layout: Layout) -> list[Column]:
    """The columns of ``layout.model``, in field order (an ``items`` field's item model in its place).

    Raises:
        TypeError: a leaf annotation with no catalog type.
        ValueError: two fields would get the same column name.
    """
    out: dict[str, Column] = {}

    def walk(cls: type[BaseModel], path: tuple[str, ...], prefix: str, from_item: bool) -> None:
        for name, info in cls.model_fields.items():
            p = path + (name,)
            dotted = ".".join(p)
            if dotted in layout.elsewhere:
                continue
            if dotted == layout.items:
                walk(item_model(info.annotation, dotted), p, prefix, True)
                continue
            inner = _unwrap(info.annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                sub = "" if dotted in layout.bare else layout.prefixes.get(dotted, f"{prefix}{name}_")
                walk(inner, p, sub, from_item)
                continue
            col = layout.rename.get(dotted, prefix + name)
            sql = "VARCHAR" if dotted in layout.convert else sql_type(info.annotation)
            conv = layout.convert.get(dotted) or (_json_text if sql == "VARCHAR" and not _is_text(inner) else None)
            if col in out:
                raise ValueError(f"catalog column {col!r} of {layout.model.__name__} comes from both "
                                 f"{'.'.join(out[col].path)} and {dotted}: rename one in TABLE_MODELS")
            out[col] = Column(p[1:] if from_item else p, col, sql, conv, from_item)

    walk(layout.model, (), "", False)
    return list(out.values())


def item_model(ann: Any, where: str) -> type[BaseModel]:
    """The model of a ``tuple[Model, ...]`` annotation (a layout's ``items`` field).

    Raises:
        TypeError: ``ann`` is not a tuple of one model.
    """
    inner = _unwrap(ann)
    args = get_args(inner)
    if get_origin(inner) is tuple and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    raise TypeError(f"items field {where} must be a tuple of models, not {ann!r}")


def _is_text(ann: Any) -> bool:
    return ann is str or (isinstance(ann, type) and issubclass(ann, StrEnum)) or \
        (get_origin(ann) is Literal and isinstance(get_args(ann)[0], str)) or \
        (isinstance(ann, _AnyOf) and all(_is_text(a) for a in ann.options))


def row(columns: list[Column], model: BaseModel, item: BaseModel | None = None) -> dict[str, Any]:
    """``{column name: value}`` of ``model`` (and of ``item`` for the item columns of a layout with ``items``;
    a missing optional parent gives None; tuples become lists)."""
    out: dict[str, Any] = {}
    for c in columns:
        v: Any = item if c.from_item else model
        for part in c.path:
            v = getattr(v, part) if v is not None else None
        if v is not None and c.convert is not None:
            v = c.convert(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[c.name] = v
    return out


TABLE_MODELS: dict[str, Layout] = {
    "cases": Layout(
        CaseRun, bare=frozenset({"record", "record.offload", "record.workload", "kv_cache"}),
        prefixes={"record.window": "window_", "cpu_kernels": "cpu_kernels_"},
        rename={"record.schema_version": "record_schema_version",
                **{f"record.offload.{k}": v for k, v in OFFLOAD_COLUMNS.items()}},
        convert={"record.offload.offload_params": _join},
        elsewhere=frozenset({"evidence", "record.rounds"})),
    "rounds": Layout(RoundResult, rename=ROUND_RENAME),
    "evidence": Layout(RuntimeEvidence, rename=dict(OFFLOAD_COLUMNS), convert={"offload_params": _join}),
    "failures": Layout(CaseFailure, bare=frozenset({"kv_cache"})),
    "serving_results": Layout(
        ServingRun, bare=frozenset({"rate", "offload", "kv_cache"}),
        prefixes={"evidence": "ev_", "load": "load_", "slo": "slo_", "engine": "engine_"},
        rename={"rate.index": "rate_index", "rate.max_concurrency": "rate_max_concurrency",
                "slo.attainment": "slo_attainment_target",
                **{f"offload.{k}": v for k, v in OFFLOAD_COLUMNS.items()}},
        convert={"offload.offload_params": _join, "evidence.offload_params": _join}),
    "accuracy_cases": Layout(
        AccuracyCaseRun, bare=frozenset({"offload"}), items="results",
        rename={"schema_version": "case_schema_version", **{f"offload.{k}": v for k, v in OFFLOAD_COLUMNS.items()}},
        convert={"offload.offload_params": _join}),
    "accuracy_verdicts": Layout(
        AccuracyVerification, rename={"cases": "case_rows", "checks": "check_rows", "baselines": "baseline_rows"},
        elsewhere=frozenset({"samples"})),  # example texts stay in the report files (accuracy-verification.*)
    "choices": Layout(ChoiceDecision, elsewhere=frozenset({"predictions"})),
    "choice_predictions": Layout(PredictedSetting),
    "serving_baseline_verdicts": Layout(BaselineVerdictRow),
    "serving_outputs": Layout(OutputCheckRow),
    "serving_percentiles": Layout(PercentileRow),
}
"""Table -> the model its derived columns come from (keys and run-level columns are added by the schema)."""


def table_columns(table: str) -> list[Column]:
    """The derived columns of ``table`` (``TABLE_MODELS``)."""
    return derive(TABLE_MODELS[table])
