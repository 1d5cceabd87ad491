"""A case process's one-time vLLM import: collector paused, then frozen, where vLLM freezes that heap itself.

Importing vLLM builds about 700k Python objects that live until the process ends. With Python's cyclic
garbage collector on, each full collection traverses all of them (0.36 CPU-s a pass on the 2-core test host,
2026-12-06, ``docs/measurements/test-stage-cpu-2026-12-06.md``): a case process with the tiny model and its
engine in the process ran 12 full collections, 2.9 of its 11.8 CPU-s (25%), most of them while
``from vllm import LLM`` ran and in the ``gc.collect()`` calls of vLLM's model loader
(``vllm.model_executor.model_loader.base_loader``, two per load), before vLLM freezes the heap itself
(``vllm.utils.gc_utils.freeze_gc_heap``: collect, then ``gc.freeze``).

Of the places vLLM 0.32 freezes a heap, two are in processes a case runs: the end of ``EngineCore.__init__``
(the engine core's process) and its serving benchmark's ``main_async`` before the first request (the others are
the GPU worker's and the API server's processes). :func:`frozen_import` freezes only such a heap: the case
process whose engine core runs in it (:func:`engine_in_process`, ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` in the case
process's environment: the ``cpu_measure`` runtime sets it) and the serving driver. There the measured
part runs with a frozen heap as before; what changes is the engine's construction (``load_seconds``: no full
pass over the import's objects, two fewer in the loader) and that the import's cyclic garbage (about 18k
objects; RSS 618 MiB with or without collecting it) is frozen, not collected. Where the engine core is a child
process (the other runtimes, unless the runner's environment sets the switch: the case process is vLLM's client
and vLLM never freezes its heap), :func:`frozen_import` leaves the collector as it is.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from results_schema.codec.io import gc_paused

ENGINE_IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
"""vLLM's switch (``vllm.envs``: ``bool(int(os.getenv(name, "1")))``): 0 runs the engine core in the process
that builds ``LLM``."""


def engine_in_process(env: Mapping[str, str] | None = None) -> bool:
    """True when vLLM runs its engine core in the process that builds ``LLM`` under ``env`` (default: this
    process's environment): ``VLLM_ENABLE_V1_MULTIPROCESSING`` an integer 0, read as ``vllm.envs`` reads it
    (default 1). Raises ``ValueError`` for a value that is not an integer, as vLLM would."""
    return not bool(int((os.environ if env is None else env).get(ENGINE_IN_PROCESS_ENV, "1")))


@contextmanager
def frozen_import(module: str, *, freeze: bool) -> Iterator[None]:
    """Run a block that imports ``module`` (a module name, e.g. ``"vllm"``). When ``freeze`` and ``module`` was
    not imported before the block: the collector is paused while the block runs (its enabled state restored
    after, also when the block raises: ``results_schema.codec.io.gc_paused``) and, when the block ends normally
    with ``module`` imported, ``gc.freeze()`` runs before the collector resumes (resuming first, its next young
    pass traversed the whole import: 0.47 CPU-s); ``gc.unfreeze`` is registered with ``atexit``, so the
    interpreter's shutdown frees the objects as without the freeze (left frozen, triton's nanobind objects are
    reported as leaked on stderr, into the case log). ``gc.freeze`` freezes every tracked object, what the process
    built before the import included.

    Otherwise (``freeze`` false, or ``module`` imported already: a test's process, a second engine) the block
    runs with the collector as it is and nothing is frozen.
    """
    if not freeze or module in sys.modules:
        yield
        return
    with gc_paused():
        yield
        if module in sys.modules:
            gc.freeze()
            atexit.register(gc.unfreeze)
