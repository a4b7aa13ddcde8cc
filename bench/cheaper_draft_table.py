"""The rows of docs/PERFORMANCE.md's "A cheaper draft at deployed widths" from gpu_suite calls' OUT directories, each
with the goal it answers and whether it is met.

    python bench/cheaper_draft_table.py OUT [OUT ...]

Reads <OUT>/<step>/rows.json of the steps q27b_vocab, q27b_fast, q8b_vocab (a step's time against AR's and the
floor), q3_vocab, q35_vocab (tau per draft head, DDTree against AR and DFlash), q3_auto_t1, q35_auto_t1 (auto
against AR and the best fixed budget), and <OUT>/gdn_solve_27b.json (us a GDN layer); prints Markdown tables. A
step not found is left out.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DEPLOYED = {"q27b_vocab": {32: 1.15, 64: 1.25}, "q27b_fast": {32: 1.15, 64: 1.25}, "q8b_vocab": {64: 1.2}}
DEMO = {"q3_vocab": ("DDTree / AR", 2.0), "q35_vocab": ("DDTree / DFlash", 1.3)}
AUTO = ("q3_auto_t1", "q35_auto_t1")
TAU_KEPT = 0.98          # tau with the cut head against the full head's
AUTO_VS_AR, AUTO_VS_BEST = 0.98, 0.97


def _rows(outs: list[Path], step: str) -> list[dict]:
    """The step's measured rows (a step cut by its time limit keeps those it finished), AR's first; none without
    AR's."""
    for out in outs:
        if (out / step / "rows.json").exists():
            rows = [r for r in json.loads((out / step / "rows.json").read_text()) if r.get("tpot_ms")]
            return rows if rows and rows[0]["method"] == "ar" else []
    return []


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _head(r: dict) -> str:
    return f"{r['draft_vocab']}" if r.get("draft_vocab") else "-"


def deployed(step: str, rows: list[dict]) -> list[str]:
    """Each speculative row's step against AR's and the floor; the goal where its budget has one and its head is
    the cut one."""
    ar = rows[0]
    lines = [f"| {step} | ar | - | {ar['step_ms']:.2f} | 1.00x | {ar.get('step_vs_floor', 0):.2f}x | |"]
    for r in rows:
        if r["method"] == "ar" or not r.get("step_ms"):
            continue
        ratio, goal = r["step_ms"] / ar["step_ms"], DEPLOYED[step].get(r["tree_budget"])
        verdict = f"<= {goal}x: {_met(ratio <= goal)}" if goal and r.get("draft_vocab_cut") else ""
        lines.append(f"| {step} | {r['run'].removesuffix('-T0')} | {_head(r)} | {r['step_ms']:.2f} | {ratio:.2f}x | "
                     f"{r.get('step_vs_floor', 0):.2f}x | {verdict} |")
    return lines


def demo(step: str, rows: list[dict]) -> list[str]:
    """tau per head (the cut head's against the full one's), the speedup over AR, and the step's goal."""
    full = {(r["method"], r["tree_budget"]): r for r in rows if r["method"] != "ar" and not r.get("draft_vocab_cut")}
    dflash = {r.get("draft_vocab_cut", False): r for r in rows if r["method"] == "dflash"}
    name, goal = DEMO[step]
    lines = []
    for r in rows:
        if r["method"] == "ar":
            continue
        kept = r["tau"] / full[(r["method"], r["tree_budget"])]["tau"]
        cut = r.get("draft_vocab_cut", False)
        tau = f"{r['tau']:.3f}" + (f" ({kept:.1%}: {_met(kept >= TAU_KEPT)})" if cut else "")
        ratio = r["speedup_vs_ar"] if step == "q3_vocab" else dflash[cut]["tpot_ms"] / r["tpot_ms"] if cut in dflash \
            else None
        verdict = f"{name} {ratio:.2f}x (>= {goal}: {_met(ratio >= goal)})" if r["method"] == "ddtree" and ratio else ""
        lines.append(f"| {step} | {r['run'].removesuffix('-T0')} | {_head(r)} | {tau} | {r['tpot_ms']:.3f} | "
                     f"{r['speedup_vs_ar']:.2f}x | {verdict} |")
    return lines


def auto(step: str, rows: list[dict]) -> list[str]:
    """auto at T=1 against AR where every fixed budget is slower than AR, else against the best fixed budget."""
    ar, fixed = rows[0], [r for r in rows if r["method"] == "ddtree" and isinstance(r["tree_budget"], int)]
    best = min(fixed, key=lambda r: r["tpot_ms"], default=ar)
    lines = []
    for r in rows:
        if r["method"] == "ar":
            continue
        verdict = ""
        if str(r["tree_budget"]).startswith("auto"):
            if best["tpot_ms"] >= ar["tpot_ms"]:
                verdict = f"{r['speedup_vs_ar']:.3f}x AR (>= {AUTO_VS_AR}: {_met(r['speedup_vs_ar'] >= AUTO_VS_AR)})"
            else:
                share = best["tpot_ms"] / r["tpot_ms"]
                verdict = f"{share:.1%} of DDTree {best['tree_budget']} (>= 97%: {_met(share >= AUTO_VS_BEST)})"
            verdict += f"; AR steps {r.get('auto_ar_share', 0):.1%}"
        lines.append(f"| {step} | {r['run'].removesuffix('-T1')} | {r.get('tau', 1):.3f} | {r['tpot_ms']:.3f} | "
                     f"{r['speedup_vs_ar']:.2f}x | {verdict} |")
    return lines


def gdn(outs: list[Path]) -> list[str]:
    found = [out / "gdn_solve_27b.json" for out in outs if (out / "gdn_solve_27b.json").exists()]
    rows = json.loads(found[0].read_text())["rows"] if found else []
    return [f"| {r['nodes']} {r['draft']} | {r['variant']} | {r['us']:.2f} |" for r in rows if r["us"] is not None]


def main(argv: list[str]) -> int:
    outs = [Path(a) for a in argv]
    tables = [("| step | run | head | step ms | x AR | x floor | goal |", "|---|---|---|---|---|---|---|",
               [line for step in DEPLOYED if (rows := _rows(outs, step)) for line in deployed(step, rows)]),
              ("| step | run | head | tau | ms a token | x AR | goal |", "|---|---|---|---|---|---|---|",
               [line for step in DEMO if (rows := _rows(outs, step)) for line in demo(step, rows)]),
              ("| step | run | tau | ms a token | x AR | goal |", "|---|---|---|---|---|---|",
               [line for step in AUTO if (rows := _rows(outs, step)) for line in auto(step, rows)]),
              ("| nodes | variant | us a layer |", "|---|---|---|", gdn(outs))]
    for header, rule, lines in tables:
        if lines:
            print("\n".join([header, rule, *lines]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
