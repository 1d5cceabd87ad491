"""What the launch of every case kind shares: its commands, its ``CaseSpec`` fields, its environment.

What is modelled: what every case kind's launch shares: the run's case commands (``CaseCommands``), the
``results_schema.records.case.CaseSpec`` fields of a bench or accuracy case (``spec_fields``, ``case_workload``;
the kind builds the spec and its argv, ``runners.kinds``), the explicit environment of ``case_env`` (see
docs/CONTRACTS.md) and vLLM's shared model-info cache.

What is deliberately not modelled: launching (``runners.incase.process_group``), runtime command
prefixes (``runners.identity.runtimes.wrap_prefix``), a serving case's spec (``runners.launching.serving_case``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from conf.schema_stack import RuntimeConfig, WorkloadConfig
from offload.controls import STEP_DELAY_ENV
from results_schema.records.case import RequestedOffload
from results_schema.records.models import WorkloadSpec
from runners.paths import CONTROLLED_ENV, EVIDENCE_HOOK_DIR, REPO_ROOT, CasePaths
from runners.cases import ScheduledCase
from conf.typed import plain
from offload.overlay import OVERLAY_CLASS_ENV, OVERLAY_ROOT_ENV
from runners.identity.runtimes import map_path


@dataclass(frozen=True)
class CaseCommands:
    """How the run starts its case processes: explicit command prefixes replacing ``[python, -m, <module>]``
    (tests: fake engines and a fake serving case, as the run's ``bench_command``, ``accuracy_command`` and
    ``serving_command`` settings) and the module a bench case runs."""

    bench_command: Sequence[str] | None = None
    accuracy_command: Sequence[str] | None = None
    serving_command: Sequence[str] | None = None
    bench_module: str = "runners.incase.bench_one"


def spec_fields(sc: ScheduledCase, *, model_dir: Path, paths: CasePaths) -> dict[str, Any]:
    """The ``CaseSpec`` fields every bench or accuracy case has: identity, runtime, device, model, the requested
    offload (the full setting, backend included: the phase's ``offload_backend``) and the record path."""
    c = sc.case
    offload = RequestedOffload(offload_group_size=c.group_size, offload_num_in_group=c.num_in_group,
                               offload_prefetch_step=c.prefetch_step, offload_params=tuple(c.params),
                               offload_backend=c.backend)
    return dict(phase=c.phase, label=c.label, implementation=c.implementation, repeat=sc.repeat,
                runtime=c.runtime_name, device=str(c.runtime.device), model=str(model_dir),
                offload=offload, record=str(paths.record))


def case_workload(w: WorkloadConfig) -> WorkloadSpec:
    """The planned workload as the record's ``WorkloadSpec`` (the same fields)."""

    return WorkloadSpec(**plain(w))


def overlay_env(runtime: RuntimeConfig) -> dict[str, str]:
    """``OFFLOAD_OVERLAY_CLASS`` / ``OFFLOAD_OVERLAY_SOURCE_ROOT`` of an ``overlay`` case (``offload.overlay``).

    The root is where the declared ``runtime.overlay_source_root`` is on this host (``runtime.path_map``,
    as for pins), so the tree on ``PYTHONPATH`` is the tree the identity gate hashed.
    """

    root = map_path(runtime, runtime.overlay_source_root or "")
    return {OVERLAY_CLASS_ENV: runtime.overlay_class or "", OVERLAY_ROOT_ENV: root}


def vllm_cache_root(run_dir: Path, implementation: str) -> Path:
    """A case's ``VLLM_CACHE_ROOT``: ``<run>/cache/vllm/<implementation>`` (one compile cache per implementation)."""
    return run_dir / "cache" / "vllm" / implementation


MODEL_INFO_DIR = "modelinfos"
"""vLLM's model-class inspection cache under ``VLLM_CACHE_ROOT`` (vLLM 0.32
``model_executor/models/registry.py``: ``_LazyRegisteredModel._get_cache_dir``)."""


def run_model_info_dir(run_dir: Path) -> Path:
    """``<run>/cache/vllm-modelinfos``: the model-info answers every implementation of the run shares."""
    return run_dir / "cache" / f"vllm-{MODEL_INFO_DIR}"


HOST_MODEL_INFO_CACHE = REPO_ROOT / ".cache" / f"vllm-{MODEL_INFO_DIR}"
"""This checkout's copy of vLLM's model-info answers, kept across runs (``.cache/`` is git-ignored, beside the
generated models): a run's shared ``modelinfos`` starts from it and hands new answers back to it."""


def share_model_info_cache(run_dir: Path, implementation: str, host_cache: Path | None = None) -> Path:
    """Make ``<run>/cache/vllm/<implementation>/modelinfos`` a link to ``<run>/cache/vllm-modelinfos``.

    vLLM inspects the model class (``Qwen2ForCausalLM``: text generation? pooling? ...) in a fresh
    interpreter that imports vLLM, unless ``VLLM_CACHE_ROOT/modelinfos`` holds the answer for the
    current bytes of the class's source file (vLLM checks a hash of them and ignores a stale or
    unreadable file). That answer depends on the installed vLLM only, never on the offloader, so the
    implementations of a run, whose ``VLLM_CACHE_ROOT`` differ (compile caches stay apart), share it.
    When the run's directory is created and ``host_cache`` is given, it starts with the ``*.json``
    answers found there (:func:`publish_model_infos` fills it): then no case pays the inspection
    (about 10 CPU-s and 20 s on the 2-core machine); otherwise the run's first case does. Idempotent;
    an existing directory in place of the link is left as it is.

    Returns:
        The shared directory (created).
    """
    shared = run_model_info_dir(run_dir)
    if not shared.is_dir():
        shared.mkdir(parents=True, exist_ok=True)
        if host_cache is not None:
            try:
                _copy_json_files(host_cache, shared)
            except OSError:  # a cache problem never stops a run: the first case then inspects the class
                pass
    link = vllm_cache_root(run_dir, implementation) / MODEL_INFO_DIR
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink() and not link.exists():  # relative: the run directory may move
        link.symlink_to(os.path.relpath(shared, link.parent), target_is_directory=True)
    return shared


def publish_model_infos(run_dir: Path, host_cache: Path) -> list[str]:
    """Copy the run's model-info answers (``<run>/cache/vllm-modelinfos/*.json``) that ``host_cache`` lacks
    or holds with other bytes into it, each by an atomic rename (a runner reading it at the same time sees
    the old file or the new one). A cache problem never fails a run: ``OSError`` is swallowed.

    Returns:
        The names of the files copied.
    """
    try:
        return _copy_json_files(run_model_info_dir(run_dir), host_cache)
    except OSError:
        return []


def _copy_json_files(src: Path, dst: Path) -> list[str]:
    if not src.is_dir():
        return []
    copied = []
    for f in sorted(src.glob("*.json")):
        data = f.read_bytes()
        target = dst / f.name
        if target.is_file() and target.read_bytes() == data:
            continue
        dst.mkdir(parents=True, exist_ok=True)
        tmp = dst / f".{f.name}.{os.getpid()}.{threading.get_ident()}.tmp"  # one writer per name
        try:
            tmp.write_bytes(data)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        copied.append(f.name)
    return copied


def case_env(sc: ScheduledCase, *, run_dir: Path, paths: CasePaths, base_env: Mapping[str, str]) -> dict[str, str]:
    """Explicit environment of one case process (see docs/CONTRACTS.md).

    ``PYTHONPATH``: the evidence hook (its ``sitecustomize`` must load first), the repository, an
    ``overlay`` case's source root, then (``inherit_pythonpath``) the inherited entries. The overlay
    comes after the repository so a published tree can never shadow this project's ``offload`` /
    ``runners`` packages, and before the inherited entries and the installed packages
    (``site-packages`` follows ``PYTHONPATH``), so its ``vllm_ascend`` shadows the installed one;
    ``offload.overlay`` refuses a class whose module was loaded from anywhere else.
    """
    env = {k: v for k, v in base_env.items() if k not in CONTROLLED_ENV}
    cache = run_dir / "cache"
    env.update({str(k): str(v) for k, v in sc.case.runtime.env.items()})
    pythonpath = f"{EVIDENCE_HOOK_DIR}:{REPO_ROOT}"
    if sc.case.implementation == "overlay":
        env.update(overlay_env(sc.case.runtime))
        pythonpath += ":" + env["OFFLOAD_OVERLAY_SOURCE_ROOT"]
    if sc.case.runtime.inherit_pythonpath and base_env.get("PYTHONPATH"):
        pythonpath += ":" + base_env["PYTHONPATH"]  # e.g. CANN's set_env.sh entries, after ours
    env.update({
        "PYTHONPATH": pythonpath,
        "OFFLOAD_IMPL": sc.case.implementation,
        "OFFLOAD_EVIDENCE_PATH": str(paths.evidence),
        "OFFLOAD_CPU_KERNEL_PATH": str(sc.case.runtime.cpu_kernel_path or ""),
        "OFFLOAD_FAULT": str(sc.case.fault or ""),  # negative control only (offload.faults)
        STEP_DELAY_ENV: repr(sc.case.step_delay_ms) if sc.case.step_delay_ms else "",  # speed control only
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "XDG_CACHE_HOME": str(cache / "xdg"),
        # one compile cache per implementation: vLLM's cache key covers the offload config,
        # not OFFLOAD_IMPL, so cases sharing a root could load another offloader's graph
        "VLLM_CACHE_ROOT": str(vllm_cache_root(run_dir, sc.case.implementation)),
        "HF_HOME": str(cache / "hf"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "PYTHONUNBUFFERED": "1",
    })
    return env
