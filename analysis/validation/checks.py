"""Run-level checks of a run (``analysis.validation.validate``): tokens, CPU kernels, KV capacity, window, manifest, placement.

What is modelled: the checks ``token_digest``, ``cpu_kernels``, ``kv_capacity``, ``device_memory``, ``measurement_window``,
``manifest`` (its saved config held to its ``config_sha256``: ``check_config_hash``) and ``placement`` listed in
``analysis.validation.validate``'s docstring, each adding its issues to a ``Collector``; ``token_digest_status``
(identical / differs / no_baseline per process).

What is deliberately not modelled: record-level checks (``analysis.validation.records``) and counts
against the plan (``analysis.validation.validate``).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from analysis.load import RunData
from analysis.validation.common import Collector
from results_schema.codec.files import file_sha256
from results_schema.codec.io import RecordError, read_json
from results_schema.records.manifest import FILE_NAME as MANIFEST_FILE, EnvironmentManifest
from results_schema.records.models import DEFAULT_MIN_MEASURED_S, BenchRecord
from results_schema.records.validation import CONTENDED_CODE
from results_schema.rules.config_rule import canonical_sha256, config_matches, non_finite_from_text
from results_schema.rules.token_rule import NOISE_NOTE, phase_floors, token_status

def token_digest_status(data: RunData) -> dict[tuple[str, str, int], str]:
    """``identical`` / ``differs`` / ``within_baseline_noise`` / ``no_baseline`` per (phase, label, repeat).

    The rule is ``results_schema.rules.token_rule`` (the runner applies it live), over every baseline process of the phase.
    """
    return token_statuses([cr.record for _p, _l, cr in data.case_runs])


def token_statuses(records: Sequence[BenchRecord]) -> dict[tuple[str, str, int], str]:
    """``token_digest_status`` of these records (``BenchRecord`` models or ``RunData.record_views``)."""
    floors = phase_floors(records)
    return {(r.phase, r.label, r.repeat): token_status(r, floors.get(r.phase)) for r in records}


def check_tokens(data: RunData, col: Collector) -> None:
    """``token_digest``: the rule of ``results_schema.rules.token_rule``; every case that differs is one issue."""
    floors = phase_floors([cr.record for _p, _l, cr in data.case_runs])
    for phase, f in floors.items():
        if not f.deterministic:
            col.add("token_digest", "baseline_not_deterministic",
                    f"{phase}: {NOISE_NOTE}: baseline processes generated {len(f.digests)} different token digests; "
                    f"rounds differing between them: {f.floor_rounds}", severity="warning", phase=phase)
    for _p, _l, cr in data.case_runs:
        r = cr.record
        floor = floors.get(r.phase)
        if floor is None or r.implementation == "baseline" or token_status(r, floor) != "differs":
            continue
        greedy = r.workload.temperature == 0.0
        how = (f"from the phase baseline{' (greedy decoding: must be identical)' if greedy else ' (sampled workload)'}"
               if floor.deterministic else
               f"beyond the baseline-vs-baseline floor ({NOISE_NOTE}): rounds {floor.rounds_left(r)} match no baseline "
               f"process vs floor {floor.floor_rounds}")
        col.add("token_digest", "token_digest_differs",
                f"{r.phase}/{r.label}-r{r.repeat}: generated tokens differ {how}",
                severity="error" if greedy else "warning", phase=r.phase, label=r.label, repeat=r.repeat)


def check_cpu_kernels(data: RunData, col: Collector) -> None:
    """Within a phase every CPU case ran the same GEMM kernels (``cpu_kernels``), baseline included.

    A comparison whose cases differ in kernel (plain vs packed) measures a kernel change, not
    weight residency. Runs recorded before ``cpu_kernels`` existed (no case has it) are not checked.
    """
    by_phase: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for _p, _l, cr in data.case_runs:
        k = cr.cpu_kernels
        key = None if k is None else (k.path, tuple(sorted(k.kernels.items())))
        by_phase[cr.record.phase][key].append(f"{cr.record.label}-r{cr.record.repeat}")
    for phase, groups in by_phase.items():
        if len(groups) > 1:
            desc = "; ".join(f"{'none' if k is None else k[0] + ' ' + str(dict(k[1]))}: {', '.join(v[:6])}"
                             for k, v in groups.items())
            col.add("cpu_kernels", "cpu_kernels_differ",
                    f"{phase}: cases ran different CPU GEMM kernels, so their difference is not only weight "
                    f"residency ({desc})", phase=phase)


def check_kv(data: RunData, col: Collector) -> None:
    per_label: dict[tuple[str, str], list] = defaultdict(list)
    released: dict[tuple[str, str], int] = {}
    for _p, _l, cr in data.case_runs:
        r, kv = cr.record, cr.kv_cache
        if kv.kv_cache_tokens is None and kv.kv_cache_gib is None:
            col.add("kv_capacity", "missing_kv_capacity",
                    f"{r.phase}/{r.label}-r{r.repeat}: no KV cache capacity line in {cr.log_path}",
                    severity="warning", phase=r.phase, label=r.label, repeat=r.repeat, path=cr.log_path)
            continue
        per_label[(r.phase, r.label)].append((kv.kv_cache_tokens, kv.kv_cache_gib))
        released[(r.phase, r.label)] = cr.evidence.released_bytes
    by_phase: dict[str, dict] = defaultdict(lambda: defaultdict(set))
    for (phase, label), vals in per_label.items():
        toks = [t for t, _g in vals if t is not None]
        gibs = [g for _t, g in vals if g is not None]
        value = (statistics.median(toks) if toks else None, statistics.median(gibs) if gibs else None)
        by_phase[phase][value].add(label)
    for phase, groups in by_phase.items():
        for value, labels in groups.items():
            rel = {released[(phase, lb)] for lb in labels}
            if len(rel) > 1:
                col.add("kv_capacity", "identical_kv_capacity",
                        f"{phase}: labels {sorted(labels)} release different bytes ({sorted(rel)}) but report the same "
                        f"KV cache capacity {value} (tokens, GiB): the KV pool may not see the released memory",
                        severity="warning", phase=phase)


def check_device_memory(data: RunData, col: Collector) -> None:
    """``missing_device_memory`` (warning): an accelerator case whose record carries the published fields
    (``requests`` set) but no device memory before / peak / after load, with the recorded reason
    (``device_memory_error``): shown as missing, never as 0. CPU cases have no device memory."""
    for _p, _l, cr in data.case_runs:
        r = cr.record
        if cr.evidence.device == "cpu" or r.requests is None or r.device_memory_peak_load_bytes is not None:
            continue
        col.add("device_memory", "missing_device_memory",
                f"{r.phase}/{r.label}-r{r.repeat}: no device memory before / peak / after load on "
                f"{cr.evidence.device} ({r.device_memory_error or 'no reason recorded'})",
                severity="warning", phase=r.phase, label=r.label, repeat=r.repeat, path=cr.log_path)


def check_window(data: RunData, col: Collector, min_window_s: float = DEFAULT_MIN_MEASURED_S) -> None:
    short: dict[tuple[str, str], list[str]] = defaultdict(list)
    for _p, _l, cr in data.case_runs:
        r = cr.record
        asked = r.workload.min_measured_s
        floor = max(min_window_s, asked or 0.0)
        if r.elapsed_s < floor or (r.window is not None and not r.window.reached):
            short[(r.phase, r.label)].append(
                f"r{r.repeat} {r.elapsed_s:.2f} s / {len(r.rounds)} rounds"
                + ("" if asked is not None else " (no minimum recorded)"))
    for (phase, label), items in short.items():
        col.add("measurement_window", "short_measurement_window",
                f"{phase}/{label}: measured window {', '.join(items)} is shorter than {min_window_s:g} s (or the "
                f"workload's min_measured_s): its throughput is inconclusive noise-wise; raise "
                f"workload.min_measured_s", severity="warning", phase=phase, label=label)


def check_host_load(data: RunData, col: Collector) -> None:
    """A warning per process that a busy host contended (``contended_case``) or that was unstable within its
    window (``unstable_case``): ``analysis.comparison.soundness``. Verdicts resting on a contended process are
    withheld and unstable points leave the front; neither is an error (the evidence still holds)."""
    from analysis.comparison.soundness import contended_keys, unstable_processes

    runs = data.runs
    if runs.empty:
        return
    by_key = {(str(p), str(lb), int(r)): i for i, (p, lb, r) in enumerate(zip(runs["phase"], runs["label"],
                                                                             runs["repeat"], strict=True))}
    for phase, label, rep in sorted(contended_keys(runs)):
        row = runs.iloc[by_key[(phase, label, rep)]]
        col.add("host_load", CONTENDED_CODE,
                f"{phase}/{label}-r{rep}: contended (foreign work on the host while it measured): "
                f"{float(row['host_foreign_cores']):.2f} "
                f"foreign cores, steal {float(row['host_steal_fraction']) * 100:.1f}% over its measured window; "
                f"verdicts resting on it are withheld", severity="warning", phase=phase, label=label, repeat=rep)
    for (phase, label, rep), why in sorted(unstable_processes(runs).items()):
        col.add("stability", "unstable_case", f"{phase}/{label}-r{rep}: unstable: {why}; kept off the front",
                severity="warning", phase=phase, label=label, repeat=rep)


def check_manifest(run_dir: Path, col: Collector) -> None:
    """``manifest``: ``environment-manifest.json`` is there (else ``missing_manifest``, a warning, and no config is
    hashed) and valid (``invalid_manifest``; a manifest without a saved config is one, and is not hashed), its saved
    config is the one its ``config_sha256`` names (``check_config_hash``), and every file ``SHA256SUMS`` lists
    outside ``summary/`` is unchanged (``checksum_mismatch``)."""
    manifest = _read_manifest(run_dir, col)
    if manifest is not None:
        check_config_hash(run_dir, manifest, col)
    sums = run_dir / "SHA256SUMS"
    if sums.is_file():
        for line in sums.read_text().splitlines():
            if not line.strip():
                continue
            digest, _, name = line.partition("  ")
            name = name.strip().removeprefix("*")
            if name.startswith("summary/") or not name:
                continue
            target = run_dir / name
            if not target.is_file():
                col.add("manifest", "checksum_mismatch", f"SHA256SUMS lists {name}, which does not exist", path=name)
                continue
            if file_sha256(target) != digest.strip():
                col.add("manifest", "checksum_mismatch", f"{name}: SHA-256 differs from SHA256SUMS", path=name)


def _read_manifest(run_dir: Path, col: Collector) -> EnvironmentManifest | None:
    """``check_manifest``'s reading of ``environment-manifest.json`` through its registered file kind: the manifest,
    or None after adding ``missing_manifest`` (a warning) or ``invalid_manifest``."""
    path = run_dir / MANIFEST_FILE
    if not path.is_file():
        col.add("manifest", "missing_manifest", f"{run_dir}: no environment-manifest.json", severity="warning")
        return None
    from results_schema.records.dispatch import kind_for

    kind = kind_for(path)
    try:
        if kind is None:
            raise LookupError(f"no file kind registered for {path.name}")
        manifest = read_json(path, kind.load_model())
    except LookupError as exc:
        col.add("manifest", "missing_manifest", f"environment-manifest.json not checked: {exc}", severity="warning")
        return None
    except RecordError as exc:
        col.add("manifest", "invalid_manifest", f"environment-manifest.json: {exc}", path="environment-manifest.json")
        return None
    return manifest if isinstance(manifest, EnvironmentManifest) else None


def check_config_hash(run_dir: Path, manifest: EnvironmentManifest, col: Collector) -> None:
    """``config_hash_mismatch`` (check ``manifest``, an error) when the manifest's saved ``config``, read back from
    its text for non-finite floats, does not hash to its ``config_sha256``
    (``results_schema.rules.config_rule.config_matches``: the rule the runner hashed the typed config with). What
    validate reads from that config (a sequential phase's declared design:
    ``analysis.comparison.sequential_check``) rests on it; the message names the run directory and both hashes."""
    if config_matches(manifest.config, manifest.config_sha256):
        return
    got = canonical_sha256(non_finite_from_text(manifest.config))
    col.add("manifest", "config_hash_mismatch",
            f"{run_dir}: the saved config in {MANIFEST_FILE} hashes to {got}, not to its config_sha256 "
            f"{manifest.config_sha256}: the config was changed after the run, or its hash was", path=MANIFEST_FILE)


def check_placement(run_dir: Path, col: Collector) -> None:
    """Two cases of one phase on one node at the same time (``analysis.validation.placement``)."""
    from analysis.validation.placement import check_placements, load_placements

    placements, errors = load_placements(run_dir)
    for e in errors:
        col.add("placement", "invalid_record", e)
    for f in check_placements(placements):
        col.add("placement", f.code, f.message, severity=f.severity, phase=f.phase, label=f.label, repeat=f.repeat)
