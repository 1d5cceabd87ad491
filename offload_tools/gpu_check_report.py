"""Readable output of the GPU check: per-point lines, a measurement README's table, the one-file bundle.

* :func:`point_lines`: one ``GPU_CHECK_POINT`` line per (point, protocol, mode) of a
  ``gpu_check_torch`` summary, the ratio to the physical ceiling first, then the event model's bound
  (:mod:`offload_tools.gpu_check_ratios`), plus one line per point not run and per step faster than
  its interleaved un-offloaded step.
* :func:`readme_table` / ``python -m offload_tools.gpu_check_report table FILE.json``: the Markdown
  table of a measurement README (``docs/measurements/<date>/README.md``), ratios recomputed from the
  recorded times (:func:`offload_tools.gpu_check_ratios.recompute`), so an older JSON gets the same
  columns.
* :func:`bundle` / ``python -m offload_tools.gpu_check_report bundle PARTS OUT ...``: what
  ``scripts/gpu_protocols.sh`` leaves: ``gpu_protocols.json`` (every part's JSON, the environment,
  the steps and the summary), ``logs.tar.gz`` and a ``README.md`` draft, three files (a lent device
  returns at most 8), and the ``GPU_PROTOCOLS_SUMMARY`` line.

Pass rule of the bundle (``ok``): the main check exits 0, the compile check exits 0, the negative
control exits 1 with ``all_bitwise_equal`` false, the skip-refill control exits 1 with
``stale_reads >= 1``, the transfer check of the main run exits 0, no point is left not run, and the
whole script ended within its limit (``--limit-s``). An optional part the script left out for lack of
time (the device-wide sync run) is listed in ``parts_not_run`` with the reason and not judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offload_tools.gpu_check_ratios import recompute

__all__ = ["PARTS", "bundle", "main", "point_lines", "readme_table", "summarize"]

PARTS = ("gpu_check_torch", "compile", "negative", "skip_refill", "step_sync_device", "transfer_check",
         "transfer_check_device")
"""The JSON parts of ``scripts/gpu_protocols.sh``, in run order."""
KILLED = (124, 137)
"""Exit statuses of a part ended by ``timeout`` (TERM, KILL)."""


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f} ms"


def _ceiling(r: dict[str, Any]) -> str:
    return r["ceiling_note"] if r.get("ceiling_ratio") is None else f"ceiling {r['ceiling_ratio']:.3f}"


def point_lines(summary: dict[str, Any]) -> list[str]:
    """``GPU_CHECK_POINT`` lines of a summary: ceiling ratio first, then the bound's, then the model's step."""
    out = []
    for p in summary.get("points", []):
        for name, pr in p.get("protocols", {}).items():
            for mode, m in pr["modes"].items():
                out.append(f"GPU_CHECK_POINT ({p['group_size']},{p['num_in_group']}) {name} {mode}: "
                           f"step {_ms(m['step_s'])}; {_ceiling(m)} ({_ms(m.get('ceiling_step_s'))}) | "
                           f"bound {m['bound_ratio']:.3f} ({_ms(m['bound_step_s'])}); model {_ms(m['model_step_s'])}; "
                           f"no offload {_ms(m['baseline_step_s'])} (spread {m['baseline_spread']:.1%})")
    out += [f"GPU_CHECK_NOT_RUN ({p['group_size']},{p['num_in_group']}): {p['reason']}"
            for p in summary.get("not_run", [])]
    out += [f"GPU_CHECK_FASTER_THAN_NO_OFFLOAD {line}" for line in summary.get("faster_than_baseline", [])]
    return out


def readme_table(data: dict[str, Any]) -> str:
    """Markdown table, one row per (point, protocol): ceiling and bound ratios per mode, step, model, speed-up."""
    rows = recompute(data)
    modes = [m for m in ("graph", "eager", "compile") if any(r["mode"] == m for r in rows)]
    speed = {(p["group_size"], p["num_in_group"]): p.get("speedup", {}) for p in data["points"] if "protocols" in p}
    head = ["(G,N)", "protocol"]
    for m in modes:
        head += [f"{m}: ceiling ratio", f"{m}: bound ratio", f"{m}: step / model (ms)"]
    head += [f"speed-up {m}" for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by: dict[tuple[int, int, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["group_size"], r["num_in_group"], r["protocol"]), {})[r["mode"]] = r
    for (g, n, proto), per in by.items():
        cells = [f"({g},{n})", proto]
        for m in modes:
            got = per.get(m)
            if got is None:
                cells += ["-", "-", "-"]
                continue
            cells += ["n/a: nothing copied" if got["ceiling_ratio"] is None else f"{got['ceiling_ratio']:.3f}",
                      f"{got['bound_ratio']:.3f}", f"{got['step_s'] * 1e3:.2f} / {got['model_step_s'] * 1e3:.2f}"]
        sp = speed.get((g, n), {})
        cells += [f"{sp[m]:.2f}" if proto == "current" and m in sp else "" for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
    for p in data.get("not_run", []):
        lines.append(f"\nNot run: ({p['group_size']},{p['num_in_group']}): {p['reason']}")
    lines += [f"\nNot run: every point after the last row: {p['stopped']}" for p in data["points"] if "stopped" in p]
    return "\n".join(lines) + "\n"


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _not_run(main: dict[str, Any] | None, rc: int, limit_s: int | None, points: Sequence[Sequence[int]]) -> list[dict]:
    """The main check's points not run: its own list, plus what a killed or silent run left."""
    if main is None:
        return [{"group_size": g, "num_in_group": n, "reason": f"the main check wrote no summary (exit {rc})"}
                for g, n in points]
    out = list(main.get("not_run", []))
    if not main.get("complete", False):
        why = f"killed at its {limit_s} s time limit" if rc in KILLED else f"ended with exit {rc}"
        out += [{"group_size": g, "num_in_group": n, "reason": f"not reached: the main check {why}"}
                for g, n in main.get("pending", [])]
    return out


def summarize(parts: dict[str, dict[str, Any] | None], rc: dict[str, int], elapsed_s: int, limit_s: int,
              main_limit_s: int | None = None, points: Sequence[Sequence[int]] = (),
              skipped: dict[str, str] | None = None) -> dict[str, Any]:
    """The bundle's summary (pass rule in the module docstring).

    Args:
        parts: part name (:data:`PARTS`) -> its JSON, ``None`` when missing or unreadable.
        rc: part name -> exit status.
        elapsed_s: the script's seconds so far.
        limit_s: the script's limit.
        main_limit_s: the main check's time limit (for the reason of a killed run).
        points: the main check's points (listed as not run when it wrote nothing).
        skipped: optional part name -> why the script did not run it (``parts_not_run``; not judged).
    """
    main, neg, skip = parts.get("gpu_check_torch"), parts.get("negative"), parts.get("skip_refill")
    not_run = _not_run(main, rc.get("gpu_check_torch", -1), main_limit_s, points)
    graph = {f"({r['group_size']},{r['num_in_group']})": {"ceiling_ratio": r["ceiling_ratio"],
                                                          "ceiling_note": r["ceiling_note"],
                                                          "bound_ratio": r["bound_ratio"]}
             for r in (recompute(main) if main else []) if r["protocol"] == "current" and r["mode"] == "graph"}
    s = {"elapsed_s": elapsed_s, "limit_s": limit_s, "within_limit": elapsed_s <= limit_s, "exit": dict(rc),
         "parts_not_run": dict(skipped or {}),
         "main_ok": (main or {}).get("ok"), "points_run": len((main or {}).get("points", [])), "not_run": not_run,
         "faster_than_baseline": (main or {}).get("faster_than_baseline"), "current_graph_ratios": graph,
         "compile_ok": rc.get("compile") == 0 and bool((parts.get("compile") or {}).get("all_bitwise_equal")),
         "negative_failed_as_it_must": rc.get("negative") == 1 and (neg or {}).get("all_bitwise_equal") is False,
         "skip_refill_detected": rc.get("skip_refill") == 1 and ((skip or {}).get("stale_reads") or 0) >= 1,
         "transfer_check_max_abs_error_pct": (parts.get("transfer_check") or {}).get("max_abs_error_pct"),
         "transfer_check_device_max_abs_error_pct": (parts.get("transfer_check_device") or {}).get("max_abs_error_pct")}
    s["ok"] = bool(rc.get("gpu_check_torch") == 0 and s["main_ok"] and s["compile_ok"]
                   and s["negative_failed_as_it_must"] and s["skip_refill_detected"]
                   and rc.get("transfer_check") == 0 and not not_run and s["within_limit"])
    return s


def bundle(parts_dir: Path, out_dir: Path, rc: dict[str, int], elapsed_s: int, limit_s: int,
           main_limit_s: int | None = None, points: Sequence[Sequence[int]] = (),
           skipped: dict[str, str] | None = None) -> dict[str, Any]:
    """Write ``gpu_protocols.json``, ``logs.tar.gz`` and ``README.md`` into ``out_dir``; return the summary.

    ``parts_dir`` holds ``<part>.json``, ``<part>.log``, ``env.txt`` and ``steps.txt`` of the script.
    """
    parts = {name: _load(parts_dir / f"{name}.json") for name in PARTS}
    summary = summarize(parts, rc, elapsed_s, limit_s, main_limit_s, points, skipped)

    def text(name: str) -> str:
        p = parts_dir / name
        return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else ""

    merged = {"summary": summary, "env": text("env.txt"), "steps": text("steps.txt").splitlines(), "parts": parts}
    (out_dir / "gpu_protocols.json").write_text(json.dumps(merged, sort_keys=True) + "\n", encoding="utf-8")
    with tarfile.open(out_dir / "logs.tar.gz", "w:gz") as tar:
        for p in sorted(parts_dir.glob("*.log")) + [parts_dir / "steps.txt", parts_dir / "env.txt"]:
            if p.is_file():
                tar.add(p, arcname=p.name)
    (out_dir / "README.md").write_text(readme_draft(merged), encoding="utf-8")
    return summary


def readme_draft(merged: dict[str, Any]) -> str:
    """The README of a measurement directory, to be completed by hand (what it shows, in words)."""
    s, main = merged["summary"], merged["parts"].get("gpu_check_torch")
    table = readme_table(main) if main else "The main check wrote no summary.\n"
    return (f"# `scripts/gpu_protocols.sh` on <device> (<date>)\n\n"
            f"Environment (`env.txt` in `logs.tar.gz`):\n\n```\n{merged['env'].strip()}\n```\n\n"
            f"Files: `gpu_protocols.json` (every part and the summary), `logs.tar.gz` (each step's log), this README.\n"
            f"{s['elapsed_s']} s in all (limit {s['limit_s']} s); ok: {str(s['ok']).lower()}.\n\n"
            f"## What it shows\n\n<in words, with the figures>\n\n"
            f"## Per point: ratio to the physical ceiling max(t_base, M_c b / BW) first, then to the event model's "
            f"bound\n\n{table}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m offload_tools.gpu_check_report", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table", help="print the README table of a gpu_check_torch JSON")
    t.add_argument("file", type=Path)
    b = sub.add_parser("bundle", help="merge a gpu_protocols.sh run's parts into three files; print its summary")
    b.add_argument("parts", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--exit", nargs="*", default=[], metavar="PART=RC", help="exit status of each part")
    b.add_argument("--elapsed-s", type=int, required=True)
    b.add_argument("--limit-s", type=int, required=True)
    b.add_argument("--main-limit-s", type=int)
    b.add_argument("--points", nargs="*", default=[], help="the main check's points, G,N")
    b.add_argument("--skipped", nargs="*", default=[], metavar="PART=WHY", help="optional parts not run, and why")
    a = ap.parse_args(argv)
    if a.cmd == "table":
        data = _load(a.file)
        if data is None or "points" not in data:
            print(f"error: {a.file}: not a gpu_check_torch JSON (no points)", file=sys.stderr)
            return 2
        print(readme_table(data), end="")
        return 0
    try:
        rc = {k: int(v) for k, v in (item.split("=", 1) for item in a.exit)}
        points = [tuple(int(v) for v in p.split(",")) for p in a.points]
        skipped = dict(item.split("=", 1) for item in a.skipped)
    except ValueError:
        print(f"error: --exit takes PART=INT (got {a.exit}), --points G,N (got {a.points}), --skipped PART=WHY "
              f"(got {a.skipped})", file=sys.stderr)
        return 2
    summary = bundle(a.parts, a.out, rc, a.elapsed_s, a.limit_s, a.main_limit_s, points, skipped)
    print("GPU_PROTOCOLS_SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
