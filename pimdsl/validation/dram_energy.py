"""Validation of the DRAM energy model against DRAMsim3's energy accounting on the same traces.

The reference ([REFDATA] dram energy README) is DRAMsim3's per-component energy on the DDR4-3200 and
HBM2 traces of the timing dataset. DRAMsim3 multiplies currents (mA) by volts and by cycles, so its
"pJ" are mA x V x cycles; we count mA x V x cycles x tCK, and compare with its numbers times tCK in
ns (DDR4-3200: 0.625; HBM2: 1). Each memory is replayed with DRAMsim3's controller structure
(`dram_reference.STRUCTURES["DRAMsim3-like"]`, which gives its cycles and ACT counts), so the two
count energy over the same commands and the same run length; what remains is how each attributes it.
"""
from __future__ import annotations

import csv
from pathlib import Path

from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from ..interpreter.dram.memory_system import replay
from ..interpreter.dram.traces import read_trace
from .dram_reference import STRUCTURES, act_count, ensure_traces, reference_dir

TARGET_PCT = 5.0
# our component -> DRAMsim3's column
COLUMNS = {"activation": "act_energy", "read": "read_energy", "write": "write_energy", "refresh": "ref_energy",
           "active_standby": "act_stb_energy", "precharge_standby": "pre_stb_energy", "total": "total_energy"}


def reference_rows(ref: Path) -> dict[tuple[str, str], dict]:
    with open(ref / "energy" / "results.csv") as f:
        return {(row["config"], row["trace"]): row for row in csv.DictReader(f)}


def dramsim3_memory(config: str, structure: str | None = "DRAMsim3-like"):
    """The reference memory `config` with DRAMsim3's controller structure (None: its own controller)."""
    overrides = [f"{config}.controller.{kv}" for kv in STRUCTURES[structure]] if structure else []
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"), overrides)
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.memories[config]


def pct(ours: float, theirs: float) -> float | None:
    return round((ours / theirs - 1) * 100, 3) if theirs else None


def run_case(memory, trace_path: Path, row: dict) -> dict:
    """Ours and DRAMsim3's energy (pJ) by component, the signed error of each, and the counts behind them."""
    result = replay(memory, read_trace(str(trace_path), memory, "dramsim3"))
    tck_ns = memory.part.tck_s * 1e9
    ours = {c: round(result.energy_pj[c], 1) for c in COLUMNS}
    theirs = {c: round(float(row[col]) * tck_ns, 1) for c, col in COLUMNS.items()}
    per = memory.part.power
    devices = memory.organization.devices_per_rank
    # rank-cycles with a row open, as DRAMsim3's act_stb_energy implies (VDD x IDD3N x devices per cycle)
    theirs_active = float(row["act_stb_energy"]) / (per.volts["VDD"] * per.amps["IDD3N"] * 1e3 * devices)
    return {
        "energy_pj": {"ours": ours, "dramsim3": theirs, "error_pct": {c: pct(ours[c], theirs[c]) for c in COLUMNS}},
        "counts": {
            "cycles": (result.cycles, int(row["num_cycles"])),
            "act": (act_count(memory, result), int(row["num_act_cmds"])),
            "ref": (result.commands.get("REF", 0), int(row["num_ref_cmds"])),
            "active_rank_cycles": (result.active_rank_cycles, round(theirs_active)),
            "rank_cycles": (result.rank_cycles, None),
        },
    }


def run_all(trace_dir: Path, progress=None) -> dict[tuple[str, str], dict]:
    ref = reference_dir()
    rows = reference_rows(ref)
    paths = ensure_traces(ref, trace_dir, sorted(rows))
    configs = sorted({c for c, _ in rows})
    memories = {config: dramsim3_memory(config) for config in configs}
    own = {config: dramsim3_memory(config, None) for config in configs}
    out = {}
    for config, trace in sorted(rows):
        out[(config, trace)] = run_case(memories[config], paths[(config, trace)], rows[(config, trace)])
        # the memory's own controller (Ramulator 2's structure): how much scheduling moves the energy
        mine = run_case(own[config], paths[(config, trace)], rows[(config, trace)])
        out[(config, trace)]["own_controller"] = {"total_error_pct": mine["energy_pj"]["error_pct"]["total"],
                                                  "energy_pj": mine["energy_pj"]["ours"],
                                                  "cycles": mine["counts"]["cycles"][0]}
        if progress:
            progress(config, trace, out[(config, trace)])
    return out
