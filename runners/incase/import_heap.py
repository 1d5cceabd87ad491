"""A case process's one-time heavy import (vLLM, torch, transformers): collector paused, then frozen.

Importing vLLM builds about 700k Python objects that live until the process ends. With Python's cyclic
garbage collector on, each full collection traverses all of them: on the 2-core test host (2026-12-06,
``docs/measurements/test-stage-cpu-2026-12-06.md``) a case process with the tiny model ran 12 full
collections, 2.9 of its 11.8 CPU-s (25%), most of them while ``from vllm import LLM`` ran and in the
``gc.collect()`` calls of vLLM's model loader (``vllm.model_executor.model_loader.base_loader``, two per
load) before vLLM freezes its heap itself (``vllm.utils.gc_utils.freeze_gc_heap``, collect then
``gc.freeze``, at the end of ``EngineCore.__init__``).

:func:`frozen_import` pauses the collector while the import runs and then moves what the import built
into the collector's permanent generation (``gc.freeze``), as vLLM's own ``freeze_gc_heap`` does after
the engine is built: the measured window (after the engine is built) runs with a frozen heap as before.
What changes: the engine's construction (``load_seconds``) no longer traverses the import's objects, and
the import's cyclic garbage (about 18k objects, no change in RSS measured) is not collected.
"""

from __future__ import annotations

import atexit
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from results_schema.codec.io import gc_paused


@contextmanager
def frozen_import(module: str, *, freeze: bool = True) -> Iterator[None]:
    """Run a block that imports ``module`` (a module name, e.g. ``"vllm"``) with the collector paused; when
    ``freeze``, the block ends normally and ``module`` was not imported before it, ``gc.freeze()``.

    A process that had ``module`` already (a test that imports vLLM in its own process, a second engine)
    keeps its heap as it is: only the process's first import is frozen. The collector's enabled state is
    restored also when the block raises (``results_schema.codec.io.gc_paused``); nothing is frozen then. What
    was frozen is unfrozen at exit (``atexit``), so the interpreter's shutdown frees it as without the freeze
    (left frozen, triton's nanobind objects are reported as leaked on stderr, into the case log).
    """
    first = module not in sys.modules
    with gc_paused():
        yield
        if freeze and first and module in sys.modules:
            gc.freeze()  # before the collector resumes: its first young pass would traverse the whole import
            atexit.register(gc.unfreeze)  # frees them at exit as before (frozen: nanobind reports triton's as leaked)
