"""Runtime evidence of what the installed vLLM offloader really did (observer only).

Installed by ``sitecustomize.py`` when ``OFFLOAD_EVIDENCE_PATH`` is set; inert otherwise.
When ``vllm.model_executor.offloader.base`` is imported (in whichever process loads the
model: vLLM V1 builds it in the engine-core child), ``set_offloader`` is wrapped so every
installed offloader gets instance-level wrappers around ``wrap_modules`` and ``post_init``.
They record the modules really passed to ``wrap_modules`` and call the originals with the
same arguments (behaviour unchanged; exceptions propagate untouched).

Publication, once per process and only on global rank 0:

* after ``post_init`` of any offloader, or
* for ``NoopOffloader`` (baseline), right after its ``wrap_modules`` (the CPU runner never
  calls ``post_init``): explicit empty evidence;
* at interpreter exit, for an offloader that wrapped modules but never saw ``post_init``
  (published with ``post_init_called = false``, so the runner can reject it).

Publishing = validate as ``results_schema.records.models.RuntimeEvidence``, write
``<path>.tmp`` + fsync + rename (+ fsync of the directory), then print
``OFFLOAD_EVIDENCE <json>`` (same bytes as the file) to stdout. Any failure while building
or writing the evidence is reported as one ``OFFLOAD_EVIDENCE_ERROR <message>`` line on
stderr and never raised into vLLM: the runner then sees missing evidence and records a
failure.

Fields come from ``evidence_state()`` on this project's offloaders, and from small adapters
reading the internals of upstream ``PrefetchOffloader`` (also vLLM-Ascend's
``NPUPrefetchOffloader`` and the published ``AscendPrefetchOffloader`` of implementation
``overlay``, same attributes), ``UVAOffloader`` and ``NoopOffloader``. The device of an
upstream-style offloader is read from its module offloaders' ``device`` (vLLM), else the
offloader's own ``device``, else the wrapped modules' parameters, else the buffer pool's
buffers: the published ``_PrefetchModuleOffloader`` has no ``device`` attribute. Wrapped layer indices are positions of the really wrapped modules in the
``wrap_modules`` call; ``selected_layers`` for upstream classes applies the selection rule to
the number of modules really seen.

Independent cross-check (fail-closed), before anything is written: the claimed evidence
must agree with what the hook observed at ``wrap_modules`` (layer count, selection, wrapped
positions and bytes); the rules live in the sibling module ``offload_evidence_check``. A
mismatch publishes nothing and prints ``OFFLOAD_EVIDENCE_ERROR evidence cross-check
failed: <claim>: expected ..., actual ...`` on stderr. ``NoopOffloader`` and unknown classes
(explicit empty evidence) are not cross-checked; UVA gets the layer and byte checks.

Not modelled: several ``wrap_modules`` calls on one offloader (the last one counts) and
pipeline-parallel ranks other than 0.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

try:  # imported as runners.incase.evidence_hook.offload_evidence_hook (tests)
    from .offload_evidence_check import check_claim, param_bytes
except ImportError:  # imported from the hook directory on PYTHONPATH (case processes, via sitecustomize)
    from offload_evidence_check import check_claim, param_bytes  # type: ignore[no-redef]

from results_schema.codec.files import write_text_atomic
from results_schema.rules.log_rule import OFFLOAD_EVIDENCE

ENV_PATH = "OFFLOAD_EVIDENCE_PATH"
ENV_IMPL = "OFFLOAD_IMPL"
IMPLEMENTATIONS = ("baseline", "current", "official", "sync", "overlay")
BASE_MODULE = "vllm.model_executor.offloader.base"
_MARK = "_offload_evidence_observed"


class _State:
    def __init__(self) -> None:
        self.published = False
        self.seen: dict[int, list[Any]] = {}
        # per offloader: per position, [(param name, bytes)] observed before wrapping
        self.observed: dict[int, list[list[tuple[str, int]]]] = {}
        self.prefix: dict[int, str] = {}
        self.post_init_seen: set[int] = set()
        self.pending: Any = None  # offloader that wrapped but has not published yet


_state = _State()


def install() -> bool:
    """Activate the hook when ``OFFLOAD_EVIDENCE_PATH`` is set; returns whether it did."""
    if not os.environ.get(ENV_PATH):
        return False
    from offload.import_hooks import when_imported

    when_imported(BASE_MODULE, _patch_base)
    return True


def _patch_base(base: Any) -> None:
    original = base.set_offloader
    if getattr(original, _MARK, False):
        return

    def set_offloader(instance: Any = None) -> None:
        original(instance)
        observe(base.get_offloader())

    setattr(set_offloader, _MARK, True)
    set_offloader.__wrapped__ = original  # type: ignore[attr-defined]
    set_offloader.__doc__ = original.__doc__
    base.set_offloader = set_offloader
    observe(base.get_offloader())


def observe(off: Any) -> None:
    """Wrap ``off.wrap_modules``/``off.post_init`` on the instance (idempotent)."""
    if off is None or getattr(off, _MARK, False):
        return
    try:
        setattr(off, _MARK, True)
    except AttributeError:  # slots or frozen object: cannot observe, nothing to change
        return
    orig_wrap = off.wrap_modules
    orig_post = off.post_init

    def wrap_modules(modules_generator: Any, *args: Any, **kwargs: Any) -> Any:
        seen: list[Any] = []
        observed: list[list[tuple[str, int]] | None] = []

        def tap() -> Any:
            for module in modules_generator:
                seen.append(module)
                observed.append(param_bytes(module))  # before the offloader touches it
                yield module

        prefix = kwargs.get("prefix", args[0] if args else "")
        result = orig_wrap(tap(), *args, **kwargs)
        _state.seen[id(off)] = seen
        _state.observed[id(off)] = observed  # type: ignore[assignment]
        _state.prefix[id(off)] = prefix if isinstance(prefix, str) else ""
        if _is_noop(off):
            publish(off)
        else:
            _state.pending = off
        return result

    def post_init(*args: Any, **kwargs: Any) -> Any:
        result = orig_post(*args, **kwargs)
        _state.post_init_seen.add(id(off))
        publish(off)
        return result

    off.wrap_modules = wrap_modules
    off.post_init = post_init


def cross_check(off: Any, d: dict[str, Any]) -> str | None:
    """Compare claimed evidence ``d`` with what the hook observed; None if consistent.

    Returns a message naming the claim, the expected and the actual value otherwise
    (rules: ``offload_evidence_check.check_claim``).
    """
    key = id(off)
    return check_claim(off, d, _state.seen.get(key), _state.observed.get(key), _state.prefix.get(key, ""))


def _is_noop(off: Any) -> bool:
    return type(off).__name__ == "NoopOffloader"


def _class_name(off: Any) -> str:
    cls = type(off)
    return f"{cls.__module__}.{cls.__qualname__}"


def _first_device(modules: list[Any]) -> str:
    for m in modules:
        for p in m.parameters():
            return str(p.device.type)
    return "cpu"


def _index_of(modules: list[Any], module: Any) -> int | None:
    for i, m in enumerate(modules):
        if m is module:
            return i
    return None


def _empty(off: Any, seen: list[Any]) -> dict[str, Any]:
    return {
        "offloader_class": _class_name(off),
        "offload_group_size": 0,
        "offload_num_in_group": 0,
        "offload_prefetch_step": 0,
        "offload_params": (),
        "num_layers": len(seen),
        "selected_layers": (),
        "wrapped_layers": (),
        "wrapped_count": 0,
        "offloaded_bytes": 0,
        "static_buffer_bytes": 0,
        "released_bytes": 0,
        "post_init_called": id(off) in _state.post_init_seen,
        "device": _first_device(seen),
    }


def _prefetch_adapter(off: Any, seen: list[Any]) -> dict[str, Any]:
    """vLLM ``PrefetchOffloader`` and its NPU ports: ``module_offloaders``, ``buffer_pool``."""
    from offload.selection import select_offload_layers

    d = _empty(off, seen)
    g, n = int(off.group_size), int(off.num_in_group)
    wrapped = sorted(
        i for i in (_index_of(seen, mo.module) for mo in off.module_offloaders) if i is not None
    )
    offloaded = 0
    for mo in off.module_offloaders:
        for po in getattr(mo, "_param_offloaders", {}).values():
            storage = getattr(po, "_cpu_storage", None)
            if storage is not None:
                offloaded += storage.numel() * storage.element_size()
    if offloaded == 0:
        offloaded = int(getattr(off, "total_offloaded_bytes", 0))
    pool = getattr(off, "buffer_pool", None)
    static = int(pool.total_bytes) if pool is not None else 0
    d.update(
        offload_group_size=g,
        offload_num_in_group=n,
        offload_prefetch_step=int(off.prefetch_step),
        offload_params=tuple(sorted(getattr(off, "offload_params", ()) or ())),
        selected_layers=select_offload_layers(len(seen), g, n) if g > 0 else (),
        wrapped_layers=tuple(wrapped),
        wrapped_count=len(wrapped),
        offloaded_bytes=offloaded,
        static_buffer_bytes=static,
        released_bytes=offloaded - static,
    )
    device = _offloader_device(off)
    if device is not None:
        d["device"] = device
    return d


def _device_type(value: Any) -> str | None:
    """``cuda`` of ``torch.device('cuda', 0)`` / ``'cuda:0'``; None when ``value`` names no device."""
    kind = getattr(value, "type", None) if not isinstance(value, str) else value.split(":", 1)[0]
    return str(kind) if isinstance(kind, str) and kind else None


def _pool_tensors(pool: Any) -> list[Any]:
    """Tensors of a buffer pool (upstream ``StaticBufferPool._buffers``: key -> per-slot tensors)."""
    buffers = getattr(pool, "_buffers", None) or getattr(pool, "buffers", None) or {}
    groups = buffers.values() if isinstance(buffers, dict) else buffers
    out: list[Any] = []
    for g in groups:
        out.extend(g if isinstance(g, (list, tuple)) else [g])
    return [t for t in out if hasattr(t, "device")]


def _offloader_device(off: Any) -> str | None:
    """Device type of an upstream-style prefetch offloader (see the module docstring for the order)."""
    mos = list(getattr(off, "module_offloaders", None) or ())
    for value in [getattr(mo, "device", None) for mo in mos] + [getattr(off, "device", None)]:
        if _device_type(value):
            return _device_type(value)
    for mo in mos:
        module = getattr(mo, "module", None)
        for p in (module.parameters() if module is not None else ()):
            return str(p.device.type)
    for t in _pool_tensors(getattr(off, "buffer_pool", None)):
        return str(t.device.type)
    return None


def _uva_adapter(off: Any, seen: list[Any]) -> dict[str, Any]:
    """vLLM ``UVAOffloader``: layers with a parameter marked UVA-offloaded or moved to CPU."""
    d = _empty(off, seen)
    wrapped = tuple(
        i
        for i, m in enumerate(seen)
        if any(getattr(p, "_vllm_is_uva_offloaded", False) for p in m.parameters())
    )
    offloaded = int(getattr(off, "cpu_offload_bytes", 0))
    d.update(
        offload_params=tuple(sorted(getattr(off, "cpu_offload_params", ()) or ())),
        selected_layers=wrapped,
        wrapped_layers=wrapped,
        wrapped_count=len(wrapped),
        offloaded_bytes=offloaded,
        released_bytes=offloaded,
    )
    return d


def _implementation(off: Any) -> str:
    impl = os.environ.get(ENV_IMPL, "")
    if impl in IMPLEMENTATIONS:
        return impl
    if hasattr(off, "evidence_state"):
        return str(getattr(off, "implementation", "current"))
    if getattr(off, "_offload_overlay", False):  # offload.overlay.OVERLAY_MARK
        return "overlay"
    return "baseline" if _is_noop(off) else "official"


def build_evidence(off: Any) -> dict[str, Any]:
    """RuntimeEvidence fields (as a dict) for offloader ``off``."""
    seen = _state.seen.get(id(off), [])
    if hasattr(off, "evidence_state"):
        d = dict(off.evidence_state())
    elif hasattr(off, "module_offloaders"):
        d = _prefetch_adapter(off, seen)
    elif hasattr(off, "cpu_offload_max_bytes"):
        d = _uva_adapter(off, seen)
    else:
        d = _empty(off, seen)
    d["schema_version"] = 1
    d["implementation"] = _implementation(off)
    d["pid"] = os.getpid()
    return d


def _is_rank_zero() -> bool:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return True


def _to_json(d: dict[str, Any]) -> str:
    try:
        from results_schema.records.models import RuntimeEvidence
    except ImportError:
        return json.dumps(d, sort_keys=True, allow_nan=False)
    return RuntimeEvidence.model_validate(d).model_dump_json()


def _cross_checked(off: Any) -> bool:
    """Ours, upstream prefetch (and NPU ports) and UVA; not Noop or unknown (empty evidence)."""
    if _is_noop(off):
        return False
    return (hasattr(off, "evidence_state") or hasattr(off, "module_offloaders")
            or hasattr(off, "cpu_offload_max_bytes"))


def publish(off: Any) -> bool:
    """Publish evidence for ``off`` once per process; returns whether this call published."""
    if _state.published or not _is_rank_zero():
        return False
    _state.published = True
    _state.pending = None
    path = os.environ.get(ENV_PATH, "")
    try:
        d = build_evidence(off)
        if _cross_checked(off):
            problem = cross_check(off, d)
            if problem is not None:
                print(f"OFFLOAD_EVIDENCE_ERROR evidence cross-check failed: {problem}",
                      file=sys.stderr, flush=True)
                return False
        text = _to_json(d)
        write_text_atomic(path, text)
    except Exception as exc:  # observer must never break the model; the runner sees no evidence
        print(f"OFFLOAD_EVIDENCE_ERROR {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return False
    print(OFFLOAD_EVIDENCE + text, flush=True)
    return True


def _publish_pending_at_exit() -> None:
    if _state.pending is not None:
        publish(_state.pending)


atexit.register(_publish_pending_at_exit)
