"""The typed config: one validation into the schema's dataclasses, unchanged saved bytes and hashes.

``fixtures/config_golden_main.json`` holds, for the default config, every experiment and two
override sets with pins typed as text, the ``config.yaml`` text and the config hash the runner
wrote at main 03d4446, the last commit before configs were typed (``conf.schema.checked_plain_config``
then ``yaml_text`` / ``config_sha256``; written by ``fixtures/make_config_golden.py``). The typed path
(``conf.typed.load_config`` -> ``plain_config``) must give the same bytes. (Against 15270aa the only
difference is ``bench_module: runners.incase.bench_one``, from the module move, not from typing.) The
``serving`` entry was recomputed the same untyped way when ``+experiment=serving`` gained its speed control
(one explicit case ``control_delay_20ms`` in 2 repeats), and again when it declared sequential looks
(``phases.serving.sequential``): those design changes, not the typed path, moved its hash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module

from results_schema.records.base import Device
from conf.schema import Config, ConfigError
from conf.typed import load_config, load_saved_config, plain_config, typed_config
from runners.identity.config_hash import config_sha256
from runners.orchestration.rundir import yaml_text

FIXTURES = Path(__file__).parent / "fixtures"
# Intended changes of the goldens (newest first):
# 2026-12-05 (issues 52 and 53): the embedded default gains the known-size control as a label of its sequential
#   phase (cases: control_delay_2_6ms, step_delay_ms 2.6): every make run shows whether it resolved a cost of
#   that size; hash 8351638565be -> 01a50fc4b2fc (pins_text 01b04f1f0a56 -> 600cb3630e85). Every experiment is
#   unchanged (aa_noise states its own cases).
# 2026-12-05 (issue 53): the embedded default (None; pins_text, which composes it) gains
#   phases.same_runtime.sequential {looks [3, 4, 6], target_pct 5, alpha 0.05, pocock}: the default stops each
#   label when its answer is known (docs/sequential.md); hash edd668379205 -> 8351638565be (pins_text d406b69c7074 ->
#   01b04f1f0a56). Every experiment is unchanged (aa_noise keeps its fixed 4 x 5 design: sequential.looks: []).
GOLDEN = json.loads((FIXTURES / "config_golden_main.json").read_text())
EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))


def _load(overrides: list[str]) -> Config:
    with initialize_config_module(config_module="conf", version_base="1.3"):
        return load_config(compose("config", overrides=overrides), overrides)


AFTER_GOLDEN = {"choose": ["+experiment=choose", "need_gib=0.05"],
                "qwen7b_choose": ["+experiment=qwen7b_choose", "need_gib=3"]}
"""Experiments written after the golden file (they have no bytes from before typing): checked to round-trip."""


NEW_AFTER_GOLDEN = ("smollm2", "smollm2_accuracy", "smollm2_negative_control", "negative_control_serving",
                    "aa_noise", "inprocess", "aa_paired")
"""Other experiments written after the golden file: checked to round-trip."""


def test_golden_covers_the_default_and_every_experiment() -> None:
    assert set(EXPERIMENTS) - set(AFTER_GOLDEN) - set(NEW_AFTER_GOLDEN) | {"None"} <= set(GOLDEN)


@pytest.mark.parametrize("name", NEW_AFTER_GOLDEN)
def test_a_later_experiment_config_reads_back_as_saved(name: str) -> None:
    data = plain_config(_load([f"+experiment={name}"]))
    assert plain_config(load_saved_config(data)) == data


@pytest.mark.parametrize("name", sorted(AFTER_GOLDEN))
def test_a_choose_config_saves_its_need_and_reads_it_back(name: str) -> None:
    config = _load(AFTER_GOLDEN[name])
    data = plain_config(config)
    assert data["need_gib"] == config.need_gib and data["choose"]["probe_phase"] == "probe"
    assert plain_config(load_saved_config(data)) == data


def test_choose_keys_at_their_default_are_not_saved() -> None:
    data = plain_config(_load([]))
    assert not {"need_gib", "need_kv_gib", "choose"} & set(data) and "config_json" not in data["model"]


@pytest.mark.parametrize("name", sorted(GOLDEN))
@pytest.mark.heavy  # measured 4.6 s over 15 cases in the fast tier (its budget is 2 minutes)
def test_config_yaml_and_hash_are_byte_identical_to_before_typing(name: str) -> None:
    want = GOLDEN[name]
    config = _load(list(want["overrides"]))
    assert isinstance(config, Config)
    data = plain_config(config)
    assert yaml_text(data) == want["config_yaml"]
    assert config_sha256(config) == want["config_sha256"]
    assert plain_config(load_saved_config(data)) == data  # a resume reads back the same config


def test_choice_fields_are_enums_and_pins_keep_their_text() -> None:
    config = _load(["runtime=cuda", "runtime.pins.packages.vllm=0.10"])
    assert config.runtime.device is Device.cuda
    assert config.runtime.pins.packages["vllm"] == "0.10"


def test_missing_value_stays_a_string_where_the_identity_gate_reports_it() -> None:
    config = _load(["+experiment=qwen7b"])
    assert "???" in config.runtime.pins.packages.values()


def test_missing_value_in_a_non_string_field_is_a_config_error_naming_the_key() -> None:
    data = plain_config(_load([]))
    data["phases"]["same_runtime"]["repeats"] = "???"
    with pytest.raises(ConfigError, match=r"phases\.same_runtime\.repeats is \?\?\? \(required, not given\)"):
        typed_config(data)


def test_unknown_key_is_refused_naming_it() -> None:
    data = plain_config(_load([]))
    data["executor"]["ray"]["adress"] = "x"
    with pytest.raises(ConfigError, match=r"unknown key 'executor\.ray\.adress'"):
        typed_config(data)


def test_wrong_type_names_key_and_value() -> None:
    data = plain_config(_load([]))
    data["workload"]["num_prompts"] = "many"
    with pytest.raises(ConfigError, match=r"workload\.num_prompts='many'"):
        typed_config(data)


def test_pins_entry_point_refuses_a_misspelt_key_naming_the_nearest_real_one(tmp_path, capsys) -> None:
    from runners.pins import main

    out = tmp_path / "pins.yaml"
    assert main(["+phases.same_runtime.repeatz=2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'phases.same_runtime.repeatz'" in err and "did you mean 'phases.same_runtime.repeats'" in err
    assert not out.exists()


@pytest.mark.heavy  # measured 0.7 s in the fast tier (its budget is 2 minutes)
def test_a_version_pin_stays_text_through_every_entry_point() -> None:
    from runners.pins import compose as pins_compose

    overrides = ["runtime=cuda", "runtime.pins.packages.vllm=0.10"]
    for config in (_load(overrides), pins_compose(overrides)):
        assert config.runtime.pins.packages["vllm"] == "0.10"
        saved = load_saved_config(yaml.safe_load(yaml_text(plain_config(config))))  # a resume reads config.yaml
        assert saved.runtime.pins.packages["vllm"] == "0.10"
    assert "vllm: '0.10'" in yaml_text(plain_config(_load(overrides)))
