"""Fake ``vllm_ascend.compilation.acl_graph`` following vllm-ascend v0.23 ``ACLGraphWrapper.__call__``.

Kept from the real code (v0.23.0, ``vllm_ascend/compilation/acl_graph.py``): the dispatch on
``forward_context.cudagraph_runtime_mode`` and ``batch_descriptor``, the entry cache
``concrete_aclgraph_entries``, ``get_offloader().sync_prev_onload()`` before capture only,
``join_after_forward()`` inside capture, and a bare ``entry.aclgraph.replay()`` on replay.

Device boundary (mocked): ``NPUGraph`` "captures" by remembering the runnable and its
arguments and "replays" by running it again with the backend reporting a capture in
progress, so the offloader takes exactly the decisions it recorded at capture (no wait for
modules loaded before capture, event waits for refills started inside the graph). The test
sets ``BACKEND`` (a ``tests.offload.fakes.FakeBackend``) and ``FORWARD_CONTEXT``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from vllm.config import CUDAGraphMode

BACKEND: Any = None
FORWARD_CONTEXT: Any = None
REPLAYS: list = []


def get_forward_context() -> Any:
    return FORWARD_CONTEXT


class NPUGraph:
    def __init__(self) -> None:
        self.captured: tuple | None = None

    def replay(self) -> None:
        REPLAYS.append(self)
        fn, args, kwargs = self.captured
        with _capturing():
            fn(*args, **kwargs)


@contextlib.contextmanager
def _capturing():
    saved = BACKEND.is_capturing
    BACKEND.is_capturing = lambda: True
    try:
        yield
    finally:
        BACKEND.is_capturing = saved


@dataclasses.dataclass
class ACLGraphEntry:
    batch_descriptor: Any
    aclgraph: NPUGraph | None = None
    output: Any | None = None


class ACLGraphWrapper:
    def __init__(self, runnable, runtime_mode: CUDAGraphMode) -> None:
        self.runnable = runnable
        self.runtime_mode = runtime_mode
        self.concrete_aclgraph_entries: dict[Any, ACLGraphEntry] = {}

    def __getattr__(self, key: str):
        if hasattr(self.runnable, key):
            return getattr(self.runnable, key)
        raise AttributeError(key)

    def __call__(self, *args, **kwargs):
        forward_context = get_forward_context()
        batch_descriptor = forward_context.batch_descriptor
        aclgraph_runtime_mode = forward_context.cudagraph_runtime_mode
        if aclgraph_runtime_mode == CUDAGraphMode.NONE or aclgraph_runtime_mode != self.runtime_mode:
            return self.runnable(*args, **kwargs)
        if batch_descriptor not in self.concrete_aclgraph_entries:
            self.concrete_aclgraph_entries[batch_descriptor] = ACLGraphEntry(batch_descriptor=batch_descriptor)
        entry = self.concrete_aclgraph_entries[batch_descriptor]
        if entry.aclgraph is None:
            aclgraph = NPUGraph()
            from vllm.model_executor.offloader.base import get_offloader

            get_offloader().sync_prev_onload()
            forward_context.capturing = True
            with _capturing():
                output = self.runnable(*args, **kwargs)
                get_offloader().join_after_forward()
            aclgraph.captured = (self.runnable, args, kwargs)
            entry.output = output
            entry.aclgraph = aclgraph
            return output
        entry.aclgraph.replay()
        return entry.output
