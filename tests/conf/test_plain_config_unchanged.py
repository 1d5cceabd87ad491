"""The plain data of every composed config is exactly the committed golden, so no config hash moves unseen.

What it checks, for the embedded default (``None``) and every experiment of ``conf/experiment/``:
``fixtures/plain_config_main.json`` holds ``conf.schema.checked_plain_config`` of each. Records, config hashes
(``runners.identity.config_hash``) and the saved ``config.yaml`` are made from this plain data, so

* the composed config, through ``checked_plain_config`` and through the typed config
  (``conf.typed.plain_config(load_config(...))``), equals the golden;
* loading it back (``checked_saved_config``) gives it again;
* it holds plain types only (``str``, ``int``, ``float``, ``bool``, ``None``; never an enum member) and
  round-trips through YAML.

A failure means a config, its hash and its records changed. If that is intended, regenerate the golden and list
the change and its reason in the commit; a new field that must not change old hashes is left out of the plain data
while it holds its default (``conf.schema.omit_defaults``). The history of the golden is the git log of its file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module

from conf.schema import checked_plain_config, checked_saved_config
from conf.typed import load_config, plain_config

# Intended changes of the goldens (newest first):
# 2026-12-05 (issue 53 item 6): +experiment=serving's serving phase gains phases.serving.sequential {looks [3, 5],
#   target_pct 5, alpha 0.05, pocock, pairing block}: each offload label stops when every (rate, metric) verdict is
#   known (docs/sequential.md, "Sequential serving phases"); its hash 0967307df7f3 -> 8fb0afab782c. Only the serving
#   entry changes: the default and every other experiment are unchanged.
# 2026-12-05 (issue 52): +experiment=aa_paired runs 6 ABBA blocks (sequential.looks [4] -> [6], 30 processes): at 4
#   blocks its printed MDE could reach 7% only at a per-block SD of 3.4% or less (docs/sequential.md). Nothing else.
# 2026-12-05 (issues 52 and 53): +experiment=aa_paired is pinned here (new): aa_noise's arms in 4 ABBA blocks, the
#   sequential runner with one look at the budget, pairing block (conf/matrix/same_runtime_aa_paired_cpu.yaml). The
#   default and every other experiment are unchanged (aa_noise, not pinned here, keeps its files and its hash).
# 2026-12-05 (issue 53 item 6): +experiment=smollm2 is pinned here, with its throughput phase sequential
#   (phases.same_runtime.sequential {looks [3, 4, 5], target_pct 5, alpha 0.05, pocock}: each label stops when its
#   answer is known, at most 20 processes, within 15 minutes on a 2-core CPU); its hash b9fb048ffeb1 -> 396474e9c4d6.
#   The default and every other experiment are unchanged.
# 2026-12-05 (issues 52 and 53): the embedded default gains the known-size control as a label of its sequential
#   phase (cases: control_delay_2_6ms, step_delay_ms 2.6): every make run shows whether it resolved a cost of
#   that size; hash 8351638565be -> 01a50fc4b2fc (pins_text 01b04f1f0a56 -> 600cb3630e85). Every experiment is
#   unchanged (aa_noise states its own cases).
# 2026-12-05 (issue 53): the embedded default (None; pins_text, which composes it) gains
#   phases.same_runtime.sequential {looks [3, 4, 6], target_pct 5, alpha 0.05, pocock}: the default stops each
#   label when its answer is known (docs/sequential.md); hash edd668379205 -> 8351638565be (pins_text d406b69c7074 ->
#   01b04f1f0a56). Every experiment is unchanged (aa_noise keeps its fixed 4 x 5 design: sequential.looks: []).
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
