"""The smollm2 model source: hash-checked input, the Llama layout, deterministic bytes, provenance in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from runners.models import smollm2
from runners.models.built import BUILT_SOURCES, built_dir

REPO = Path(__file__).resolve().parents[2]


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp ``convert_hf_to_gguf.py`` ``LlamaModel.permute``."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("n_head", [9, 3])
def test_reverse_permute_undoes_llama_cpp_permute(n_head):
    w = np.arange(n_head * 64 * 5, dtype=np.float32).reshape(n_head * 64, 5)
    assert np.array_equal(smollm2.reverse_permute(llama_cpp_permute(w, n_head), n_head), w)
    assert not np.array_equal(llama_cpp_permute(w, n_head), w)


def test_gguf_names_map_to_hugging_face_llama_names_and_others_are_refused():
    assert smollm2.hf_tensor_name("blk.29.attn_q.weight") == "model.layers.29.self_attn.q_proj.weight"
    assert smollm2.hf_tensor_name("blk.0.ffn_up.weight") == "model.layers.0.mlp.up_proj.weight"
    assert smollm2.hf_tensor_name("token_embd.weight") == "model.embed_tokens.weight"
    with pytest.raises(ValueError, match="not a Llama decoder tensor"):
        smollm2.hf_tensor_name("blk.0.ssm_conv1d.weight")


def test_smollm2_is_a_built_source_cached_under_its_own_name():
    from conf.schema_stack import ModelConfig

    assert {"tiny", "smollm2"} <= BUILT_SOURCES
    d = built_dir(ModelConfig(name="m", source="smollm2", num_layers=30, cache_dir="/x"))  # type: ignore[arg-type]
    assert d == Path("/x/smollm2-135m-instruct-q4_1-bf16")


def test_a_directory_without_provenance_has_none_in_the_manifest(tmp_path):
    assert smollm2.manifest_provenance(tmp_path) is None
    (tmp_path / "provenance.json").write_text("{}")
    with pytest.raises(ValueError, match="not this builder's provenance"):
        smollm2.manifest_provenance(tmp_path)


@pytest.mark.heavy  # hashes the 98 MB GGUF
def test_installed_wheel_gguf_is_checked_against_the_pins(monkeypatch):
    path = smollm2.installed_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size == smollm2.GGUF_SIZE
    monkeypatch.setattr(smollm2, "GGUF_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="pinned 0000"):
        smollm2.installed_gguf()


@pytest.mark.heavy(seconds=15)  # one build, ~15-30 s on 2 cores
def test_a_build_gives_the_pinned_sha256sums(tmp_path):
    """The build is deterministic: its files hash to the pins ``conf/model/smollm2.yaml`` holds (written from an
    earlier build, on another host), which also shows what a second build here would (a second build cost ~10 CPU-s)."""
    from results_schema.codec.files import file_sha256

    a = smollm2.build_smollm2(tmp_path / "a")
    names = [ln.split()[1] for ln in (a / "SHA256SUMS").read_text().splitlines()]
    assert names == sorted(["LICENSE", "chat_template.jinja", "config.json", "generation_config.json",
                            "model.safetensors", "provenance.json", "tokenizer.json", "tokenizer_config.json"])
    pinned = [ln.split(":", 1)[1].strip() for ln in (REPO / "conf/model/smollm2.yaml").read_text().splitlines()
              if ln.startswith("sha256sums_sha256:")]
    assert pinned == [file_sha256(a / "SHA256SUMS")]
    assert json.loads((a / "config.json").read_text()) == json.loads(
        (REPO / "conf/model/configs/smollm2_135m.json").read_text())
    prov = smollm2.manifest_provenance(a)
    assert prov is not None and prov.description == "SmolLM2-135M-Instruct, Q4_1 dequantized to bf16"
    assert prov.source_wheel_sha256 == smollm2.WHEEL_SHA256 and prov.source_file_sha256 == smollm2.GGUF_SHA256
    assert "Q4_1 x210" in prov.quantization
    with pytest.raises(ValueError, match="exists"):
        smollm2.build_smollm2(a)
