"""Provenance of a run directory: model, hardware, runtime versions, run id, config hash.

What is modelled: the fields of ``results_schema.records.summary.Provenance``, read from the run's
``environment-manifest.json`` (strictly, via ``results_schema.records.manifest.EnvironmentManifest``) and
from the validated case records (vLLM / torch versions each case process reported). Nothing is
read from the machine that renders the report: a report written elsewhere describes the run,
not the reader.

What is deliberately not modelled: checking the identity (``runners.identity.pin_checks`` does at run time).
"""

from __future__ import annotations

from pathlib import Path

from analysis.load import RunData
from results_schema.codec.io import RecordError, read_json
from results_schema.records.manifest import EnvironmentManifest
from results_schema.records.summary import Provenance

MANIFEST = "environment-manifest.json"


def _machine(platform_str: str | None) -> str | None:
    """Architecture from a ``platform.platform()`` string (``Linux-6.1-x86_64-with-glibc2.36`` -> x86_64)."""
    if not platform_str:
        return None
    for arch in ("x86_64", "aarch64", "arm64", "ppc64le", "s390x", "riscv64", "i686", "AMD64"):
        if arch in platform_str:
            return arch
    return None


def provenance(run_dir: Path | str, data: RunData | None = None) -> Provenance:
    """Provenance of ``run_dir`` (manifest when present and valid; records for runtime versions).

    Args:
        run_dir: the run directory.
        data: its loaded records (for vLLM / torch versions); optional.

    Returns:
        ``Provenance``; ``manifest`` is False (and manifest fields null) when the manifest is
        absent or does not validate.
    """
    run_dir = Path(run_dir)
    vllm: tuple[str, ...] = ()
    torch: tuple[str, ...] = ()
    if data is not None and data.case_runs:
        vllm = tuple(sorted({cr.record.vllm_version for _p, _l, cr in data.case_runs}))
        torch = tuple(sorted({cr.record.torch_version for _p, _l, cr in data.case_runs}))
    path = run_dir / MANIFEST
    m = None
    if path.is_file():
        try:
            m = read_json(path, EnvironmentManifest)
        except RecordError:
            m = None
    if m is None:
        return Provenance(run_id=run_dir.name, vllm_versions=vllm, torch_versions=torch, manifest=False)
    # one entry per distinct device: the manifest lists the device of every runtime used, often the same one
    devices = tuple(dict.fromkeys(f"{d.kind}: {d.name} x{d.count}" for d in m.devices))
    isa = _isa(m)
    return Provenance(
        run_id=m.run_id, experiment=m.experiment, created_utc=m.created_utc, model_name=m.model.name,
        model_path=m.model.path, model_num_layers=m.model.num_layers,
        model_sha256sums_sha256=m.model.sha256sums_sha256, hostname=m.hostname, platform=m.platform,
        machine=_machine(m.platform), isa=isa if isinstance(isa, str) else None, devices=devices,
        python_version=m.python_version.split()[0], vllm_versions=vllm, torch_versions=torch,
        packages=dict(m.packages), git_revision=m.git.revision, git_dirty=m.git.dirty,
        config_sha256=m.config_sha256, manifest=True)


def _isa(m: EnvironmentManifest) -> str | None:
    """The ISA row: per runtime of the manifest's ``numerics``, ``<device>: <CPU model>: <flags>
    (ATen <capability>)``, runtimes joined by ``; ``; None when the manifest has no numerics.

    Example: ``cpu: AMD EPYC: avx, avx2, avx512_bf16, ... (ATen AVX512)``.
    """
    rows = []
    for n in m.numerics:
        flags = ", ".join(n.cpu_isa_flags) or "no ISA flags recorded"
        aten = f" (ATen {n.aten_cpu_capability})" if n.aten_cpu_capability else ""
        rows.append(f"{n.device}: {n.cpu_model}: {flags}{aten}")
    return "; ".join(rows) or None


def one_line(p: Provenance) -> str:
    """``run <id> | model <name> | <devices> | vllm <v> torch <v> | config <hash12>`` for titles and consoles."""
    parts = [f"run {p.run_id}"]
    if p.model_name:
        parts.append(f"model {p.model_name}")
    if p.devices:
        parts.append("; ".join(p.devices) + (f" ({p.machine})" if p.machine else ""))
    if p.vllm_versions:
        parts.append("vllm " + "/".join(p.vllm_versions))
    if p.torch_versions:
        parts.append("torch " + "/".join(p.torch_versions))
    if p.config_sha256:
        parts.append(f"config {p.config_sha256[:12]}")
    if not p.manifest:
        parts.append("no environment manifest")
    return " | ".join(parts)


__all__ = ["provenance", "one_line", "MANIFEST"]
