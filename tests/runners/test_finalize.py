"""Log parsing: KV cache capacity in every known format, and the root-cause exception."""

from __future__ import annotations

import pytest

from runners.finalize import parse_kv_cache, root_cause


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


def test_root_cause_of_plain_error_line() -> None:
    assert root_cause("ValueError: offload_num_in_group (3) must be <= offload_group_size (2)\n") == (
        "ValueError", "offload_num_in_group (3) must be <= offload_group_size (2)")
    assert root_cause("all good\n") == (None, None)
