"""Layout limits of the product code: no function over 60 lines, few top-level modules; long modules noted for review.

What is modelled: every ``*.py`` file under the product packages (``offload``,
``results_schema``, ``analysis``, ``runners``, ``conf``; ``tests/`` is not
product code). A module's length is its physical line count: above ``--review-module`` (400)
it is printed as a note for review, never a failure (a module is split where its concepts part,
not to stay under a count). A function's length is
``end_lineno - lineno + 1`` of its ``def`` (decorators excluded), nested
functions counted on their own as well as inside their parent. Complexity
(McCabe <= 12) is ruff's job (``[tool.ruff.lint.mccabe]`` in pyproject.toml).
``runners`` and ``analysis`` hold at most ``TOP_LEVEL_LIMIT`` modules at their top level (a
subpackage counts as one; ``__init__`` / ``__main__`` do not): the rest sits in subpackages
named by concept.

Usage: ``python scripts/check_layout.py [--review-module N] [--max-function N]``;
prints every violation as ``path:line: ...`` and exits 1 if there is any, else
prints the review notes and one summary line and exits 0.
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


def long_modules(root: Path, review_module: int) -> list[str]:
    """``path:1: ...`` notes for the product modules over ``review_module`` lines (a review guideline)."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > review_module:
                out.append(f"{path.relative_to(root).as_posix()}:1: note: {lines} lines (review guideline "
                           f"{review_module}: does it hold more than one concept?)")
    return out


def violations(root: Path, max_function: int) -> tuple[list[str], int, int]:
    """``(messages, modules checked, functions checked)`` for the product packages under ``root``."""
    out: list[str] = []
    n_mod = n_fn = 0
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            src = path.read_text(encoding="utf-8")
            n_mod += 1
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
    ap.add_argument("--review-module", type=int, default=400)
    ap.add_argument("--max-function", type=int, default=60)
    args = ap.parse_args(argv)
    for note in long_modules(ROOT, args.review_module):
        print(note)
    found, n_mod, n_fn = violations(ROOT, args.max_function)
    for line in found:
        print(line)
    if found:
        print(f"layout: {len(found)} violation(s) in {n_mod} modules / {n_fn} functions", file=sys.stderr)
        return 1
    print(f"layout ok: {n_mod} modules, {n_fn} functions <= {args.max_function} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
