"""The case code: the project's source files a case process runs, and their tree hash.

What is modelled: a case process runs a ``runners.incase`` module (``python -m runners.incase...``) and,
through vLLM's ``vllm.general_plugins`` entry point, ``offload.plugin``; the case code is every module of
the project's packages those import, directly or not, function-local imports included (the import graph
as grimp builds it, the library behind import-linter's contracts in ``pyproject.toml``). Its hash is
``runners.identity.probe.tree_sha256`` over those files (paths relative to the repository root), so
editing the GPU check (``offload_tools``), a reader (``results_schema.reading``), the analysis or the
driver leaves it unchanged, and editing anything a case process can import changes it.

What is deliberately not modelled: modules imported by name at run time (``importlib``); the project
imports its own code by ``import`` statements only, and the import-linter contract on ``runners.incase``
keeps the closure inside ``offload``, ``runners.incase`` and ``results_schema.records`` / ``.rules`` / ``.codec``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from runners.identity.probe import tree_sha256
from runners.paths import REPO_ROOT

__all__ = ["CASE_ENTRY_PACKAGES", "CASE_ENTRY_MODULES", "case_code_files", "case_code_sha256"]

CASE_ENTRY_PACKAGES = ("runners.incase",)
"""Every module of these packages can be a case process's ``python -m`` entry."""
CASE_ENTRY_MODULES = ("offload.plugin",)
"""Loaded inside the engine by vLLM's plugin entry point (``pyproject.toml``)."""
_PACKAGES = ("offload", "offload_tools", "results_schema", "runners", "conf", "analysis")


@lru_cache(maxsize=4)
def case_code_files(repo: Path = REPO_ROOT) -> tuple[str, ...]:
    """Repository-relative paths of the case code's source files (each package's ``__init__.py`` included).

    Raises:
        ValueError: grimp cannot find one of the project's packages on ``sys.path``.
    """
    import grimp

    graph = grimp.build_graph(*_PACKAGES, cache_dir=None)
    roots = [m for m in graph.modules if any(m == p or m.startswith(p + ".") for p in CASE_ENTRY_PACKAGES)]
    roots += list(CASE_ENTRY_MODULES)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(graph.find_modules_directly_imported_by(module))
        parent = module.rpartition(".")[0]
        if parent:
            todo.append(parent)  # importing a.b runs a/__init__.py
    files = []
    for module in seen:
        rel = Path(*module.split("."))
        path = rel / "__init__.py" if (repo / rel).is_dir() else rel.with_suffix(".py")
        if (repo / path).is_file():
            files.append(path.as_posix())
    return tuple(sorted(files))


def case_code_sha256(repo: Path = REPO_ROOT) -> str:
    """Tree hash over the case code's files (``case_code_files``), as ``runners.identity.probe.tree_sha256``."""
    return tree_sha256(repo, case_code_files(repo))
