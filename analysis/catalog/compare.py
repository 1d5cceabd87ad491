"""Compare two catalogued runs label by label: same setting, different stack, version or host.

What is modelled: labels of run A and run B are paired by setting -- (phase, implementation,
offload_group_size, offload_num_in_group, offload_prefetch_step, offload_params); ``match_phase=False``
drops the phase from the key (runs of different experiments). For each pair the per-process
throughputs (``cases.throughput_tok_s``, finite only) of B are compared with A's by
``analysis.comparison.verdict_rule.unpaired_interval`` (the verdict rule's 95% t interval over processes of
``B / A - 1`` in percent: ratio of geometric means, log tok/s) and the verdict comes from
``analysis.comparison.verdict_rule.verdict`` (``faster`` = B is faster than A). With fewer than two processes on a side there is no interval and
the verdict is ``inconclusive``. A pair is ``INVALID`` when a validation error concerns either label
(or either run as a whole). A pair resting on a contended process (foreign work on the host while one of
either label's processes measured: ``host_load.contended``, ``results_schema.records.host_load``) is ``withheld``
and its issues say how many processes of each side were contended, as a run's own decision table withholds
such a verdict. Retention (each run vs its own baseline) and evidence-released bytes are
printed beside it, so a host change (absolute tok/s differ) can be told from an offloader change
(retention differs).

What is deliberately not modelled: multiple-comparison correction across pairs.
"""

from __future__ import annotations

import pandas as pd

from analysis.catalog.store import CatalogError, connect
from analysis.comparison.verdict_rule import unpaired_interval
from analysis.comparison.decision import call_verdict

SETTING = ["implementation", "group_size", "num_in_group", "prefetch_step", "offload_params"]

COLUMNS = ["phase_a", "phase_b", "label_a", "label_b", "implementation", "group_size", "num_in_group",
           "prefetch_step", "processes_a", "processes_b", "median_a_tok_s", "median_b_tok_s", "delta_pct",
           "ci_low_pct", "ci_high_pct", "verdict", "retention_a", "retention_b", "released_bytes_a",
           "released_bytes_b", "issues"]


def resolve_run(con, ref: str) -> str:
    """A run id from a run id, a unique run-id prefix, or a run directory path that was loaded.

    Raises:
        CatalogError: no run, or several, match ``ref``.
    """
    rows = con.execute("SELECT run_id FROM runs WHERE run_id = ? OR run_dir = ? OR run_id LIKE ? || '%' "
                       "ORDER BY run_id", [ref, str(_abs(ref)), ref]).fetchall()
    exact = [r[0] for r in rows if r[0] == ref]
    if exact:
        return exact[0]
    if len(rows) == 1:
        return rows[0][0]
    known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    if not rows:
        raise CatalogError(f"run {ref!r} is not in the catalog; known runs: {', '.join(known) or 'none'}")
    raise CatalogError(f"run {ref!r} is ambiguous: matches {', '.join(r[0] for r in rows)}")


def _abs(ref: str) -> str:
    from pathlib import Path

    return str(Path(ref).resolve())


def compare_runs(db, run_a: str, run_b: str, *, match_phase: bool = True,
                 margin_pct: float | None = None) -> tuple[pd.DataFrame, dict]:
    """Pair the labels of two runs and compute interval-based verdicts (B vs A).

    Args:
        db: catalog file (opened read-only).
        run_a, run_b: run ids (or unique prefixes, or loaded run directories).
        match_phase: pair only labels of the same phase.
        margin_pct: equivalence margin for the verdict function (percent); None = its default.

    Returns:
        ``(pairs, runs)``: pairs with ``COLUMNS``; ``runs`` maps ``"a"``/``"b"`` to the run's row of
        ``runs`` as a dict (for the header: host, device, vLLM version, validity).

    Raises:
        CatalogError: unknown or ambiguous run, missing catalog, a margin the verdict function rejects.
    """
    con = connect(db, read_only=True)
    try:
        a, b = resolve_run(con, run_a), resolve_run(con, run_b)
        runs = {k: con.execute("SELECT * FROM runs WHERE run_id = ?", [rid]).df().iloc[0].to_dict()
                for k, rid in (("a", a), ("b", b))}
        labels = con.execute("SELECT * FROM label_summary WHERE run_id IN (?, ?)", [a, b]).df()
        cases = con.execute("SELECT run_id, phase, label, throughput_tok_s, coalesce(host_load_contended, false) "
                            "AS contended FROM cases WHERE run_id IN (?, ?) AND isfinite(throughput_tok_s)",
                            [a, b]).df()
        bad = con.execute("SELECT run_id, phase, label, string_agg(DISTINCT code, ',') AS codes FROM invalid_labels "
                          "WHERE run_id IN (?, ?) GROUP BY ALL", [a, b]).df()
    finally:
        con.close()
    la, lb = labels[labels["run_id"] == a], labels[labels["run_id"] == b]
    key = SETTING + (["phase"] if match_phase else [])
    pairs = la.merge(lb, on=key, suffixes=("_a", "_b"))
    if match_phase:
        pairs["phase_a"] = pairs["phase_b"] = pairs["phase"]
    issues = {(r.run_id, r.phase, r.label): r.codes for r in bad.itertuples()}
    rows = [row for _, p in pairs.iterrows()
            if (row := _pair_row(p, cases, issues, (a, b), runs, margin_pct)) is not None]
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.sort_values(["phase_a", "implementation", "group_size", "num_in_group", "prefetch_step"],
                           kind="stable", ignore_index=True), runs


def _pair_row(p: pd.Series, cases: pd.DataFrame, issues: dict, ids: tuple[str, str], runs: dict,
              margin_pct: float | None) -> dict | None:
    """One row of ``COLUMNS`` for a pair of labels (None when a side has no finite throughput).

    Raises:
        CatalogError: the verdict function rejects ``margin_pct``.
    """
    a, b = ids
    side_a = cases[(cases["run_id"] == a) & (cases["phase"] == p["phase_a"]) & (cases["label"] == p["label_a"])]
    side_b = cases[(cases["run_id"] == b) & (cases["phase"] == p["phase_b"]) & (cases["label"] == p["label_b"])]
    ta, tb = side_a["throughput_tok_s"].to_numpy(), side_b["throughput_tok_s"].to_numpy()
    if len(ta) == 0 or len(tb) == 0:
        return None
    iv = unpaired_interval(tb, ta)
    lo_p, hi_p = iv.low_pct, iv.high_pct
    try:
        v = call_verdict(lo_p, hi_p, margin_pct)
    except ValueError as exc:
        raise CatalogError(str(exc)) from exc
    codes = [c for c in (issues.get((a, p["phase_a"], p["label_a"])), issues.get((b, p["phase_b"], p["label_b"])))
             if c]
    if codes or not runs["a"]["valid"] or not runs["b"]["valid"]:
        v = "INVALID"
        codes = codes or ["run invalid"]
    contended = (int(side_a["contended"].sum()), int(side_b["contended"].sum()))
    if any(contended):
        v = v if v == "INVALID" else "withheld"
        codes.append(f"withheld: contended (A {contended[0]} of {len(ta)} processes, B {contended[1]} of {len(tb)}; "
                     "foreign work on the host while they measured)")
    med_a, med_b = float(pd.Series(ta).median()), float(pd.Series(tb).median())
    return {"phase_a": p["phase_a"], "phase_b": p["phase_b"], "label_a": p["label_a"], "label_b": p["label_b"],
            **{k: p[k] for k in SETTING if k != "offload_params"}, "processes_a": len(ta),
            "processes_b": len(tb), "median_a_tok_s": med_a, "median_b_tok_s": med_b,
            "delta_pct": (med_b - med_a) / med_a * 100.0, "ci_low_pct": lo_p, "ci_high_pct": hi_p,
            "verdict": v, "retention_a": p["retention_a"], "retention_b": p["retention_b"],
            "released_bytes_a": p["released_bytes_a"], "released_bytes_b": p["released_bytes_b"],
            "issues": "; ".join(codes)}


DIFF_FIELDS = ["hostname", "device_name", "vllm_version", "torch_version", "git_revision", "model_name",
               "config_sha256", "experiment"]
