"""Where things are: the repository root, the evidence hook, a case's files, run ids.

What is modelled: paths the orchestrator and the case command line share (``CasePaths``:
``logs/``, ``evidence/``, ``records/`` of one case process), relative-path resolution and the
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
    """Log, evidence sidecar, record and ``case.json`` of one case process (``<phase>/<label>-r<repeat>``)."""

    log: Path
    evidence: Path
    record: Path

    @classmethod
    def of(cls, run_dir: Path, phase: str, stem: str) -> "CasePaths":
        return cls(log=run_dir / "logs" / phase / f"{stem}.log", evidence=run_dir / "evidence" / phase / f"{stem}.json",
                   record=run_dir / "records" / phase / f"{stem}.json")

    @property
    def case(self) -> Path:
        """``<record stem>.case.json`` next to the record (the case process's ``CaseSpec``)."""
        return self.record.with_name(f"{self.record.stem}.case.json")

    def existing(self) -> list[Path]:
        return [p for p in (self.log, self.evidence, self.record) if p.exists()]


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
