"""What the runner prints: the console, case k/n progress with ETA, the dry-run schedule.

What is modelled: a rich console (200 columns when not a terminal), one plain line per finished
case (``[k/n] phase/label-rR: status (wall s) ETA``; the status of a success is its kind's, ``runners.kinds``)
plus a live bar on a terminal, and the dry-run schedule table with the per-phase settings every case gets
(the workload line and further lines of each phase's kind).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence

from conf.schema import Config
from conf.schema_matrix import MatrixConfig
from runners.cases import ScheduledCase
from runners.kinds.registry import kind_of


def make_console() -> Any:
    """The runner's rich ``Console`` (no highlighting; 200 columns when stdout is not a terminal)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


class Progress:
    """Case k/n with ETA: a rich bar on a terminal, one plain line per case always."""

    def __init__(self, total: int, *, live: bool) -> None:
        self.console = make_console()
        self.total = total
        self.done = 0
        self.walls: list[float] = []
        self.t0 = time.monotonic()
        self._bar: Any = None
        if live and self.console.is_terminal and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn
            from rich.progress import TimeElapsedColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     console=self.console, transient=True)
            self._task = self._bar.add_task("cases", total=total)
            self._bar.start()

    def skip(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n)

    def start(self, sc: ScheduledCase) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"{sc.case.phase}/{sc.stem}")

    def eta_s(self) -> float | None:
        if not self.walls:
            return None
        elapsed = time.monotonic() - self.t0
        return elapsed / len(self.walls) * (self.total - self.done)

    def finish(self, sc: ScheduledCase, status: str, wall_s: float) -> None:
        self.done += 1
        self.walls.append(wall_s)
        eta = self.eta_s()
        eta_txt = "-" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
        self.console.print(f"[{self.done}/{self.total}] {sc.case.phase}/{sc.stem}: {status} "
                           f"({wall_s:.1f} s) ETA {eta_txt}")
        if self._bar is not None:
            self._bar.update(self._task, advance=1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_schedule(items: Sequence[ScheduledCase], cfg: Config) -> None:
    """Dry run: the schedule table, processes per phase, then ``schedule_settings``."""
    from rich.markup import escape
    from rich.table import Table

    console = make_console()
    table = Table(title=f"schedule: {cfg.experiment_name} ({len(items)} processes)")
    for col in ("#", "phase", "repeat", "label", "impl", "G", "N", "P", "runtime", "rounds"):
        table.add_column(col)
    for sc in items:
        c = sc.case
        table.add_row(str(sc.index + 1), c.phase, str(sc.repeat), c.label, c.implementation, str(c.group_size),
                      str(c.num_in_group), str(c.prefetch_step), c.runtime_name, kind_of(c).rounds_cell(c))
    console.print(table)
    per_phase: dict[str, int] = {}
    for sc in items:
        per_phase[sc.case.phase] = per_phase.get(sc.case.phase, 0) + 1
    console.print("processes per phase: " + ", ".join(f"{k}={v}" for k, v in per_phase.items())
                  + f"; total={len(items)}")
    for line in schedule_settings(items, cfg):
        console.print(escape(line))


def schedule_settings(items: Sequence[ScheduledCase], cfg: Config) -> list[str]:
    """Dry-run lines naming what every case gets: per phase the offload backend(s), schedule and
    process limits, the effective workload, and the runtime's case environment."""
    lines: list[str] = []
    firsts: dict[str, Any] = {}
    for sc in items:
        firsts.setdefault(sc.case.phase, sc.case)
    for phase, c in firsts.items():
        m = cfg.phases[phase]
        backends = sorted({sc.case.backend for sc in items if sc.case.phase == phase and sc.case.offload_requested})
        rt = c.runtime
        lines.append(f"phase {phase}: runtime={rt.name} offload_backend={','.join(backends) or '-'} "
                     f"focus_first={m.focus_first} cooldown_s={c.cooldown_s:g} "
                     f"case_timeout_s={c.timeout_s:g} kill_grace_s={c.kill_grace_s:g}")
        lines.append(kind_of(c).workload_line(c))
        env = " ".join(f"{k}={v}" for k, v in sorted(rt.env.items()))
        overlay = any(sc.case.phase == phase and sc.case.implementation == "overlay" for sc in items)
        lines.append(f"  case env: {env or '-'}; PYTHONPATH=<evidence hook>:<repo>"
                     + (f":{rt.overlay_source_root} (overlay cases: {rt.overlay_class})" if overlay else "")
                     + (":<inherited PYTHONPATH>" if rt.inherit_pythonpath else "")
                     + f"; health: {' '.join(rt.health_command or ['-'])}"
                     + (f" (expect {rt.health_expect!r})" if rt.health_expect else ""))
        lines += kind_of(c).settings_lines(c)  # e.g. what the accuracy verifier holds the phase to
    return lines


def expected_duration_line(items: Sequence[ScheduledCase], phases: Mapping[str, MatrixConfig]) -> str:
    """The run's expected duration, printed before the first case.

    Args:
        items: the scheduled processes (``ScheduledCase``) still to run.
        phases: the config's phases; each phase's ``expected_case_s`` (seconds per process on the machine
            the matrix was sized on) and ``cooldown_s``.

    Returns:
        ``expected duration: ~5.5 min (10 processes x ~33 s in same_runtime), then the close stage
        (copy bench, analysis); ...`` or, when a phase has no ``expected_case_s``, a line saying the ETA
        after each case is the estimate.
    """
    counts: dict[str, int] = {}
    for sc in items:
        counts[sc.case.phase] = counts.get(sc.case.phase, 0) + 1
    unknown = [ph for ph in counts if ph not in phases or not phases[ph].expected_case_s]
    if not counts:
        return "expected duration: no case to run"
    if unknown:
        return (f"expected duration: unknown (no expected_case_s for phase(s) {', '.join(unknown)}); "
                "the ETA printed after each case is the estimate")
    total = 0.0
    parts = []
    for ph, n in counts.items():
        e = float(phases[ph].expected_case_s or 0.0)
        total += n * e + max(0, n - 1) * phases[ph].cooldown_s
        parts.append(f"{n} processes x ~{e:.0f} s in {ph}")
    return (f"expected duration: ~{total / 60:.1f} min ({'; '.join(parts)}), then the close stage (copy bench, "
            "analysis); per-process times as seen on the 2-core machine the matrix was sized on, longer under other load")
