"""Claims about honest reporting: CPU caveats, no overwrite of a run's summary, clean CLI errors, readable plots."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from analysis.aggregate import aggregate
from analysis.cli import main
from analysis.load import load_run
from analysis.report.markdown import render_markdown
from analysis.report.plots import plot_pareto, plot_retention
from analysis.report.summary import write_summary
from analysis.report.tables import CPU_NOTE, build
from tests.support.synthetic import SynthCase, SynthPhase, write_run_dir

from .conftest import FIXTURES

REAL = FIXTURES / "real_tiny_run"
README = Path(__file__).resolve().parents[2] / "README.md"


def _sums(run: Path) -> dict[str, str]:
    out = {}
    for line in (run / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[name.lstrip("*")] = digest
    return out


def _check_sums(run: Path) -> list[str]:
    bad = []
    for name, digest in _sums(run).items():
        if hashlib.sha256((run / name).read_bytes()).hexdigest() != digest:
            bad.append(name)
    return bad


@pytest.fixture
def real_copy(tmp_path) -> Path:
    if not REAL.is_dir():
        pytest.skip("no real run fixture")
    run = tmp_path / "real"
    shutil.copytree(REAL, run)
    return run


def _two_impl_run(tmp_path, repeats: int, runtime: str = "cpu") -> Path:
    cases = [SynthCase("baseline", "baseline", mean_tok_s=100.0, sd_tok_s=1.0)]
    for g, n in ((8, 1), (4, 1), (4, 2), (2, 1)):
        cases.append(SynthCase(f"current_g{g}_n{n}", "current", g, n, mean_tok_s=90.0, sd_tok_s=1.0))
        cases.append(SynthCase(f"official_g{g}_n{n}", "official", g, n, mean_tok_s=90.0, sd_tok_s=1.0))
    return write_run_dir(tmp_path / f"run{repeats}{runtime}", [SynthPhase("same_runtime", cases, repeats=repeats,
                                                                          runtime=runtime)], seed=3)


# ---------------------------------------------------------------- 2. CPU honesty


@pytest.mark.heavy  # measured 1.4 s in the fast tier (its budget is 2 minutes)
def test_cpu_run_markdown_says_released_bytes_are_accounted_not_measured(real_copy, tmp_path):
    full, main_table = render_markdown(build(real_copy))
    per_label = full.split("## Per label", 1)[1].split("\n## ", 1)[0]
    assert CPU_NOTE in per_label  # visible under the table
    assert "not measured memory" in CPU_NOTE and "same RAM" in CPU_NOTE
    assert CPU_NOTE in main_table  # the runner prints this part
    out = tmp_path / "fresh"
    write_summary(real_copy, out_dir=out)
    doc = json.loads((out / "comparison-summary.json").read_text())
    assert doc["notes"] == [CPU_NOTE]


def test_non_cpu_run_has_no_cpu_note(tmp_path):
    run = _two_impl_run(tmp_path, repeats=2, runtime="cuda")
    full, _ = render_markdown(build(run))
    assert CPU_NOTE not in full


def test_pareto_axis_says_accounted_and_cpu(real_copy):
    s = aggregate(load_run(real_copy))
    fig = plot_pareto(s)
    xl = fig.axes[0].get_xlabel()
    plt.close(fig)
    assert "accounted by evidence" in xl and "CPU runtime" in xl
    assert "device memory" not in xl


def test_recommend_prints_cpu_caveat(real_copy, capsys):
    assert main(["recommend", str(real_copy), "--need-gib", "0.0005"]) == 0
    out = capsys.readouterr().out
    assert "note: " + CPU_NOTE in out
    assert "of device memory" not in out


# ---------------------------------------------------------------- 3. no overwrite of a run's summary


def test_cli_report_refuses_to_overwrite_existing_summary(real_copy, capsys):
    before = {p.name: p.read_bytes() for p in (real_copy / "summary").iterdir()}
    assert main(["report", str(real_copy)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--out" in err and "SHA256SUMS" in err
    assert {p.name: p.read_bytes() for p in (real_copy / "summary").iterdir()} == before
    assert _check_sums(real_copy) == []


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_cli_report_out_writes_new_dir_and_keeps_checksums(real_copy, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(real_copy.parent)
    out = tmp_path / "fresh-report"
    assert main(["report", real_copy.name, "--out", str(out)]) == 0
    assert _check_sums(real_copy) == []
    doc = json.loads((out / "comparison-summary.json").read_text())
    assert doc["run_dir"] == str(real_copy.resolve())  # resolved, not "real" as typed
    assert (out / "pareto.png").is_file()
    # --out must be new: a second report into it is refused and changes nothing
    before = (out / "comparison-summary.json").read_bytes()
    assert main(["report", str(real_copy), "--out", str(out)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (out / "comparison-summary.json").read_bytes() == before


@pytest.mark.heavy  # measured 0.9 s in the fast tier (its budget is 2 minutes)
def test_runner_style_write_summary_still_writes_run_summary(tmp_path, monkeypatch):
    """runners.matrix calls ``write_summary(run_dir)`` (no keywords) once, before SHA256SUMS."""
    run = _two_impl_run(tmp_path, repeats=2)
    monkeypatch.chdir(run.parent)
    table = write_summary(Path(run.name))
    assert table.startswith("validation: VALID")
    doc = json.loads((run / "summary" / "comparison-summary.json").read_text())
    assert doc["run_dir"] == str(run.resolve())


# ---------------------------------------------------------------- 4. recommend argument errors, README example


@pytest.mark.parametrize("argv", [["--need-gib", "-1"], ["--need-kv-gib", "-0.5"], ["--need-gib", "nan"],
                                  ["--need-gib", "inf"]])
def test_recommend_rejects_bad_need_cleanly(real_copy, capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(["recommend", str(real_copy), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"argument {argv[0]}: {argv[1]}:" in err and ">= 0" in err and len(err.strip().splitlines()) == 1


def test_readme_recommend_example_is_met_by_the_default_tiny_run(real_copy, capsys):
    m = re.search(r"-m analysis recommend \S+ --need-gib ([0-9.]+)", README.read_text())
    assert m, "README lost its recommend example"
    need = float(m.group(1))
    assert main(["recommend", str(real_copy), "--need-gib", str(need)]) == 0
    out = capsys.readouterr().out
    assert "no measured point meets the need" not in out
    assert "recommendation: current_" in out


# ---------------------------------------------------------------- 5. readable plots


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_retention_plot_uses_no_joining_lines_and_annotates_points(real_copy):
    s = aggregate(load_run(real_copy))
    fig = plot_retention(s)
    ax = fig.axes[0]
    # only the y=1 reference line; no data line joining points (it drew vertical segments between
    # (4,2) and (2,1), which both offload 4 layers, that looked like error bars)
    data_lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1 and len(set(ln.get_ydata())) > 1]
    assert data_lines == []
    texts = _texts(ax)
    for lbl in ("(8,1)", "(4,1)", "(4,2)", "(2,1)", "baseline"):
        assert any(t.startswith(lbl) for t in texts), (lbl, texts)
    # equal layer counts are dodged: (4,2) and (2,1) do not share an x
    xs = {t.get_text(): t.xy[0] for t in ax.texts}
    assert xs["(4,2)"] != xs["(2,1)"]
    # one process per label: no spread bars, and the legend says so
    assert not ax.collections or all(type(c).__name__ != "LineCollection" for c in ax.collections)
    assert any("no interval, no spread" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)


def test_retention_bars_only_with_repeats_and_legend_says_so(tmp_path):
    s = aggregate(load_run(_two_impl_run(tmp_path, repeats=3)))
    fig = plot_retention(s)
    ax = fig.axes[0]
    assert any(type(c).__name__ == "LineCollection" for c in ax.collections)
    assert any("process min..max" in " ".join(t.get_text().split()) for t in ax.get_legend().get_texts())
    plt.close(fig)


def test_pareto_annotates_gn_and_separates_coincident_points(tmp_path):
    s = aggregate(load_run(_two_impl_run(tmp_path, repeats=2)))
    # make current and official coincide exactly at every point
    off = s["implementation"] == "official"
    for _, r in s[off].iterrows():
        cur = (s["implementation"] == "current") & (s["group_size"] == r["group_size"]) \
            & (s["num_in_group"] == r["num_in_group"])
        s.loc[cur, "throughput_median_tok_s"] = r["throughput_median_tok_s"]
    fig = plot_pareto(s)
    ax = fig.axes[0]
    texts = [t for t in ax.texts if t.get_text().startswith("(4,2)")]
    assert len(texts) == 2  # one per implementation
    assert texts[0].xy == texts[1].xy and texts[0].xyann != texts[1].xyann  # stacked, not overlaid
    assert {t.get_color() for t in texts} == {"tab:blue", "tab:orange"}
    plt.close(fig)
