"""Field types shared by the accuracy models (``results_schema.records.accuracy``, ``results_schema.records.accuracy_report``).

What is modelled: the constrained scalar types of accuracy files (task names, SHA-256 hex digests,
fractions in [0, 1], protocol names). Re-exported by :mod:`results_schema.records.accuracy`.

What is deliberately not modelled: the models themselves. This module must not import vLLM or torch.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

Task = Literal["gsm8k", "gpqa", "addition"]
"""Which task: GSM8K (grade-school math, free-form number), GPQA Diamond (4-way choice), or ``addition`` (this
project's generated single-digit sums ``What is a + b?``, an open number, GSM8K-format rows; no published split)."""

Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
NonNegSeconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

FinishReason = Literal["stop", "length", "abort"]
VerifyMode = Literal["formal", "limited"]

ProtocolName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*-v[1-9][0-9]*$")]
"""A protocol's name and version, e.g. ``qwen-chat-v1`` (lower case, dash-separated, ending ``-v<N>``)."""

BaselineJudgement = Literal["identity", "noise_floor", "single_baseline"]
"""How a task's offload cases are judged (``results_schema.rules.accuracy_rule.baseline_judgement``)."""
