"""Reproduction of [PIPELOAD] Tables II and III and the Fig. 7 end points on the bundled specs.

Two kinds of "ours": predicted for the paper's machine by the pipelined-loading loop on the bundled
system specs (per-agent load rate calibrated on each model's PipeSwitch column, the disk's read
bandwidth on ViT-Large's 6-agent run (582 MB in 43.2 ms, Table II; specs/hardware/edge_cpu.pim), compute
from the CPU roofline: the specs cite each), and measured on
this machine by `pimc execute` (synthetic weights at the models' shapes; GPT-J with fewer layers).
`python validation/run_pipeload.py` rewrites validation/pipeload.json and .md;
tests/test_validation_pipeload.py recomputes the predicted rows and checks the trends.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from dataclasses import replace

from ..loops.pipelined_loading import layer_profile
from ..loops import pipelined_loading as pl
from ..ir.errors import CompileError

MODELS = {"bert_large": "BERT-Large", "gpt2_medium": "GPT-2-Base", "vit_large": "ViT-Large", "gpt_j_6b": "GPT-J"}
COLUMNS = ("baseline", "pipeswitch", 2, 4, 6)
# [PIPELOAD] Table II, latency (ms), and Table III, memory footprint (MB): Baseline, PipeSwitch, 2/4/6 LAs
TABLE2 = {"bert_large": (15891.5, 14897.1, 7720.8, 4621.8, 3510.7),
          "gpt2_medium": (1659.5, 2457.9, 1704.7, 1396.1, 1121.4),
          "vit_large": (345.0, 157.3, 90.8, 56.8, 43.2),
          "gpt_j_6b": (31330.9, 76494.6, 51003.3, 33487.2, 29640.9)}
TABLE3 = {"bert_large": (1627.3, 1689.2, 457.1, 661.5, 930.8),
          "gpt2_medium": (1433.8, 1436.8, 387.5, 518.8, 649.9),
          "vit_large": (600.9, 626.6, 60.8, 110.2, 159.4),
          "gpt_j_6b": (12354.0, 12468.6, 1668.6, 2455.4, 3242.2)}
# [PIPELOAD] Sec. V-C (Fig. 7 end points): (limit MB, latency ms) at the low and the high end
FIG7 = {"vit_large": ((60, 81), (300, 36)), "bert_large": ((500, 7721), (1250, 2923)),
        "gpt2_medium": ((400, 1705), (1000, 1004)), "gpt_j_6b": ((2000, 51003), (7000, 29074))}
# GPT-J measured here: 28 layers x 8 reload passes of 403 MB is minutes per configuration on two
# cores, so the measured run keeps 6 layers (enough for 6 agents); the paper's other models run whole.
MEASURED_OVERRIDES = {"gpt_j_6b": ["gpt_j_6b.layers=6"]}


def system(model: str, *overrides: str):
    name = f"pipeload_{model}"
    spec, diags = load_spec(str(specs_dir() / "systems" / f"{name}.pim"), list(overrides))
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.systems[name]


# [PIPELOAD] Sec. II-B (Fig. 3): loading the model takes about ten times one inference for the three
# ~1 GB models ("by roughly an order of magnitude") and about twice for GPT-J. Used only to split the
# baseline's measured time into its load and its compute (paper_profile).
LOAD_OVER_COMPUTE = {"bert_large": 10.0, "gpt2_medium": 10.0, "vit_large": 10.0, "gpt_j_6b": 2.0}


def _column(col) -> tuple[str, int | None]:
    return ("pipeload", col) if isinstance(col, int) else (col, None)


def paper_profile(model: str) -> layer_profile.Profile:
    """A per-layer profile of the paper's machine, fitted on two of its numbers per model (the paper
    prints no profile, Sec. IV-1): one agent's layer load = PipeSwitch's time per layer load (one
    loader, load-bound: Table II / (passes x layers)); the baseline (Table II) = whole load W + passes
    x one pass's compute C, with W = LOAD_OVER_COMPUTE x C (Sec. II-B), gives C per pass and W; a
    layer's compute is C / layers. Bytes are ours."""
    base = pl.setup(system(model))
    n, passes = len(base.profile.layers), base.passes
    load = TABLE2[model][1] / 1e3 / (passes * n)
    per_pass = TABLE2[model][0] / 1e3 / (LOAD_OVER_COMPUTE[model] + passes)
    compute = per_pass / n
    layers = tuple(layer_profile.LayerProfile(l.bytes, load, compute, compute) for l in base.profile.layers)
    whole = LOAD_OVER_COMPUTE[model] * per_pass
    return replace(base.profile, layers=layers, whole_load_s=whole, resident_load_s=0.0, head_prefill_s=0.0,
                   head_decode_s=0.0, source="fitted on [PIPELOAD] Table II (baseline, PipeSwitch) and Sec. II-B")


def _setup(model: str, profile, *overrides: str) -> pl.Setup:
    s = pl.setup(system(model, *overrides))
    return replace(s, profile=profile) if profile is not None else s


FIT_AGENTS = 6


def fit_contention(model: str, profile, agents: int = FIT_AGENTS) -> float:
    """Alpha such that `agents` agents take Table II's time (bisection; 0 when even alpha = 0 is
    slower). The other agent columns are then predictions."""
    target = TABLE2[model][COLUMNS.index(agents)] / 1e3
    s = _setup(model, profile, "workload.memory_limit=1 TB")
    at = lambda a: pl.predict(replace(s, machine=replace(s.machine, contention=a)), "pipeload", agents)["end_s"]
    if at(0.0) >= target:
        return 0.0
    lo, hi = 0.0, 4.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid) < target else (lo, mid)
    return (lo + hi) / 2


def predicted(model: str, profile=None, contention: float | None = None) -> dict:
    """Latency (ms) and memory (MB) per column for the paper's machine, no memory limit (Table II/III)."""
    s = _setup(model, profile, "workload.memory_limit=1 TB")
    if contention is not None:
        s = replace(s, machine=replace(s.machine, contention=contention))
    out = {}
    for col in COLUMNS:
        strategy, m = _column(col)
        r = pl.report(s, pl.predict(s, strategy, m))
        out[str(col)] = {"latency_ms": r["end_to_end_s"] * 1e3, "memory_mb": r["memory_bytes"]["total"] / 1e6}
    return out


def fig7(model: str, profile=None, contention: float = 0.0) -> list[dict]:
    """The planner's choice and latency at Fig. 7's lowest and highest memory limit."""
    rows = []
    for limit_mb, paper_ms in FIG7[model]:
        try:
            s = _setup(model, profile, f"workload.memory_limit={limit_mb} MB", "mapping.params.loading_agents=auto")
            s = replace(s, machine=replace(s.machine, contention=contention))
            r = pl.report(s, pl.predict(s))
            rows.append({"limit_mb": limit_mb, "paper_ms": paper_ms, "ours_ms": r["end_to_end_s"] * 1e3,
                         "agents": r["loading_agents"], "memory_mb": r["memory_bytes"]["total"] / 1e6})
        except CompileError as exc:                # a limit below one layer: say so in the table
            rows.append({"limit_mb": limit_mb, "paper_ms": paper_ms, "ours_ms": None, "agents": None,
                         "memory_mb": None, "note": getattr(exc, "message", str(exc))})
    return rows


def measure(model: str, repeats: int, cache: str | None = None) -> dict:
    """Medians of `repeats` runs of `pimc execute` (each its own process) on this machine."""
    argv = [sys.executable, "-m", "pimdsl.cli.main", "execute", str(specs_dir() / "systems" / f"pipeload_{model}.pim"),
            "--agents", "2,4,6", "--json", "--set", "workload.memory_limit=1 TB"]
    for o in MEASURED_OVERRIDES.get(model, []):
        argv += ["--set", o]
    if cache:
        argv += ["--cache", cache]
    runs = []
    for _ in range(repeats):
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
    out = {"repeats": repeats, "cores": runs[0]["cores"], "overrides": MEASURED_OVERRIDES.get(model, [])}
    for i, col in enumerate(COLUMNS):
        rows = [r["runs"][i] for r in runs]
        med = lambda key: statistics.median(row[key] for row in rows)
        out[str(col)] = {"latency_ms": med("measured_latency_s") * 1e3,
                         "predicted_latency_ms": med("predicted_latency_s") * 1e3,
                         "memory_mb": med("measured_peak_rss_growth_bytes") / 1e6,
                         "predicted_memory_mb": med("predicted_memory_bytes") / 1e6,
                         "output_equals_plain_forward": all(row["output_equals_plain_forward"] for row in rows)}
    return out


def trends(table: dict, layer_mb: float) -> dict:
    """Speedup over PipeSwitch at 2/4/6 agents (should grow) and memory added per agent (about one layer)."""
    ps = table["pipeswitch"]["latency_ms"]
    speedups = [ps / table[str(m)]["latency_ms"] for m in (2, 4, 6)]
    per_agent = [(table[str(b)]["memory_mb"] - table[str(a)]["memory_mb"]) / (b - a) / layer_mb
                 for a, b in ((2, 4), (4, 6))]
    return {"speedup_vs_pipeswitch": speedups, "speedup_grows": speedups[0] < speedups[1] < speedups[2],
            "layers_per_added_agent": per_agent}


def layer_mb(model: str, *overrides: str) -> float:
    s = pl.setup(system(model, *overrides))
    return s.profile.layers[0].bytes / 1e6


def paper_table(model: str) -> dict:
    return {str(c): {"latency_ms": TABLE2[model][i], "memory_mb": TABLE3[model][i]} for i, c in enumerate(COLUMNS)}


def collect(measured: dict) -> dict:
    """Everything validation/pipeload.md shows; `measured` comes from measure() (or the committed file)."""
    out = {"models": {}, "measured_here": measured}
    for model in MODELS:
        prof = paper_profile(model)
        alpha = fit_contention(model, prof)
        pred = predicted(model, prof, alpha)
        size = layer_mb(model)
        row = {"paper": paper_table(model), "predicted": pred, "spec_only": predicted(model),
               "contention_alpha": alpha, "layer_mb": size,
               "compute_per_layer_ms": prof.layers[0].prefill_s * 1e3, "load_per_layer_ms": prof.layers[0].load_s * 1e3,
               "whole_load_ms": prof.whole_load_s * 1e3, "fig7": fig7(model, prof, alpha),
               "trends": {"paper": trends(paper_table(model), size), "predicted": trends(pred, size)}}
        if model in measured:
            here = layer_mb(model, *MEASURED_OVERRIDES.get(model, []))
            row["trends"]["measured_here"] = trends(measured[model], here)
        out["models"][model] = row
    return out


INCONSISTENCIES = [
    "Table I labels GPT-J FP32, but its memory columns (412 MB per layer, 12,354 MB) are FP16 sizes "
    "(6.05 B parameters x 2 B); we follow the memory columns (models/gpt_j_6b.pim).",
    "Table I's \"GPT-2-Base\" (355 M parameters, 24 layers, 51 MB FP32 layers) is the GPT-2 medium shape, "
    "not GPT-2 small (124 M, 12 layers); we run GPT-2 medium (models/gpt2_medium.pim).",
    "Sec. V-B-1 gives ViT-Large's memory reduction over PipeSwitch as 74.0-86.7%; Table III gives 74.6-90.3% "
    "(74.0-86.6% is GPT-J's). Sec. V-B-2 gives GPT-J 74.6-90.3% (ViT's) where Table III gives 74.0-86.6%, and "
    "GPT-2-Base 13.7-72.9% where Table III gives 54.8-73.0% (13.7% matches nothing).",
    "The headline \"4.24x speedup while reducing memory footprints by 90.3%\" (Sec. I) pairs BERT-Large's "
    "6-agent speedup with ViT-Large's 2-agent memory reduction; the abstract's 86.7%/90.3% are swapped "
    "between the encoder and the GPT-style models.",
    "\"Adding one Loading Agent implies one additional layer saved in memory\" (Sec. V-B-1) holds for ViT "
    "and GPT-J in Table III, but BERT-Large grows by 2.0-2.7 layers and GPT-2-Base by 1.3 layers per agent.",
    "Fig. 7 (Sec. V-C): ViT-Large at a 60 MB limit runs in 81 ms, faster than 2 agents in Table II "
    "(90.8 ms), although 2 agents need 60.8 MB > 60 MB.",
    "Sec. V-B-1 puts BERT's embedding and pooling at \"about 20%\" and ViT's at \"about 1.5%\" of memory; "
    "Table I gives 19.1% and 3.2%.",
    "ViT-Large's PipeSwitch is 2.19x faster than its baseline; overlapping load and compute can give at "
    "most 2x, so the baseline's whole-model load path costs more than per-layer loading (our fitted profile "
    "gives the baseline its own load time).",
    "Sec. V-B-2 says the GPT-style speedups are below the baseline's \"when the number of Loading Agents "
    "is low (<= 4)\"; Table II has GPT-2-Base at 4 agents 1.19x faster than its baseline (1396.1 vs 1659.5 ms); "
    "only its 2-agent run and GPT-J's 2- and 4-agent runs are slower.",
    "The daemon \"sends S^stop to all loaders\" and resumes them when room returns (Sec. III-B) without "
    "saying in which order; a first-come resume can deadlock under a tight budget (later layers hold the "
    "room the next needed layer waits for). We admit loads in layer order, which cannot.",
]


MARKER = "<!-- written by hand below; run_pipeload.py keeps it -->"


def _f(v, digits=1):
    return "-" if v is None else f"{v:,.{digits}f}"


def _err(ours, paper):
    return "-" if ours is None or not paper else f"{100 * (ours / paper - 1):+.0f}%"


def markdown(data: dict) -> str:
    meas = data["measured_here"]
    L = ["# PIPELOAD: Tables II and III, Fig. 7, predicted and measured",
         "",
         "Generated by `python validation/run_pipeload.py` from `validation/pipeload.json` (do not edit by hand).",
         "",
         "Paper: [PIPELOAD] (its framework is also called \"Hermes\"), wall-clock runs of a prototype on a "
         "Xeon Gold 6248R limited to 8 cores (Sec. V-A-4). Latency: one inference (BERT-Large, ViT-Large) or 8 "
         "generated tokens from a 4-token prompt (GPT-2-Base, GPT-J), every layer reloaded per token in the "
         "pipelined modes (Sec. V-B-2). Memory: the run's peak.",
         "",
         "## How ours is obtained",
         "",
         "- **Predicted, paper's machine**: the pipelined-loading loop (`pimc run`) on "
         "`specs/systems/pipeload_*.pim` with a per-layer profile fitted per model, because the paper prints "
         "none (Sec. IV-1): one agent's layer load = Table II's PipeSwitch time per layer (one loader, "
         "load-bound); the baseline = whole-model load W + passes x one pass's compute C, with W = 10 C for the "
         "~1 GB models and W = 2 C for GPT-J (Sec. II-B, Fig. 3). So the **Baseline and PipeSwitch columns are "
         "calibration points** (equal by construction, up to the resident part's first load). The loaders' "
         "contention alpha (k concurrent loads each 1 + alpha (k-1) slower) is fitted on the **6-agent column**; "
         "the **2- and 4-agent columns are predictions**. Memory is predicted from the model shapes alone "
         "(resident embedding/head + the layers the schedule holds + KV cache and working set): no memory "
         "number of the paper is used.",
         "- **Measured here**: `pimc execute` on this machine (2 cores, shared with other jobs during the run, "
         "so latencies are medians of repeated runs and noisy), synthetic seeded weights at the models' shapes "
         "as safetensors files in the page cache (warm), numpy compute on one thread. GPT-J keeps "
         f"{', '.join(MEASURED_OVERRIDES['gpt_j_6b'])} (28 layers x 8 reload passes is minutes per "
         "configuration here); the others run whole. Memory = the process's resident-set growth during the "
         "run. \"Predicted here\" is `pimc run`'s schedule on the profile `pimc execute` measured just before.",
         "",
         "## Table II: latency (ms)",
         "",
         "| model | column | paper | predicted (paper's machine) | error | measured here | predicted here | error |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
    names = {"baseline": "Baseline", "pipeswitch": "PipeSwitch", "2": "2 LAs", "4": "4 LAs", "6": "6 LAs"}
    for model, row in data["models"].items():
        for col, label in names.items():
            p, o = row["paper"][col]["latency_ms"], row["predicted"][col]["latency_ms"]
            m = meas.get(model, {}).get(col)
            tag = {"baseline": " (calibration)", "pipeswitch": " (calibration)", str(FIT_AGENTS): " (alpha fit)"}.get(col, "")
            L.append(f"| {MODELS[model]} | {label} | {_f(p)} | {_f(o)}{tag} | {_err(o, p)} | "
                     f"{_f(m and m['latency_ms'])} | {_f(m and m['predicted_latency_ms'])} | "
                     f"{_err(m and m['predicted_latency_ms'], m and m['latency_ms'])} |")
    L += ["", "## Table III: memory footprint (MB)", "",
          "| model | column | paper | predicted (paper's machine) | error | measured here | predicted here | error |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model, row in data["models"].items():
        for col, label in names.items():
            p, o = row["paper"][col]["memory_mb"], row["predicted"][col]["memory_mb"]
            m = meas.get(model, {}).get(col)
            L.append(f"| {MODELS[model]} | {label} | {_f(p)} | {_f(o)} | {_err(o, p)} | "
                     f"{_f(m and m['memory_mb'])} | {_f(m and m['predicted_memory_mb'])} | "
                     f"{_err(m and m['predicted_memory_mb'], m and m['memory_mb'])} |")
    L += ["", "## Trends", "",
          "Speedup over PipeSwitch at 2 / 4 / 6 agents, and the memory each added agent costs, in layers "
          "(from 2 to 4 and from 4 to 6 agents).", "",
          "| model | source | speedup 2 / 4 / 6 | grows with agents | layers per added agent |",
          "|---|---|---|---|---|"]
    for model, row in data["models"].items():
        for source, t in row["trends"].items():
            speedups = [f"{x:.2f}" for x in t["speedup_vs_pipeswitch"]]
            if source == "predicted":             # PipeSwitch is a calibration point, 6 agents the alpha fit
                speedups[-1] += " (fitted)"
            L.append(f"| {MODELS[model]} | {source.replace('_', ' ')} | " + " / ".join(speedups)
                     + f" | {'yes' if t['speedup_grows'] else 'no'} | "
                     + " / ".join(f"{x:.2f}" for x in t["layers_per_added_agent"]) + " |")
    spec = {m: row["spec_only"]["pipeswitch"]["latency_ms"] / row["spec_only"][str(FIT_AGENTS)]["latency_ms"]
            for m, row in data["models"].items()}
    L += ["", f"The predicted {FIT_AGENTS}-agent speedups are ratios of two fitted columns (PipeSwitch is a "
          f"calibration point, {FIT_AGENTS} agents the contention fit), so they match the paper by construction "
          "(BERT-Large " + f"{data['models']['bert_large']['trends']['predicted']['speedup_vs_pipeswitch'][-1]:.2f}x, "
          f"GPT-J {data['models']['gpt_j_6b']['trends']['predicted']['speedup_vs_pipeswitch'][-1]:.2f}x) and are not "
          "evidence; from the spec alone (no fitted profile) the speedups are "
          + ", ".join(f"{MODELS[m]} {v:.1f}x" for m, v in spec.items()) + "."]
    L += ["", "## Fitted profile of the paper's machine", "",
          "| model | layer (MB, ours) | one agent's layer load (ms) | layer compute (ms) | baseline's whole load (ms) | alpha |",
          "|---|---:|---:|---:|---:|---:|"]
    for model, row in data["models"].items():
        L.append(f"| {MODELS[model]} | {row['layer_mb']:.1f} | {row['load_per_layer_ms']:.1f} | "
                 f"{row['compute_per_layer_ms']:.1f} | {row['whole_load_ms']:.0f} | {row['contention_alpha']:.3f} |")
    L += ["", "## Fig. 7 end points: the planner under a memory limit (predicted, paper's machine)", "",
          "| model | limit (MB) | paper (ms) | ours (ms) | error | agents chosen | our peak (MB) |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    for model, row in data["models"].items():
        for r in row["fig7"]:
            L.append(f"| {MODELS[model]} | {r['limit_mb']} | {r['paper_ms']} | {_f(r['ours_ms'], 0)} | "
                     f"{_err(r['ours_ms'], r['paper_ms'])} | {r['agents'] or '-'} | {_f(r['memory_mb'])} |")
    L += ["", "## From the spec alone (no fitted profile)", "",
          "`pimc run` without a profile derives loads from the storage and agent rates and compute from the "
          "CPU roofline, which is far faster than the paper's software stack:", "",
          "| model | Baseline paper / spec | PipeSwitch paper / spec | 6 LAs paper / spec |", "|---|---|---|---|"]
    for model, row in data["models"].items():
        cells = [f"{row['paper'][c]['latency_ms']:,.0f} / {row['spec_only'][c]['latency_ms']:,.0f}"
                 for c in ("baseline", "pipeswitch", "6")]
        L.append(f"| {MODELS[model]} | " + " | ".join(cells) + " |")
    L += ["", "## The paper's inconsistencies", ""] + [f"{i}. {t}" for i, t in enumerate(INCONSISTENCIES, 1)]
    L[L.index("## How ours is obtained"):L.index("## How ours is obtained")] = [prediction_count(data), ""]
    return "\n".join(L) + "\n"


def prediction_count(data: dict) -> str:
    """The rows that are predictions for the paper's machine (Table II at 2 and 4 agents, every Table III
    row, the Fig. 7 end points) and how many are within 10% of the paper."""
    errs = []
    for row in data["models"].values():
        for col in ("2", "4"):
            errs.append(row["predicted"][col]["latency_ms"] / row["paper"][col]["latency_ms"] - 1)
        for col in row["paper"]:
            errs.append(row["predicted"][col]["memory_mb"] / row["paper"][col]["memory_mb"] - 1)
        errs += [r["ours_ms"] / r["paper_ms"] - 1 for r in row["fig7"] if r["ours_ms"]]
    close = sum(abs(e) <= 0.10 for e in errs)
    return (f"{len(errs)} rows are predictions for the paper's machine (Table II at 2 and 4 agents, Table III, "
            f"the Fig. 7 end points); {close} of them are within 10% of the paper. Table II's Baseline and "
            f"PipeSwitch columns are calibration points and its {FIT_AGENTS}-agent column the contention fit.")
