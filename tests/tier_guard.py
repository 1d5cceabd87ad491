"""Fast-tier guard: a test not marked ``engine`` (or ``slow``/``full_grid``) must not start a real engine.

``make test-fast`` runs ``-m 'not slow and not engine and ...'`` and promises no vLLM engine start,
no Ray cluster and no browser. This plugin (registered by ``tests/conftest.py``) makes that promise
checkable: while the setup, call or teardown of an *unmarked* test runs, it watches

* in-process imports (``sys.addaudithook``, event ``import``) of the modules that only an engine
  start loads (:data:`ENGINE_MODULES`: vLLM's ``LLM`` / engine core / API server);
* every process the test starts (audit events ``subprocess.Popen``, ``os.posix_spawn``, ``os.exec``)
  and, once one was started, every descendant process (a ``psutil`` scan every
  :data:`POLL_S` seconds while the phase runs and once at its end), classified by its command line
  (:func:`engine_command`): ``python -m runners.incase.bench_one`` (the real bench), ``python -m
  runners.incase.accuracy run``, the test drivers that build a ``vllm.LLM`` (:data:`_DRIVER_SCRIPTS`),
  ``vllm.entrypoints.*`` / ``vllm serve``, a process titled ``VLLM::...``
  (vLLM's engine core and workers), Ray's ``raylet`` / ``gcs_server`` / ``ray start`` / ``ray::``
  workers, and Chromium;

and fails the test, naming what started. It also stops the start where it can, so a misplaced
engine test costs seconds, not minutes: an engine command's ``Popen``/``exec`` and an engine
module's import raise :class:`EngineStartBlocked` in the test, and a descendant found by the scan
is killed (SIGKILL, with its own descendants; only processes this test session started). A test that needs one of these gets ``@pytest.mark.engine``
(then it runs in ``make test`` only). The in-process check sees an import only the first time a
module is imported in the session: in ``make test-fast`` no engine test runs before, so every import
is seen; in the full suite a module an earlier engine test imported is not seen again (the process
checks still hold there).

Errors: the guarded test fails with ``pytest.fail`` listing every detection (at most
:data:`MAX_REPORTED`), even when the code under test caught :class:`EngineStartBlocked`.
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import psutil
import pytest

ENGINE_MARKERS = ("engine", "slow", "full_grid", "gpu", "npu")
"""Markers that allow a test to start an engine (tests with any of them are not guarded)."""

ENGINE_MODULES = frozenset({
    "vllm.entrypoints.llm",                       # vllm.LLM
    "vllm.v1.engine.llm_engine",                  # LLMEngine (every offline engine)
    "vllm.v1.engine.core",                        # EngineCore (in-process or the engine core process)
    "vllm.v1.engine.core_client",                 # the client that starts the engine core process
    "vllm.entrypoints.openai.api_server",         # the OpenAI-compatible server
})
"""Modules whose import means an engine is being started in the test process.

Checked against vLLM 0.32.0: importing ``vllm``, ``vllm.config``, ``vllm.model_executor.*`` (the
offloaders) or ``vllm.entrypoints.launchers.cli_args`` loads none of them. Ray is not listed:
``import ray`` alone loads its worker and node modules; a cluster start is caught by its processes
(``gcs_server``, ``raylet``).
"""

POLL_S = 2.0
"""Seconds between descendant scans (each reads every process of the host: psutil's ppid map): a vLLM engine takes
more than 5 s to start here and a Ray cluster lives for its run, so none slips through."""

MAX_REPORTED = 10

_PYTHON_MODULES = {"runners.incase.bench_one": "the real bench (runners.incase.bench_one)"}
_DRIVER_SCRIPTS = {"vllm_driver.py": "tests/offload/vllm_driver.py"}
"""Test drivers that build a real ``vllm.LLM`` in their own process (by file name)."""
_RAY_BINARIES = {"raylet", "gcs_server", "plasma_store", "dashboard"}
_BROWSERS = {"chromium", "chromium-browser", "chrome", "headless_shell", "google-chrome"}


class EngineStartBlocked(ImportError):
    """Raised into a guarded test at an engine start (an ``ImportError`` so imports fail cleanly too)."""


def engine_command(argv: Sequence[str]) -> str | None:
    """What engine ``argv`` starts (a short description), or None for any other command.

    ``argv``: a process's command line (``psutil.Process.cmdline()`` or a ``Popen`` argument list).
    A module counts only when passed to ``-m`` (a script that merely mentions a name is not an engine).
    """
    args = [str(a) for a in argv]
    if not args:
        return None
    exe = os.path.basename(args[0])
    for i, a in enumerate(args[:-1]):
        if a != "-m":
            continue
        module = args[i + 1]
        if module in _PYTHON_MODULES:
            return _PYTHON_MODULES[module]
        if module == "runners.incase.accuracy" and "run" in args[i + 2:i + 3]:
            return "a real accuracy case (runners.incase.accuracy run)"
        if module.startswith("vllm.entrypoints"):
            return f"a vLLM server ({module})"
    if len(args) > 1 and os.path.basename(args[1]) in _DRIVER_SCRIPTS:
        return f"a real vLLM engine ({_DRIVER_SCRIPTS[os.path.basename(args[1])]})"
    if exe == "vllm" and "serve" in args[1:2]:
        return "a vLLM server (vllm serve)"
    if args[0].startswith("VLLM::"):
        return f"a vLLM engine process ({args[0]})"
    if exe in _RAY_BINARIES or args[0].startswith("ray::") or (exe == "ray" and "start" in args[1:2]):
        return f"a Ray process ({exe})"
    if exe in _BROWSERS:
        return f"a browser ({exe})"
    return None


def _kill_tree(proc: psutil.Process) -> None:
    """SIGKILL ``proc`` and its descendants (a detected engine; errors of vanished processes ignored)."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        procs = [proc]
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def _argv_of(event: str, args: tuple) -> Sequence[str] | None:
    """The command line of a process-start audit event (None for other events)."""
    if event == "subprocess.Popen":          # (executable, args, cwd, env)
        argv = args[1]
        if isinstance(argv, (str, bytes, os.PathLike)):
            return [os.fsdecode(argv)]
        return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if event in ("os.posix_spawn", "os.exec"):  # (path, argv, env)
        return [os.fsdecode(a) for a in args[1]]
    return None


@dataclass(eq=False)  # hashable by identity: pluggy keeps plugins in sets
class TierGuard:
    """The pytest plugin object (one per session); see the module docstring."""

    active: str | None = None
    """nodeid of the guarded test phase now running (None = not watching)."""
    detections: list[str] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)
    _since: float = 0.0
    _poller: threading.Event | None = None
    """Set by the scan thread when it has stopped; None while no scan thread runs."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _hooked: bool = False

    # ------------------------------------------------------------------ detection
    def _detect(self, what: str) -> None:
        with self._lock:
            if what not in self.detections and len(self.detections) < MAX_REPORTED:
                self.detections.append(what)

    def audit(self, event: str, args: tuple) -> None:
        """``sys.addaudithook`` callback: cheap unless a guarded phase is running."""
        if self.active is None:
            return
        if event == "import":
            if args[0] in ENGINE_MODULES:
                found = f"imported {args[0]} in the test process (an engine start)"
                self._detect(found)
                raise EngineStartBlocked(f"tier guard: {found}")
            return
        if event == "os.fork":
            self._start_poller()
            return
        argv = _argv_of(event, args)
        if argv is None:
            return
        what = engine_command(argv)
        if what:
            self._detect(f"started {what}: {' '.join(argv)[:200]}")
            raise EngineStartBlocked(f"tier guard: {what} blocked outside the engine tier")
        self._start_poller()

    def scan(self) -> None:
        """Classify every descendant process started since the phase began (once per pid)."""
        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if child.pid in self._seen:
                continue
            try:
                if child.create_time() < self._since:
                    continue
                argv = child.cmdline()
            except psutil.Error:
                continue
            self._seen.add(child.pid)
            what = engine_command(argv)
            if what:
                self._detect(f"a child process runs {what}: {' '.join(argv)[:200]}")
                _kill_tree(child)

    def _poll(self, stopped: threading.Event) -> None:
        try:
            while not self._stop.wait(POLL_S):
                self.scan()
        finally:
            stopped.set()

    def _start_poller(self) -> None:
        # A bare ``_thread`` (not ``threading.Thread``): tests that record ``threading.Thread.start``
        # to prove the runner starts no thread beside its case forks see only the product's threads.
        # The scan takes no lock a forked child could need (psutil reads /proc; CPython resets the
        # import lock and the GIL in the child).
        if self._poller is None:
            self._stop.clear()
            self._poller = threading.Event()
            _thread.start_new_thread(self._poll, (self._poller,))

    # ------------------------------------------------------------------ phases
    def begin(self, nodeid: str) -> None:
        if not self._hooked:
            sys.addaudithook(self.audit)
            self._hooked = True
        self.detections, self._seen, self._since = [], set(), time.time() - 1.0
        self.active = nodeid

    def end(self) -> list[str]:
        """Stop watching; the detections of the phase."""
        stopped, self._poller = self._poller, None
        if stopped is not None:
            self._stop.set()
            stopped.wait()
            self.scan()
        self.active = None
        return list(self.detections)

    def take(self) -> list[str]:
        """Detections so far in this phase, then forget them (for the guard's own tests)."""
        if self._poller is not None:
            self.scan()
        with self._lock:
            found, self.detections = list(self.detections), []
        return found

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._guarded(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._guarded(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._guarded(item))

    def _guarded(self, item: pytest.Item):
        if any(item.get_closest_marker(m) for m in ENGINE_MARKERS):
            return (yield)
        self.begin(item.nodeid)
        try:
            result = yield
        except BaseException as exc:
            self._fail_if(self.end(), exc)
            raise
        self._fail_if(self.end(), None)
        return result

    @staticmethod
    def _fail_if(found: list[str], cause: BaseException | None) -> None:
        if not found:
            return
        msg = ("a test outside the engine tier started an engine (mark it @pytest.mark.engine, or use the fake "
               "bench / fake engine):\n  " + "\n  ".join(found))
        if cause is not None:
            msg += f"\n(the test also raised {type(cause).__name__}: {cause})"
        pytest.fail(msg, pytrace=False)


PLUGIN_NAME = "tier_guard"


def install(config: pytest.Config) -> TierGuard:
    """Register the session's guard once (``tests/conftest.py``; ``-p tests.tier_guard`` elsewhere)."""
    guard = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if guard is None:
        guard = TierGuard()
        config.pluginmanager.register(guard, PLUGIN_NAME)
    return guard


def pytest_configure(config: pytest.Config) -> None:
    install(config)
