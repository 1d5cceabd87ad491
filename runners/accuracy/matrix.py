"""Stand-alone accuracy matrix: baseline + offload cases, one fresh process each, then the verifier.

What is modelled: for every dataset and every case (the first case must be the
baseline) one ``python -m runners.accuracy run`` process, started with
``subprocess.Popen(start_new_session=True)`` and an explicit environment (the
same contract as bench cases: ``PYTHONPATH = evidence_hook : repo root``,
``OFFLOAD_IMPL``, ``OFFLOAD_EVIDENCE_PATH`` when the evidence hook exists,
per-run caches, ``VLLM_NO_USAGE_STATS=1``), a per-case timeout (TERM, then
KILL of the process group), a log per case, and a typed
:class:`results_schema.models.CaseFailure` line in ``accuracy-failures.jsonl``
for a case that fails. Then :func:`analysis.accuracy.verify` runs over the
directory and its report is written to ``accuracy-verification.json``.

Layout of ``--out`` (refused if it exists); ``<tasks>`` is ``gsm8k`` or, with
``--process-per case``, ``gsm8k+gpqa``::

    cases/<label>.<task>.result.json  cases/<label>.<task>.examples.jsonl
    logs/<label>.<tasks>.log           evidence/<label>.<tasks>.json
    accuracy-failures.jsonl            accuracy-verification.{json,md}

What is deliberately not modelled: identity gates and repeats (the project's
``python -m runners.matrix`` with an accuracy phase provides those); this
command is the direct, dependency-light way to run the accuracy matrix.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from results_schema.io import append_jsonl
from results_schema.models import CaseFailure, OffloadSetting
from runners.accuracy.case import EVIDENCE_ENV, IMPL_ENV, default_label
from runners.accuracy.datasets import load_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
EVIDENCE_HOOK_DIR = REPO_ROOT / "runners" / "evidence_hook"


@dataclass(frozen=True)
class AccuracyCase:
    """One case of the accuracy matrix (one process per dataset)."""

    label: str
    implementation: str
    offload: OffloadSetting

    @property
    def offload_arg(self) -> str:
        o = self.offload
        if not o.enabled:
            return "0"
        return f"{o.offload_group_size},{o.offload_num_in_group},{o.offload_prefetch_step}"


def parse_cases(text: str) -> list[AccuracyCase]:
    """``"baseline,current:4:1,current:2:1"`` -> cases (first must be baseline, labels unique).

    Raises:
        ValueError: malformed entry, invalid offload values, no leading baseline, duplicate label.
    """
    from runners.accuracy.cli import parse_offload

    cases: list[AccuracyCase] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        impl, _, rest = item.partition(":")
        if impl not in ("baseline", "current", "official", "sync"):
            raise ValueError(f"case {item!r}: unknown implementation {impl!r}")
        offload = parse_offload(rest if rest else "0")
        if impl != "baseline" and not offload.enabled:
            raise ValueError(f"case {item!r}: implementation {impl} needs G:N with G > 0 and N > 0")
        if impl == "baseline" and offload.enabled:
            raise ValueError(f"case {item!r}: baseline takes no offload setting")
        cases.append(AccuracyCase(default_label(impl, offload), impl, offload))
    if not cases or cases[0].implementation != "baseline":
        raise ValueError(f"--cases {text!r}: the first case must be 'baseline'")
    labels = [c.label for c in cases]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--cases {text!r}: duplicate labels {labels}")
    return cases


def case_env(run_dir: Path, implementation: str, evidence_path: Path | None) -> dict[str, str]:
    """Environment of one case process (explicit; inherited variables kept except those set here)."""
    env = {k: v for k, v in os.environ.items() if k not in (IMPL_ENV, EVIDENCE_ENV, "PYTHONPATH")}
    cache = run_dir / "cache"
    paths = [str(EVIDENCE_HOOK_DIR)] if (EVIDENCE_HOOK_DIR / "sitecustomize.py").is_file() else []
    env.update(
        PYTHONPATH=os.pathsep.join(paths + [str(REPO_ROOT)]),
        VLLM_NO_USAGE_STATS="1",
        XDG_CACHE_HOME=str(cache / "xdg"),
        VLLM_CACHE_ROOT=str(cache / "vllm"),
        HF_HOME=str(cache / "hf"),
        HF_HUB_OFFLINE="1",
        TRITON_CACHE_DIR=str(cache / "triton"),
    )
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env[IMPL_ENV] = implementation
    if evidence_path is not None:
        env[EVIDENCE_ENV] = str(evidence_path)
    return env


@contextmanager
def _process_group(cmd: list[str], env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        log.write(("$ " + shlex.join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                _kill_group(proc, grace_s=5.0)


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, n: int = 30) -> tuple[str, ...]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return tuple(lines[-n:])


_ERROR_RE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)):")


def run_one(
    run_dir: Path, case: AccuracyCase, tasks: list[str], cmd: list[str], env: dict[str, str], timeout_s: float
) -> CaseFailure | None:
    """Launch one case process (one or more tasks) and wait; returns a failure record or None on success."""
    name = f"{case.label}.{'+'.join(tasks)}"
    log_path = run_dir / "logs" / f"{name}.log"
    t0 = time.monotonic()
    timed_out = False
    with _process_group(cmd, env, log_path) as proc:
        while proc.poll() is None:
            if time.monotonic() - t0 > timeout_s:
                timed_out = True
                _kill_group(proc, grace_s=5.0)
                break
            time.sleep(0.5)
    duration = time.monotonic() - t0
    rc = proc.returncode
    missing = [f"{case.label}.{t}.result.json" for t in tasks
               if not (run_dir / "cases" / f"{case.label}.{t}.result.json").is_file()]
    if not timed_out and rc == 0 and not missing:
        return None
    if timed_out:
        ftype, msg = "timeout", f"accuracy case {name} exceeded {timeout_s:.0f}s and was killed"
    elif rc is not None and rc < 0:
        ftype, msg = "signal", f"accuracy case {name} was killed by signal {-rc}"
    elif rc != 0:
        ftype, msg = "nonzero_exit", f"accuracy case {name} exited with code {rc}"
    else:
        ftype, msg = "no_result", f"accuracy case {name} exited 0 but wrote no {', '.join(missing)}"
    tail = _tail(log_path)
    error_type = next((m.group(1) for ln in reversed(tail) if (m := _ERROR_RE.search(ln))), None)
    return CaseFailure(
        phase="accuracy",
        label=name,
        implementation=case.implementation,  # type: ignore[arg-type]
        repeat=0,
        failure_type=ftype,  # type: ignore[arg-type]
        exit_code=rc if (rc is not None and rc >= 0) else None,
        signal=-rc if (rc is not None and rc < 0) else None,
        error_type=error_type,
        error_message=msg,
        log_tail=tail,
        log_path=str(log_path.relative_to(run_dir)),
        duration_s=duration,
    )


def run_matrix(
    *,
    model: str | None,
    tiny_model_cache: str | None,
    manifest: str,
    datasets: str,
    cases: str,
    out: str,
    limit: int | None,
    engine_args: str = "",
    timeout_s: float = 1800.0,
    per_process: str = "case-dataset",
    protocol: str = "qwen-chat-v1",
) -> int:
    """Run the accuracy matrix and verify it.

    Args:
        protocol: registered accuracy protocol every case is scored under.
        per_process: ``case-dataset`` (default: one process per case and dataset) or
            ``case`` (one process per case running every dataset on one engine: fewer
            model loads, same outputs).

    Returns:
        0 when every case ran and the verifier passed; 1 otherwise.

    Raises:
        ValueError: invalid cases; DatasetError: a dataset is missing or mismatched
        (checked before any process starts); FileExistsError: ``out`` exists.
    """
    from analysis.accuracy import render_markdown, verify, write_report

    from results_schema.protocols import check_protocol

    check_protocol(protocol)
    if per_process not in ("case-dataset", "case"):
        raise ValueError(f"--process-per {per_process!r}: expected 'case-dataset' or 'case'")
    parsed = parse_cases(cases)
    manifest_path = Path(manifest).resolve()
    datasets_by_task: dict[str, str] = {}
    for d in (d.strip() for d in datasets.split(",") if d.strip()):  # verified before any process starts
        entry = load_dataset(manifest_path, d)[0]
        if entry.task in datasets_by_task:
            raise ValueError(f"--datasets {datasets!r}: task {entry.task} given twice")
        datasets_by_task[entry.task] = d
    tasks = list(datasets_by_task)
    run_dir = Path(out).resolve()
    if run_dir.exists():
        raise FileExistsError(f"run directory {run_dir} already exists; results are never overwritten")
    if tiny_model_cache is not None:
        from runners.tiny_model import ensure_tiny_model

        model = str(ensure_tiny_model(tiny_model_cache))
    assert model is not None
    run_dir.mkdir(parents=True)
    hook = (EVIDENCE_HOOK_DIR / "sitecustomize.py").is_file()
    if not hook:
        print(f"warning: {EVIDENCE_HOOK_DIR}/sitecustomize.py missing: offload evidence will not be recorded",
              file=sys.stderr)
    failures = 0
    groups = [[t] for t in tasks] if per_process == "case-dataset" else [tasks]
    for group in groups:
        for case in parsed:
            name = f"{case.label}.{'+'.join(group)}"
            evidence = run_dir / "evidence" / f"{name}.json" if hook else None
            if evidence is not None:
                evidence.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "runners.accuracy", "run", "--model", model,
                   "--dataset", ",".join(datasets_by_task[t] for t in group),
                   "--manifest", str(manifest_path), "--implementation", case.implementation,
                   "--offload", case.offload_arg, "--label", case.label, "--out", str(run_dir / "cases"),
                   "--protocol", protocol]
            if limit is not None:
                cmd += ["--limit", str(limit)]
            cmd += shlex.split(engine_args)
            print(f"[accuracy] {name}: launching", flush=True)
            t0 = time.monotonic()
            failure = run_one(run_dir, case, group, cmd, case_env(run_dir, case.implementation, evidence), timeout_s)
            if failure is not None:
                failures += 1
                append_jsonl(run_dir / "accuracy-failures.jsonl", failure)
                print(f"[accuracy] {name}: FAILED ({failure.error_message}); log {failure.log_path}", flush=True)
                print("\n".join(failure.log_tail[-10:]), flush=True)
            else:
                print(f"[accuracy] {name}: done in {time.monotonic() - t0:.1f}s", flush=True)
    report = verify(run_dir, limit=limit if limit is not None else _fixture_limit(run_dir))
    write_report(run_dir, report)
    print(render_markdown(report), flush=True)
    return 0 if (report.passed and failures == 0) else 1


def _fixture_limit(run_dir: Path) -> int | None:
    """Verifier mode for a run without --limit: formal, unless a dataset is a fixture (then limited to its rows)."""
    from analysis.accuracy import load_results

    results = load_results(run_dir)
    if results and any(r.dataset.kind == "fixture" for r, _ in results):
        return max(r.dataset.rows for r, _ in results)
    return None
