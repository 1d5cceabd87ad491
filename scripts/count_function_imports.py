"""Count the project imports made inside functions in ``runners/``; fail above a ceiling (run by ``make lint``).

What is counted: every ``import`` / ``from ... import`` statement nested in a function (at any depth) of a
``runners/**/*.py`` file whose module is one of the project's packages (``offload``, ``offload_tools``,
``results_schema``, ``analysis``, ``runners``, ``conf``) or relative, and every call of
``importlib.import_module`` / ``__import__`` anywhere in those files (a stand-in for an import statement counts
as one, wherever it is), read with ``ast`` (nothing is imported).
What stays inside functions on purpose: imports of modules that load torch, vLLM, Ray, matplotlib, pandas or
plotly (``analysis.*``, ``runners.models.qwen2_torch``, ``offload_tools.bench`` / ``h2d_bench``), everything in
``runners/incase/`` (case-process code: import order against vLLM, the evidence hook is loaded into every Python
process), and imports whose names tests replace by ``monkeypatch`` at call time.

Usage: ``python scripts/count_function_imports.py [--ceiling N] [--list]``; prints the count (and with
``--list`` every counted import as ``path:line: module``); exits 1 when the count exceeds the ceiling.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("offload", "offload_tools", "results_schema", "analysis", "runners", "conf")
CEILING = 48
"""Most function-level project imports ``runners/`` may hold (249 at 13e6545, before they moved to module tops)."""
STAND_INS = ("import_module", "__import__")


def _is_project(module: str) -> bool:
    return module.startswith(".") or module.split(".")[0] in PROJECT


def _imports_in_functions(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every project import statement nested in a function of ``tree``."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, ast.Import):
                mods = [a.name for a in child.names]
            elif in_function and isinstance(child, ast.ImportFrom):
                mods = ["." * child.level + (child.module or "")]
            else:
                mods = []
            if any(_is_project(m) for m in mods):
                out.append((child.lineno, ", ".join(mods)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return out


def _stand_ins(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, call)`` of every ``importlib.import_module(...)`` / ``__import__(...)`` call in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in STAND_INS:
                out.append((node.lineno, f"{name}(...)"))
    return out


def count(root: Path = ROOT) -> list[str]:
    """``path:line: module`` of every counted import under ``root / "runners"``, in file order."""
    found = []
    for path in sorted((root / "runners").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for line, what in sorted(_imports_in_functions(tree) + _stand_ins(tree)):
            found.append(f"{rel}:{line}: {what}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ceiling", type=int, default=CEILING)
    ap.add_argument("--list", action="store_true", help="print every counted import")
    args = ap.parse_args(argv)
    found = count()
    if args.list:
        print("\n".join(found))
    print(f"function-level project imports in runners/: {len(found)} (ceiling {args.ceiling})")
    if len(found) > args.ceiling:
        print(f"error: {len(found)} function-level project imports in runners/ exceed the ceiling {args.ceiling}: "
              "import at the module top (heavy modules excepted: see this script's docstring)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
