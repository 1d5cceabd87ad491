"""Where things are: the repository root, the evidence hook, a case's files, run ids.

What is modelled: paths the orchestrator and the case command line share (``CasePaths``: every
file of one case process, whatever its kind), relative-path resolution and the
run id format. What is deliberately not modelled: creating or reading the files.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from runners.incase import REPO_ROOT

EVIDENCE_HOOK_DIR = REPO_ROOT / "runners" / "incase" / "evidence_hook"
CONTROLLED_ENV = ("PYTHONPATH", "OFFLOAD_IMPL", "OFFLOAD_EVIDENCE_PATH", "OFFLOAD_CPU_KERNEL_PATH", "PYTHONSTARTUP",
                  "OFFLOAD_OVERLAY_CLASS", "OFFLOAD_OVERLAY_SOURCE_ROOT", "OFFLOAD_FAULT",
                  "OFFLOAD_STEP_DELAY_MS")
"""Variables the runner sets for every case process (never inherited from the runner's environment)."""


@dataclass(frozen=True)
class CasePaths:
    """Every file of one case process (``<phase>/<label>-r<repeat>``), for every case kind: the one naming scheme.

    ``logs/<phase>/<stem>.log`` (``log``), ``evidence/<phase>/<stem>.json`` (``evidence``),
    ``records/<phase>/<stem>.json`` (``record``), ``records/<phase>/<stem>.case.json`` (``case``: a bench or
    accuracy case's ``CaseSpec``), ``records/<phase>/<stem>/`` (``out_dir``: an accuracy case's result files, a
    serving case's per-request files), and a serving case's ``cases/<phase>/<stem>.serving-case.json``
    (``serving_spec``), ``records/<phase>/<stem>.serving.json`` (``serving_record``) and
    ``logs/<phase>/<stem>.server.log`` (``server_log``); ``processes/<phase>/<stem>.json`` (``pid_file``) while it
    runs. Which of them a case writes is its kind's
    (``runners.kinds.base.CaseKind.files``).
    """

    run_dir: Path
    phase: str
    stem: str

    @classmethod
    def of(cls, run_dir: Path, phase: str, stem: str) -> "CasePaths":
        return cls(run_dir=run_dir, phase=phase, stem=stem)

    @property
    def log(self) -> Path:
        return self.run_dir / "logs" / self.phase / f"{self.stem}.log"

    @property
    def evidence(self) -> Path:
        return self.run_dir / "evidence" / self.phase / f"{self.stem}.json"

    @property
    def record(self) -> Path:
        return self.run_dir / "records" / self.phase / f"{self.stem}.json"

    @property
    def case(self) -> Path:
        """``<record stem>.case.json`` next to the record (the case process's ``CaseSpec``)."""
        return self.record.with_name(f"{self.stem}.case.json")

    @property
    def out_dir(self) -> Path:
        """``records/<phase>/<stem>/``: an accuracy case's result files, a serving case's request files."""
        return self.run_dir / "records" / self.phase / self.stem

    @property
    def pid_file(self) -> Path:
        """``processes/<phase>/<stem>.json``: the case's running processes, kept while it runs."""
        return self.run_dir / "processes" / self.phase / f"{self.stem}.json"

    @property
    def serving_spec(self) -> Path:
        """``cases/<phase>/<stem>.serving-case.json``: a serving case's ``ServingCaseSpec``."""
        return self.run_dir / "cases" / self.phase / f"{self.stem}.serving-case.json"

    @property
    def serving_record(self) -> Path:
        """``records/<phase>/<stem>.serving.json``: a serving case's ``ServingCaseResult``."""
        return self.record.with_name(f"{self.stem}.serving.json")

    @property
    def server_log(self) -> Path:
        """``logs/<phase>/<stem>.server.log``: a serving case's API server log."""
        return self.log.with_name(f"{self.stem}.server.log")


def abs_path(path: str, base: Path = REPO_ROOT) -> Path:
    """``path`` with ``~`` expanded; relative paths are resolved against ``base``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p)


def new_run_id() -> str:
    """``<UTC time>-<6 random hex>``: sortable and collision-free."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def accuracy_manifest_path(configured: str) -> Path:
    """Absolute dataset manifest of an accuracy phase (``MatrixConfig.accuracy_manifest``; relative = repository root)."""
    return abs_path(configured)
