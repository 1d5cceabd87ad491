"""A stand-in for ``runners.incase.bench_one`` that costs no vLLM start-up (fault tests).

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

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from offload import controls
from offload.selection import select_offload_layers
from results_schema.records.host_load import HostLoad
from results_schema.codec.io import dumps_model, write_json
from results_schema.records.models import BenchRecord, RoundResult, RuntimeEvidence
from runners.incase.bench_one import _specs, build_parser, load_case
from runners.incase.host_load import HostReading, window_load
from runners.incase.engine_path import REJECTED, build, project_verdict

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


def main() -> int:
    ns = build_parser().parse_args(sys.argv[1:])
    try:
        a = load_case(ns.case)
        offload, workload = _specs(a)
    except ValueError as exc:
        print(f"ValueError: {exc}", file=sys.stderr, flush=True)
        return 2
    behaviours = dict(kv.split("=", 1) for kv in os.environ.get("FAKE_BEHAVIOUR", "").split(",") if "=" in kv)
    mode = behaviours.get(a.label, "ok")
    assert os.environ["OFFLOAD_IMPL"] == a.implementation
    if a.engine_validates and project_verdict(a) is not None:
        return _engine_path(a, mode)
    record_path = Path(a.record)
    print("fake bench starting", a.label, flush=True)
    print(f"FAKE_BENCH_PYTHON {sys.executable}", flush=True)  # rehearsal: which interpreter the runtime started
    from importlib import metadata

    stack = {d: _version(metadata, d) for d in ("vllm", "vllm-ascend", "torch-npu")}
    print("FAKE_BENCH_STACK " + json.dumps(stack, sort_keys=True), flush=True)
    plugins = sorted(f"{ep.name}={ep.value}@{ep.dist.name if ep.dist else '?'}"
                     for ep in metadata.entry_points(group="vllm.general_plugins"))
    print("FAKE_BENCH_PLUGINS " + " ".join(plugins), flush=True)
    cfg_json = Path(a.model) / "config.json"
    num_layers = json.loads(cfg_json.read_text()).get("num_hidden_layers", 8) if cfg_json.is_file() else 8
    time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP_S", "0")))
    gate, deadline = os.environ.get("FAKE_BENCH_WAIT_FOR"), time.monotonic() + 300
    waiting = os.environ.get("FAKE_BENCH_WAIT_LABELS")
    if waiting is not None:
        labels = waiting.split(",")
        gate = gate if a.label in labels or f"{a.label}-r{a.repeat}" in labels or (
            "*" in labels and a.implementation != "baseline") else None
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
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
    print("(EngineCore pid=1) INFO [kv_cache_utils.py:1] CPU KV cache size: 524,288 tokens, "
          "Maximum concurrency for 256 tokens per request: 2,048.00x", flush=True)
    kernel_path = os.environ.get("OFFLOAD_CPU_KERNEL_PATH", "")
    if kernel_path:
        n_linear = 4 * num_layers  # qkv, o, gate_up, down per decoder layer
        kernels = {"torch_linear": n_linear - 1, "onednn": 1} if mode == "packedkernel" else (
            {"torch_linear": n_linear} if kernel_path == "plain" else {"onednn": n_linear})
        print("(Worker pid=2) OFFLOAD_CPU_KERNELS " + json.dumps({"path": kernel_path, "layers": n_linear,
                                                                   "kernels": kernels}), flush=True)
    if a.device != "cpu" and mode != "nokv":
        for _ in range(2 if mode == "dupkv" else 1):
            print("(EngineCore pid=1) INFO [gpu_worker.py:1] Available KV cache memory: 12.34 GiB", flush=True)
    layers = select_offload_layers(num_layers, offload.offload_group_size, offload.offload_num_in_group) if a.implementation != "baseline" else ()
    wrapped = () if mode == "nooffload" else layers
    nbytes = LAYER_BYTES * len(wrapped)
    ev = RuntimeEvidence(
        offloader_class=OFFLOADER_CLASS[a.implementation], implementation=a.implementation, offload_group_size=offload.offload_group_size,
        offload_num_in_group=offload.offload_num_in_group, offload_prefetch_step=offload.offload_prefetch_step, num_layers=num_layers,
        selected_layers=layers, wrapped_layers=wrapped, wrapped_count=len(wrapped), offloaded_bytes=nbytes,
        static_buffer_bytes=0, released_bytes=nbytes, post_init_called=mode != "nopostinit", pid=os.getpid(), device=a.device)
    if mode != "noevidence":
        write_json(Path(os.environ["OFFLOAD_EVIDENCE_PATH"]), ev)
        logged = ev.model_copy(update={"pid": ev.pid + 1}) if mode == "mismatch" else ev
        print("(EngineCore pid=1) OFFLOAD_EVIDENCE " + dumps_model(logged), flush=True)
    def produced(i: int) -> int:
        return 0 if (mode == "empty" and i == 1) else workload.num_prompts * workload.max_tokens

    delay_ms = controls.step_delay_requested()
    if delay_ms:  # the speed control: lines as offload.controls prints them; every step of a round sleeps
        print(controls.applied_line(delay_ms, "FakeForCausalLM"), flush=True)
        print(f"{controls.ACTED} step_delay_ms={delay_ms:g}: first forward delayed", flush=True)
    step = _round_seconds(a.label, len(layers), a.repeat) + workload.max_tokens * delay_ms / 1000.0
    rounds = tuple(RoundResult(index=i, elapsed_s=step, prompt_tokens=workload.num_prompts * workload.input_len,
                               output_tokens=produced(i), throughput_tok_s=produced(i) / step,
                               token_digest=("f" if mode == "digest" and i == 0 else "0") * 64)
                   for i in range(workload.measured_rounds))
    out = sum(r.output_tokens for r in rounds)
    elapsed = sum(r.elapsed_s for r in rounds)
    rec = BenchRecord(phase=a.phase, label=a.label, implementation=a.implementation, repeat=a.repeat,
                      runtime=a.runtime, model=a.model, offload=offload, workload=workload, load_seconds=1.0,
                      rounds=rounds, output_tokens=out, elapsed_s=elapsed, throughput_tok_s=out / elapsed,
                      token_digest=("e" if mode == "digest" else "1") * 64, peak_rss_bytes=1, device_memory_bytes=None, vllm_version="fake",
                      torch_version="fake", pid=os.getpid(), step_delay_ms=delay_ms)
    busy = [x for x in os.environ.get("FAKE_CONTENDED", "").split(",") if x]
    if busy:
        rec = rec.model_copy(update={"host_load": _sampled_load(f"{a.label}-r{a.repeat}" in busy
                                                                or f"{a.label}-r*" in busy)})
    if mode == "otherworkload":
        rec = rec.model_copy(update={"workload": workload.model_copy(update={"dtype": "float32"})})
    write_json(record_path, rec)
    line = "BENCH_RESULT " + dumps_model(rec)
    print(line, flush=True)
    if mode == "dup":
        print(line, flush=True)
    return 0


def _sampled_load(busy: bool) -> HostLoad:
    """The host load the sampler's two readings give (module docstring): 0.7 foreign cores when ``busy``, none else."""
    start = HostReading(wall_s=0.0, host_busy_s=0.0, host_total_s=0.0, steal_s=0.0, case_s=0.0, runner_s=0.0)
    end = HostReading(wall_s=10.0, host_busy_s=17.0 if busy else 10.0, host_total_s=20.0, steal_s=0.0, case_s=10.0,
                      runner_s=0.0)
    load = window_load(start, end, cores=2)
    assert load is not None  # both readings given
    return load.record()


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


def _engine_path(a, mode: str) -> int:
    """An invalid setting on the engine path (see the module docstring); exit 1 like bench_one."""
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
