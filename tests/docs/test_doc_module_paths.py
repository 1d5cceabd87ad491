"""Every module, `python -m` target and repository file a Markdown doc names exists.

Scans the repository's `*.md` files (not `docs/measurements/`: dated records of what was measured
then, kept as written; not hidden folders such as `.venv`, nor run outputs under `results/`) for

* `python -m X` (also `python3`, `.venv/bin/python`, `$(PY)`, `"$PY"`): `X` must be a module file or a
  package with `__main__.py`;
* dotted paths of this project's packages (`offload.`, `offload_tools.`, `runners.`, `results_schema.`,
  `analysis.`, `conf.`, `tests.`) inside backticks, fenced code or `:mod:`: the longest prefix that is a
  module (`a/b/c.py` or `a/b/c/__init__.py`) must exist, and each name after it must be defined in
  that module's file (`def` / `class` / an assignment / an import);
* repository file paths (`runners/matrix.py`, `tests/x/test_y.py::test_z`, `conf/runtime/ascend_*.yaml`)
  whose first folder is a top-level folder of the repository, relative to the repository root or to
  the Markdown file's own folder; a `::name` pytest node must be a `def name` in that file.

Modules are resolved by file existence, never imported, so the test starts no engine and imports
nothing heavy (for `python -m` of another distribution only `importlib.util.find_spec` of its
top-level name). Not checked: paths with placeholders (`<run_id>`, `{json,md}`, `$VAR`), files a
run writes (`results/`), the files a documented command makes (`GENERATED`), prose without backticks.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("offload_tools", "offload", "runners", "results_schema", "analysis", "conf", "tests")
SKIPPED_DIRS = {"docs/measurements", "results", "outputs", "multirun", "build"}
FILE_SUFFIXES = ("py", "md", "yaml", "yml", "toml", "sh", "json", "jsonl", "txt", "cfg", "ipynb", "ini")
# Files a documented command writes, not files of the repository: path -> the command that makes it.
GENERATED = {
    "eval_datasets/full/manifest.json": "python -m runners.incase.accuracy materialize --out-dir eval_datasets/full",
}
NOT_A_NAME = {"py", "json", "jsonl", "yaml", "yml", "md", "csv", "txt", "html", "png", "toml", "sh"}

PYTHON_M = re.compile(r"""(?:python3?|\$\(PY\)|"?\$\{?PY\}?"?)\s+"""  # python, .venv/bin/python, $(PY), "$PY"
                      r"""(?:-[A-Za-z]\s+\S+\s+|-[A-Za-z]+\s+)*?-m\s+([A-Za-z_][\w.]*)""")  # options, then -m X
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
DOTTED = re.compile(r"(?<![\w./\-$])((?:%s)(?:\.[A-Za-z_]\w*)+)" % "|".join(PROJECT_PACKAGES))
PATH = re.compile(r"(?<![\w./\-<>{}$])((?:\.?[\w-]+/)+[\w.*-]+\.(?:%s))(?:::([\w]+))?(?![\w/])"
                  % "|".join(FILE_SUFFIXES))


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The repository's Markdown files, hidden folders, run outputs and docs/measurements/ left out."""
    found = []
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts[:-1]):
            continue
        if any(rel.as_posix().startswith(d + "/") for d in SKIPPED_DIRS):
            continue
        found.append(path)
    return found


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    """(offset, content) of each fenced block and inline code span (`:mod:` roles are code spans too)."""
    fenced = [(m.start(), m.end()) for m in FENCE.finditer(text)]
    for start, end in fenced:
        yield start, text[start:end]
    pos = 0
    for start, end in fenced + [(len(text), len(text))]:
        for m in CODE_SPAN.finditer(text[pos:start]):
            yield pos + m.start(2), m.group(2)
        pos = end


def _module_file(parts: list[str], base: Path = ROOT) -> Path | None:
    """`a/b/c.py` or `a/b/c/__init__.py` under `base`, or None."""
    stem = base.joinpath(*parts)
    for candidate in (stem.with_name(stem.name + ".py"), stem / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def defines(source: str, name: str) -> bool:
    """Whether `name` is defined at any level of a module's source (def, class, assignment, import)."""
    pattern = (
        rf"^\s*(?:async\s+def|def|class)\s+{name}\b"
        rf"|^\s*{name}\s*(?::[^=\n]+)?="
        rf"|^\s*(?:from\s+\S+\s+)?import\s+[^\n]*\b{name}\b"
        rf"|^\s+{name}\b\s*:"  # a dataclass / model field
    )
    return re.search(pattern, source, re.M) is not None


def dotted_is_dead(dotted: str) -> str | None:
    """Why a project module path does not resolve, or None when it does."""
    parts = dotted.split(".")
    if parts[-1] in NOT_A_NAME:
        return None  # a file name such as `results_schema.json`, not a module path
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut])
        if module is None:
            continue
        source = module.read_text(encoding="utf-8")
        missing = [name for name in parts[cut:] if not defines(source, name)]
        if not missing:
            return None
        if module.name == "__init__.py" and missing[0] == parts[cut]:
            return f"no module or name {missing[0]} in {module.parent.relative_to(ROOT).as_posix()}/"
        return f"no {', '.join(missing)} in {module.relative_to(ROOT).as_posix()}"
    return "no such module"


def runnable_is_dead(module: str) -> str | None:
    """Why `python -m module` cannot run, or None when it can (project modules by file, others by spec)."""
    parts = module.split(".")
    if parts[0] in PROJECT_PACKAGES:
        base: Path | None = ROOT
    else:
        spec = importlib.util.find_spec(parts[0])
        if spec is None:
            return "not installed"
        if len(parts) == 1 and not spec.submodule_search_locations:
            return None
        base = Path(spec.origin).parent.parent if spec.origin else None
        if base is None:
            return None  # a namespace package: nothing to look at without importing it
    target = base.joinpath(*parts)
    if target.with_name(target.name + ".py").is_file() or (target / "__main__.py").is_file():
        return None
    if (target / "__init__.py").is_file():
        return "a package without __main__.py"
    return "no such module"


def path_is_dead(md: Path, rel: str, node: str | None) -> str | None:
    """Why a repository file path (and its `::test` node) does not resolve, or None."""
    for base in (ROOT, md.parent):
        hits = sorted(base.glob(rel)) if "*" in rel else [base / rel]
        hits = [h for h in hits if h.exists()]
        if hits:
            test_def = re.compile(rf"^\s*(?:async\s+)?def\s+{node}\b", re.M)
            if node and not any(h.is_file() and test_def.search(h.read_text(encoding="utf-8")) for h in hits):
                return f"no test {node} in {rel}"
            return None
    return "no such file"


def _checked_path(md: Path, rel: str) -> bool:
    """Whether `rel` names this repository's file: its first folder is a folder of the root or beside `md`."""
    top = rel.split("/", 1)[0]
    if top in SKIPPED_DIRS or top.startswith(".") and top != ".ci":
        return False  # run outputs, caches, the venv, `./relative` examples
    return (ROOT / top).is_dir() or (md.parent / top).is_dir()


def dead_references(md: Path) -> list[str]:
    """`file:line: reference (why)` for each reference in `md` that does not resolve."""
    text = md.read_text(encoding="utf-8")
    name = md.relative_to(ROOT).as_posix() if md.is_relative_to(ROOT) else md.name
    dead: dict[tuple[int, str], str] = {}
    for m in PYTHON_M.finditer(text):
        why = runnable_is_dead(m.group(1).rstrip("."))
        if why:
            dead[(_line_of(text, m.start(1)), f"python -m {m.group(1)}")] = why
    for offset, code in code_spans(text):
        for m in DOTTED.finditer(code):
            ref = m.group(1)
            if code[m.end():m.end() + 1] == "/" or re.search(r"-m\s+$", code[max(0, m.start() - 8):m.start()]):
                continue  # a path segment, or a `python -m` target (checked above)
            why = dotted_is_dead(ref)
            if why:
                dead.setdefault((_line_of(text, offset + m.start()), ref), why)
    for m in PATH.finditer(text):
        rel, node = m.group(1), m.group(2)
        if rel in GENERATED or not _checked_path(md, rel):
            continue
        why = path_is_dead(md, rel, node)
        if why:
            dead[(_line_of(text, m.start()), rel + (f"::{node}" if node else ""))] = why
    return [f"{name}:{line}: {ref} ({why})" for (line, ref), why in sorted(dead.items())]


def test_the_scan_finds_the_repository_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "runners/README.md", "docs/test-suite.md"} <= names
    assert not any(n.startswith(("docs/measurements/", ".venv/")) for n in names)


def test_a_dead_module_path_a_dead_file_and_a_dead_test_are_each_reported(tmp_path: Path) -> None:
    assert dotted_is_dead("runners.errors.EXIT_INVALID") is None
    assert dotted_is_dead("runners.errors.EXIT_NOPE") == "no EXIT_NOPE in runners/errors.py"
    assert dotted_is_dead("analysis.no_such_module") is not None
    assert runnable_is_dead("runners.matrix") is None
    assert runnable_is_dead("runners") == "a package without __main__.py"
    assert runnable_is_dead("pytest") is None
    md = ROOT / "docs" / "x.md"
    assert path_is_dead(md, "runners/errors.py", None) is None
    assert path_is_dead(md, "runners/nope.py", None) == "no such file"
    assert path_is_dead(md, "tests/docs/test_doc_module_paths.py", "test_nope") is not None
    assert path_is_dead(md, "tests/docs/test_doc_module_paths.py", "test_every_reference_in_the_docs_resolves") is None


def test_each_dead_reference_is_reported_as_file_line_reference(tmp_path: Path) -> None:
    md = tmp_path / "doc.md"
    md.write_text("Run `python -m runners.matrix` and `runners.errors.EXIT_OK`.\n"
                  "```\npython -m runners.nope\n```\n"
                  "See `analysis.no_such_module` and runners/nope.py, not results/x/y.json.\n")
    assert dead_references(md) == [
        "doc.md:3: python -m runners.nope (no such module)",
        "doc.md:5: analysis.no_such_module (no module or name no_such_module in analysis/)",
        "doc.md:5: runners/nope.py (no such file)",
    ]


def test_every_reference_in_the_docs_resolves() -> None:
    dead = [line for md in markdown_files() for line in dead_references(md)]
    assert not dead, "dead references in the docs:\n" + "\n".join(dead)
