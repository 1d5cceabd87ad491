"""Log parsing: KV cache capacity in every known format, and the root-cause exception."""

from __future__ import annotations

import pytest

from runners.outcome.case_log import parse_kv_cache, root_cause


@pytest.mark.parametrize("line, field, value", [
    ("INFO [gpu_worker.py:1] Available KV cache memory: 15.66 GiB", "kv_cache_gib", 15.66),
    ("INFO [kv_cache_utils.py:1] GPU KV cache size: 2,042,016 tokens", "kv_cache_tokens", 2042016),
    ("(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens", "kv_cache_tokens", 524288),
    ("INFO Maximum concurrency for 2,048 tokens per request: 997.08x", "max_concurrency", 997.08),
    ("INFO Maximum concurrency for 256 tokens per request: 2,048.00x", "max_concurrency", 2048.0),
    ("INFO # GPU blocks: 1000, KV cache size: 16,000 tokens", "kv_cache_tokens", 16000),
])
def test_parses_every_kv_cache_format(line: str, field: str, value: float) -> None:
    assert getattr(parse_kv_cache(f"noise\n{line}\nmore noise\n"), field) == value


def test_combined_vllm_cpu_line_gives_tokens_and_concurrency() -> None:
    kv = parse_kv_cache("CPU KV cache size: 524,288 tokens, Maximum concurrency for 256 tokens per request: 2048.00x")
    assert (kv.kv_cache_tokens, kv.max_concurrency, kv.kv_cache_gib) == (524288, 2048.0, None)


def test_missing_kv_line_gives_null_not_zero() -> None:
    kv = parse_kv_cache("nothing about caches here\n")
    assert kv.kv_cache_tokens is None and kv.kv_cache_gib is None and kv.max_concurrency is None


def test_root_cause_is_the_child_assertion_not_the_parent_runtime_error() -> None:
    log = "\n".join([
        "(EngineCore pid=7) ERROR 11-30 06:59:35 [core.py:1] EngineCore failed to start.",
        "(EngineCore pid=7) ERROR 11-30 06:59:35 [core.py:1] Traceback (most recent call last):",
        '(EngineCore pid=7) ERROR 11-30 06:59:35 [core.py:1]   File "prefetch.py", line 9, in wrap_modules',
        "(EngineCore pid=7) ERROR 11-30 06:59:35 [core.py:1] AssertionError: Module parameters should not already be on CPU",
        "Traceback (most recent call last):",
        '  File "bench_one.py", line 1, in <module>',
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ])
    assert root_cause(log) == ("AssertionError", "Module parameters should not already be on CPU")


def test_root_cause_read_past_the_rank_prefix_of_an_engine_in_the_case_process() -> None:
    # VLLM_ENABLE_V1_MULTIPROCESSING=0: upstream's assertion from the case process itself (this machine's log)
    log = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/v/vllm/model_executor/offloader/prefetch.py", line 429, in __init__',
        '[rank0]:     assert self.device != torch.device("cpu"), (',
        "[rank0]:            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "[rank0]: AssertionError: Module parameters should not already be on CPU (offloader handles CPU placement)",
    ])
    assert root_cause(log) == ("AssertionError",
                               "Module parameters should not already be on CPU (offloader handles CPU placement)")
    assert root_cause("(EngineCore_DP0 pid=1) [rank0]: AssertionError: boom\n") == ("AssertionError", "boom")


def test_root_cause_of_plain_error_line() -> None:
    assert root_cause("ValueError: offload_num_in_group (3) must be <= offload_group_size (2)\n") == (
        "ValueError", "offload_num_in_group (3) must be <= offload_group_size (2)")
    assert root_cause("all good\n") == (None, None)


# ------------------------------------------------------------------ logs with values out of range

from pathlib import Path  # noqa: E402

from runners.outcome.bench import finalize_bench  # noqa: E402
from runners.outcome.case_log import kv_cache_change, kv_cache_problem  # noqa: E402
from runners.incase.process_group import ProcessOutcome  # noqa: E402


@pytest.mark.parametrize("line, value", [
    ("INFO [gpu_worker.py:1] Available KV cache memory: -0.87 GiB", -0.87),
    ("Available KV cache memory: -1,024.5 GiB", -1024.5),
    ("Available KV cache memory: +2.5 GiB", 2.5),
    ("Available KV cache memory: 0.00 GiB", 0.0),
])
def test_signed_kv_cache_memory_is_parsed(line: str, value: float) -> None:
    kv = parse_kv_cache(f"noise\n{line}\n")
    assert kv.kv_cache_gib == value
    assert (kv_cache_problem(kv) is not None) is (value < 0)


def test_negative_kv_cache_memory_is_named() -> None:
    assert kv_cache_problem(parse_kv_cache("Available KV cache memory: -0.87 GiB\n")) == (
        "Available KV cache memory: -0.87 GiB (no room for KV cache)")


def test_several_kv_lines_record_the_last_and_report_the_change() -> None:
    kv = parse_kv_cache("Available KV cache memory: 1.5 GiB\nx\nAvailable KV cache memory: -0.87 GiB\n")
    assert kv.kv_cache_gib == -0.87 and kv.kv_cache_gib_history == (1.5, -0.87)
    assert "changed during the case: 1.5 -> -0.87 GiB (recorded the last)" in kv_cache_change(kv)
    same = parse_kv_cache("Available KV cache memory: 2 GiB\nAvailable KV cache memory: 2 GiB\n")
    assert same.kv_cache_gib == 2.0 and kv_cache_change(same) == ""
    assert parse_kv_cache("Available KV cache memory: 2 GiB\n").kv_cache_gib_history == ()


def _sc():
    from tests.runners.helpers import compose_cfg
    from runners.planning.plan import plan

    return plan(compose_cfg())[0]


@pytest.mark.parametrize("exit_code", [0, 1])
def test_negative_kv_cache_memory_fails_the_case_with_a_named_error(tmp_path: Path, exit_code: int) -> None:
    log = tmp_path / "logs" / "c.log"
    log.parent.mkdir()
    log.write_text("Available KV cache memory: 0.5 GiB\nAvailable KV cache memory: -0.87 GiB\n"
                   + ("ValueError: No available memory for the cache blocks.\n" if exit_code else ""))
    out = ProcessOutcome(exit_code=exit_code, signal=None, timed_out=False, wall_s=1.0, pid=1)
    fin = finalize_bench(_sc(), out, run_dir=tmp_path, log_path=log, evidence_path=tmp_path / "e.json",
                   record_path=tmp_path / "r.json", command=("x",))
    assert not fin.lines and fin.failure is not None and not fin.expected
    f = fin.failure
    assert f.failure_type == "no_kv_cache_memory"
    assert "Available KV cache memory: -0.87 GiB (no room for KV cache)" in f.error_message
    assert "0.5 -> -0.87 GiB" in f.error_message
    assert f.kv_cache is not None and f.kv_cache.kv_cache_gib == -0.87
    if exit_code:
        assert "ValueError: No available memory" in f.error_message
