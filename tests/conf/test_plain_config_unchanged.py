"""The plain data of a composed config is unchanged by the typed schema (choice fields as enums).

``fixtures/plain_config_main.json`` holds ``conf.schema.checked_plain_config`` of the default
config and of every experiment, computed on main (72b25e4) before the schema was split and its
choice fields became ``StrEnum``s. Records, config hashes and the saved ``config.yaml`` are made
from this plain data, so it must stay the same plain strings (not enum members).
The published accuracy design added, and only added, ``max_accuracy_drop: 0.0`` to every phase and the
``accuracy`` phase (``accuracy_published``) of ``qwen7b`` / ``qwen1_5b``, whose ``accuracy_manifest`` is the
full splits (``eval_datasets/full/manifest.json``), as published.
The engine path added, and only added, ``engine_validates: false`` to every explicit case and
smoke's ``engine_invalid_g2_n3`` case; and (wheel-vs-installed tree) only ``package_wheels: {}`` to every
runtime's ``pins``.
Implementation ``overlay`` added, and only added, ``overlay_source_root`` (null) and ``overlay_class``
(null; the published ``AscendPrefetchOffloader`` pattern on the Ascend runtimes) to every runtime.
The trained accuracy model added, and only added, ``accuracy_model`` to every phase (null; ``reproduce``:
``eval_models/tiny-answering-qwen2-l4-h128``) and ``fault: null`` to every explicit case, and ``reproduce``'s
``accuracy_manifest`` became the generated held-out sets (``eval_datasets/synthetic/manifest.json``).
The embedded default's measurement design then changed the default (``None``) only: model ``cpu_default``
(hidden 1024), matrix ``same_runtime_cpu`` (points (4,1) (2,1) (4,3) (1,1), 2 repeats, input 8 / 64 output
tokens, min window 6 s, its own runtime ``cpu_measure``); every phase gained ``expected_case_s`` (null unless set).
Its points then became (2,1) (1,1) with 4 repeats and ``expected_case_s`` 27 (verdicts that survive one outlying process).
The serving speed control added, and only added, to ``serving`` one explicit case ``control_delay_20ms`` (baseline,
``step_delay_ms`` 20) in 2 repeats; a case without it carries no ``step_delay_ms`` key (``conf.schema.omit_defaults``).
The serving blocks design then set ``serving``'s ``repeats`` to 3 and added one explicit case ``baseline_twin``
(implementation baseline): two baseline processes in each block (``analysis.serving.stats``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module

from conf.schema import checked_plain_config, checked_saved_config
from conf.typed import load_config, plain_config

EXPECTED = json.loads((Path(__file__).parent / "fixtures" / "plain_config_main.json").read_text())


def _plain_types_only(node: object) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            assert type(k) is str
            _plain_types_only(v)
    elif isinstance(node, list):
        for v in node:
            _plain_types_only(v)
    else:
        assert node is None or type(node) in (str, int, float, bool), (node, type(node))


@pytest.mark.parametrize("experiment", sorted(EXPECTED))
@pytest.mark.heavy  # measured 5.6 s over 11 cases in the fast tier (its budget is 2 minutes)
def test_plain_config_is_what_it_was_on_main(experiment: str) -> None:
    overrides = [] if experiment == "None" else [f"+experiment={experiment}"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        plain = checked_plain_config(compose("config", overrides=overrides), overrides)
        via_typed = plain_config(load_config(compose("config", overrides=overrides), overrides))
    assert plain == EXPECTED[experiment]
    assert via_typed == EXPECTED[experiment]
    assert checked_saved_config(plain) == EXPECTED[experiment]
    for data in (plain, via_typed):
        _plain_types_only(data)
        assert yaml.safe_load(yaml.safe_dump(data)) == data  # the saved config.yaml round-trips
