"""Every override the documentation shows must compose.

Sources: ``README.md``, ``conf/README.md``, ``runners/README.md``, ``docs/*.md`` (every
``python -m runners.matrix ...`` / ``python -m runners.pins ...`` command, in code blocks
and inline code, continuation lines joined) and the comments of ``conf/**/*.yaml`` (those
commands, and any comment line that is itself an override such as
``runtime.pins.packages.torch-npu=<version>``). Placeholders ``<...>`` and shell
variables become a dummy value; ``+pins=FILE`` becomes an empty pins file; ``--out FILE``
and ``...`` are dropped. Each command is composed with Hydra exactly as the runner does.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "conf" / "README.md", REPO / "runners" / "README.md",
        *sorted((REPO / "docs").glob("*.md"))]
COMMAND = re.compile(r"python\S* -m runners\.(matrix|pins)\b(?P<args>[^`\n|;&#]*)")
OVERRIDE_LINE = re.compile(r"^\s*#\s+(?P<ov>[+~]{0,2}[a-zA-Z_][\w\-]*(\.[\w\-./]+)+=\S+)\s*$")


def _joined(text: str) -> str:
    """Shell continuation lines joined; inline-code spans split over two lines joined."""
    return re.sub(r"\\\n\s*", " ", text)


def _commands(path: Path) -> list[tuple[str, str]]:
    text = _joined(path.read_text())
    out = []
    for m in COMMAND.finditer(text):
        out.append((f"{path.relative_to(REPO)}: {m.group(0).strip()}", m.group("args")))
    # inline code spans broken over a line in Markdown: `python -m runners.matrix a\nb`
    for m in re.finditer(r"`python\S* -m runners\.(?:matrix|pins)\b([^`]*)`", text):
        if "\n" in m.group(1):
            out.append((f"{path.relative_to(REPO)}: {' '.join(m.group(0).split())}", m.group(1).replace("\n", " ")))
    return out


def _yaml_overrides(path: Path) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        m = OVERRIDE_LINE.match(line)
        if m:
            out.append((f"{path.relative_to(REPO)}: {m.group('ov')}", m.group("ov")))
        elif line.lstrip().startswith("#"):
            for c in COMMAND.finditer(line):
                out.append((f"{path.relative_to(REPO)}: {c.group(0).strip()}", c.group("args")))
    return out


def examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        found += _commands(doc)
    for y in sorted((REPO / "conf").rglob("*.yaml")):
        found += _yaml_overrides(y)
    return found


def _to_overrides(args: str, pins_file: Path) -> list[str]:
    args = re.sub(r"<[^<>]*>", "x", args)
    args = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "x", args)
    toks = shlex.split(args)
    out, skip = [], False
    for t in toks:
        if skip:
            skip = False
            continue
        if t == "--out":
            skip = True
            continue
        if t.startswith("--out=") or t in ("...", "[...]") or t.startswith("-"):
            continue
        if t == "+experiment=NAME":
            t = "+experiment=smoke"
        if t.startswith(("+pins=", "pins=")):
            out.append(f"+pins={pins_file}")
            continue
        out.append(t)
    return out


def test_examples_are_found() -> None:
    names = [n for n, _ in examples()]
    assert len(names) >= 10, names
    assert any("ascend_latest.yaml" in n for n in names), names  # the file-pin comment form
    assert any("real-host.md" in n for n in names), names


@pytest.mark.parametrize("name,args", examples(), ids=[n for n, _ in examples()])
@pytest.mark.heavy  # measured 15.1 s over 67 cases in the fast tier (its budget is 2 minutes)
def test_documented_override_composes(name: str, args: str, tmp_path: Path) -> None:
    from runners.identity.pins_file import PinsError, expand_pins_args
    from runners.pins import compose

    pins_file = tmp_path / "pins.yaml"
    pins_file.write_text("overrides: []\nnot_found: []\nmismatched: []\n")
    overrides = _to_overrides(args, pins_file)
    if "runtime" in " ".join(overrides) and not any(o.startswith("+experiment=") for o in overrides) \
            and name.split(":")[0].endswith(".yaml"):
        runtime = Path(name.split(":")[0]).stem
        if Path(name.split(":")[0]).parent.name == "runtime":
            overrides = [f"runtime={runtime}", *overrides]
    try:
        compose(expand_pins_args(overrides))
    except PinsError as exc:
        pytest.fail(f"{name}\n  overrides {overrides}\n  {exc}")
