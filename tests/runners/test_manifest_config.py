"""The manifest records the config as strict JSON, a serving rate of ``.inf`` included (as the text "inf"), and the
text reads back to the data its ``config_sha256`` names."""

from __future__ import annotations

import math

from hydra import compose, initialize_config_module

from conf.typed import load_config, plain_config
from results_schema.codec.io import dumps_model, read_json, write_json
from results_schema.records.manifest import FILE_NAME, EnvironmentManifest, GitIdentity, ModelIdentity
from results_schema.rules.config_rule import canonical_sha256, config_matches, non_finite_from_text
from runners.identity.config_hash import config_sha256
from runners.identity.manifest import build_manifest, json_safe


def test_json_safe_writes_non_finite_floats_as_text_and_keeps_the_rest() -> None:
    assert json_safe({"a": [1.0, float("inf"), -float("inf")], "b": (2, "x"), "c": None}) == \
        {"a": [1.0, "inf", "-inf"], "b": [2, "x"], "c": None}
    assert json_safe(float("nan")) == "nan"


def test_a_config_with_an_infinite_request_rate_round_trips_in_the_manifest() -> None:
    overrides = ["+experiment=serving", "phases.serving.serving.request_rates=[4,inf]"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        config = load_config(compose("config", overrides=overrides), overrides)
    assert plain_config(config)["phases"]["serving"]["serving"]["request_rates"][-1] == float("inf")
    model = ModelIdentity(name="tiny", path="/m", sha256sums_sha256="0" * 64, revision=None, num_layers=2)
    manifest = build_manifest(run_id="r", experiment="serving", packages={}, checks=(), model=model,
                              offload_tree="0" * 64, devices=(), config=config, overrides=overrides,
                              case_code="0" * 64, git=GitIdentity(revision="unborn", dirty=False), env={})
    dumps_model(manifest)  # raises when the manifest does not round-trip through strict JSON
    assert manifest.config["phases"]["serving"]["serving"]["request_rates"][-1] == "inf"
    assert manifest.config_sha256 == config_sha256(config)


def test_the_shared_hash_of_a_config_with_an_infinite_rate_survives_the_manifest(tmp_path) -> None:
    """The serving experiment's rates end in ``.inf``: the manifest written and read back holds it as text, and
    the text read back (``non_finite_from_text``) hashes to the ``config_sha256`` the runner recorded; the text
    alone does not."""
    overrides = ["+experiment=serving"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        config = load_config(compose("config", overrides=overrides), overrides)
    assert plain_config(config)["phases"]["serving"]["serving"]["request_rates"][-1] == math.inf
    model = ModelIdentity(name="tiny", path="/m", sha256sums_sha256="0" * 64, revision=None, num_layers=2)
    write_json(tmp_path / FILE_NAME, build_manifest(
        run_id="r", experiment="serving", packages={}, checks=(), model=model, offload_tree="0" * 64, devices=(),
        config=config, overrides=overrides, case_code="0" * 64, git=GitIdentity(revision="unborn", dirty=False),
        env={}))
    back = read_json(tmp_path / FILE_NAME, EnvironmentManifest)
    assert back.config["phases"]["serving"]["serving"]["request_rates"][-1] == "inf"
    assert back.config_sha256 == config_sha256(config)
    assert canonical_sha256(non_finite_from_text(back.config)) == back.config_sha256
    assert canonical_sha256(back.config) != back.config_sha256
    assert config_matches(back.config, back.config_sha256)
