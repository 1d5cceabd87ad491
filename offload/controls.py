"""Speed control: a baseline that runs slower and moves no bytes (the known answer of an output comparison).

What is modelled: ``step_delay`` -- a forward pre-hook on the model a runner loaded (``runner.model``, the
``*ForCausalLM`` module vLLM's runner calls once per engine step, outside the compiled region) that sleeps
``OFFLOAD_STEP_DELAY_MS`` milliseconds before every forward. No weight moves, no offloader is installed:
only the step time changes. Under Poisson arrivals a slower server forms different decode batches, and on
a runtime whose GEMM rounding depends on the batch shape (bf16 on CPU) a greedy near-tie can then turn.
A delayed baseline shows how many requests that changes by itself, so an offload case whose outputs move
no more than that is not called corrupt, and one that moves more still is
(``analysis.serving.outputs``; ``+experiment=serving``). Its timing verdict against the undelayed
baselines has an expected answer too: ``slower`` by about the delay per output token (the serving
summary warns at a rate where the baselines' floor is too wide to show it).

Proof it took effect: :func:`apply_step_delay` prints ``OFFLOAD_CONTROL applied step_delay_ms=...`` once
when it installs the hook, and the hook prints ``OFFLOAD_CONTROL acted step_delay_ms=...`` at the first
forward it delays; the runner requires both lines in the server log of a case with a delay
(``runners.outcome.serving``).

The runner sets ``OFFLOAD_STEP_DELAY_MS`` per case (config: a serving case's ``step_delay_ms``, baseline
only); the plugin applies it in the process that loads the model. Unset, empty or ``0``: nothing happens.

The control needs an eager model (``enforce_eager``): a CUDA-graph replay runs no Python hook, so a runner
whose model is graph-wrapped, or whose model config is not eager, is refused (``ValueError`` at load), and
planning refuses a control whose workload is not eager.

What is deliberately not modelled: a delay shaped like a layer copy (per layer, proportional to bytes);
one sleep per step is what changes the batch timing.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

STEP_DELAY_ENV = "OFFLOAD_STEP_DELAY_MS"
"""Environment variable holding the per-forward delay in milliseconds (empty, unset or 0: none)."""

MAX_STEP_DELAY_MS = 10_000.0
"""Largest delay accepted (ms): a control, not a hang."""

APPLIED = "OFFLOAD_CONTROL applied"
"""Prefix of the line printed when the hook is installed."""

ACTED = "OFFLOAD_CONTROL acted"
"""Prefix of the line printed at the first delayed forward."""


def parse_step_delay_ms(text: str) -> float:
    """The delay of ``OFFLOAD_STEP_DELAY_MS``'s value ``text`` in ms (0.0 for empty).

    Raises:
        ValueError: not a number, not finite, negative or above ``MAX_STEP_DELAY_MS``.
    """
    if not text.strip():
        return 0.0
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(f"{STEP_DELAY_ENV}={text!r} is not a number of milliseconds") from None
    if not math.isfinite(ms) or not 0.0 <= ms <= MAX_STEP_DELAY_MS:
        raise ValueError(f"{STEP_DELAY_ENV}={text!r}: allowed 0 to {MAX_STEP_DELAY_MS:g} ms")
    return ms


def step_delay_requested() -> float:
    """``OFFLOAD_STEP_DELAY_MS`` parsed (0.0 when unset). Raises ``ValueError`` as :func:`parse_step_delay_ms`."""
    return parse_step_delay_ms(os.environ.get(STEP_DELAY_ENV, ""))


def applied_line(ms: float, model_class: str) -> str:
    """The line :func:`apply_step_delay` prints (the runner matches its prefix, value and the colon after it)."""
    return f"{APPLIED} step_delay_ms={ms:g}: every forward of {model_class} sleeps {ms:g} ms first (moves no bytes)"


def apply_step_delay(model: Any, ms: float) -> str:
    """Register the sleeping forward pre-hook on ``model`` (once); return the line it printed.

    Args:
        model: the ``torch.nn.Module`` the runner calls per step.
        ms: the delay per forward (ms), > 0.

    Raises:
        ValueError: ``model`` has no ``register_forward_pre_hook`` (not a module) or ``ms`` is not > 0.
    """
    done = getattr(model, "_offload_step_delay_line", None)
    if done:
        return str(done)
    if not ms > 0:
        raise ValueError(f"step delay {ms!r} ms: a control needs a delay > 0")
    if not hasattr(model, "register_forward_pre_hook"):
        raise ValueError(f"step delay: {type(model).__name__} is not a torch module")
    state = {"acted": 0}
    seconds = ms / 1000.0

    def hook(_module: Any, _args: Any) -> None:
        time.sleep(seconds)
        state["acted"] += 1
        if state["acted"] == 1:
            print(f"{ACTED} step_delay_ms={ms:g}: first forward delayed", flush=True)

    model.register_forward_pre_hook(hook)
    line = applied_line(ms, type(model).__name__)
    print(line, flush=True)
    model._offload_step_delay_line = line
    return line


def apply_step_delay_from_env(runner: Any) -> str | None:
    """:func:`apply_step_delay` on ``runner.model`` with ``OFFLOAD_STEP_DELAY_MS``'s value; None when unset/0.

    Raises:
        ValueError: a bad value, or a runner without a loaded ``model``.
    """
    ms = step_delay_requested()
    if ms == 0.0:
        return None
    model = getattr(runner, "model", None)
    if model is None:
        raise ValueError(f"{STEP_DELAY_ENV}={ms:g}: {type(runner).__name__} has no loaded model to delay")
    import torch

    eager = getattr(getattr(runner, "model_config", None), "enforce_eager", None)
    if not isinstance(model, torch.nn.Module) or eager is False:
        # a CUDA-graph wrapper forwards attributes to the inner model, whose hooks a graph replay never runs
        raise ValueError(f"{STEP_DELAY_ENV}={ms:g}: the speed control needs an eager model (enforce_eager); "
                         f"{type(runner).__name__}.model is a {type(model).__name__}, enforce_eager={eager}")
    return apply_step_delay(model, ms)
