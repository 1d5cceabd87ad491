"""``python -m runners.matrix``: run a matrix of offload cases, one fresh process per case.

This module is the thin entry: ``+pins=FILE`` is expanded (``runners.identity.pins_file``), the config
is composed once (``conf/`` through ``runners.compose_check``; with a Hydra flag such as ``--cfg``,
``@hydra.main`` composes instead), signals are recorded, and ``run_matrix`` runs the stages of
``runners.orchestration.stages``:

    plan (``runners.planning.plan``; invalid parameters stop here, before any process; dry run: print, exit)
    -> identity gate (``runners.identity.gates``: declared pins, model, offload tree; fail closed)
    -> open or resume the run directory (``runners.orchestration.rundir``: config, overrides, environment
       manifest, reproduction copy, ``plan.json``; resume skips recorded cases, quarantines leftovers)
    -> execute phases (``runners.orchestration.execute``: identity re-check + health gate per phase, each case
       in a fresh process group via the executor, local or Ray; finalize; one JSONL line per case)
    -> close (``runners.orchestration.close``: identity at the end, analysis, accuracy verifier, ``SHA256SUMS``,
       the verdict line).

The case command line is its kind's (``runners.kinds.registry.case_argv``: the spec the case process reads
and its argv), the environment ``runners.launching.case_command.case_env``; ``runners.orchestration.execute``
calls them.

Exit codes: ``runners.errors.EXIT_MEANINGS`` (each code with its meaning).

What is deliberately not modelled: statistics of any kind (``analysis``).
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING, Sequence

from conf.schema import Config

from runners.errors import EXIT_CASE_FAILURES, EXIT_CONFIG, EXIT_OK, RunnerError
from runners.orchestration.progress import make_console as _console
from conf.schema import ConfigError
from conf.typed import load_config
from runners.compose_check import compose_checked, refuse_schema_choices, task_overrides
from runners.identity.pins_file import PinsError, expand_pins_args
from runners.incase.process_group import install_interrupt_handlers
from runners.orchestration.stages import run_stages

if TYPE_CHECKING:
    from runners.orchestration.host_measures import HostMeasures


# ----------------------------------------------------------------------------- the run


def run_matrix(cfg: Config, overrides: Sequence[str] = (), host: HostMeasures | None = None) -> int:
    """Run a typed config: the stages of ``runners.orchestration.stages.run_stages``.

    Returns the exit code; prints one-line errors.

    Args:
        cfg: the config (``conf.typed.load_config``).
        overrides: the command-line overrides (saved with the run).
        host: the host measurements (``runners.orchestration.host_measures.HostMeasures``); None = the real ones.
    """

    console = _console()
    try:
        return run_stages(cfg, list(overrides), console, host)
    except RunnerError as exc:
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(str(exc))}")  # messages hold [brackets]: not markup
        return exc.exit_code


# ----------------------------------------------------------------------------- signals and entry


_EXIT_CODE = EXIT_OK
_HOST: HostMeasures | None = None
"""The host measurements :func:`main` was given (None: the real ones), for ``hydra_main``'s run too."""


def _install_signal_handlers() -> None:
    install_interrupt_handlers((signal.SIGINT, signal.SIGTERM))  # recorded: never lost inside a fork callback


try:
    import hydra
    from omegaconf import DictConfig

    import conf  # noqa: F401  (registers the structured-config schemas)

    @hydra.main(version_base="1.3", config_path="../conf", config_name="config")
    def hydra_main(cfg: DictConfig) -> None:
        from hydra.core.hydra_config import HydraConfig


        global _EXIT_CODE
        overrides = list(HydraConfig.get().overrides.task)
        try:
            refuse_schema_choices(dict(HydraConfig.get().runtime.choices))
            config = load_config(cfg, overrides)
        except ConfigError as exc:
            _console().print(f"[bold red]error:[/] config: {exc}")
            _EXIT_CODE = EXIT_CONFIG
            return
        try:
            _EXIT_CODE = run_matrix(config, overrides, _HOST)
        except Exception:  # a bug, not a config error: show it, and keep exit 2 for Hydra's own errors
            import traceback

            traceback.print_exc()
            _EXIT_CODE = EXIT_CASE_FAILURES
except ImportError:  # pragma: no cover - hydra is a core dependency
    hydra_main = None


def _run_composed(args: Sequence[str]) -> int:
    """Compose ``args`` once (``runners.compose_check``), type the config and run it; the exit code.

    A compose or config error is one line (compose: stderr; the typed config's checks: the console, as
    under ``@hydra.main``), exit ``EXIT_CONFIG``; a bug shows its traceback, exit ``EXIT_CASE_FAILURES``.
    """

    try:
        cfg = compose_checked(args)
    except ConfigError as exc:
        print(f"error: config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    overrides = task_overrides(args)
    try:
        config = load_config(cfg, overrides)
    except ConfigError as exc:
        _console().print(f"[bold red]error:[/] config: {exc}")
        return EXIT_CONFIG
    try:
        return run_matrix(config, overrides, _HOST)
    except Exception:  # a bug, not a config error: show it
        import traceback

        traceback.print_exc()
        return EXIT_CASE_FAILURES


def main(host: HostMeasures | None = None) -> int:
    """Console entry point: ``+pins=FILE`` expansion, then one compose; compose errors exit 2 (not Hydra's 1).

    The overrides are composed once (``runners.compose_check``): a compose error is one line naming
    the override, the nearest real key or option and the allowed ones, exit ``EXIT_CONFIG``. With a
    Hydra flag (``--help``, ``--cfg``, ``-m``, ...) Hydra handles everything.

    Args:
        host: the host measurements the run makes, as :func:`run_matrix`'s (None: the real ones; the test
            suite's runner subprocesses pass the session's shared torch probe, ``tests/runners/matrix_entry.py``).
    """
    global _HOST, _EXIT_CODE
    _HOST, _EXIT_CODE = host, EXIT_OK  # a second call in one process starts clean
    _install_signal_handlers()

    try:
        sys.argv[1:] = expand_pins_args(sys.argv[1:])
    except PinsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not any(a.startswith("-") for a in sys.argv[1:]):
        return _run_composed(sys.argv[1:])
    try:
        hydra_main()
    except SystemExit as exc:  # Hydra reports a config / override error (already printed) with exit 1
        if exc.code not in (0, None):
            return EXIT_CONFIG
        raise
    return _EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
