"""Reproduction of PIM-SHERPA's evaluation ([PIM_SHERPA] Sec. 6) on the bundled phone specs.

Every number the paper's text reports, beside ours from `run_system` on
specs/systems/pim_sherpa_llama3_2_{1b,3b}.pim: the capacities and savings of
section 6, the SMC latencies, TTFT points and the Table 2 overhead ratios,
the end-to-end speedups of Fig. 12, and NC-GEMM times of Fig. 13. Two paper
numbers are calibration points of spec constants (the CPU efficiency and the
uncached read rate; the specs cite them): they are marked `calibrated` and
match by construction. `python validation/run_pim_sherpa.py` rewrites
validation/pim_sherpa.json and .md; tests/test_validation_pim_sherpa.py
recomputes the cheap rows and fails when one drifts from the committed file.
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from ..interpreter.op_timing import OpTimer
from ..loops.step.step_run import compile_step, run_system
from ..ir.workload import DTYPE_BYTES
from ..lowering.pim_program import tensor_rows
from ..ir.addresses import row_stride
from .scoring import prediction_count

MODELS = {"1b": "pim_sherpa_llama3_2_1b", "3b": "pim_sherpa_llama3_2_3b"}
GB = 1e9

# Table 2 ([PIM_SHERPA] Sec. 3.3): input SL -> (SUM(GEMM, online) vs GEMM, MAX(GEMM, online) vs GEMM), %
TABLE2 = {1: (400, 300), 8: (250, 150), 16: (175, 100), 32: (138, 100), 64: (119, 100), 128: (109, 100),
          192: (106, 100)}
FIG12_LENGTHS = (64, 96, 128, 160, 192)


def system(model: str, *overrides: str):
    spec, diags = load_spec(str(specs_dir() / "systems" / f"{MODELS[model]}.pim"), list(overrides))
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.systems[MODELS[model]]


def report(model: str, strategy: str, input_len: int = 1, output_len: int = 1) -> dict:
    return run_system(system(model, f"mapping.strategy={strategy}", f"workload.input_len={input_len}",
                             f"workload.output_len={output_len}")).report


def smc_seconds(model: str, strategy: str) -> float:
    """The prefill's swizzled copies, summed: the paper's 'static SMC latency' (independent of SL)."""
    sys_ = system(model, f"mapping.strategy={strategy}")
    program = compile_step(sys_, "prefill", 1, 1, 0)
    timer = OpTimer(sys_)
    return sum(timer.seconds(a["lowered"]) for n, a in program.ops() if n.startswith("smc:"))


def row(figure: str, quantity: str, paper: float | None, ours: float, unit: str, kind: str = "prediction",
        note: str = "") -> dict:
    error = (ours - paper) / paper if paper else None
    return {"figure": figure, "quantity": quantity, "paper": paper, "ours": ours, "unit": unit,
            "error": error, "kind": kind, "note": note}


def counts(rows: list[dict]) -> str:
    """The predictions with a paper number, how many are within 10%, and what the other rows are."""
    pred = [r["error"] for r in rows if r["kind"] == "prediction" and r["error"] is not None]
    calibrated = sum(r["kind"] != "prediction" for r in rows)
    return prediction_count(pred, "the paper", f"The other {len(rows) - len(pred)}: {calibrated} calibration "
                            f"points (kind calibrated or calibrated reading) and {len(rows) - len(pred) - calibrated} "
                            "without a paper number.")


def capacity_rows() -> list[dict]:
    rows = []
    for model, host_gb, savings in (("1b", 2.47, {"ddb": 47.8, "owr": 48.5, "facil_o": 49.2}),
                                    ("3b", 6.4, {"ddb": 49.4, "owr": 49.7})):
        mem = {s: report(model, s)["memory_bytes"] for s in ("wd", "facil_o", "ddb", "owr")}
        host = mem["wd"]["weights_by_region"]["host_weights"]
        pim = mem["wd"]["weights_by_region"]["pim_weights"]
        rows.append(row("Sec. 6", f"{model}: host-friendly weights", host_gb, host / GB, "GB"))
        if model == "1b":
            padding = weight_padding_bytes(model)
            rows.append(row("Sec. 6", "1b: PIM-aware padding (K, V, LM head)", 80, padding / 1e6, "MB"))
            rows.append(row("Sec. 6", "1b: PIM-aware copy beyond host-friendly (padding + GEMV result rows)", None,
                            (pim - host) / 1e6, "MB", note="the paper's 80 MB counts weights only"))
            rows.append(row("Sec. 6", "1b: one SMC buffer (2048 x 8192 x 2 B)", 33.554432,
                            mem["owr"]["buffers"] / 1e6, "MB"))
        wd = mem["wd"]["weights"]
        for s, paper in savings.items():
            ours = 100 * (1 - (mem[s]["weights"] + mem[s]["buffers"]) / wd)
            rows.append(row("Sec. 6", f"{model}: capacity saving of {s} vs WD", paper, ours, "%"))
    return rows


def weight_padding_bytes(model: str) -> int:
    """PIM-aware weight rows (every bank's rows, padding included) minus the weights, over all layers."""
    program = compile_step(system(model, "mapping.strategy=ddb"), "decode", 1, 1, 1)
    memory = program.pim_memory
    rows = {a["op"].weight: (tensor_rows(memory, a["program"], a["tiling"], "weight") * row_stride(memory),
                             a["op"].weight_elements * DTYPE_BYTES[a["op"].dtype])
            for _, a in program.ops() if a.get("family") == "program" and a["op"].weight}
    return int(sum(stored - weights for stored, weights in rows.values()))


def smc_rows() -> list[dict]:
    return [row("Sec. 6", "1b: SMC latency, S-DDB (2 copy threads)", 0.89, smc_seconds("1b", "ddb"), "s",
                "calibrated reading", "the reading of 'a quarter of peak' (Sec. 6) that gives this value is "
                "chosen in specs/mappings/pim_sherpa.pim"),
            row("Sec. 6", "3b: SMC latency, S-DDB (2 copy threads)", 2.54, smc_seconds("3b", "ddb"), "s"),
            row("Sec. 6", "1b: SMC latency, S-OWR (4 threads)", 0.6, smc_seconds("1b", "owr"), "s"),
            row("Sec. 6", "3b: SMC latency, S-OWR (4 threads)", 1.4, smc_seconds("3b", "owr"), "s")]


def ttft_rows() -> tuple[list[dict], list[dict]]:
    """Sec. 6 TTFT points and the Table 2 ratios (serial = S-OWR, overlapped = S-DDB, vs FACIL-O)."""
    ttft = {(s, sl): report("1b", s, sl)["ttft_s"] for s in ("facil_o", "ddb", "owr") for sl in TABLE2}
    rows = [row("Sec. 6", "1b SL 32: GEMM time (FACIL-O TTFT)", 0.74, ttft[("facil_o", 32)], "s", "calibrated",
                "the CPU efficiency 0.40 in specs/hardware/galaxy_s24p.pim is set from this point"),
            row("Sec. 6", "1b SL 32: S-OWR TTFT (0.74 s GEMM + 0.6 s SMC)", 1.34, ttft[("owr", 32)], "s"),
            row("Sec. 6", "1b SL 32: S-DDB TTFT ('similar to S-OWR')", 1.34, ttft[("ddb", 32)], "s")]
    owr_3b = report("3b", "owr", 192)
    rows.append(row("Sec. 6", "3b SL 192: S-OWR prefill throughput", 16.7, 192 / owr_3b["ttft_s"], "tokens/s"))
    table2 = []
    for sl, (serial, overlapped) in TABLE2.items():
        base = ttft[("facil_o", sl)]
        table2.append({"input_len": sl, "paper_serial_pct": serial, "ours_owr_pct": 100 * ttft[("owr", sl)] / base,
                       "paper_overlapped_pct": overlapped, "ours_ddb_pct": 100 * ttft[("ddb", sl)] / base,
                       "facil_o_ttft_s": base, "owr_ttft_s": ttft[("owr", sl)], "ddb_ttft_s": ttft[("ddb", sl)]})
    return rows, table2


def _speedup(point: tuple[str, int, int]) -> tuple[tuple[str, int, int], float]:
    strategy, i, o = point
    return point, report("1b", strategy, i, o)["speedup_vs_no_pim"]


def fig12(workers: int = 2) -> dict:
    points = [(s, i, o) for s in ("facil_o", "ddb", "owr") for i in FIG12_LENGTHS for o in FIG12_LENGTHS]
    with ProcessPoolExecutor(workers) as pool:
        speedups = dict(pool.map(_speedup, points))
    return {f"{s} {i} {o}": v for (s, i, o), v in speedups.items()}


def fig12_rows(grid: dict) -> list[dict]:
    get = lambda s, i, o: grid[f"{s} {i} {o}"]
    gaps = [100 * (1 - get("ddb", i, o) / get("facil_o", i, o)) for i in (64, 96) for o in FIG12_LENGTHS]
    gaps_long = [100 * (1 - get("ddb", i, o) / get("facil_o", i, o)) for i in (160, 192) for o in FIG12_LENGTHS]
    owr_max = max(get("owr", i, o) for i in FIG12_LENGTHS for o in FIG12_LENGTHS)
    return [row("Fig. 12", "S-OWR: largest speedup over the host-only system", 3.3, owr_max, "x"),
            row("Fig. 12", "S-DDB below FACIL-O, input SL 64-96: smallest gap", 2.5, min(gaps), "%"),
            row("Fig. 12", "S-DDB below FACIL-O, input SL 64-96: largest gap", 19, max(gaps), "%"),
            row("Fig. 12", "S-DDB below FACIL-O, input SL 160-192 ('nearly identical'): largest gap", None,
                max(gaps_long), "%")]


def nc_gemm_rows() -> list[dict]:
    rows = []
    for sl, paper in ((64, 148), (128, 332), (192, 458)):
        ours = report("3b", "nc_gemm", sl)["ttft_s"]
        rows.append(row("Fig. 13", f"3b SL {sl}: NC-GEMM TTFT", paper, ours, "s",
                        "calibrated" if sl == 64 else "prediction",
                        "the uncached read rate 2.44 GB/s is set from this point" if sl == 64 else ""))
    rows.append(row("Fig. 13", "3b: NC-GEMM prefill throughput", 0.4, 128 / report("3b", "nc_gemm", 128)["ttft_s"],
                    "tokens/s"))
    return rows


def decode_rows() -> list[dict]:
    r = report("1b", "ddb", 128, 8)
    return [row("Sec. 3.1", "1b: decode GEMV speedup over host DRAM bandwidth ('up to eightfold')", 8,
                r["tpot_no_pim_s"] / r["tpot_pim_s"], "x", "prediction",
                "two computing ranks per channel (see specs/hardware/galaxy_s24p.pim)")]
