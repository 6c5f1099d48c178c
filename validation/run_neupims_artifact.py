#!/usr/bin/env python3
"""Regenerate the tables of validation/neupims_artifact.md: every run of the NeuPIMs authors'
simulator ([NEUPIMS_RUNS]) beside pimdsl's counterpart, per run and per stage, the modes' ratios,
and the numbers behind the remaining gaps.

    python validation/run_neupims_artifact.py      (about a minute)

Only the text between the markers is rewritten; the explanations around it are written by hand
from the numbers.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.validation import neupims_artifact as V      # noqa: E402
from pimdsl.validation.scoring import prediction_count    # noqa: E402

BEGIN, END = "<!-- tables: run_neupims_artifact.py -->", "<!-- /tables -->"
NS = 1e9


def pct(ours: float, ref: float) -> str:
    return f"{100 * (ours / ref - 1):+.1f}%"


def share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def runs_table(rows: list[dict]) -> str:
    out = ["| run | mode (pimdsl strategy) | batch | channels | artifact tokens/s | pimdsl tokens/s | error "
           "| step time error | held within | pimdsl physical tokens/s | bandwidth utilisation: artifact (a layer) / pimdsl (the step) |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        a, p, f = r["artifact"], r["pimdsl"], r["physical"]
        out.append(f"| {r['run']} | {r['mode']} (`{r['strategy']}`) | {r['batch']} | {r['ch_alloc']} "
                   f"| {a['tokens_per_s']:,.0f} | {p['tokens_per_s']:,.0f} | {pct(p['tokens_per_s'], a['tokens_per_s'])} "
                   f"| {pct(p['total_s'], a['total_s'])} | {100 * r['tolerance']:.0f}% | {f['tokens_per_s']:,.0f} "
                   f"| {share(r['artifact_bandwidth'])} / {share(p['bandwidth'])} |")
    return "\n".join(out)


def stages_table(rows: list[dict]) -> str:
    out = ["| run | " + " | ".join(f"{s}: artifact / pimdsl (error)" for s in V.STAGES) + " | layer (error) |",
           "|---|" + "---:|" * (len(V.STAGES) + 1)]
    for r in rows:
        a, p = r["artifact"], r["pimdsl"]
        cells = []
        for s in V.STAGES:
            if s in a["stages"]:
                cells.append(f"{a['stages'][s] * NS:,.0f} / {p['stages'][s] * NS:,.0f} "
                             f"({pct(p['stages'][s], a['stages'][s])})")
            else:
                cells.append("–")
        cells.append(f"{a['layer_s'] * NS:,.0f} / {p['layer_s'] * NS:,.0f} ({pct(p['layer_s'], a['layer_s'])})")
        out.append(f"| {r['run']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def ratios_table(ratios: list[dict]) -> str:
    out = ["| ratio | paper | artifact | pimdsl as the artifact computes | pimdsl physical |",
           "|---|---|---:|---:|---:|"]
    for q in ratios:
        paper = f"{q['paper']:.2f} ({q['paper_note']})" if q["paper"] else q["paper_note"]
        out.append(f"| {q['ratio']} | {paper} | {q['artifact']:.2f} | {q['pimdsl']:.2f} | {q['physical']:.2f} |")
    return "\n".join(out)


def gaps_tables(by: dict) -> str:
    ops = ["| run | operation | artifact cycles | pimdsl | error |", "|---|---|---:|---:|---:|"]
    for name in ("main_7B_b128_sboff_clb", "main_7B_b256_sboff_rr", "main_7B_b512_sboff_rr0"):
        for o in V.op_rows(by[name]):
            ops.append(f"| {name} | {o['op']} | {o['artifact'] * NS:,.0f} | {o['pimdsl'] * NS:,.0f} "
                       f"| {pct(o['pimdsl'], o['artifact'])} |")
    pim = ["| run | K.q phase: artifact / pimdsl busiest channel | s.V phase | PIM occupancy, mean channel |",
           "|---|---:|---:|---:|"]
    for name in ("main_7B_b128_sboff_clb", "main_7B_b256_sboff_rr", "main_7B_b512_sboff_rr0"):
        ph = V.attention_phase_rows(by[name])
        pim.append(f"| {name} | " + " | ".join(f"{a * NS:,.0f} / {b * NS:,.0f} (x{a / b:.2f})"
                                               for a, b in (ph["kq"], ph["sv"], ph["mean_channel"])) + " |")
    pre = ["| run | artifact layer | pimdsl layer | extra s.V preloads | pimdsl + them (error) |",
           "|---|---:|---:|---:|---:|"]
    for name in ("npuonly_7B_b128_rr", "npuonly_7B_b256_rr", "npuonly_7B_b512_rr0"):
        a, p, x = V.artifact(by[name])["layer_s"], V.step(by[name])["layer_s"], V.extra_preload_seconds(by[name])
        pre.append(f"| {name} | {a * NS:,.0f} | {p * NS:,.0f} | {x * NS:,.0f} | {(p + x) * NS:,.0f} ({pct(p + x, a)}) |")
    mech = ["| mechanism set back | run | artifact tokens/s | pimdsl, declared mechanism (error) | set back (error) |",
            "|---|---|---:|---:|---:|"]
    for what, where, setting in V.MECHANISMS:
        key, value = where.split("=")
        for run in by.values():
            if run[key] == value:
                a, p, q = float(run["tokens_per_s"]), V.step(run)["tokens_per_s"], V.variant(run, setting)["tokens_per_s"]
                mech.append(f"| {what} (`{setting}`) | {run['run']} | {a:,.0f} | {p:,.0f} ({pct(p, a)}) "
                            f"| {q:,.0f} ({pct(q, a)}) |")
    return ("The declared mechanisms, each set back to pimdsl's default:\n\n" + "\n".join(mech) + "\n\n"
            "NPU operations of one layer, the whole batch (stages A and E without interleaving):\n\n"
            + "\n".join(ops) + "\n\nStage B with dual row buffers, by GEMV phase (the artifact's K.q operation "
            "includes its softmax and the scores' write-back):\n\n" + "\n".join(pim)
            + "\n\nNPU-only attention (`gemv_issue = serial`) and the npu-only branch's extra preloads:\n\n"
            + "\n".join(pre))


def main() -> int:
    start = time.perf_counter()
    rows = V.rows()
    ratios = V.ratio_rows(rows)
    by = {r["run"]: r for r in V.runs()}
    (ROOT / "validation" / "neupims_artifact.json").write_text(
        json.dumps({"runs": rows, "ratios": ratios}, indent=1) + "\n")
    counted = prediction_count([r["pimdsl"]["tokens_per_s"] / r["artifact"]["tokens_per_s"] - 1 for r in rows],
                               "the artifact's tokens/s", "Every run is a prediction: no constant is fitted on an "
                               "artifact run (the options only select how the artifact computes).")
    body = ("### Per run\n\n" + counted + "\n\n" + runs_table(rows) + "\n\n### Per stage (cycles = ns)\n\n" + stages_table(rows)
            + "\n\n### The modes' ratios\n\n" + ratios_table(ratios) + "\n\n### Behind the gaps\n\n" + gaps_tables(by))
    md_path = ROOT / "validation" / "neupims_artifact.md"
    md = md_path.read_text() if md_path.exists() else f"{BEGIN}\n{END}\n"
    head, rest = md.split(BEGIN, 1)
    md_path.write_text(head + BEGIN + "\n" + body + "\n" + END + rest.split(END, 1)[1])
    print(body)
    print(f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
