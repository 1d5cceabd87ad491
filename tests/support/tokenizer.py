"""The tokenizer of the test models without ``transformers.AutoTokenizer``, for the fake case processes.

``AutoTokenizer`` imports torch (through ``transformers.generation``): about 4.5 s of CPU in every fake
accuracy case and fake server process, which load no engine and need no torch. Every model the tests
generate is a Qwen2 (``config.json`` ``model_type``), for which ``AutoTokenizer`` returns
``transformers.Qwen2Tokenizer``; :func:`qwen2_tokenizer` loads that class directly.
``tests/accuracy/test_tokenizer_stand_in.py`` checks, on each model, that it is the class ``AutoTokenizer`` returns
and that both render the same prompt text and token ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def qwen2_tokenizer(model: str | Path) -> Any:
    """``transformers.Qwen2Tokenizer`` of the model directory ``model`` (local files only).

    Raises:
        ValueError: the model's ``config.json`` names another ``model_type`` (use ``AutoTokenizer``).
    """
    model_type = json.loads((Path(model) / "config.json").read_text()).get("model_type")
    if model_type != "qwen2":
        raise ValueError(f"{model}: model_type {model_type!r}; qwen2_tokenizer loads only 'qwen2' models")
    from transformers import Qwen2Tokenizer

    return Qwen2Tokenizer.from_pretrained(str(model), local_files_only=True)
