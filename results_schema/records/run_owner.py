"""Who writes a run directory: the runner holding its lock, and every runner that held it.

What is modelled:
* ``RunnerHolder``: one runner process that holds (or held) a run directory's lock
  (``runners.orchestration.run_lock``): host, pid, process start time, command line, when it took the lock,
  and how (``created`` the run, ``resumed`` it after a clean exit, ``took_over`` from a
  holder that died without releasing it, named in ``previous``). ``<run>/runner.json`` names
  the live holder (removed when it exits cleanly); ``<run>/runner-history.jsonl`` keeps one
  line per acquisition, so a takeover stays on record.

What is deliberately not modelled: the lock itself (an ``flock`` on ``<run>/runner.lock``,
released by the kernel when its holder dies).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from results_schema.records.base import NonNegFloat, StrictModel
from results_schema.records.dispatch import FileKind

HOLDER_FILE = "runner.json"
"""The live holder of a run directory's lock (absent when no runner holds it or the last one exited cleanly)."""
HISTORY_FILE = "runner-history.jsonl"
"""Every acquisition of a run directory's lock, one ``RunnerHolder`` line each."""
LOCK_FILE = "runner.lock"
"""The file that is ``flock``ed (empty; its content is never read)."""

Acquisition = Literal["created", "resumed", "took_over"]


class PreviousHolder(StrictModel):
    """The holder a takeover replaced (its ``runner.json`` was left behind: it died holding the lock)."""

    host: str = Field(description="Hostname of the previous holder.")
    pid: int = Field(ge=1, description="Its process id.")
    process_start_time_s: NonNegFloat = Field(description="Its process start time (Unix s), which tells pid reuse apart.")
    acquired_at: str = Field(description="When it took the lock (ISO 8601, UTC).")


class RunnerHolder(StrictModel):
    """One runner process holding a run directory's lock."""

    schema_version: Literal[1] = Field(default=1, description="Schema version of this record (always 1).")
    host: str = Field(description="Hostname of the runner (socket.gethostname()).")
    pid: int = Field(ge=1, description="Process id of the runner.")
    process_start_time_s: NonNegFloat = Field(description="Process start time of the runner (Unix s; psutil).")
    command: tuple[str, ...] = Field(description="The runner's command line (sys.argv with its interpreter).")
    acquired_at: str = Field(description="When the runner took the lock (ISO 8601, UTC).")
    acquisition: Acquisition = Field(description="created: a new run; resumed: the previous runner had released "
                                                 "the lock; took_over: the previous holder died holding it.")
    previous: PreviousHolder | None = Field(default=None, description="The dead holder a takeover replaced "
                                                                      "(took_over only).")


FILE_KINDS: list[FileKind] = [
    FileKind(HOLDER_FILE, "results_schema.records.run_owner:RunnerHolder", jsonl=False),
    FileKind(HISTORY_FILE, "results_schema.records.run_owner:RunnerHolder", jsonl=True),
]
