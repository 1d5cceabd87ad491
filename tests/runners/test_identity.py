"""Identity: hashes, pins (fail closed), secrets never written, manifest strictness."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from conf.schema_stack import PinsConfig
from results_schema.records.manifest import EnvironmentManifest, is_secret_name
from runners.identity.pin_checks import IdentityError, check_pins, enforce
from runners.incase.recorded_env import recordable_env
from runners.identity.probe import package_version, sha256_file, tree_sha256


def _pins(**kw):
    return check_pins(PinsConfig(**kw), model_dir=None, model_pin=None, model_revision=None, observed_revision=None,
                      offload_pin=None, offload_actual="x")


def test_tree_hash_tracks_content_and_paths_and_ignores_bytecode(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    h0 = tree_sha256(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"junk")
    assert tree_sha256(tmp_path) == h0
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert tree_sha256(tmp_path) != h0


def test_file_pin_mismatch_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "version.info"
    f.write_text("driver 1\n")
    good = sha256_file(f)
    assert all(c.ok for c in _pins(files={str(f): good}))
    f.write_text("driver 2\n")
    with pytest.raises(IdentityError, match=r"pin file '.*version.info': expected"):
        enforce(_pins(files={str(f): good}), when="test")


def test_declared_but_unset_pin_fails_closed() -> None:
    with pytest.raises(IdentityError, match=r"pin package 'pydantic' is declared but has no value"):
        enforce(_pins(packages={"pydantic": "???"}), when="test")


def test_missing_tool_is_named_first() -> None:
    checks = _pins(tools=["definitely-not-a-tool-xyz"], packages={"pydantic": "???"})
    with pytest.raises(IdentityError, match=r"required tool 'definitely-not-a-tool-xyz' is not on PATH \(\+1 more"):
        enforce(checks, when="test")


def test_failed_pins_shared_by_two_runtimes_are_listed_once() -> None:
    one_runtime = _pins(tools=["definitely-not-a-tool-xyz"], packages={"pydantic": "???", "no-such-dist-xyz": "1.0"})
    with pytest.raises(IdentityError) as exc:
        enforce(one_runtime + one_runtime, when="test")  # two runtimes declaring the same pins
    msg = str(exc.value)
    assert "(+2 more: package:pydantic, package:no-such-dist-xyz)" in msg, msg
    assert msg.count("tool:definitely-not-a-tool-xyz") == 0 and msg.count("package:pydantic") == 1


def test_qwen7b_identity_gate_lists_each_failed_pin_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.errors import RunnerError
    from runners.config import runtimes_used
    from runners.identity.gates import gather_identity
    from tests.runners.helpers import compose_cfg

    monkeypatch.setattr("shutil.which", lambda name, *a, **k: None)  # npu-smi absent even on an Ascend host
    with pytest.raises(RunnerError) as exc:
        cfg = compose_cfg("+experiment=qwen7b")
        gather_identity(cfg, runtimes_used(cfg), when="test")
    msg = str(exc.value)
    first = msg.splitlines()[0]
    assert "required tool 'npu-smi' is not on PATH" in first
    listed = first.split("more: ", 1)[1].rstrip(")").split(", ")
    assert len(listed) == len(set(listed)), listed
    assert "tool:npu-smi" not in listed and listed.count("package:vllm-ascend") <= 1
    assert f"(+{len(listed)} more: " in first
    # then every failed pin of every runtime, once, with expected and observed values
    details = [ln for ln in msg.splitlines() if ln.startswith("  - ")]
    assert len(details) == len(set(details))
    assert ("  - [ascend_native_v018] pin package 'vllm-ascend': expected '==0.18.0', but it is missing on this "
            "machine") in details
    assert any(d.startswith("  - [ascend_latest] pin package 'torch-npu' is declared but has no value") for d in details)
    assert "python -m runners.pins +experiment=qwen7b" in msg.splitlines()[-1]


def test_package_pins_accept_exact_versions_and_specifiers() -> None:
    v = package_version("pydantic")
    assert v is not None
    assert all(c.ok for c in _pins(packages={"pydantic": v}))
    assert all(c.ok for c in _pins(packages={"pydantic": ">=2"}))
    assert not any(c.ok for c in _pins(packages={"pydantic": "==1.*"}))
    assert not any(c.ok for c in _pins(packages={"no-such-dist-xyz": "1.0"}))


def test_secret_environment_names_are_never_written() -> None:
    env = {"HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "s", "DB_PASSWORD": "p", "OPENAI_API_KEY": "k",
           "VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/bin"}
    kept = recordable_env(env)
    assert kept == {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert is_secret_name("my_api_token") and not is_secret_name("OMP_NUM_THREADS")


def test_manifest_forbids_extra_fields() -> None:
    with pytest.raises(ValidationError):
        EnvironmentManifest.model_validate({"schema_version": 1, "surprise": True})


def test_model_sums_pin(tmp_path: Path) -> None:
    (tmp_path / "SHA256SUMS").write_text("abc  config.json\n")
    digest = hashlib.sha256(b"abc  config.json\n").hexdigest()
    checks = check_pins(PinsConfig(), model_dir=tmp_path, model_pin=digest, model_revision=None, observed_revision=None,
                        offload_pin="y", offload_actual="x")
    assert [(c.kind, c.ok) for c in checks] == [("model_sha256sums", True), ("offload_tree", False)]
