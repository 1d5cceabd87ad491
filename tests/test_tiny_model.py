import json
import time
from pathlib import Path

import pytest
from safetensors import safe_open

from runners.models.tiny_model import build_tiny_model, layer_param_count, verify_model_dir


def test_same_seed_builds_byte_identical_files(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", num_layers=2)
    b = build_tiny_model(tmp_path / "b", num_layers=2)
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_different_seed_changes_weights(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", num_layers=1, seed=0)
    b = build_tiny_model(tmp_path / "b", num_layers=1, seed=1)
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()


def test_layer_bytes_match_architecture_fact(tiny_model_dir: Path) -> None:
    # ARCHITECTURE.md: layers 3 and 7 of the 8-layer tiny Qwen2 hold 591,872 bytes (bf16).
    per_layer = layer_param_count(128, 256, 4, 2, 32) * 2
    assert 2 * per_layer == 591_872
    with safe_open(str(tiny_model_dir / "model.safetensors"), "pt") as f:
        got = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys() if k.startswith("model.layers.3."))
    assert got * 2 == per_layer


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_config_and_tokenizer_are_qwen2_with_chat_template(tiny_model_dir: Path) -> None:
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["num_hidden_layers"] == 8
    tok_cfg = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_cfg["chat_template"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    text = "Natalia sold 48 clips. #### 72"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok) == cfg["vocab_size"]


def test_tampered_file_fails_verification(tmp_path: Path) -> None:
    d = build_tiny_model(tmp_path / "m", num_layers=1)
    (d / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="config.json"):
        verify_model_dir(d)


def test_refuses_non_empty_output_dir(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        build_tiny_model(tmp_path / "m")
    assert (tmp_path / "m" / "x").read_text() == "keep me"


def test_two_callers_at_once_build_the_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Test workers on a fresh clone (and two runs) ask for the model at the same time: one builds, the other waits."""
    import threading

    import runners.models.tiny_model as tm

    built: list[Path] = []
    real_build = tm.build_tiny_model

    def slow_build(out_dir, **kw):  # the window in which a second caller would also see no model
        built.append(Path(out_dir))
        time.sleep(0.5)
        return real_build(out_dir, **kw)

    monkeypatch.setattr(tm, "build_tiny_model", slow_build)
    results: list[Path | BaseException] = []

    def ask() -> None:
        try:
            results.append(tm.ensure_tiny_model(tmp_path, num_layers=1))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(built) == 1, built
    assert len(results) == 2 and results[0] == results[1] == tmp_path / "tiny-qwen2-l1-h128-s0", results
