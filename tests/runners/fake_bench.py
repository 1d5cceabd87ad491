"""A stand-in for ``runners.incase.bench_one`` that costs no vLLM start-up (fault tests).

It imports no pydantic model on an ordinary case: it reads the ``case.json`` and writes the record, the evidence
sidecar and their lines as plain JSON, which the runner reads with the strict models (a document they refuse fails
the test that ran it, with the model's error). It checks the offload setting with the rule bench_one applies in the
case process (``offload.selection.check_offload_setting``: an ``expect_error`` case ends there, exit 2); a case with
``engine_validates`` is read as bench_one reads it (``runners.incase.bench_one.load_case``,
``runners.incase.engine_path``). A ``make test`` starts about 500 of these processes; importing the models and
bench_one cost each about 0.1 CPU-s of its 0.25 (measured 2026-12-06).

Accepts bench_one's arguments (``--case CASE_JSON``) and writes what bench_one and the evidence hook
would: the record, one ``BENCH_RESULT`` line, the evidence sidecar, one
``OFFLOAD_EVIDENCE`` line and a KV cache log line. ``FAKE_BEHAVIOUR`` (in the case
environment, ``label=behaviour,...``) selects a fault for a label:

* ``sleep``: start a child that sleeps, write both pids to ``<record>.pids``, sleep forever.
* ``sigkill``: kill itself with SIGKILL after printing a line.
* ``crash``: raise upstream's ``AssertionError`` (like the official offloader on CPU).
* ``dup``: print two BENCH_RESULT lines.
* ``noevidence``: write no evidence.
* ``nooffload``: evidence with no wrapped module.
* ``mismatch``: evidence sidecar differs from the logged evidence line.
* ``empty``: the second measured round generates no token.
* ``sigill``: like vLLM when its worker dies by SIGILL: a child with faulthandler enabled kills
  itself with SIGILL (its "Fatal Python error: Illegal instruction" lands in the log), then this
  process fails with vLLM's engine error (exit 1).
* ``packedkernel``: the ``OFFLOAD_CPU_KERNELS`` line reports one packed (oneDNN) layer.
* ``digest``: the first measured round's token digest differs (an INVALID run: tokens differ).
* ``nokv`` / ``dupkv``: no / two ``Available KV cache memory`` lines (accelerator devices print one).
* ``nopostinit``: evidence whose offloader never ran ``post_init``.
* ``otherworkload``: the record's workload differs from the plan's (another dtype).
* ``tamper``: append a line to the file named by ``FAKE_TAMPER_PATH`` (identity re-check tests), then succeed.
* ``hide``: a shell child runs ``( setsid sleep 300 & ); sleep 30`` (a grandchild leaves the group and the tree).
* ``engine``: like vLLM: a ``multiprocessing`` spawn child (EngineCore) that spawns a worker, a fork child, and a
  ``setsid sleep 300`` that leaves the tree; all pids (engine, worker, fork child; the sleep is found by its
  environment) are written to ``<record>.pids``; then sleep forever.

* engine path (a case with ``engine_validates`` whose setting the project's check refuses): by default,
  what vLLM 0.32.0 CPU printed for N > G (``runners.incase.engine_path``'s ``ENGINE_REJECTED`` line and the
  traceback of its ``OffloadConfig`` validation, recorded from a real run, the values substituted);
  ``engine_accepts``: the engine returns (``EngineAcceptedInvalid``); ``engine_crash``: an unrelated
  ``RuntimeError``; ``factory_rejects``: this project's factory validation raises (component ``offload``).

Throughput (choose-then-confirm tests): ``FAKE_COPY_FRACTION`` (a float ``f``) makes every measured round of
a case that offloads ``L`` layers take ``0.5 * (1 + f * L)`` s instead of 0.5 s (a serial copy cost: retention
``1 / (1 + f * L)``); ``FAKE_SLOW`` (``label:factor,...``) multiplies the round time of the labels named
(``*``: of every other label that offloads a layer); a key ``label-rN`` names one process (it wins over ``label``).

``FAKE_CONTENDED`` (``label-rN,...``; ``label-r*``: every process of that label) stands in for the host-load
sampler (``runners.incase.host_load.read_host``) of those processes: its two readings show 0.7 cores of foreign
work over a 10 s window (17 s of host busy time, 10 s of it the case's own), and the record's ``host_load`` comes
from them through the production rule (``window_load(...).record()``: ``contended`` by ``is_contended``); while
it is set, every other process records a quiet window the same way (unset: no reading).

``FAKE_BENCH_SLEEP_S`` delays every case (interrupt tests); ``FAKE_BENCH_WAIT_FOR`` (a path) holds every case
until that file exists (at most 300 s): a test decides when its case may end, whatever the machine's load;
with ``FAKE_BENCH_WAIT_LABELS`` (``label,...``; ``label-rN``: that process only; ``*``: every label that offloads a
layer) only those labels wait.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from offload import controls
from offload.selection import check_offload_setting, select_offload_layers
from results_schema.codec.files import write_text_atomic

LAYER_BYTES = 295_936
OFFLOADER_CLASS = {
    "baseline": "vllm.model_executor.offloader.base.NoopOffloader",
    "current": "offload.prefetch.CurrentPrefetchOffloader",
    "sync": "offload.prefetch.SyncOffloader",
    "official": "vllm.model_executor.offloader.prefetch.PrefetchOffloader",
}
"""The classes the real runs report (analysis.validation.validate checks them per implementation)."""


def _version(metadata, dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _read_case(path: str) -> dict[str, Any]:
    """The ``case.json`` as plain JSON (``CaseSpec``'s fields); exit 2 like bench_one when it is not a bench case."""
    try:
        case = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        print(f"ValueError: case {path}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if case.get("kind") != "bench" or not case.get("workload"):
        print(f"ValueError: case {path}: not a bench case with a workload", file=sys.stderr, flush=True)
        raise SystemExit(2)
    return case


def _write(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented JSON through the project's atomic writer (``results_schema.codec.files``, no pydantic), as
    ``results_schema.codec.io.write_json`` writes a model."""
    write_text_atomic(path, json.dumps(doc, indent=2) + "\n")


def _line(doc: dict[str, Any]) -> str:
    """``doc`` as one line of JSON (the form of ``results_schema.codec.io.dumps_model``)."""
    return json.dumps(doc, separators=(",", ":"))


def main() -> int:
    ap = argparse.ArgumentParser(prog="fake_bench")
    ap.add_argument("--case", required=True)
    ns = ap.parse_args(sys.argv[1:])
    a = _read_case(ns.case)
    behaviours = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_BEHAVIOUR", "").split(",") if "=" in kv)
    label, implementation, repeat = a["label"], a["implementation"], a["repeat"]
    mode = behaviours.get(label, "ok")
    assert os.environ["OFFLOAD_IMPL"] == implementation
    offload, workload = a["offload"], a["workload"]
    g, n, k = offload["offload_group_size"], offload["offload_num_in_group"], offload["offload_prefetch_step"]
    if a.get("engine_validates"):
        engine_path_exit = _engine_path_case(ns.case, mode)
        if engine_path_exit is not None:
            return engine_path_exit
    else:
        try:  # bench_one's check in the case process (case_input.checked_offload): an expect_error case ends here
            check_offload_setting(implementation, g, n, k, offload.get("offload_backend", "auto"))
        except ValueError as exc:
            print(f"ValueError: {exc}", file=sys.stderr, flush=True)
            return 2
    record_path = Path(a["record"])
    print("fake bench starting", label, flush=True)
    print(f"FAKE_BENCH_PYTHON {sys.executable}", flush=True)  # rehearsal: which interpreter the runtime started
    from importlib import metadata

    stack = {d: _version(metadata, d) for d in ("vllm", "vllm-ascend", "torch-npu")}
    print("FAKE_BENCH_STACK " + json.dumps(stack, sort_keys=True), flush=True)
    plugins = sorted(f"{ep.name}={ep.value}@{ep.dist.name if ep.dist else '?'}"
                     for ep in metadata.entry_points(group="vllm.general_plugins"))
    print("FAKE_BENCH_PLUGINS " + " ".join(plugins), flush=True)
    cfg_json = Path(a["model"]) / "config.json"
    num_layers = json.loads(cfg_json.read_text()).get("num_hidden_layers", 8) if cfg_json.is_file() else 8
    time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP_S", "0")))
    gate, deadline = os.environ.get("FAKE_BENCH_WAIT_FOR"), time.monotonic() + 300
    waiting = os.environ.get("FAKE_BENCH_WAIT_LABELS")
    if waiting is not None:
        labels = waiting.split(",")
        gate = gate if label in labels or f"{label}-r{repeat}" in labels or (
            "*" in labels and implementation != "baseline") else None
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    fault_exit = _fault(mode, record_path)
    if fault_exit is not None:
        return fault_exit
    _engine_lines(mode, a["device"], num_layers)
    layers = tuple(select_offload_layers(num_layers, g, n)) if implementation != "baseline" else ()
    wrapped = () if mode == "nooffload" else layers
    nbytes = LAYER_BYTES * len(wrapped)
    ev = {"schema_version": 1, "offloader_class": OFFLOADER_CLASS[implementation], "implementation": implementation,
          "offload_group_size": g, "offload_num_in_group": n, "offload_prefetch_step": k, "offload_params": [],
          "num_layers": num_layers, "selected_layers": list(layers), "wrapped_layers": list(wrapped),
          "wrapped_count": len(wrapped), "offloaded_bytes": nbytes, "static_buffer_bytes": 0,
          "released_bytes": nbytes, "post_init_called": mode != "nopostinit", "pid": os.getpid(),
          "device": a["device"], "copy_protocol": None}
    if mode != "noevidence":
        _write(Path(os.environ["OFFLOAD_EVIDENCE_PATH"]), ev)
        logged = {**ev, "pid": ev["pid"] + 1} if mode == "mismatch" else ev
        print("(EngineCore pid=1) OFFLOAD_EVIDENCE " + _line(logged), flush=True)

    def produced(i: int) -> int:
        return 0 if (mode == "empty" and i == 1) else workload["num_prompts"] * workload["max_tokens"]

    delay_ms = controls.step_delay_requested()
    if delay_ms:  # the speed control: lines as offload.controls prints them; every step of a round sleeps
        print(controls.applied_line(delay_ms, "FakeForCausalLM"), flush=True)
        print(f"{controls.ACTED} step_delay_ms={delay_ms:g}: first forward delayed", flush=True)
    step = _round_seconds(label, len(layers), repeat) + workload["max_tokens"] * delay_ms / 1000.0
    rounds = [{"index": i, "elapsed_s": step, "prompt_tokens": workload["num_prompts"] * workload["input_len"],
               "output_tokens": produced(i), "throughput_tok_s": produced(i) / step,
               "token_digest": ("f" if mode == "digest" and i == 0 else "0") * 64}
              for i in range(workload["measured_rounds"])]
    out = sum(r["output_tokens"] for r in rounds)
    elapsed = sum(r["elapsed_s"] for r in rounds)
    rec = {"schema_version": 1, "phase": a["phase"], "label": label, "implementation": implementation,
           "repeat": repeat, "runtime": a["runtime"], "model": a["model"], "offload": offload,
           "workload": {**workload, "dtype": "float32"} if mode == "otherworkload" else workload,
           "load_seconds": 1.0, "rounds": rounds, "output_tokens": out, "elapsed_s": elapsed,
           "throughput_tok_s": out / elapsed, "token_digest": ("e" if mode == "digest" else "1") * 64,
           "peak_rss_bytes": 1, "device_memory_bytes": None, "vllm_version": "fake", "torch_version": "fake",
           "pid": os.getpid(), **({"step_delay_ms": delay_ms} if delay_ms else {})}
    busy = [x for x in os.environ.get("FAKE_CONTENDED", "").split(",") if x]
    if busy:
        rec["host_load"] = _sampled_load(f"{label}-r{repeat}" in busy or f"{label}-r*" in busy)
    _write(record_path, rec)
    line = "BENCH_RESULT " + _line(rec)
    print(line, flush=True)
    if mode == "dup":
        print(line, flush=True)
    return 0


def _fault(mode: str, record_path: Path) -> int | None:
    """The faults that act before the engine reports (module docstring): the exit code, or ``None`` to go on
    (``tamper``, and every other mode). ``sleep``, ``hide``, ``engine`` and ``sigkill`` never return."""
    if mode == "sleep":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
        record_path.with_suffix(".pids").write_text(f"{os.getpid()} {child.pid}\n")
        time.sleep(1000)
    if mode == "hide":
        subprocess.run(["/bin/sh", "-c", "( setsid sleep 300 & ); sleep 30"])
        time.sleep(1000)
    if mode == "engine":
        _engine(record_path)
    if mode == "tamper":
        with open(os.environ["FAKE_TAMPER_PATH"], "a") as fh:
            fh.write("tampered\n")
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "sigill":
        subprocess.run([sys.executable, "-X", "faulthandler", "-c",
                        "import os, signal; os.kill(os.getpid(), signal.SIGILL)"], check=False)
        print("Exception: WorkerProc initialization failed due to an exception in a background process.", flush=True)
        return 1
    if mode == "crash":
        print("Traceback (most recent call last):", flush=True)
        print('  File "prefetch.py", line 1, in wrap_modules', flush=True)
        print("AssertionError: Module parameters should not already be on CPU", flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return 1
    return None


def _engine_lines(mode: str, device: str, num_layers: int) -> None:
    """The engine's log lines the runner reads: the KV cache size, the CPU kernel report (when a kernel path is
    requested), an accelerator's KV cache memory (``nokv`` / ``dupkv``: none / two)."""
    print("(EngineCore pid=1) INFO [kv_cache_utils.py:1] CPU KV cache size: 524,288 tokens, "
          "Maximum concurrency for 256 tokens per request: 2,048.00x", flush=True)
    kernel_path = os.environ.get("OFFLOAD_CPU_KERNEL_PATH", "")
    if kernel_path:
        n_linear = 4 * num_layers  # qkv, o, gate_up, down per decoder layer
        kernels = {"torch_linear": n_linear - 1, "onednn": 1} if mode == "packedkernel" else (
            {"torch_linear": n_linear} if kernel_path == "plain" else {"onednn": n_linear})
        print("(Worker pid=2) OFFLOAD_CPU_KERNELS " + json.dumps({"path": kernel_path, "layers": n_linear,
                                                                   "kernels": kernels}), flush=True)
    if device != "cpu" and mode != "nokv":
        for _ in range(2 if mode == "dupkv" else 1):
            print("(EngineCore pid=1) INFO [gpu_worker.py:1] Available KV cache memory: 12.34 GiB", flush=True)


def _sampled_load(busy: bool) -> dict[str, Any]:
    """The host load the sampler's two readings give (module docstring): 0.7 foreign cores when ``busy``, none
    else, as the record's JSON (``HostLoad``)."""
    from runners.incase.host_load import HostReading, window_load

    start = HostReading(wall_s=0.0, host_busy_s=0.0, host_total_s=0.0, steal_s=0.0, case_s=0.0, runner_s=0.0)
    end = HostReading(wall_s=10.0, host_busy_s=17.0 if busy else 10.0, host_total_s=20.0, steal_s=0.0, case_s=10.0,
                      runner_s=0.0)
    load = window_load(start, end, cores=2)
    assert load is not None  # both readings given
    return load.record().model_dump(mode="json")


def _round_seconds(label: str, offloaded: int, repeat: int = 0) -> float:
    """Seconds of one measured round: 0.5, times ``1 + FAKE_COPY_FRACTION * offloaded``, times the label's
    ``FAKE_SLOW`` factor (module docstring)."""
    fraction = float(os.environ.get("FAKE_COPY_FRACTION", "0") or 0)
    slow = dict(kv.split(":", 1) for kv in os.environ.get("FAKE_SLOW", "").split(",") if ":" in kv)
    factor = slow.get(f"{label}-r{repeat}", slow.get(label, slow.get("*", 1.0) if offloaded else 1.0))
    return 0.5 * (1 + fraction * offloaded) * float(factor)


_VLLM_032_REJECTION = (
    "1 validation error for OffloadConfig | Value error, offload_num_in_group ({n}) must be <= offload_group_size "
    "({g}) [type=value_error, input_value=ArgsKwargs((), {{'offload_... offload_params=set())}}), "
    "input_type=ArgsKwargs] | For further information visit https://errors.pydantic.dev/2.14/v/value_error")


def _engine_path_case(case_path: str, mode: str) -> int | None:
    """A case with ``engine_validates``, read as bench_one reads it: the exit of :func:`_engine_path` when the
    project's check refuses its setting; ``None`` (go on as an ordinary case) when it accepts it."""
    from runners.incase.bench_one import load_case
    from runners.incase.engine_path import project_verdict

    a = load_case(case_path)
    return _engine_path(a, mode) if project_verdict(a) is not None else None


def _engine_path(a, mode: str) -> int:
    """An invalid setting on the engine path (see the module docstring); exit 1 like bench_one."""
    from runners.incase.engine_path import REJECTED, build, project_verdict

    o = a.offload
    if mode == "engine_accepts":
        build(lambda **_: object(), {}, a)
    if mode == "engine_crash":
        build(_crashing_engine, {}, a)
    if mode == "factory_rejects":
        from offload.factory import PrefetchSettings, validate_settings

        build(lambda **_: validate_settings(PrefetchSettings(o.offload_backend, o.offload_group_size,
                                                             o.offload_num_in_group, o.offload_prefetch_step, ())), {}, a)
    msg = _VLLM_032_REJECTION.format(g=o.offload_group_size, n=o.offload_num_in_group)
    info = {"component": "vllm", "error_type": "pydantic_core._pydantic_core.ValidationError", "message": msg,
            "project_check": project_verdict(a), "raised_in": "vllm.engine.arg_utils:2806 create_engine_config"}
    print(REJECTED + json.dumps(info, sort_keys=True), file=sys.stderr, flush=True)
    print("Traceback (most recent call last):", file=sys.stderr, flush=True)
    print('  File "vllm/engine/arg_utils.py", line 2806, in create_engine_config', file=sys.stderr, flush=True)
    print("pydantic_core._pydantic_core.ValidationError: " + msg.replace(" | ", "\n  ", 1), file=sys.stderr, flush=True)
    return 1


def _crashing_engine(**_: object) -> None:
    raise RuntimeError("Engine core initialization failed. See root cause above.")


def _worker() -> None:  # spawned by the fake EngineCore, like vLLM's worker process
    time.sleep(1000)


def _engine_core(pid_path: str) -> None:
    import multiprocessing as mp

    w = mp.get_context("spawn").Process(target=_worker)
    w.start()
    with open(pid_path, "a") as fh:
        fh.write(f"{os.getpid()} {w.pid}\n")
    time.sleep(1000)


def _engine(record_path: Path) -> None:
    import multiprocessing as mp

    pid_path = str(record_path.with_suffix(".pids"))
    core = mp.get_context("spawn").Process(target=_engine_core, args=(pid_path,))
    core.start()
    forked = os.fork()
    if forked == 0:
        time.sleep(1000)
        os._exit(0)
    subprocess.Popen(["/bin/sh", "-c", "( setsid sleep 300 & )"]).wait()
    with open(pid_path, "a") as fh:
        fh.write(f"{os.getpid()} {forked}\n")
    time.sleep(1000)


if __name__ == "__main__":
    raise SystemExit(main())
