"""Output token ids of every measured serving request, read from the stream vLLM's own client times.

What is modelled: the server is asked for ``return_token_ids`` (vLLM's completions API streams each
chunk's ``token_ids`` beside its ``text``); ``capturing(backend)`` wraps the benchmark's request
function for ``backend`` so that the aiohttp response it reads is teed: every byte vLLM's client
reads (and times) is also appended to a buffer, parsed after the request into the output token ids
(SSE ``data:`` lines, ``choices[0].token_ids``). vLLM's timing code runs unchanged; the tee costs one
list append per network read. Requests are keyed by their id (``--request-id-prefix`` +
dataset index, vLLM's ``RandomDataset``); warm-up requests carry no id and are not kept.

``token_ids_sha256`` is the digest recorded per request (``RequestOutcome.output_token_ids_sha256``):
SHA-256 of the ids as comma-joined decimals.

What is deliberately not modelled: other backends than the completions endpoint, logprobs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast


def token_ids_sha256(ids: Sequence[int]) -> str:
    """SHA-256 (hex) of ``ids`` written as comma-joined decimals (``[1, 22]`` -> sha256 of ``b"1,22"``)."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()


def parse_stream(raw: bytes) -> list[int]:
    """Output token ids of one streamed completion (its SSE bytes as read).

    Raises:
        ValueError: a ``data:`` line that is not JSON, or a content chunk without ``token_ids``.
    """
    ids: list[int] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        body = line[len("data:"):].strip()
        if body == "[DONE]" or not body:
            continue
        data = json.loads(body)
        for choice in data.get("choices") or ():
            got = choice.get("token_ids")
            if got is None:
                raise ValueError(f"a streamed chunk has no token_ids (did the server get return_token_ids?): {body[:200]}")
            ids.extend(int(x) for x in got)
    return ids


class _TeeContent:
    def __init__(self, content: Any, sink: list[bytes]) -> None:
        self._content, self._sink = content, sink

    async def iter_any(self) -> Any:
        async for chunk in self._content.iter_any():
            self._sink.append(chunk)
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._content, name)


class _TeeResponse:
    def __init__(self, response: Any, sink: list[bytes]) -> None:
        self._response, self.content = response, _TeeContent(response.content, sink)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)


class _TeeRequest:
    def __init__(self, cm: Any, sink: list[bytes]) -> None:
        self._cm, self._sink = cm, sink

    async def __aenter__(self) -> _TeeResponse:
        return _TeeResponse(await self._cm.__aenter__(), self._sink)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


class _TeeSession:
    def __init__(self, session: Any, sink: list[bytes]) -> None:
        self._session, self._sink = session, sink

    def post(self, *args: Any, **kwargs: Any) -> _TeeRequest:
        return _TeeRequest(self._session.post(*args, **kwargs), self._sink)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


@contextmanager
def capturing(backend: str) -> Iterator[dict[str, list[int] | str]]:
    """Tee the request function of ``backend`` while the block runs; yield ``{request_id: ids or error}``.

    A request whose stream cannot be parsed maps to the error text (the caller names it).
    """
    from vllm.benchmarks.lib import endpoint_request_func as erf

    funcs = erf.ASYNC_REQUEST_FUNCS
    original = funcs[backend]
    got: dict[str, list[int] | str] = {}

    async def teed(request_func_input: Any, session: Any, pbar: Any = None) -> Any:
        sink: list[bytes] = []
        out = await original(request_func_input, cast(Any, _TeeSession(session, sink)), pbar)
        rid = request_func_input.request_id
        if rid is not None and out.success:
            try:
                got[rid] = parse_stream(b"".join(sink))
            except ValueError as exc:
                got[rid] = str(exc)
        return out

    funcs[backend] = teed
    try:
        yield got
    finally:
        funcs[backend] = original
