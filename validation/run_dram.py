#!/usr/bin/env python3
"""Regenerate the DRAM engine's validation table: validation/dram.md and validation/dram.json.

    python validation/run_dram.py [--traces DIR]

Replays every trace of the reference dataset (regenerating the large ones with
its gen_traces.py, checked by sha256) through each reference memory of
specs/reference/dram.pim, compares with DRAMsim3 and Ramulator 2, and also
replays each memory with the other simulator's controller structure, to show
how much of a gap is queueing rather than timing. tests/test_dram_validation.py
fails when an error grows past the committed one by more than one point.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pimdsl.frontend.pipeline import load_spec                       # noqa: E402
from pimdsl.frontend.resources import specs_dir                      # noqa: E402
from pimdsl.interpreter.memory_system import replay                   # noqa: E402
from pimdsl.interpreter.traces import read_trace                      # noqa: E402
from pimdsl.validation import dram_reference as V                    # noqa: E402

# The two controller structures, as `--set` overrides ([REFDATA] dram README Sec. 8.1, 8.4).
STRUCTURES = {
    "DRAMsim3-like": ["queue_structure=per_bank", "command_queue_depth=8", "scheduler=frfcfs_rowhit",
                      "row_hit_cap=4", "write_drain_high=1.0", "write_drain_low=0"],
    "Ramulator-like": ["queue_structure=transaction", "scheduler=frfcfs_rowhit", "row_hit_cap=0",
                       "write_drain_high=0.8", "write_drain_low=0.2"],
}

# Why a row looks as it does: mechanisms we measured (the alternate-structure column) or
# that the reference README documents. Keyed by (config, trace); "*" matches any trace.
NOTES = {
    ("ddr4_3200", "bank_parallel_hit"): "DRAMsim3 is 4-5% faster than both Ramulator 2 and us: its per-bank "
        "command queues (32 + 8 per bank) keep the other rank busy while one rank refreshes; with "
        "DRAMsim3's structure we land within 2% of it (alternate column).",
    ("ddr4_3200", "random_read"): "Nearer to DRAMsim3; Ramulator 2 is 2.8% faster than DRAMsim3 here. "
        "DRAMsim3's structure makes us 9% faster than DRAMsim3 (our FR-FCFS sees all 8 x 32 command-queue "
        "entries; DRAMsim3 round-robins over bank queues): not its scheduler, so not used for this config.",
    ("ddr4_3200", "mixed_stream_2r1w"): "The two simulators differ by their write-drain policy ([REFDATA] dram README Sec. 8.4): "
        "with DRAMsim3's drain (full buffer to empty) we match DRAMsim3 (alternate column).",
    ("hbm2", "mixed_stream_2r1w"): "As for DDR4: Ramulator's watermark drain is 7% slower than DRAMsim3's; "
        "we follow Ramulator's, and DRAMsim3's structure brings us within 1% of DRAMsim3.",
    ("hbm2", "bank_parallel_hit"): "Ramulator 2 plain FRFCFS pre-empts row hits (+8.3%, [REFDATA] dram README Sec. 8.3); we "
        "compare with its FRFCFS-RowHit run, which is our scheduler.",
    ("hbm2", "random_read"): "DRAMsim3's deeper queues give it 2.5% over Ramulator 2 ([REFDATA] dram README Sec. 8.1).",
    ("hbm2", "idle_seq"): "30 vs 31 cycles: DRAMsim3 spends a cycle moving a request into its command queue "
        "and Ramulator 2 models ACT as a 2-cycle command; we follow DRAMsim3's 1-cycle ACT without the move.",
    ("hbm2", "idle_random"): "As idle_seq.",
    ("ddr4_3200", "idle_seq"): "DRAMsim3 = Ramulator 2 + 1 cycle (its command-queue move, [REFDATA] dram README Sec. 7.3); "
        "we equal Ramulator 2.",
    ("ddr4_3200", "idle_random"): "As idle_seq.",
    ("lpddr4_2400", "*"): "DRAMsim3 only; we use DRAMsim3's per-bank command queues, its row-hit cap of 4 "
        "and its drain policy. The +1 idle cycle of DRAMsim3 comes out of the queue move.",
    ("lpddr5_6400", "*"): "Ramulator 2 only. Idle latencies are 1 cycle under Ramulator's: it issues a "
        "WCK2CK sync (CAS) command before the first RD and splits ACT into ACT-1/ACT-2; lpddr5.pim models "
        "one 2-cycle ACT and no CAS (the language has no conditional command).",
    ("lpddr5_6400", "seq_read"): "Ramulator 2 only; 1.3% slower than Ramulator: not isolated (candidates: "
        "ACT-1/ACT-2 split and the CAS command, see lpddr5.pim).",
}


def note_for(config, trace):
    return NOTES.get((config, trace)) or NOTES.get((config, "*"), "")


def alternate_structure(memory_name: str, current: str) -> tuple[str, object]:
    other = "Ramulator-like" if current == "per_bank" else "DRAMsim3-like"
    overrides = [f"{memory_name}.controller.{kv}" for kv in STRUCTURES[other]]
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"), overrides)
    if spec is None:
        raise RuntimeError(diags.render_all())
    return other, spec.memories[memory_name]


def fmt_pct(x):
    return "" if x is None else f"{x:+.1f}%"


def write_markdown(results, alternates, path: Path, speed):
    lines = [
        "# DRAM engine validation against DRAMsim3 and Ramulator 2",
        "",
        "Generated by `python validation/run_dram.py` from the reference dataset "
        "(`validation/reference/dram/`, [REFDATA] dram README Sec. 2-8). Each configuration is the memory of the "
        "same name in `specs/reference/dram.pim`. Targets: total cycles within "
        f"{V.CYCLE_TARGET_PCT:g}% of the nearer reference (DRAMsim3, or the Ramulator 2 run with our "
        "scheduler); idle min and median read latency within one cycle of it. Saturated average latency, "
        "row-hit rate and ACT counts follow each simulator's queue structure ([REFDATA] dram README Sec. 8.1) and are reported, "
        "not targeted. `tests/test_dram_validation.py` fails when a cycle error grows by more than one "
        "point over the `cycle_error_pct` committed in `validation/dram.json`.",
        "",
        "Controller structure used: ddr4_3200, hbm2 and lpddr5_6400 use Ramulator 2's (requests scheduled "
        "from 32-entry read and write buffers, watermark write drain); lpddr4_2400, which only DRAMsim3 "
        "ran, uses DRAMsim3's (per-bank command queues of 8, row-hit cap 4, full-buffer drain). Where both "
        "simulators ran a config, we follow Ramulator 2, whose buffers bound what the scheduler sees in the "
        "way the spec's queue depths say; the *alternate* column replays with the other structure.",
        "",
        "| config | trace | ours cycles | DRAMsim3 | Ramulator 2 | error vs nearer | target met | alternate structure | "
        "avg read lat ours / DS3 / R2 | min / p50 lat ours / nearer | row-hit ours / nearer | ACT ours / nearer | note |",
        "|---|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if not r.references:
            continue
        ds3 = r.references.get("DRAMsim3")
        r2 = next((v for k, v in r.references.items() if k.startswith("Ramulator2")), None)
        near = r.references[r.nearer]
        met = abs(r.cycle_error_pct) <= V.CYCLE_TARGET_PCT and (r.idle_ok is not False)
        alt_name, alt = alternates.get((r.config, r.trace), (None, None))
        alt_err = (alt["cycles"] / near["cycles"] - 1) * 100 if alt else None
        o = r.ours
        lines.append(
            f"| {r.config} | {r.trace} | {o['cycles']} | {ds3['cycles'] if ds3 else '–'} | "
            f"{r2['cycles'] if r2 else '–'} | {fmt_pct(r.cycle_error_pct)} ({r.nearer}) | {'yes' if met else 'NO'} | "
            f"{fmt_pct(alt_err)} ({alt_name}) | "
            f"{o['avg_read_latency_cycles']:.1f} / {ds3['avg_read_latency_cycles'] if ds3 else '–'} / "
            f"{r2['avg_read_latency_cycles'] if r2 else '–'} | "
            f"{o['min_read_latency_cycles']} / {o['p50_read_latency_cycles']} vs "
            f"{near['min_read_latency_cycles']} / {near['p50_read_latency_cycles']} | "
            f"{o['row_hit_rate']:.3f} / {near['row_hit_rate']:.3f} | {o['act_cmds']} / {near['act_cmds']} | "
            f"{note_for(r.config, r.trace)} |")
    hidden = [r for r in results if not r.references]
    if hidden:
        lines += ["", "## Traces whose reference results are kept back", "",
                  "The dataset withholds these results ([REFDATA] dram README Sec. 1); our numbers, for the record.", "",
                  "| config | trace | ours cycles | GB/s | avg read lat | row-hit | ACT |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in hidden:
            o = r.ours
            lines.append(f"| {r.config} | {r.trace} | {o['cycles']} | {o['bandwidth_gbps']:.2f} | "
                         f"{o['avg_read_latency_cycles']:.1f} | {o['row_hit_rate']:.3f} | {o['act_cmds']} |")
    total = sum(len_ for _, len_ in speed)
    secs = sum(s for s, _ in speed)
    lines += ["", f"Replayed {total} requests in {secs:.1f} s of engine time on this machine "
              f"({total / secs:,.0f} requests/s overall; see `benchmarks/dram_speed.py` for the speed benchmark).", ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", help="where to regenerate the large traces (default: a temporary folder)")
    ap.add_argument("--out", default=str(ROOT / "validation"), help="folder for dram.md and dram.json")
    args = ap.parse_args(argv)
    trace_dir = Path(args.traces) if args.traces else Path(tempfile.mkdtemp(prefix="pimdsl-traces-"))
    speed = []
    started = time.time()

    def progress(r):
        speed.append((time.time() - progress.t, r.ours["requests"]))
        progress.t = time.time()
        print(f"  {r.config:12s} {r.trace:20s} {r.ours['cycles']:>9d} cycles  {fmt_pct(r.cycle_error_pct):>7s}",
              file=sys.stderr)
    progress.t = time.time()
    results = V.run_all(trace_dir, progress=progress)
    alternates = {}
    ref = V.reference_dir()
    paths = V.ensure_traces(ref, trace_dir, V.all_cases(ref))
    memories = V.load_reference_memories()
    for r in results:
        if not r.references:
            continue
        name, memory = alternate_structure(r.config, memories[r.config].controller.queue_structure)
        alternates[(r.config, r.trace)] = (name, replay(memory, read_trace(str(paths[(r.config, r.trace)]),
                                                                          memory, "dramsim3")).to_json())
    out = Path(args.out)
    (out / "dram.json").write_text(json.dumps([r.to_json() for r in results], indent=1) + "\n")
    write_markdown(results, alternates, out / "dram.md", speed)
    print(f"wrote {out / 'dram.md'} and {out / 'dram.json'} in {time.time() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
