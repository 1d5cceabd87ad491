"""Fake vLLM-Ascend (test fixture): the structure of vllm-ascend v0.23 that our plugin touches.

Importing it installs a fake ``torch.npu`` namespace, as importing ``torch_npu`` does on a
real Ascend host (the device boundary is mocked; tensors stay on the CPU).
"""

import itertools

import torch

CALLS: list = []
_ids = itertools.count()


class Event:
    def __init__(self, *a, **k):
        self.id = next(_ids)

    def record(self, stream=None):
        CALLS.append(("event.record", self.id, getattr(stream, "id", None)))

    def synchronize(self):
        CALLS.append(("event.synchronize", self.id))


class Stream:
    def __init__(self, *a, **k):
        self.id = next(_ids)
        CALLS.append(("stream.new", self.id))

    def wait_event(self, event):
        CALLS.append(("stream.wait_event", self.id, event.id))

    def wait_stream(self, other):
        CALLS.append(("stream.wait_stream", self.id, other.id))

    def synchronize(self):
        CALLS.append(("stream.synchronize", self.id))


class _Ctx:
    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        _NS.current = self.stream
        CALLS.append(("stream.enter", self.stream.id))

    def __exit__(self, *exc):
        _NS.current = _NS.default
        return False


class _Npu:
    Stream = Stream
    Event = Event

    def __init__(self):
        self.default = Stream()
        self.current = self.default

    def current_stream(self):
        return self.current

    def stream(self, s):
        return _Ctx(s)

    def is_current_stream_capturing(self):
        return False


_NS = _Npu()
torch.npu = _NS
