"""Secrets: only run-relevant environment variables are recorded (allow-list), credential-shaped
values are redacted whatever their name, and no credential of the table reaches any file of a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from results_schema.records.manifest import REDACTED, looks_like_credential
from runners.incase.recorded_env import recordable_env
from tests.runners.helpers import run_fake

# name, value, recorded as: None = not recorded at all, REDACTED = name kept, value redacted
SECRETS = [
    ("HF_TOKEN", "hf_AbCdEfGhIjKlMnOpQrStUvWx", None),
    ("MY_API_KEY", "k3y-value-1234567890-abcdef", None),
    ("DB_PASSWORD", "pa55w0rd-xyz-4711", None),
    ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None),
    ("GH_PAT", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", None),           # was written
    ("NOT_A_SECRET_NAME", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", None),
    ("VLLM_REMOTE_URL", "https://alice:s3cr3tpw@models.example.com/repo", REDACTED),  # allowed name
    ("OMP_EXTRA", "sk-proj-abcdefghijklmnop1234", REDACTED),
    ("CUDA_EXTRA", "AKIAIOSFODNN7EXAMPLE", REDACTED),
    ("TORCH_HEADER", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     REDACTED),
    ("HCCL_MIRROR", "ftp://bob:hunter2hunter2@mirror.example.org", REDACTED),
    ("VLLM_API_KEY", "plain-looking-value-42", None),                       # allowed prefix, secret name
    ("ASCEND_SLACK", "xoxb-1234567890-abcdefghij", REDACTED),
    # short forms: a known prefix followed by any number of token characters
    ("TORCH_FOO", "ghp_abcdefSECRET7", REDACTED),
    ("VLLM_SHORT_HF", "hf_Ab12", REDACTED),
    ("OMP_SHORT_SK", "sk-x9", REDACTED),
    ("CUDA_SHORT_PAT", "github_pat_1A", REDACTED),
    ("MKL_SHORT_GL", "glpat-Z", REDACTED),
    ("KMP_SHORT_SLACK", "xoxp-7", REDACTED),
]
KEPT = [("VLLM_CPU_KVCACHE_SPACE", "1"), ("OMP_NUM_THREADS", "2"), ("HF_HUB_OFFLINE", "1"),
        ("VLLM_PLAIN_URL", "https://models.example.com/repo"), ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]
NOT_RECORDED = [("SOME_RANDOM_VAR", "unrelated-value-31337"), ("HOME_OF_CATS", "/tmp/cats")]


@pytest.mark.parametrize("name,value,expected", SECRETS)
def test_recordable_env_drops_or_redacts_every_secret(name, value, expected):
    got = recordable_env({name: value})
    assert got.get(name) == expected
    assert value not in got.values()


@pytest.mark.parametrize("name,value", KEPT)
def test_run_relevant_variables_are_recorded_verbatim(name, value):
    assert recordable_env({name: value}) == {name: value}
    assert not looks_like_credential(value)


def test_variables_outside_the_allow_list_are_not_recorded_unless_declared():
    env = dict(NOT_RECORDED)
    assert recordable_env(env) == {}
    assert recordable_env(env, declared=["SOME_RANDOM_VAR"]) == {"SOME_RANDOM_VAR": "unrelated-value-31337"}


@pytest.mark.heavy  # measured 3.0 s in the fast tier (its budget is 2 minutes)
def test_no_credential_reaches_any_file_of_a_run(tmp_path: Path, monkeypatch) -> None:
    for name, value, _ in SECRETS + [(n, v, None) for n, v in NOT_RECORDED]:
        monkeypatch.setenv(name, value)
    code, run_dir = run_fake(tmp_path, "phases.same_runtime.points=[{g: 4, n: 1}]")
    assert code == 0
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "environment-manifest.json" for p in files) and any(p.suffix == ".log" for p in files)
    for path in files:
        text = path.read_bytes().decode(errors="replace")
        for name, value, expected in SECRETS:
            assert value not in text, f"{name}'s value reached {path}"
            if expected is None:
                assert name not in text, f"{name} reached {path}"
        for name, value in NOT_RECORDED:
            assert value not in text, f"{name} (not run-relevant) reached {path}"
    manifest = (run_dir / "environment-manifest.json").read_text()
    assert '"VLLM_REMOTE_URL": "<redacted: looks like a credential>"' in manifest
    log = next(p for p in files if p.suffix == ".log").read_text()
    assert "# env: VLLM_REMOTE_URL=<redacted: looks like a credential>" in log
    assert "# env: VLLM_CPU_KVCACHE_SPACE=" in log  # the runtime's declared variable is recorded


def test_credential_value_in_the_runtime_env_config_is_refused():
    from runners.errors import PlanError
    from runners.planning.plan import plan
    from tests.runners.helpers import compose_cfg

    with pytest.raises(PlanError, match="VLLM_MIRROR"):
        plan(compose_cfg("+runtime.env.VLLM_MIRROR='https://u:hunter2hunter2@x.org'"))


SHORT_TOKEN = "ghp_abcdefSECRET7"


@pytest.mark.heavy  # a fake-bench run (3 s CPU)
def test_a_short_token_reaches_no_file_of_a_baseline_only_run_even_through_a_failure(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """Manifest, case log header and the failure record's log tail: the short token is written nowhere."""
    from results_schema.codec.io import read_jsonl
    from results_schema.records.case_outcome import CaseFailure

    monkeypatch.setenv("TORCH_FOO", SHORT_TOKEN)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    code, run_dir = run_fake(tmp_path, "phases.same_runtime.points=[]", "+runtime.env.FAKE_BEHAVIOUR=\"baseline=crash\"")
    assert code == 1  # the crashed baseline is a failure record with the log's tail
    (failure,) = read_jsonl(run_dir / "same_runtime-failures.jsonl", CaseFailure)
    assert failure.log_tail  # the log's tail is recorded with the failure
    log = run_dir / "logs" / "same_runtime" / "baseline-r0.log"
    assert f"# env: TORCH_FOO={REDACTED}" in log.read_text()
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"environment-manifest.json", "same_runtime-failures.jsonl"} <= {p.name for p in files}
    for path in files:
        assert SHORT_TOKEN.encode() not in path.read_bytes(), path
        assert b"abcdefSECRET7" not in path.read_bytes(), path
    assert f'"TORCH_FOO": "{REDACTED}"' in (run_dir / "environment-manifest.json").read_text()
