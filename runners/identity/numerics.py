"""What the numerics of a run depend on: CPU model and ISA, torch / oneDNN, threads, accelerator.

What is modelled: the facts recorded in the environment manifest (``numerics``) so that two
runs whose greedy tokens differ can be told apart by platform: CPU model name and the ISA
flags that select bf16 GEMM kernels (``amx*``, ``avx512*``, ``avx2``, ``avx``, ``fma``,
``f16c`` from ``/proc/cpuinfo``), torch and oneDNN versions and the torch thread count
*as a case process sees them* (a probe run with the case environment and the runtime's
interpreter), the thread count and binding variables (``OMP_NUM_THREADS``,
``VLLM_CPU_OMP_THREADS_BIND``, ...), the CPU GEMM kernel path of the run
(:mod:`offload.cpu_kernels`), and GPU / NPU model and driver where present.

What is deliberately not modelled: BIOS / microcode settings, frequency scaling, NUMA
topology beyond the binding variables.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from results_schema.records.base import Device
from results_schema.records.manifest import REDACTED, NumericsIdentity, looks_like_credential

ISA_FLAG = re.compile(r"^(amx\w*|avx512\w*|avx2|avx|fma|f16c|avx_vnni\w*)$")
"""ISA flags recorded (the ones vLLM / oneDNN / sgl-kernel choose bf16 GEMM kernels by)."""

THREAD_ENV = ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_PROC_BIND",
              "OMP_PLACES", "KMP_AFFINITY", "GOMP_CPU_AFFINITY", "MKL_NUM_THREADS", "DNNL_MAX_CPU_ISA",
              "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
"""Environment variables of the case process that set thread count, binding or ISA caps."""

PROBE = (
    "import json, re, torch\n"
    "cfg = torch.__config__.show()\n"
    "m = re.search(r'(?:oneDNN|MKL-DNN) v([0-9][0-9.]*)', cfg)\n"
    "print(json.dumps({'torch': torch.__version__, 'onednn': m.group(1) if m else None,\n"
    "                  'threads': torch.get_num_threads(),\n"
    "                  'cpu_capability': torch.backends.cpu.get_cpu_capability()}))\n"
)
"""Run in a case-like process: torch version, oneDNN version, torch threads, ATen CPU capability."""


def parse_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """CPU model name and the recorded ISA flags (sorted) from ``/proc/cpuinfo`` text.

    Returns:
        ``(model name or platform.processor() when absent, flags)``.
    """
    model = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = {f for f in value.split() if ISA_FLAG.match(f)}
    return model or platform.processor() or "unknown", tuple(sorted(flags))


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, tuple[str, ...]]:
    """:func:`parse_cpuinfo` of this host (``("unknown", ())`` when unreadable)."""
    try:
        return parse_cpuinfo(cpuinfo.read_text(errors="replace"))
    except OSError:
        return platform.processor() or "unknown", ()


ProbeTorch = Callable[[str, Mapping[str, str]], dict[str, object]]
"""``(python, env) -> facts``: :func:`probe_torch`'s signature (callers may inject another probe)."""


def probe_torch(python: str, env: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, object]:
    """Run :data:`PROBE` with ``python`` and ``env``; empty dict (never raises) when it fails."""
    try:
        r = subprocess.run([python, "-c", PROBE], env=dict(env), capture_output=True, text=True,
                           timeout=timeout_s, check=False)
        if r.returncode == 0 and r.stdout.strip():
            return dict(json.loads(r.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError):
        pass
    return {}


def accelerator_facts(device: str) -> tuple[str | None, str | None]:
    """``(model, driver version)`` of the first GPU / NPU; ``(None, None)`` on CPU or when unknown.

    CUDA: ``nvidia-smi --query-gpu=name,driver_version``. NPU: ``npu-smi info`` (the
    ``Version:`` header and the first chip name row).
    """
    try:
        if device == "cuda" and shutil.which("nvidia-smi"):
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60, check=False)
            first = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
            name, _, driver = first.partition(",")
            return (name.strip() or None), (driver.strip() or None)
        if device == "npu" and shutil.which("npu-smi"):
            r = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=60, check=False)
            text = r.stdout if r.returncode == 0 else ""
            ver = re.search(r"Version:\s*([\w.\-]+)", text)
            chip = re.search(r"^\|\s*\d+\s+(\S+)\s*\|", text, re.M)
            return (chip.group(1) if chip else None), (ver.group(1) if ver else None)
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    return None, None


def numerics_identity(*, device: str, python: str, case_env: Mapping[str, str], cpu_kernel_path: str | None,
                      probe_torch: ProbeTorch, cpuinfo: Path = Path("/proc/cpuinfo")) -> NumericsIdentity:
    """Assemble :class:`NumericsIdentity` for a runtime.

    Args:
        device: ``cpu``, ``cuda`` or ``npu``.
        python: interpreter the cases run with (probed for torch / oneDNN / threads).
        case_env: environment a case process gets (runner environment + runtime env).
        cpu_kernel_path: the run's CPU GEMM kernel path, or None when not a CPU runtime.
        cpuinfo: ``/proc/cpuinfo`` path (tests pass a fixture).
        probe_torch: the torch probe (the run's ``runners.orchestration.host_measures.HostMeasures.probe_torch``:
            :func:`probe_torch`, or in the test suite one that shares one real probe between runs on the same host).
    """
    model, flags = cpu_facts(cpuinfo)
    facts = probe_torch(python, case_env)
    accel_model, accel_driver = accelerator_facts(device)
    threads = facts.get("threads")
    return NumericsIdentity(
        device=Device(device), cpu_model=model, cpu_isa_flags=flags, machine=platform.machine(),
        torch_version=str(facts["torch"]) if facts.get("torch") else None,
        onednn_version=str(facts["onednn"]) if facts.get("onednn") else None,
        aten_cpu_capability=str(facts["cpu_capability"]) if facts.get("cpu_capability") else None,
        torch_num_threads=int(threads) if isinstance(threads, int) else None,
        thread_env={k: REDACTED if looks_like_credential(str(case_env[k])) else str(case_env[k])
                    for k in THREAD_ENV if k in case_env},
        cpu_kernel_path=cpu_kernel_path, accelerator_model=accel_model, accelerator_driver=accel_driver,
    )


def describe(flags: Sequence[str]) -> str:
    """Short text of the ISA flags that decide bf16 kernels (for failure messages)."""
    keep = [f for f in flags if f.startswith(("amx", "avx512_bf16", "avx512f", "avx2"))]
    return " ".join(keep) if keep else "none of amx*/avx512_bf16/avx512f/avx2"
