"""A stand-in for vLLM's OpenAI-compatible API server that costs no engine start-up (serving fault tests).

Accepts the API server's arguments (``--host``, ``--port``, ``--model``, ``--random-*`` ignored,
``--offload-group-size`` ...) and serves ``GET /health``, ``GET /v1/models`` and a streaming
``POST /v1/completions`` that emits ``max_tokens`` one-token chunks (``FAKE_TOKEN_GAP_S`` apart; with
``return_token_ids`` each carries a token id derived from the prompt, shifted when ``FAKE_TOKEN_SHIFT_IMPL`` names the case's
``OFFLOAD_IMPL``: an offloader whose outputs differ)
and a final ``usage`` chunk with ``prompt_tokens`` = the prompt's length under the model's
tokenizer (the class ``transformers.AutoTokenizer`` returns, as vLLM: ``tests.support.tokenizer``; times ``FAKE_PROMPT_TOKENS_FACTOR``, default 1: a tokenizer-mismatch fault).
Like the evidence hook inside a real server, it publishes offload evidence (explicit empty
evidence for the baseline; layers chosen by ``offload.selection`` otherwise) to
``OFFLOAD_EVIDENCE_PATH`` and prints one ``OFFLOAD_EVIDENCE`` line.

With ``OFFLOAD_STEP_DELAY_MS`` set (the speed control), it installs ``offload.controls``' hook on a stand-in
model and runs it before every streamed token, as the plugin does on a real model: the applied and acted
lines appear in its log and every token waits the delay; ``FAKE_TOKEN_SHIFT_DELAYED=1`` then also shifts its
token ids (a slower server whose batches turn greedy tokens), and ``FAKE_TOKEN_SHIFT_EVEN=1`` limits every
shift to prompts whose character sum is even.

``FAKE_OFFLOAD_GAP_S`` (a comma-separated list of seconds) replaces ``FAKE_TOKEN_GAP_S`` in an offload case's server
(``OFFLOAD_IMPL`` not ``baseline``): repeat ``r`` (read from the evidence path's ``<label>-r<r>`` stem) waits entry
``r mod len`` before each token, so a sequential serving test sets a cost per block; ``FAKE_OFFLOAD_GAP_S_<label>``
(the same list) replaces it for the offload label ``<label>`` alone, so one run holds labels of different costs.

``FAKE_SERVER_MODE``:
* ``ok`` (default): behave.
* ``never_healthy``: listen on nothing, sleep forever.
* ``exit``: print a traceback-like line and exit 3 at once.
* ``orphan``: behave, but start a child that ignores SIGTERM (it outlives the server).
* ``fail_one``: behave, but answer the second completion request with HTTP 500 and vLLM's error body (one
  failed request: the benchmark records the HTTP reason as its error).
* ``break_then_die``: cut every completion stream after its first chunk (the client sees a broken transfer) and
  SIGKILL itself 1 s after the first: a server that is dying, whose sockets close before its exit can be seen.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from offload import controls
from offload.selection import select_offload_layers
from results_schema.codec.io import dumps_model, write_json
from results_schema.records.models import RuntimeEvidence
from tests.support.tokenizer import qwen2_tokenizer

COMPLETIONS: list[int] = []
"""One entry per completion request served (``fail_one`` fails the second)."""
COUNT_LOCK = threading.Lock()

LAYER_BYTES = 295_936
NUM_LAYERS = 8


class _StandInModel:
    """What ``offload.controls.apply_step_delay`` needs of a model: forward pre-hooks, run per step."""

    def __init__(self) -> None:
        self.hooks: list = []

    def register_forward_pre_hook(self, hook) -> None:
        self.hooks.append(hook)

    def step(self) -> None:
        for h in self.hooks:
            h(self, ())


MODEL = _StandInModel()


def _evidence(a: argparse.Namespace) -> None:
    path = os.environ.get("OFFLOAD_EVIDENCE_PATH")
    if not path:
        return
    impl = os.environ.get("OFFLOAD_IMPL", "baseline")
    g, n = a.offload_group_size, a.offload_num_in_group
    layers = tuple(select_offload_layers(NUM_LAYERS, g, n)) if g > 0 else ()
    cls = {"baseline": "vllm.model_executor.offloader.base.NoopOffloader",
           "current": "offload.prefetch.CurrentPrefetchOffloader"}.get(impl, "offload.sync.SyncOffloader")
    ev = RuntimeEvidence(offloader_class=cls, implementation=impl, offload_group_size=g, offload_num_in_group=n,
                         offload_prefetch_step=a.offload_prefetch_step if g > 0 else 0, num_layers=NUM_LAYERS,
                         selected_layers=layers, wrapped_layers=layers, wrapped_count=len(layers),
                         offloaded_bytes=LAYER_BYTES * len(layers), static_buffer_bytes=0,
                         released_bytes=LAYER_BYTES * len(layers), post_init_called=True, pid=os.getpid(),
                         device="cpu")
    write_json(Path(path), ev)
    print("(EngineCore pid=1) OFFLOAD_EVIDENCE " + dumps_model(ev), flush=True)
    print("CPU KV cache size: 10,000 tokens", flush=True)


def _gap_s() -> float:
    """The wait before each streamed token (module docstring: ``FAKE_TOKEN_GAP_S``, ``FAKE_OFFLOAD_GAP_S``,
    ``FAKE_OFFLOAD_GAP_S_<label>``)."""
    label, _, repeat = Path(os.environ.get("OFFLOAD_EVIDENCE_PATH", "x-r0.json")).stem.rpartition("-r")
    per_repeat = os.environ.get(f"FAKE_OFFLOAD_GAP_S_{label}", os.environ.get("FAKE_OFFLOAD_GAP_S"))
    if per_repeat and os.environ.get("OFFLOAD_IMPL", "baseline") != "baseline":
        gaps = [float(x) for x in per_repeat.split(",")]
        return gaps[int(repeat) % len(gaps)]
    return float(os.environ.get("FAKE_TOKEN_GAP_S", "0.002"))


def token_ids(prompt: str, max_tokens: int, *, delayed: bool) -> list[int]:
    """The output token ids streamed for ``prompt``: derived from its characters, shifted (module docstring:
    ``FAKE_TOKEN_SHIFT_IMPL``, ``FAKE_TOKEN_SHIFT_DELAYED`` when ``delayed``, ``FAKE_TOKEN_SHIFT_EVEN``)."""
    shifted = os.environ.get("FAKE_TOKEN_SHIFT_IMPL") == os.environ.get("OFFLOAD_IMPL", "baseline") or (
        os.environ.get("FAKE_TOKEN_SHIFT_DELAYED") == "1" and delayed)
    seed = sum(map(ord, prompt))
    if shifted and (os.environ.get("FAKE_TOKEN_SHIFT_EVEN") != "1" or seed % 2 == 0):
        seed += 1
    return [(seed * 31 + k) % 50_000 for k in range(max_tokens)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self._json(200, {"data": [{"id": self.server.model, "root": self.server.model}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/v1/completions":
            self._json(404, {"error": "not found"})
            return
        max_tokens = int(req.get("max_tokens") or 1)
        with COUNT_LOCK:
            COMPLETIONS.append(1)
            nth = len(COMPLETIONS)
        if os.environ.get("FAKE_SERVER_MODE") == "fail_one" and nth == 2:
            self._json(500, {"object": "error", "type": "InternalServerError", "code": 500,
                             "message": "EngineCore encountered an issue (fake)"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj) -> None:
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        if os.environ.get("FAKE_SERVER_MODE") == "break_then_die":
            if nth == 1:
                threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
            send({"choices": [{"text": "a", "index": 0}]})
            self.close_connection = True  # the chunked body never ends: the client's transfer breaks
            return

        gap = _gap_s()
        want_ids = bool(req.get("return_token_ids"))
        ids = token_ids(str(req.get("prompt", "")), max_tokens, delayed=bool(MODEL.hooks))
        for k in range(max_tokens):
            time.sleep(gap)
            MODEL.step()
            choice = {"text": "a", "index": 0}
            if want_ids:
                choice["token_ids"] = [ids[k]]
            send({"choices": [choice]})
        prompt_tokens = len(self.server.tokenizer(req.get("prompt", ""), add_special_tokens=False).input_ids)
        prompt_tokens *= int(os.environ.get("FAKE_PROMPT_TOKENS_FACTOR", "1"))
        send({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--offload-group-size", type=int, default=0)
    ap.add_argument("--offload-num-in-group", type=int, default=0)
    ap.add_argument("--offload-prefetch-step", type=int, default=1)
    a, _rest = ap.parse_known_args()
    mode = os.environ.get("FAKE_SERVER_MODE", "ok")
    print(f"fake server mode {mode} pid {os.getpid()}", flush=True)
    if mode == "never_healthy":
        time.sleep(1000)
    if mode == "exit":
        print("RuntimeError: Engine core initialization failed (fake)", flush=True)
        return 3
    if mode == "orphan":
        # prctl(PR_SET_PDEATHSIG, 0): clear the parent-death signal the evidence hook arms in every
        # Python process of a case, so this child really outlives the server (a non-Python helper would)
        child = subprocess.Popen([sys.executable, "-c", "import ctypes, signal, time; ctypes.CDLL(None).prctl(1, 0); "
                                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('orphan ready', flush=True); "
                                  "time.sleep(1000)"])
        print(f"orphan child pid {child.pid}", flush=True)
    _evidence(a)
    if controls.step_delay_requested():
        controls.apply_step_delay(MODEL, controls.step_delay_requested())
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.model = a.model
    # the class vLLM's server counts with (AutoTokenizer's answer), loaded without importing torch
    srv.tokenizer = qwen2_tokenizer(a.model) if (Path(a.model) / "tokenizer.json").is_file() else None
    srv.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
