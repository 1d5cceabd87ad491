"""``conf.schema.omit_defaults`` reads the schema: a field marked ``added_field`` is left out of the plain config while
it holds its default, at any depth (a nested schema, a list and a map of schemas); an unmarked field never is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from conf.schema import omit_defaults
from conf.schema_stack import added_field


@dataclass
class Inner:
    old: Optional[int] = None
    new: Optional[int] = added_field()


@dataclass
class Outer:
    kept: Optional[str] = None
    added: Optional[float] = added_field()
    block: Inner = added_field(default_factory=Inner)
    one: Inner = field(default_factory=Inner)
    many: List[Inner] = field(default_factory=list)
    named: Dict[str, Inner] = field(default_factory=dict)


def test_marked_fields_at_their_default_are_left_out_at_every_depth():
    inner = {"old": None, "new": None}
    data = {"kept": None, "added": None, "block": dict(inner), "one": dict(inner), "many": [dict(inner)],
            "named": {"a": dict(inner)}}
    assert omit_defaults(data, Outer) == {"kept": None, "one": {"old": None}, "many": [{"old": None}],
                                          "named": {"a": {"old": None}}}


def test_a_marked_field_that_differs_from_its_default_is_kept():
    data = {"added": 1.5, "block": {"old": None, "new": 3}, "one": {"old": 1, "new": 2}}
    assert omit_defaults(data, Outer) == {"added": 1.5, "block": {"old": None, "new": 3}, "one": {"old": 1, "new": 2}}
