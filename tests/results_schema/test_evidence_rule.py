"""One evidence rule for the runner (first problem) and the validation (every problem)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from results_schema.records.base import Device
from conf.schema_stack import RuntimeConfig
from analysis.validation.common import Collector
from analysis.validation.records import check_evidence as offline_check
from offload.selection import select_offload_layers
from results_schema.rules.evidence_rule import config_num_layers, evidence_problems
from results_schema.codec.io import write_json
from runners.outcome.case_checks import CheckFailed, check_evidence as live_check
from results_schema.rules.log_rule import OFFLOAD_EVIDENCE
from tests.support.synthetic import SynthCase, make_case_run

CR = make_case_run("p", SynthCase("current_g4_n1", "current", 4, 1), 0, random.Random(0))

BROKEN = {  # evidence change -> (validation issue code, runner failure type)
    "no_post_init": ({"post_init_called": False}, "no_post_init", "no_offload_evidence"),
    "params": ({"offload_params": ("mlp",)}, "evidence_mismatch", "evidence_mismatch"),
    "prefetch": ({"offload_prefetch_step": 3}, "evidence_mismatch", "evidence_mismatch"),
    "class": ({"offloader_class": "offload.sync.SyncOffloader"}, "wrong_offloader_class", "evidence_mismatch"),
    "selection": ({"selected_layers": (3, 7, 0)}, "selection_mismatch", "evidence_mismatch"),
}


def _live(ev, tmp_path: Path, model: str | None = None) -> None:
    case = SimpleNamespace(implementation="current", group_size=4, num_in_group=1, prefetch_step=1, params=(),
                           runtime=RuntimeConfig(name="cpu", device=Device.cpu))
    side = tmp_path / "ev.json"
    write_json(side, ev)
    live_check(SimpleNamespace(case=case), f"{OFFLOAD_EVIDENCE}{ev.model_dump_json()}\n", side, model=model)


def test_the_synthetic_evidence_passes_both() -> None:
    assert evidence_problems(CR.evidence, implementation="current", setting=CR.record.offload,
                             select=select_offload_layers) == []


@pytest.mark.parametrize("name", BROKEN)
def test_each_problem_is_found_live_and_offline(name: str, tmp_path: Path) -> None:
    update, code, failure_type = BROKEN[name]
    ev = CR.evidence.model_copy(update=update)
    col = Collector()
    offline_check(SimpleNamespace(case_runs=[(None, 1, CR.model_copy(update={"evidence": ev}))]), col, None)
    assert code in [i.code for _c, i in col.issues]
    with pytest.raises(CheckFailed) as exc:
        _live(ev, tmp_path)
    assert exc.value.failure_type == failure_type


def test_offline_collects_every_problem_live_stops_at_the_first(tmp_path: Path) -> None:
    ev = CR.evidence.model_copy(update={"post_init_called": False, "offload_prefetch_step": 3})
    probs = evidence_problems(ev, implementation="current", setting=CR.record.offload, select=select_offload_layers)
    assert [p.code for p in probs] == ["evidence_mismatch", "no_post_init"]
    with pytest.raises(CheckFailed) as exc:
        _live(ev, tmp_path)
    assert exc.value.message == probs[0].message


def test_a_layer_count_other_than_config_json_is_found_live_and_offline(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": CR.evidence.num_layers + 4}))
    col = Collector()
    offline_check(SimpleNamespace(case_runs=[(None, 1, CR)]), col, model)
    assert [i.code for _c, i in col.issues] == ["num_layers_mismatch"]
    with pytest.raises(CheckFailed) as exc:
        _live(CR.evidence, tmp_path, model=str(model))
    assert exc.value.failure_type == "evidence_mismatch"
    assert exc.value.message == col.issues[0][1].message.split(": ", 1)[1]
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": CR.evidence.num_layers}))
    _live(CR.evidence, tmp_path, model=str(model))  # the same count passes
    assert config_num_layers(tmp_path / "no-such-model") is None  # a hub name or unreadable dir: not checked
