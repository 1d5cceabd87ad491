"""Builders for accuracy tests: a fake engine (no vLLM) and fake-engine run directories."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from results_schema.records.accuracy import EngineSettings, SamplingSettings
from results_schema.records.identity import OffloadSetting
from runners.incase.accuracy.case import run_cases
from runners.incase.accuracy.engine import Generation

FIXTURE_MANIFEST = Path(__file__).resolve().parents[2] / "eval_datasets" / "fixtures" / "manifest.json"


def engine_settings(**overrides: Any) -> EngineSettings:
    """Engine run options (unset = the protocol's value, else vLLM's)."""
    return EngineSettings(**overrides)


def offload(g: int = 0, n: int = 0, p: int = 1) -> OffloadSetting:
    return OffloadSetting(offload_group_size=g, offload_num_in_group=n, offload_prefetch_step=p)


def deterministic_reply(prompt: Sequence[int], sampling: SamplingSettings) -> str:
    """A reply that depends only on the prompt: a final answer line (long budget) or a letter (short)."""
    h = int(hashlib.sha256(bytes(str(list(prompt)), "ascii")).hexdigest(), 16)
    if sampling.max_tokens > 8:
        return f"Step by step... so the total is \\boxed{{{h % 100}}}.\nThe answer is {h % 100}."
    return ["A", "(B)", "C. because", "Answer: D", "I think C"][h % 5]


class FakeEngine:
    """Deterministic engine: the output depends only on the prompt (and an optional twist)."""

    name = "fake"
    twist: Callable[[int, str], str] | None = None
    twist_baseline: bool = False  # apply the twist to a baseline too (a runtime whose baseline is not deterministic)

    def __init__(self, model: str, engine: EngineSettings, offload: OffloadSetting) -> None:
        self.offload = offload

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingSettings) -> list[Generation]:
        out = []
        for i, p in enumerate(prompts):
            text = deterministic_reply(p, sampling)
            if self.twist is not None and (self.offload.enabled or self.twist_baseline):
                text = self.twist(i, text)
            ids = tuple(b for b in text.encode())[: sampling.max_tokens]
            out.append(Generation(text=text, token_ids=ids, finish_reason="stop"))
        return out


def make_run(
    out: Path,
    model: Path,
    *,
    manifest: Path = FIXTURE_MANIFEST,
    datasets: Sequence[str] = ("gsm8k", "gpqa"),
    cases: Sequence[tuple[str, OffloadSetting]] = (("baseline", offload()), ("current", offload(4, 1)),
                                                   ("current", offload(2, 1))),
    limit: int | None = None,
    engine_factory: Any = FakeEngine,
    protocol: str = "qwen-chat-v1",
) -> Path:
    """A fake-engine accuracy run directory (``out/cases/...``)."""
    for impl, off in cases:
        os.environ.pop("OFFLOAD_IMPL", None)  # run_cases sets it for its engine; the autouse fixture restores
        run_cases(model=str(model), manifest=manifest, datasets=list(datasets), implementation=impl, offload=off,
                  out_dir=out / "cases", engine_settings=engine_settings(), limit=limit,
                  engine_factory=engine_factory, protocol=protocol)
    return out


@pytest.fixture(autouse=True)
def _clean_offload_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_cases sets OFFLOAD_IMPL when unset; record both variables so teardown restores them."""
    for name in ("OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH"):
        monkeypatch.setenv(name, "recorded")
        monkeypatch.delenv(name)
