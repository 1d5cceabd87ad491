"""Evidence hook: loaded by every interpreter started with ``runners/incase/evidence_hook`` on
``PYTHONPATH`` (every Python process of a case). Three duties, in this order:

1. Inside a case (``OFFLOAD_CASE_TOKEN`` set by ``runners.incase.process_group``): die with the parent.
   ``PR_SET_PDEATHSIG`` = SIGKILL is set at start-up and again in every ``fork`` child
   (``os.register_at_fork``), so when the runner is killed with SIGKILL the whole Python
   tree of the case (bench process, vLLM EngineCore and workers, the multiprocessing
   resource tracker) dies from the top down. A process whose parent already died
   before the call kills itself. Linux only; elsewhere a no-op.
2. With ``OFFLOAD_EVIDENCE_PATH`` set: observe the vLLM offloader (``offload_evidence_hook``);
   it never changes behaviour.
3. Chain to the next ``sitecustomize`` on ``sys.path`` (a distribution's or a site's), which
   this module shadows: it is found with this directory left out and executed, so it
   still runs, after the hook. An error in it is reported like ``site`` reports one and
   does not stop the interpreter.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError, ImportError):
        return
    state = {"pid": os.getpid()}

    def arm(expected_parent) -> None:
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if expected_parent is not None and os.getppid() != expected_parent:
            os.kill(os.getpid(), signal.SIGKILL)  # the parent died before the signal was armed

    def after_fork_in_child() -> None:
        parent, state["pid"] = state["pid"], os.getpid()
        arm(parent)

    arm(None if os.getppid() != 1 else -1)  # re-parented to init already: the case is over
    os.register_at_fork(after_in_child=after_fork_in_child)


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.normcase(_HERE)
    path = [p for p in sys.path if os.path.normcase(os.path.abspath(p or os.curdir)) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin is None:
        return
    if os.path.normcase(os.path.dirname(os.path.abspath(spec.origin))) == here:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_chained_sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # same leniency as site.execsitecustomize
        print(f"Error in sitecustomize {spec.origin} (chained from {__file__}); "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


if os.environ.get("OFFLOAD_CASE_TOKEN"):
    _die_with_parent()

if os.environ.get("OFFLOAD_EVIDENCE_PATH"):
    import offload_evidence_hook

    offload_evidence_hook.install()

_chain()
