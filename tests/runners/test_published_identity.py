"""Published identity formats: the sha256sum tree hash and ModelScope's ``.msc`` revision."""

from __future__ import annotations

from conf.schema_stack import PinsConfig

import pickle
import subprocess
from pathlib import Path

import pytest

from runners.identity.probe import PUBLISHED_PREFIX, sha256sum_lines, sha256sum_tree
from runners.identity.published_identity import model_revision, msc_revision, tree_value_for_pin


def _tree(root: Path) -> Path:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "sub").mkdir()
    (root / "a.py").write_text("print('a')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (root / "pkg" / "same.txt").write_text("same\n")
    (root / "pkg" / "sub" / "same.txt").write_text("same\n")  # equal content: ties broken by path
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"cache")
    (root / "pkg" / "c.pyc").write_bytes(b"cache")
    return root


def test_tree_hash_equals_the_sha256sum_pipeline(tmp_path):
    root = _tree(tmp_path / "t")
    shell = ("find . -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -name '*.pyo' -print0 "
             "| xargs -0 sha256sum | LC_ALL=C sort | sha256sum")
    out = subprocess.run(["bash", "-c", shell], cwd=root, capture_output=True, text=True, check=True).stdout
    assert sha256sum_tree(root) == out.split()[0]
    assert len(sha256sum_lines(root)) == 5 and all("  ./" in line for line in sha256sum_lines(root))


def test_tree_hash_changes_with_content_and_ignores_caches(tmp_path):
    root = _tree(tmp_path / "t")
    before = sha256sum_tree(root)
    (root / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"more cache")
    assert sha256sum_tree(root) == before
    (root / "a.py").write_text("print('b')\n")
    assert sha256sum_tree(root) != before


def test_pin_format_selects_the_hash(tmp_path):
    root = _tree(tmp_path / "t")
    assert tree_value_for_pin("ab" * 32, root, "project") == "project"
    assert tree_value_for_pin(PUBLISHED_PREFIX + "00", root, "project") == PUBLISHED_PREFIX + sha256sum_tree(root)


def _msc(d: Path, entries) -> None:
    (d / ".msc").write_bytes(pickle.dumps(entries))


def test_revision_from_modelscope_msc(tmp_path):
    _msc(tmp_path, [{"Path": "config.json", "Revision": "v1.0.2"}, {"Path": "model.safetensors", "Revision": "v1.0.2"}])
    assert msc_revision(tmp_path) == model_revision(tmp_path) == "v1.0.2"
    (tmp_path / "REVISION").write_text("abc123\n")
    assert model_revision(tmp_path) == "abc123"  # an explicit REVISION file wins


def test_msc_fails_closed(tmp_path):
    assert msc_revision(tmp_path) is None and model_revision(tmp_path) is None
    _msc(tmp_path, [{"Path": "a", "Revision": "r1"}, {"Path": "b", "Revision": "r2"}])
    with pytest.raises(ValueError, match="several revisions"):
        msc_revision(tmp_path)
    _msc(tmp_path, [{"Path": "a"}])
    with pytest.raises(ValueError, match="no Revision"):
        msc_revision(tmp_path)
    (tmp_path / ".msc").write_bytes(pickle.dumps([Path("x")]))  # a class: refused, never constructed
    with pytest.raises(ValueError, match="only plain"):
        msc_revision(tmp_path)


@pytest.mark.heavy  # measured 2.9 s in the fast tier (its budget is 2 minutes)
def test_runner_accepts_a_published_offload_tree_pin_and_rejects_a_wrong_one(tmp_path):
    from runners.errors import EXIT_IDENTITY, EXIT_OK
    from runners.paths import REPO_ROOT
    from tests.runners.helpers import run_fake

    right = PUBLISHED_PREFIX + sha256sum_tree(REPO_ROOT / "offload")
    code, _ = run_fake(tmp_path / "ok", "phases.same_runtime.points=[{g: 4, n: 1}]", f"offload_tree_sha256='{right}'")
    assert code == EXIT_OK
    wrong = PUBLISHED_PREFIX + "0" * 64
    code, run_dir = run_fake(tmp_path / "bad", "phases.same_runtime.points=[{g: 4, n: 1}]",
                             f"offload_tree_sha256='{wrong}'")
    assert code == EXIT_IDENTITY and not (run_dir / "records").exists()


# --- runtime.pins.source_trees in the published format ---------------------------------------------

_SHA256SUM_RECIPE = ("find . -type f ! -path '*/__pycache__/*' ! -name '*.py[co]' -print0 "
                     "| xargs -0 sha256sum | LC_ALL=C sort | sha256sum")
"""The published recipe, as runners.identity.published_identity documents it (run by the real ``sha256sum``)."""


def _shell_tree_hash(root: Path) -> str:
    out = subprocess.run(["bash", "-c", _SHA256SUM_RECIPE], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def _source_tree(tmp_path: Path) -> Path:
    root = _tree(tmp_path / "src")
    (root / "link.py").symlink_to(root / "a.py")  # find -type f skips symlinks; so must the hash
    return root


def test_source_tree_pin_takes_the_published_format_and_a_bare_hex(tmp_path):
    from runners.identity.pin_checks import check_pins
    from runners.identity.probe import tree_sha256

    root = _source_tree(tmp_path)
    published = PUBLISHED_PREFIX + _shell_tree_hash(root)
    assert published == PUBLISHED_PREFIX + sha256sum_tree(root)

    def check(value: str):
        (c,) = check_pins(PinsConfig(source_trees={str(root): value}), model_dir=None, model_pin=None, model_revision=None,
                          observed_revision=None, offload_pin=None, offload_actual="")
        return c

    assert check(published).ok and check(published).actual == published
    assert check(tree_sha256(root)).ok  # a bare hex is the project's tree hash
    wrong = check(PUBLISHED_PREFIX + "0" * 64)
    assert not wrong.ok and wrong.actual == published and wrong.kind == "source_tree"
    assert not check(_shell_tree_hash(root)).ok  # the published value without its prefix is not the project's hash
    (root / "pkg" / "sub" / "b.bin").write_bytes(b"changed")
    assert not check(published).ok


def test_probe_observes_the_published_source_tree_in_its_own_process(tmp_path):
    import json
    import sys

    from runners.identity.pin_checks import probe_spec
    from runners.identity.probe import parse_probe_output

    root = _source_tree(tmp_path)
    spec = probe_spec(PinsConfig(source_trees={str(root): PUBLISHED_PREFIX + "0" * 64, "/nowhere": "ab" * 32}))
    assert spec["source_trees_sha256sum"] == [str(root)] and spec["source_trees"] == ["/nowhere"]
    out = subprocess.run([sys.executable, "-m", "runners.identity.probe", json.dumps(spec)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    obs = parse_probe_output(out)
    assert obs["source_trees_sha256sum"] == {str(root): PUBLISHED_PREFIX + _shell_tree_hash(root)}
    assert obs["source_trees"] == {"/nowhere": None}


def test_pins_cli_writes_and_checks_a_published_source_tree_pin(tmp_path):
    from runners.pins import compose, observe_all, override_for

    root = _source_tree(tmp_path)
    published = PUBLISHED_PREFIX + _shell_tree_hash(root)
    result = observe_all(compose([f"+runtime.pins.source_trees={{{root}:'{published}'}}"]))
    assert override_for("runtime", "source_trees", str(root), published) in result["overrides"]
    assert not result["mismatched"]
    wrong = PUBLISHED_PREFIX + "0" * 64
    result = observe_all(compose([f"+runtime.pins.source_trees={{{root}:'{wrong}'}}"]))
    assert result["mismatched"] == [{"key": "runtime.pins.source_trees", "pin": str(root), "expected": wrong,
                                     "observed": published}]


@pytest.mark.heavy  # measured 1.1 s in the fast tier (its budget is 2 minutes)
def test_runner_gate_refuses_a_wrong_published_source_tree_pin(tmp_path):
    from runners.errors import EXIT_IDENTITY, EXIT_OK
    from tests.runners.helpers import run_fake

    root = _source_tree(tmp_path)
    right = PUBLISHED_PREFIX + _shell_tree_hash(root)
    point = "phases.same_runtime.points=[{g: 4, n: 1}]"
    code, _ = run_fake(tmp_path / "ok", point, f"+runtime.pins.source_trees={{{root}:'{right}'}}")
    assert code == EXIT_OK
    wrong = PUBLISHED_PREFIX + "0" * 64
    code, run_dir = run_fake(tmp_path / "bad", point, f"+runtime.pins.source_trees={{{root}:'{wrong}'}}")
    assert code == EXIT_IDENTITY and not (run_dir / "records").exists()
