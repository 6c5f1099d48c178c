#!/usr/bin/env python3
"""Regenerate validation/neupims.json and the table in validation/neupims.md: NeuPIMs' section 8.2
numbers beside ours.

    python validation/run_neupims.py [-j JOBS]      (ten minutes or more on two shared cores)

The table between the markers in neupims.md and the plot validation/neupims/fig12_throughput.png
are rewritten; the explanations around the table are written by hand from the numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import neupims_serving as V      # noqa: E402
from pimdsl.validation.scoring import prediction_count, within   # noqa: E402

BEGIN, END = "<!-- table: run_neupims.py -->", "<!-- /table -->"
PLOT = ROOT / "validation" / "neupims" / "fig12_throughput.png"


def plot(g: dict) -> None:
    """Fig. 12's layout: throughput over batch size per model (columns) and dataset (rows)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(V.DATASETS), len(V.MODELS), figsize=(16, 7), sharex=True)
    for row, dataset in enumerate(V.DATASETS):
        for col, model in enumerate(V.MODELS):
            ax = axes[row][col]
            for strategy in V.FIG12:
                ys = [g[V.key(model, dataset, b, strategy)]["tokens_per_s"] for b in V.BATCHES]
                ax.plot(V.BATCHES, ys, marker="o", label=strategy)
            ax.set_title(f"GPT3-{model.upper()}, {dataset}")
            ax.set_xticks(V.BATCHES)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("tokens/s (all tp x pp devices)")
            if row == len(V.DATASETS) - 1:
                ax.set_xlabel("batch size")
    axes[0][0].legend()
    fig.suptitle("NeuPIMs Fig. 12 grid, pimdsl computed as the authors' simulator does "
                 "(validation/neupims.md explains the gaps to the paper)")
    fig.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    tmp = PLOT.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    tmp.replace(PLOT)


def fmt(value, unit: str) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if unit == "x" else f"{value:.1f}"


def table(rows: list[dict]) -> str:
    lines = ["| where | quantity | paper | ours | unit | error | kind |", "|---|---|---:|---:|---|---:|---|"]
    for r in rows:
        err = f"{100 * r['error']:+.0f}%" if r["error"] is not None else "–"
        kind = r["kind"] + (f" ({r['note']})" if r["note"] else "")
        lines.append(f"| {r['figure']} | {r['quantity']} | {fmt(r['paper'], r['unit'])} | {fmt(r['ours'], r['unit'])} "
                     f"| {r['unit']} | {err} | {kind} |")
    return "\n".join(lines)


def counts(rows: list[dict]) -> str:
    """Every row is a prediction (nothing is fitted here); how many compare with a paper number and are within 10%."""
    scored = [r for r in rows if r["error"] is not None]
    headline = [r["error"] for r in scored if r["kind"] == "prediction"]
    return prediction_count([r["error"] for r in scored], "the paper",
                            f"No constant is fitted to a number here, so every row with a paper number counts; of "
                            f"the {len(headline)} headline rows (kind prediction) {within(headline)} are within 10%. "
                            f"The other {len(rows) - len(scored)} rows have no paper number.")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--plot-only", action="store_true", help="redraw the plot from neupims.json")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the points already in neupims.json (after changing only the table)")
    args = ap.parse_args()
    json_path = ROOT / "validation" / "neupims.json"
    done = json.loads(json_path.read_text())["grid"] if (args.reuse or args.plot_only) and json_path.exists() else None
    if args.plot_only:
        plot(done)
        return 0
    start = time.perf_counter()
    from rich.progress import Progress
    with Progress(transient=True) as bar:
        task = bar.add_task("NeuPIMs grid", total=len(V.points()))
        g = V.grid(args.jobs, lambda n, total: bar.update(task, completed=n), done)
    rows = V.all_rows(g)
    json_path.write_text(json.dumps({"rows": rows, "grid": g}, indent=1) + "\n")
    md_path = ROOT / "validation" / "neupims.md"
    md = md_path.read_text() if md_path.exists() else f"{BEGIN}\n{END}\n"
    head, rest = md.split(BEGIN, 1)
    md_path.write_text(head + BEGIN + "\n" + table(rows) + "\n\n" + counts(rows) + "\n" + END + rest.split(END, 1)[1])
    plot(g)
    print(table(rows))
    print(f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
