"""Layout limits of the product code: no module over 400 lines, no function over 60 lines, few top-level modules.

What is modelled: every ``*.py`` file under the product packages (``offload``,
``results_schema``, ``analysis``, ``runners``, ``conf``; ``tests/`` is not
product code). A module's length is its physical line count; a function's is
``end_lineno - lineno + 1`` of its ``def`` (decorators excluded), nested
functions counted on their own as well as inside their parent. Complexity
(McCabe <= 12) is ruff's job (``[tool.ruff.lint.mccabe]`` in pyproject.toml).
``runners`` and ``analysis`` hold at most ``TOP_LEVEL_LIMIT`` modules at their top level (a
subpackage counts as one; ``__init__`` / ``__main__`` do not): the rest sits in subpackages
named by concept.

Usage: ``python scripts/check_layout.py [--max-module N] [--max-function N]``;
prints every violation as ``path:line: ...`` and exits 1 if there is any, else
prints one summary line and exits 0.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGES = ("offload", "offload_tools", "results_schema", "analysis", "runners", "conf")
ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL_LIMIT = {"runners": 15, "analysis": 15}


def top_level_modules(pkg_dir: Path) -> list[str]:
    """Modules (``*.py`` but ``__init__`` / ``__main__``) and subpackages directly under ``pkg_dir``."""
    return sorted(p.name for p in pkg_dir.iterdir()
                  if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
                  or (p.is_dir() and (p / "__init__.py").is_file()))


def violations(root: Path, max_module: int, max_function: int) -> tuple[list[str], int, int]:
    """``(messages, modules checked, functions checked)`` for the product packages under ``root``."""
    out: list[str] = []
    n_mod = n_fn = 0
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            src = path.read_text(encoding="utf-8")
            n_mod += 1
            lines = len(src.splitlines())
            if lines > max_module:
                out.append(f"{rel}:1: module has {lines} lines (limit {max_module})")
            for node in ast.walk(ast.parse(src, filename=rel)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n_fn += 1
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > max_function:
                        out.append(f"{rel}:{node.lineno}: function {node.name}() has {length} lines "
                                   f"(limit {max_function})")
    for pkg, limit in TOP_LEVEL_LIMIT.items():
        top = top_level_modules(root / pkg)
        if len(top) > limit:
            out.append(f"{pkg}/__init__.py:1: {len(top)} top-level modules (limit {limit}): {', '.join(top)}")
    return out, n_mod, n_fn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-module", type=int, default=400)
    ap.add_argument("--max-function", type=int, default=60)
    args = ap.parse_args(argv)
    found, n_mod, n_fn = violations(ROOT, args.max_module, args.max_function)
    for line in found:
        print(line)
    if found:
        print(f"layout: {len(found)} violation(s) in {n_mod} modules / {n_fn} functions", file=sys.stderr)
        return 1
    print(f"layout ok: {n_mod} modules <= {args.max_module} lines, {n_fn} functions <= {args.max_function} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
