"""Validated records of one model held as decoded msgspec structs, read field by field as columns.

What is modelled: ``RecordTable`` holds the accepted lines of one JSONL file (or several, concatenated)
of one ``results_schema`` model, each as the ``msgspec.Struct`` derived from the model
(``results_schema.codec.fast_structs``) or, for a line only the full reader accepted, as the pydantic model
itself. Both have the model's field names, so ``column("record.offload.offload_group_size")`` reads a
field of every row with one attribute lookup per row and level; a field the line left out (``UNSET``
in a struct) reads as the model's default, exactly as pydantic fills it. ``explode`` flattens a
``tuple[Model, ...]`` field (the rounds of every record) into a table of its own. ``models()`` builds
the pydantic models without running a validator again (``fast_structs.ModelPlan.rebuild``): a table
only ever holds lines that passed every per-field constraint and the model's own validators
(``results_schema.reading.table_scan`` runs them on every line).

What is deliberately not modelled: reading files (``results_schema.reading.table_scan``), validation,
fields through a ``dict`` or a union of several models.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from operator import attrgetter
from typing import Annotated, Any, Generic, TypeVar, Union, cast, get_args, get_origin

import msgspec
from pydantic import BaseModel

from results_schema.codec.fast_structs import field_default, plan_for
from results_schema.codec.io import gc_paused

__all__ = ["RecordTable"]

M = TypeVar("M", bound=BaseModel)

_UNSET = msgspec.UNSET


def _bare(ann: Any) -> tuple[Any, bool]:
    """``(annotation without Annotated / None, whether None is allowed)``."""
    nullable = False
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(ann) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(ann))
            if len(args) != 1:
                return ann, nullable
            ann = args[0]
        else:
            return ann, nullable


def _model_of(ann: Any) -> type[BaseModel] | None:
    bare, _ = _bare(ann)
    return bare if isinstance(bare, type) and issubclass(bare, BaseModel) else None


class RecordTable(Generic[M]):
    """Accepted records of ``model`` in file order.

    Attributes:
        model: the pydantic model of one row.
        lines: 1-based line number of each row in its file.
        items: each row as the model's derived struct or as the model itself.
    """

    def __init__(self, model: type[M], lines: list[int], items: list[Any]) -> None:
        if len(lines) != len(items):
            raise ValueError(f"{len(lines)} line numbers for {len(items)} rows")
        self.model = model
        self.lines = lines
        self.items = items
        self._columns: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def _field(self, path: str) -> tuple[type[BaseModel], str, bool]:
        """``(model holding the last field, its name, whether a row's parent value may be None)``."""
        model: type[BaseModel] = self.model
        nullable = False
        *parents, name = path.split(".")
        for p in parents:
            f = model.model_fields.get(p)
            sub = _model_of(f.annotation) if f is not None else None
            if f is None or sub is None:
                raise KeyError(f"{self.model.__name__}: {path!r} does not go through a model field at {p!r}")
            nullable = nullable or _bare(f.annotation)[1]
            model = sub
        if name not in model.model_fields:
            raise KeyError(f"{model.__name__} has no field {name!r} (path {path!r}); fields: {list(model.model_fields)}")
        return model, name, nullable

    def column(self, path: str) -> list[Any]:
        """The value of the dotted field ``path`` for every row (a list aligned with ``items``).

        A field absent from a line is the model's default (a default factory is called per row); a
        field below an optional model that is null is None. The list is cached: do not modify it.

        Raises:
            KeyError: ``path`` names no field, or goes through a field that is not a model.
        """
        got = self._columns.get(path)
        if got is not None:
            return got
        model, name, nullable = self._field(path)
        parent = path.rpartition(".")[0]
        rows = self.column(parent) if parent else self.items
        get = attrgetter(name)
        values = [None if v is None else get(v) for v in rows] if nullable else list(map(get, rows))
        f = model.model_fields[name]
        if not f.is_required():
            default = field_default(f)
            value = default()
            if f.default_factory is None and not isinstance(value, (dict, list, set)):
                values = [value if v is _UNSET else v for v in values]
            else:
                values = [default() if v is _UNSET else v for v in values]
        self._columns[path] = values
        return values

    def explode(self, path: str) -> tuple[RecordTable[Any], list[int]]:
        """The items of the ``tuple[Model, ...]`` field ``path`` of every row, as one table, and their count per row.

        The sub-table's ``lines`` repeat the line of the row each item came from.

        Raises:
            KeyError: ``path`` names no field, or the field is not a tuple of one model.
        """
        model, name, _ = self._field(path)
        ann, _ = _bare(model.model_fields[name].annotation)
        args = get_args(ann)
        item_model = _model_of(args[0]) if get_origin(ann) is tuple and len(args) == 2 and args[1] is Ellipsis else None
        if item_model is None:
            raise KeyError(f"{path!r} is not a tuple of one model (annotation {ann!r})")
        groups = [() if g is None else g for g in self.column(path)]
        counts = list(map(len, groups))
        items = [x for g in groups for x in g]
        lines = [ln for ln, n in zip(self.lines, counts, strict=True) for _ in range(n)]
        return RecordTable(item_model, lines, items), counts

    def models(self) -> list[M]:
        """Every row as its pydantic model (structs rebuilt without running a validator again)."""
        plan = plan_for(self.model)
        rebuild = plan.rebuild
        struct = plan.struct
        with gc_paused():  # model trees hold no cycle; see gc_paused
            return [cast(M, rebuild(x)[0]) if type(x) is struct else x for x in self.items]

    @classmethod
    def concat(cls, model: type[M], tables: Sequence[RecordTable[M]]) -> RecordTable[M]:
        """The rows of ``tables`` one after another (the one table itself, columns cached, when there is one)."""
        if len(tables) == 1:
            return tables[0]
        return cls(model, [ln for t in tables for ln in t.lines], [x for t in tables for x in t.items])
