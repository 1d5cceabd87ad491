"""bench_one's pure parts: exact-length prompts, per-round freshness, digests, argument validation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runners.incase.bench_one import main, make_prompt_ids
from runners.incase.rounds import digest_ids

REPO = Path(__file__).resolve().parents[2]
VOCAB = list(range(10, 300))


def test_prompts_have_exact_length_and_are_deterministic() -> None:
    a = make_prompt_ids(0, 1, 4, 32, VOCAB)
    assert len(a) == 4 and all(len(p) == 32 for p in a)
    assert a == make_prompt_ids(0, 1, 4, 32, VOCAB)
    assert all(t in set(VOCAB) for p in a for t in p)


def test_each_round_gets_fresh_prompts() -> None:
    rounds = [make_prompt_ids(0, r, 4, 32, VOCAB) for r in range(4)]
    firsts = {tuple(r[0][:8]) for r in rounds}
    assert len(firsts) == 4  # no shared prefix -> no prefix-cache reuse across rounds
    assert make_prompt_ids(1, 0, 4, 32, VOCAB) != rounds[0]


def test_digest_is_order_and_boundary_sensitive() -> None:
    assert digest_ids([[1, 2], [3]]) != digest_ids([[3], [1, 2]])
    assert digest_ids([[1, 2], [3]]) != digest_ids([[1], [2, 3]])
    assert digest_ids([[1, 2], [3]]) == digest_ids([[1, 2], [3]])


def _case_file(tmp_path, implementation: str, offload: dict | None = None, **workload) -> str:
    """A bench case.json (written as raw JSON, so invalid values reach bench_one's own checks)."""
    w = dict(num_prompts=2, input_len=8, max_tokens=4, max_model_len=64, seed=0, dtype="bfloat16",
             enforce_eager=True, gpu_memory_utilization=0.5, warmup_rounds=1, measured_rounds=3,
             min_measured_s=0.0, enable_prefix_caching=None, prompts_vary_per_round=True)
    w.update(workload)
    case = dict(kind="bench", phase="p", label="x", implementation=implementation, repeat=0, runtime="cpu",
                model="/nonexistent", record="/tmp/r.json", workload=w,
                offload={"offload_group_size": 0, "offload_num_in_group": 0, **(offload or {})})
    path = tmp_path / "x-r0.case.json"
    path.write_text(json.dumps(case))
    return str(path)


INVALID = [
    ("current", dict(offload_group_size=2, offload_num_in_group=3),
     "offload_num_in_group (3) must be <= offload_group_size (2)"),
    ("current", dict(offload_group_size=4, offload_num_in_group=1, offload_backend="magic"),
     "offload_backend ('magic')"),
    ("baseline", dict(offload_group_size=4, offload_num_in_group=1),
     "implementation baseline needs offload_group_size 0"),
    ("current", {}, "needs offload_group_size > 0"),
]


@pytest.mark.parametrize("implementation, offload, message", INVALID)
def test_invalid_arguments_exit_2_with_the_message(implementation, offload, message, capsys, tmp_path) -> None:
    assert main(["--case", _case_file(tmp_path, implementation, offload)]) == 2
    assert message in capsys.readouterr().err


def test_invalid_arguments_exit_before_vllm_is_imported(tmp_path) -> None:
    """In a fresh interpreter: this test's process may already hold vLLM (another test imported it)."""
    dirs = [tmp_path / str(i) for i in range(len(INVALID))]
    for d in dirs:
        d.mkdir()
    cases = [_case_file(d, impl, off) for d, (impl, off, _) in zip(dirs, INVALID, strict=True)]
    code = ("import sys; from runners.incase.bench_one import main; "
            "codes = [main(['--case', c]) for c in sys.argv[1:]]; print(codes, 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, *cases], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.splitlines()[-1]
    assert out == f"{[2] * len(INVALID)} False", out


def test_seed_text_needs_the_same_prompts_every_round(capsys, tmp_path) -> None:
    case = _case_file(tmp_path, "baseline", prompt_mode="seed_text")
    assert main(["--case", case]) == 2
    assert "prompt_mode seed_text uses the same prompts in every round" in capsys.readouterr().err


def test_missing_case_file_exits_2(capsys, tmp_path) -> None:
    assert main(["--case", str(tmp_path / "none.case.json")]) == 2
    assert "none.case.json" in capsys.readouterr().err


def _fake_round(elapsed_s: float, calls: list[int]):
    def one_round(g: int):
        calls.append(g)
        return elapsed_s, [[1, 2, 3], [4, 5, 6]], 16
    return one_round


def test_rounds_repeat_until_the_minimum_window_is_reached() -> None:
    from runners.incase.bench_one import run_rounds

    calls: list[int] = []
    rounds = run_rounds(_fake_round(0.25, calls), warmup_rounds=1, min_rounds=3, min_measured_s=3.0)
    # 0.25 s rounds: 3 rounds give 0.75 s; the 3 s window needs 12 rounds
    assert len(rounds) == 12
    assert sum(r.elapsed_s for r in rounds) >= 3.0
    assert sum(r.elapsed_s for r in rounds[:-1]) < 3.0
    assert calls == list(range(13))  # warmup round 0 first, then fresh prompts per round
    assert [r.index for r in rounds] == list(range(12))


def test_slow_rounds_keep_the_minimum_round_count() -> None:
    from runners.incase.bench_one import run_rounds

    rounds = run_rounds(_fake_round(2.0, []), warmup_rounds=0, min_rounds=3, min_measured_s=3.0)
    assert len(rounds) == 3  # 2 rounds reach 4 s, but measured_rounds asks 3


def test_negative_min_window_is_rejected_before_vllm(capsys, tmp_path) -> None:
    assert main(["--case", _case_file(tmp_path, "baseline", min_measured_s=-1)]) == 2
    assert "workload.min_measured_s: Input should be greater than or equal to 0" in capsys.readouterr().err


def test_identity_digest_covers_the_rounds_every_case_runs() -> None:
    """A slower case measures fewer extra rounds; its greedy digest must still equal the baseline's."""
    from runners.incase.bench_one import overall_digest, run_rounds

    fast = run_rounds(_fake_round(0.25, []), warmup_rounds=1, min_rounds=3, min_measured_s=3.0)
    slow = run_rounds(_fake_round(1.0, []), warmup_rounds=1, min_rounds=3, min_measured_s=3.0)
    assert len(fast) == 12 and len(slow) == 3
    assert overall_digest(fast, 3) == overall_digest(slow, 3)


def test_the_host_is_read_once_after_the_warmup_rounds_and_before_the_first_measured_round():
    from runners.incase.bench_one import run_rounds

    calls: list[int] = []
    marks: list[int] = []
    rounds = run_rounds(_fake_round(0.25, calls), warmup_rounds=2, min_rounds=3, min_measured_s=0.0,
                        window_start=lambda: marks.append(len(calls)))
    assert marks == [2] and len(rounds) == 3
    marks.clear()
    calls.clear()
    run_rounds(_fake_round(0.25, calls), warmup_rounds=0, min_rounds=2, min_measured_s=0.0,
               window_start=lambda: marks.append(len(calls)))
    assert marks == [0]
