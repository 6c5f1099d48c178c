"""The measured GPU kernel and collective models against measured A100 / H100 times ([VIDUR]
profiling data: every operator of a decoder layer over 1 to 4,096 tokens at TP 1, 2, 4, 8 for seven
models, and NCCL all-reduce and send/recv over NVSwitch and NVLink).

The raw CSVs (`$PIMDSL_REFERENCE/gpu_measured/`, not committed) are reduced by `summarize` to the
points compared, committed in `validation/reference/gpu/` (`compute.csv`, `network.csv`), so a
lone clone compares and fits the same points. `fit_kernels` fits a GPU's five calibration
quantities on one model at TP 1; `fit_link` a link's collective on its measured curves.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from ..interpreter.host.collectives import all_reduce_time, send_recv_time
from ..interpreter.host.models import kernel_time
from ..interpreter.host.op_kernels import op_kernel
from ..ir.hardware import Collective, KernelCalibration, Link, Processor

ROOT = Path(__file__).resolve().parents[2]
GPUS = {"a100": "a100_sxm_80gb", "h100": "h100_sxm"}            # data folder -> processor of gpus.pim
FIT_MODEL = "Llama-2-7b-hf"                                      # the one model each GPU is fitted on, at TP 1
PROJECTIONS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
OPERATORS = PROJECTIONS + ELEMENTWISE
# token counts kept in the summary: 1 to 4,096, about four per octave (every measured series has them)
TOKENS = (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768,
          896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096)
# topology -> (link of gpus.pim, the worker count its collective is fitted on: a DGX's whole NVSwitch
# node; a pairwise-NVLink board's bridged pair, as its 4-GPU runs cross pairs without NVLink)
TOPOLOGIES = {"a100_dgx": ("a100_nvswitch", 8), "h100_dgx": ("h100_nvswitch", 8),
              "a100_pairwise_nvlink": ("a100_nvlink_pair", 2), "h100_pairwise_nvlink": ("h100_nvlink_pair", 2)}
MODEL_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")


# ---- the measured data -----------------------------------------------------------------------

def raw_root() -> Path | None:
    """$PIMDSL_REFERENCE/gpu_measured, when it is there."""
    env = os.environ.get("PIMDSL_REFERENCE")
    path = Path(env) / "gpu_measured" if env else None
    return path if path and (path / "compute").is_dir() else None


def summarize(raw: Path) -> tuple[list[dict], list[dict]]:
    """(compute rows, network rows) of the raw data: the TOKENS of every (gpu, model, TP) series,
    medians in ms; intra-node collectives at about 40 sizes per worker count."""
    compute = []
    for path in sorted(raw.glob("compute/*/*/*/mlp.csv")):
        gpu, model = path.parts[-4], path.parts[-2]
        seen = set()
        for row in csv.DictReader(path.open()):
            key = (int(row["num_tokens"]), int(row["num_tensor_parallel_workers"]))
            if key[0] not in TOKENS or key in seen:
                continue
            seen.add(key)
            out = {"gpu": gpu, "model": model, "tokens": key[0], "tp": key[1]}
            out |= {c: row[c] for c in MODEL_COLUMNS}
            out |= {op: row.get(f"time_stats.{op}.median", "") for op in OPERATORS}
            compute.append(out)
    network = []
    for topology in TOPOLOGIES:
        for collective in ("all_reduce", "send_recv"):
            rows = [r for r in csv.DictReader((raw / "network" / topology / f"{collective}.csv").open())
                    if r["num_workers"] == r["devices_per_node"]]
            for workers in sorted({int(r["num_workers"]) for r in rows}):
                series = sorted((int(r["size"]), float(r[f"time_stats.{collective}.median"]))
                                for r in rows if int(r["num_workers"]) == workers)
                keep = sorted({round(i) for i in np.linspace(0, len(series) - 1, 40)})
                network += [{"topology": topology, "collective": collective, "workers": workers,
                             "size_bytes": series[i][0], "ms": series[i][1]} for i in keep]
    return compute, network


def summary_dir() -> Path:
    """validation/reference/gpu of the checkout (or of the working directory), else $PIMDSL_REFERENCE/gpu."""
    from .dram_reference import reference_dir
    return reference_dir("gpu", "compute.csv", env_first=False)


def write_summary(compute: list[dict], network: list[dict], folder: Path | None = None) -> None:
    folder = folder or ROOT / "validation" / "reference" / "gpu"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("compute.csv", compute), ("network.csv", network)):
        with (folder / name).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def read_summary(folder: Path | None = None) -> tuple[list[dict], list[dict]]:
    folder = folder or summary_dir()
    return (list(csv.DictReader((folder / "compute.csv").open())),
            list(csv.DictReader((folder / "network.csv").open())))


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured operator time: `seconds` of `op` on `gpu` for `tokens` tokens at TP `tp`."""
    gpu: str
    model: str
    op: str
    tokens: int
    tp: int
    seconds: float
    kernel_args: tuple            # (op, shape, split) for op_kernel


def _kernel_args(op: str, m: int, row: dict) -> tuple:
    h, kv, e, x = (int(row[c]) for c in MODEL_COLUMNS[:4])
    hd, gated = e // h, row["use_gated_mlp"] == "True"
    return {"attn_pre_proj": ("gemm", (m, (h + 2 * kv) * hd, e), "n"),
            "attn_post_proj": ("gemm", (m, e, h * hd), "k"),
            "mlp_up_proj": ("gemm", (m, (2 if gated else 1) * x, e), "n"),
            "mlp_down_proj": ("gemm", (m, e, x), "k"),
            "input_layernorm": ("rmsnorm", (m, e), "n"),
            "post_attention_layernorm": ("rmsnorm", (m, e), "n"),
            "attn_rope": ("rotary", (m, (h + kv) * hd), "n"),
            "mlp_act": ("silu_mul" if gated else "gelu", (m, x), "n"),
            "add": ("add", (m, e), "n")}[op]


def points(compute: list[dict]) -> list[Point]:
    out = []
    for row in compute:
        m, tp = int(row["tokens"]), int(row["tp"])
        for op in OPERATORS:
            if row.get(op) not in (None, ""):
                out.append(Point(row["gpu"], row["model"], op, m, tp, float(row[op]) * 1e-3, _kernel_args(op, m, row)))
    return out


# ---- predictions, errors, fits ---------------------------------------------------------------

def predict(processor: Processor, point: Point) -> float:
    op, shape, split = point.kernel_args
    return kernel_time(processor, op_kernel(op, shape, processor.name, tp=point.tp, split=split)).seconds


def errors(processor: Processor, pts: list[Point]) -> np.ndarray:
    """Signed relative errors, predicted / measured - 1."""
    return np.array([predict(processor, p) / p.seconds - 1 for p in pts])


def with_calibration(processor: Processor, calibration: KernelCalibration) -> Processor:
    return dataclasses.replace(processor, calibration=calibration, count=1)


def fit_kernels(processor: Processor, pts: list[Point]) -> KernelCalibration:
    """The five calibration quantities fitted together on `pts` (one model at TP 1, all nine
    operators): least squares in log error (Nelder-Mead from `processor`'s own values)."""
    from scipy.optimize import minimize          # scikit-learn's dependency; used by the fit only

    start = processor.calibration or KernelCalibration(4e-6, 0.8, 0.7, 0.6, 0.3)

    def calibration(x):
        return KernelCalibration(float(abs(x[0])) * 1e-6, *(float(min(abs(v), 1.0)) for v in x[1:]))

    def loss(x):
        return float(np.mean(np.log1p(errors(with_calibration(processor, calibration(x)), pts)) ** 2))

    x0 = [start.launch_latency_s * 1e6, start.memory_efficiency, start.tensor_efficiency,
          start.elementwise_efficiency, start.exposed_fraction]
    best = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-10, "maxiter": 4000}).x
    return calibration(best)


# Groupings of the element-wise operators tried for a separate element-wise calibration (part of
# validation/gpu.md: each class gets its own achieved bandwidth share and kernel floor).
ELEMENTWISE_CLASSES = {
    "one class": (ELEMENTWISE,),
    "streams / norms": (("attn_rope", "mlp_act", "add"), ("input_layernorm", "post_attention_layernorm")),
    "add / other streams / norms": (("add",), ("attn_rope", "mlp_act"), ("input_layernorm", "post_attention_layernorm")),
}


def elementwise_trials(processor: Processor, pts: list[Point]) -> dict:
    """For each grouping of ELEMENTWISE_CLASSES: every class's (efficiency, floor) fitted on the
    fit model at TP 1 (the GEMM quantities unchanged), and the median error per element-wise operator
    over every point. ``seconds = floor + max(compute_s, memory_s) + exposed * min(...)`` with
    ``memory_s = bytes / (memory_bandwidth * efficiency)``, as the model times element-wise kernels."""
    from scipy.optimize import minimize

    ew = [p for p in pts if p.op in ELEMENTWISE]
    kernels = [op_kernel(p.kernel_args[0], p.kernel_args[1], processor.name, tp=p.tp, split=p.kernel_args[2])
               for p in ew]
    nbytes = np.array([k.bytes for k in kernels], dtype=float)
    comp = np.array([kernel_time(processor, k).compute_s for k in kernels])
    measured = np.array([p.seconds for p in ew])
    ops, fit_on = np.array([p.op for p in ew]), np.array([p.model == FIT_MODEL and p.tp == 1 for p in ew])
    cal = processor.calibration

    def seconds(x, sel):
        mem = nbytes[sel] / (processor.memory_bandwidth_bytes_per_s * abs(x[0]))
        return abs(x[1]) * 1e-6 + np.maximum(comp[sel], mem) + cal.exposed_fraction * np.minimum(comp[sel], mem)

    def medians(pred):
        err = np.abs(pred / measured - 1)
        return {"median_abs": {op: float(np.median(err[ops == op])) for op in ELEMENTWISE}, "all": float(np.median(err))}

    out = {"now": medians(np.array([kernel_time(processor, k).seconds for k in kernels]))}
    for name, classes in ELEMENTWISE_CLASSES.items():
        pred, fits = np.zeros_like(measured), []
        for cls in classes:
            sel = np.isin(ops, cls)
            f = sel & fit_on
            x = minimize(lambda x: float(np.mean(np.log(seconds(x, f) / measured[f]) ** 2)),
                         [cal.elementwise_efficiency, cal.launch_latency_s * 1e6], method="Nelder-Mead").x
            pred[sel] = seconds(x, sel)
            fits.append({"operators": list(cls), "efficiency": float(abs(x[0])), "floor_s": float(abs(x[1])) * 1e-6})
        out[name] = {"fits": fits, **medians(pred)}
    adds = [(b / t, p.tokens) for b, t, p in zip(nbytes, measured, ew) if p.op == "add"]
    share, tokens = max(adds)
    out["add_peak"] = {"bandwidth_share": float(share / processor.memory_bandwidth_bytes_per_s), "tokens": int(tokens)}
    return out


def stats(errs) -> dict:
    a = np.abs(np.asarray(errs))
    return {"points": int(a.size), "median_abs": float(np.median(a)), "p90_abs": float(np.percentile(a, 90))}


# ---- collectives -----------------------------------------------------------------------------

def network_series(network: list[dict], topology: str, collective: str) -> list[tuple[int, float, float]]:
    """(workers, bytes, measured seconds) of one topology's collective."""
    return [(int(r["workers"]), float(r["size_bytes"]), float(r["ms"]) * 1e-3) for r in network
            if r["topology"] == topology and r["collective"] == collective]


def collective_time(link: Link, collective: str, workers: int, nbytes: float) -> float:
    return all_reduce_time(link, nbytes, workers) if collective == "all_reduce" else send_recv_time(link, nbytes)


def fit_link(link: Link, network: list[dict], topology: str) -> Link:
    """`link` with its collective fitted on the all-reduce at the topology's fit worker count, for
    ring and tree (the better of the two kept), and its latency and bandwidth on 2-GPU send/recv."""
    from scipy.optimize import minimize

    def fitted(series, make):
        def loss(x):
            return float(np.mean([math.log(make(x).__call__(n, s) / t) ** 2 for n, s, t in series]))
        x = minimize(loss, [5.0, 100.0], method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-10}).x
        return loss(x), x

    ar = network_series(network, topology, "all_reduce")
    fit_on = [row for row in ar if row[0] == TOPOLOGIES[topology][1]]
    choices = []
    for algorithm in ("ring", "tree"):
        def make(x, algorithm=algorithm):
            c = Collective(algorithm, abs(x[0]) * 1e-6, abs(x[1]) * 1e9)
            return lambda n, s: all_reduce_time(dataclasses.replace(link, collective=c), s, n)
        loss, x = fitted(fit_on, make)
        choices.append((loss, Collective(algorithm, float(abs(x[0])) * 1e-6, float(abs(x[1])) * 1e9)))
    collective = min(choices, key=lambda c: c[0])[1]
    sr = [row for row in network_series(network, topology, "send_recv") if row[0] == 2]

    def make_sr(x):
        lk = dataclasses.replace(link, latency_s=abs(x[0]) * 1e-6, bandwidth_bytes_per_s=abs(x[1]) * 1e9)
        return lambda n, s: send_recv_time(lk, s)
    _, x = fitted(sr, make_sr)
    return dataclasses.replace(link, latency_s=float(abs(x[0])) * 1e-6, bandwidth_bytes_per_s=float(abs(x[1])) * 1e9,
                               collective=collective)


# ---- the table -------------------------------------------------------------------------------

MB = 1 << 20


def devices():
    """(processors, links) of specs/hardware/gpus.pim."""
    from ..frontend.pipeline import load_spec
    from ..frontend.resources import specs_dir
    spec, diags = load_spec(str(specs_dir() / "hardware" / "gpus.pim"), [])
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.processors, spec.links


def collect(fit: bool = False) -> dict:
    """Every comparison of validation/gpu.md, from the committed summary and the spec's values
    (with `fit`, the fitted values too, for the spec)."""
    compute, network = read_summary()
    pts = points(compute)
    processors, links = devices()
    out = {"points": len(pts), "kernels": {}, "transfer": {}, "collectives": {}, "fits": {}}
    for gpu, name in GPUS.items():
        proc = dataclasses.replace(processors[name], count=1)
        mine = [p for p in pts if p.gpu == gpu]
        err = errors(proc, mine)
        table = {}
        for op in OPERATORS:
            for tp in (1, 2, 4, 8):
                sel = [e for e, p in zip(err, mine) if p.op == op and p.tp == tp]
                if sel:
                    table[f"{op}/{tp}"] = stats(sel)
        proj = [e for e, p in zip(err, mine) if p.op in PROJECTIONS]
        predicted = [e for e, p in zip(err, mine) if not (p.model == FIT_MODEL and p.tp == 1)]
        held = [e for e, p in zip(err, mine) if p.op in PROJECTIONS and p.model != FIT_MODEL]
        out["kernels"][gpu] = {
            "processor": name, "table": table, "projections": stats(proj), "held_out_projections": stats(held),
            "predictions": {"points": len(predicted), "within_10pct": int(sum(abs(e) <= 0.10 for e in predicted)),
                            "projections_within_10pct": int(sum(abs(e) <= 0.10 for e, p in zip(err, mine) if p.op in
                                                                PROJECTIONS and not (p.model == FIT_MODEL and p.tp == 1))),
                            "projection_points": int(sum(p.op in PROJECTIONS and not (p.model == FIT_MODEL and p.tp == 1)
                                                         for p in mine))},
            "per_operator": {op: stats([e for e, p in zip(err, mine) if p.op == op]) for op in OPERATORS},
            "per_model": {m: stats([e for e, p in zip(err, mine) if p.model == m and p.op in PROJECTIONS])
                          for m in sorted({p.model for p in mine})},
            "series": [[p.model, p.op, p.tp, p.tokens, p.seconds, p.seconds * (1 + e)] for p, e in zip(mine, err)]}
        out["kernels"][gpu]["elementwise_trials"] = elementwise_trials(proc, mine)
        if fit:
            out["fits"][name] = dataclasses.asdict(fit_kernels(proc, [p for p in mine if p.model == FIT_MODEL and p.tp == 1]))
    # the law carried over: the A100's calibration on the H100's datasheet
    h100 = with_calibration(processors[GPUS["h100"]], processors[GPUS["a100"]].calibration)
    mine = [p for p in pts if p.gpu == "h100"]
    err = errors(h100, mine)
    out["transfer"] = {"projections": stats([e for e, p in zip(err, mine) if p.op in PROJECTIONS]),
                       "per_operator": {op: stats([e for e, p in zip(err, mine) if p.op == op]) for op in PROJECTIONS}}
    for topology, (name, fit_workers) in TOPOLOGIES.items():
        link = links[name]
        rows = {}
        for collective in ("all_reduce", "send_recv"):
            series = network_series(network, topology, collective)
            for n in sorted({w for w, _, _ in series}):
                pts_n = [(s, t, collective_time(link, collective, n, s)) for w, s, t in series if w == n]
                big = [pred / t - 1 for s, t, pred in pts_n if s >= MB]
                rows[f"{collective}/{n}"] = stats(big) | {"curve": [[s, t, pred] for s, t, pred in pts_n]}
        out["collectives"][topology] = {"link": name, "fit_workers": fit_workers, "rows": rows}
        if fit:
            fitted = fit_link(link, network, topology)
            out["fits"][name] = {"latency_s": fitted.latency_s, "bandwidth_bytes_per_s": fitted.bandwidth_bytes_per_s,
                                 "collective": dataclasses.asdict(fitted.collective)}
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def headline(data: dict) -> dict:
    """The Done-when checks: per GPU the projections' median and each projection's p90; the
    A100 law on the H100; the NVSwitch / NVLink-pair all-reduces over sizes >= 1 MB."""
    counted = [row for c in data["collectives"].values() for key, row in c["rows"].items()
               if key.startswith("all_reduce/") and (c["fit_workers"] == 8 or key == "all_reduce/2")]
    pooled = [abs(pred / t - 1) for row in counted for s, t, pred in row["curve"] if s >= MB]
    return {
        "projection_median": {g: k["projections"]["median_abs"] for g, k in data["kernels"].items()},
        "projection_p90": {g: {op: k["per_operator"][op]["p90_abs"] for op in PROJECTIONS}
                           for g, k in data["kernels"].items()},
        "held_out_median": {g: k["held_out_projections"]["median_abs"] for g, k in data["kernels"].items()},
        "a100_law_on_h100_median": data["transfer"]["projections"]["median_abs"],
        "all_reduce_median": {f"{t}/{key}": row["median_abs"] for t, c in data["collectives"].items()
                              for key, row in c["rows"].items() if key.startswith("all_reduce/")},
        "all_reduce_pooled": stats(pooled),
    }


def markdown(data: dict) -> str:
    h = headline(data)
    fits = data.get("fits", {})
    lines = ["# GPU kernels and collectives against measured A100 and H100 times", "",
             "Generated by `python validation/run_gpu.py` from the measured points in "
             "`validation/reference/gpu/` ([VIDUR] profiling data: the operators of one decoder layer "
             "over 1 to 4,096 tokens at TP 1, 2, 4, 8, and NCCL collectives; README there) and the "
             "devices of `specs/hardware/gpus.pim`, timed by the measured GPU kernel model "
             "(`pimdsl/interpreter/host/gpu_kernel.py`) and the collectives of "
             "`pimdsl/interpreter/host/collectives.py`. Errors are |predicted / measured - 1|.", "",
             f"Each GPU's five calibration quantities are fitted on {FIT_MODEL} at TP 1 only; "
             "every other model and every TP degree is a prediction. "
             f"{data['points']} measured operator times are compared; "
             + "; ".join(f"on the {g.upper()} {k['predictions']['points']} are predictions (all but the fit model's "
                         f"TP 1 points), {k['predictions']['within_10pct']} of them within 10% "
                         f"({k['predictions']['projections_within_10pct']} of the {k['predictions']['projection_points']} "
                         "projections)" for g, k in data["kernels"].items()) + ".", "",
             "## Headline", "",
             "| check | A100 | H100 | target |", "|---|---|---|---|",
             f"| median error, four projections, all models / TP / tokens | {_pct(h['projection_median']['a100'])} "
             f"| {_pct(h['projection_median']['h100'])} | <= 10% |",
             f"| same, models not fitted on | {_pct(h['held_out_median']['a100'])} | {_pct(h['held_out_median']['h100'])} | <= 15% |"]
    for op in PROJECTIONS:
        lines.append(f"| p90 error, {op} | {_pct(h['projection_p90']['a100'][op])} | "
                     f"{_pct(h['projection_p90']['h100'][op])} | <= 25% |")
    ar = h["all_reduce_pooled"]
    lines += [f"| H100 from its datasheet with the A100's calibration (no H100 fit), median, projections | "
              f"| {_pct(h['a100_law_on_h100_median'])} | <= 15% |",
              f"| all-reduce, median over sizes >= 1 MiB ({ar['points']} points: NVSwitch nodes at 2, 4, 8 GPUs, "
              f"NVLink pairs; both GPUs) | {_pct(ar['median_abs'])} | | <= 15% |", "",
              "What the model does not capture: the element-wise operators share one achieved bandwidth and one "
              "kernel floor, fitted together with the GEMMs; the measured kernels differ more than that allows "
              "(the residual add streams at about 90% of the bandwidth with a 1 us floor, the norms at about 45% "
              "with a 4 us floor), so the add is over-predicted by about 2x and the norms under-predicted by about "
              "20%; a separate element-wise calibration does not fix it (below, \"Element-wise kernels\"). In a "
              "decoder layer they are a few percent of the time beside the projections. The L2 cache is "
              "not modelled (weights stream from DRAM on every call). The 2-GPU all-reduce on an NVSwitch node "
              "runs slower per byte than the 8-GPU ring the link is fitted on (NCCL uses fewer channels), so it is "
              "under-predicted by about 20%.", ""]
    lines += ["## Per GPU, operator and TP degree", "",
              "Median / 90th-percentile error over token counts (all models).", ""]
    for gpu, k in data["kernels"].items():
        lines += [f"### {gpu.upper()} (`{k['processor']}`)", "", "| operator | TP 1 | TP 2 | TP 4 | TP 8 | all |",
                  "|---|---|---|---|---|---|"]
        for op in OPERATORS:
            cells = [f"{_pct(k['table'][f'{op}/{tp}']['median_abs'])} / {_pct(k['table'][f'{op}/{tp}']['p90_abs'])}"
                     if f"{op}/{tp}" in k["table"] else "-" for tp in (1, 2, 4, 8)]
            a = k["per_operator"][op]
            lines.append(f"| {op} | " + " | ".join(cells) + f" | {_pct(a['median_abs'])} / {_pct(a['p90_abs'])} |")
        lines += ["", "Per model (the four projections, all TP degrees; * = the fit model):", "",
                  "| model | points | median | p90 |", "|---|---|---|---|"]
        for m, st in k["per_model"].items():
            lines.append(f"| {m}{' *' if m == FIT_MODEL else ''} | {st['points']} | {_pct(st['median_abs'])} | {_pct(st['p90_abs'])} |")
        lines += ["", f"![{gpu}](gpu/{gpu}.png)", ""]
    lines += elementwise_section(data)
    lines += ["## The A100 law on the H100", "",
              "`h100_sxm`'s datasheet values with `a100_sxm_80gb`'s calibration block (nothing fitted on an H100):", "",
              "| operator | median | p90 |", "|---|---|---|"]
    for op, st in data["transfer"]["per_operator"].items():
        lines.append(f"| {op} | {_pct(st['median_abs'])} | {_pct(st['p90_abs'])} |")
    lines += ["", "## Collectives", "",
              "Median / 90th-percentile error over message sizes >= 1 MiB, per topology and worker count "
              "(intra-node runs only). Each link's collective is fitted on the all-reduce at the worker count "
              "marked *, its latency and bandwidth on the 2-GPU send/recv; the rest are predictions.", "",
              "| topology (link) | collective | workers | sizes | median | p90 |", "|---|---|---|---|---|---|"]
    for topology, c in data["collectives"].items():
        for key, row in c["rows"].items():
            collective, n = key.split("/")
            star = " *" if collective == "all_reduce" and int(n) == c["fit_workers"] else ""
            lines.append(f"| {topology} (`{c['link']}`) | {collective} | {n}{star} | {row['points']} | "
                         f"{_pct(row['median_abs'])} | {_pct(row['p90_abs'])} |")
    lines += ["", "The 4-GPU runs of the pairwise-NVLink boards cross GPU pairs that no NVLink bridge joins "
              "(their measured bus bandwidth is a tenth of the bridged pair's); the NVLink-pair link does "
              "not describe them and they are shown, not counted.", "", "![collectives](gpu/collectives.png)", ""]
    if fits:
        lines += ["## Fitted values (`--fit`)", "", "```", json_dumps(fits), "```", ""]
    return "\n".join(lines)


def elementwise_section(data: dict) -> list[str]:
    """The separate element-wise calibrations tried (`elementwise_trials`), and why none is adopted."""
    lines = ["## Element-wise kernels: a separate calibration, tried and not adopted", "",
             "Each grouping gives every class of element-wise operators its own achieved bandwidth share and "
             f"kernel floor, fitted on {FIT_MODEL} at TP 1 like the other quantities (the GEMM quantities "
             "unchanged, so the projections do not move); median error over every model, TP degree and token "
             "count. 'now' is the spec's one element-wise efficiency and the common launch floor.", "",
             "| GPU | grouping | fitted share / floor per class | " + " | ".join(ELEMENTWISE) + " | all |",
             "|---|---|---|" + "---|" * (len(ELEMENTWISE) + 1)]
    for gpu, k in data["kernels"].items():
        trials = k["elementwise_trials"]
        for name in ("now", *ELEMENTWISE_CLASSES):
            t = trials[name]
            fits = "; ".join(f"{f['efficiency']:.2f} / {f['floor_s'] * 1e6:.1f} us" for f in t.get("fits", ()))
            lines.append(f"| {gpu.upper()} | {name} | {fits} | "
                         + " | ".join(_pct(t["median_abs"][op]) for op in ELEMENTWISE) + f" | {_pct(t['all'])} |")
    a, h = (data["kernels"][g]["elementwise_trials"]["add_peak"] for g in ("a100", "h100"))
    lines += ["", "None is adopted. Norms and streams apart, the norms come down by 2-6 points but the add stays "
              "70-76% over and the activation gets worse; only a class of its own brings the add near, and then "
              "its fitted share exceeds the datasheet bandwidth: the measured add reaches "
              f"{_pct(a['bandwidth_share'])} of the A100's bandwidth ({a['tokens']} tokens) and "
              f"{_pct(h['bandwidth_share'])} of the H100's ({h['tokens']} tokens), so its operands are served from L2 "
              "(at those sizes the call's three tensors, 19-31 MB, fit in the 40 / 50 MB L2, and a profiling loop "
              "that repeats the call finds them there), which a DRAM-streaming law cannot express; and the measured floors differ per operator (at 8 tokens the add takes "
              "1-2 us, the gated activation 7-8 us), more than a per-class floor follows. Modelling the L2 "
              "(operands resident below its size) is what would fix the add; it is left out.", ""]
    return lines


def json_dumps(obj) -> str:
    import json
    return json.dumps(obj, indent=1)


def plots(data: dict, folder: Path) -> None:
    """Predicted vs measured time per operator over tokens (log-log), one figure per GPU (the
    held-out Llama-2-70B at TP 1 and 8), and the all-reduce curves."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder.mkdir(parents=True, exist_ok=True)
    for gpu, k in data["kernels"].items():
        fig, axes = plt.subplots(3, 3, figsize=(12, 10))
        for ax, op in zip(axes.flat, OPERATORS):
            for tp, color in ((1, "C0"), (8, "C3")):
                rows = sorted((r[3], r[4], r[5]) for r in k["series"]
                              if r[0] == "Llama-2-70b-hf" and r[1] == op and r[2] == tp)
                if not rows:
                    continue
                x, meas, pred = zip(*rows)
                ax.loglog(x, [v * 1e3 for v in meas], "o", ms=3, color=color, label=f"measured TP {tp}")
                ax.loglog(x, [v * 1e3 for v in pred], "-", color=color, label=f"predicted TP {tp}")
            ax.set_title(op, fontsize=9)
            ax.set_xlabel("tokens")
            ax.set_ylabel("ms")
        axes.flat[0].legend(fontsize=7)
        fig.suptitle(f"{gpu.upper()}, Llama-2-70B (not fitted on): measured [VIDUR] vs predicted")
        fig.tight_layout()
        fig.savefig(folder / f"{gpu}.png", dpi=80)
        plt.close(fig)
    fig, axes = plt.subplots(1, len(data["collectives"]), figsize=(16, 4))
    for ax, (topology, c) in zip(axes, data["collectives"].items()):
        for i, (key, row) in enumerate(c["rows"].items()):
            s, t, p = zip(*row["curve"])
            ax.loglog(s, [v * 1e3 for v in t], "o", ms=2, color=f"C{i}", label=f"{key} measured")
            ax.loglog(s, [v * 1e3 for v in p], "-", color=f"C{i}")
        ax.set_title(topology, fontsize=9)
        ax.set_xlabel("bytes")
        ax.set_ylabel("ms")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(folder / "collectives.png", dpi=80)
    plt.close(fig)
