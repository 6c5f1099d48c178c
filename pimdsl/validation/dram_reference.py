"""Validation of the DRAM engine against the DRAMsim3 / Ramulator 2 reference dataset.

The dataset (validation/reference/dram/ in the repository, or
$PIMDSL_REFERENCE/dram; provenance in its README) holds the
results of both simulators on named configurations and a deterministic trace
generator. Each configuration is a memory of the same name in
`specs/reference/dram.pim`. For every (config, trace) we replay the trace and
compare with the reference runs:

  * total cycles: the error against the nearer of DRAMsim3 and the Ramulator 2
    run whose scheduler matches ours (target 3%);
  * idle traces: min and median read latency within one cycle of it;
  * saturated average latency, row-hit rate and ACT count are reported only
    (they follow each simulator's queue structure, [REFDATA] dram README Sec. 8.1).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from ..interpreter.dram_tables import find_roles
from ..interpreter.memory_system import replay
from ..interpreter.traces import read_trace

CYCLE_TARGET_PCT = 3.0
IDLE_TARGET_CYCLES = 1
IDLE_TRACES = ("idle_seq", "idle_random")
# Ramulator 2 scheduler names for ours
RAMULATOR_SCHEDULER = {"frfcfs": "FRFCFS", "frfcfs_rowhit": "FRFCFS-RowHit", "fcfs": "FRFCFS"}


def reference_dir() -> Path:
    """The dataset: $PIMDSL_REFERENCE/dram, else validation/reference/dram of the checkout."""
    env = os.environ.get("PIMDSL_REFERENCE")
    checkout = Path(__file__).resolve().parents[2]
    candidates = [Path(env)] if env else [checkout / "validation" / "reference",
                                          Path.cwd() / "validation" / "reference"]
    for base in candidates:
        if (base / "dram" / "results.csv").exists():
            return base / "dram"
    raise FileNotFoundError("the DRAM reference dataset is not at " + " or ".join(str(c / "dram") for c in candidates)
                            + "; run from a checkout of pimdsl or set PIMDSL_REFERENCE to the folder that holds "
                            "dram/results.csv")


def reference_rows(ref: Path) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    with open(ref / "results.csv") as f:
        for row in csv.DictReader(f):
            out.setdefault((row["config"], row["trace"]), []).append(row)
    return out


def manifest(ref: Path) -> list[dict]:
    return json.loads((ref / "traces" / "manifest.json").read_text())


def ensure_traces(ref: Path, out: Path, cases: list[tuple[str, str]]) -> dict[tuple[str, str], Path]:
    """Path of each case's trace: the stored one, or regenerated and checked by sha256."""
    entries = {(m["config"], m["trace"]): m for m in manifest(ref)}
    paths, missing = {}, []
    for case in cases:
        m = entries[case]
        stored = ref / "traces" / m["file"]
        generated = out / m["file"]
        if stored.exists():
            paths[case] = stored
        else:
            paths[case] = generated
            if not generated.exists() or _sha256(generated) != m["sha256"]:
                missing.append(case)
    if missing:
        out.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, str(ref / "gen_traces.py"), "--out", str(out)]
        for config in sorted({c for c, _ in missing}):
            args += ["--config", config]
        for trace in sorted({t for _, t in missing}):
            args += ["--trace", trace]
        subprocess.run(args, check=True, capture_output=True)
    for case in missing:
        if _sha256(paths[case]) != entries[case]["sha256"]:
            raise RuntimeError(f"regenerated trace {paths[case]} does not match the manifest's sha256")
    return paths


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class CaseResult:
    config: str
    trace: str
    ours: dict
    references: dict          # simulator label -> reference row subset
    nearer: str | None
    cycle_error_pct: float | None     # signed, against the nearer reference
    idle_ok: bool | None

    def to_json(self) -> dict:
        return {"config": self.config, "trace": self.trace, "ours": self.ours, "references": self.references,
                "nearer": self.nearer, "cycle_error_pct": self.cycle_error_pct, "idle_ok": self.idle_ok}


def _ref_summary(row: dict) -> dict:
    return {"cycles": int(row["total_cycles"]),
            "avg_read_latency_cycles": float(row["avg_read_latency_cycles"]),
            "min_read_latency_cycles": int(row["min_read_latency_cycles"]),
            "p50_read_latency_cycles": int(row["p50_read_latency_cycles"]),
            "row_hit_rate": float(row["row_hit_rate"]), "act_cmds": int(row["act_cmds"]),
            "ref_cmds": int(row["ref_cmds"])}


def comparable(rows: list[dict], scheduler: str) -> dict[str, dict]:
    """DRAMsim3's run and the Ramulator 2 run with our scheduler, by label."""
    out = {}
    for row in rows:
        if row["simulator"] == "DRAMsim3":
            out["DRAMsim3"] = _ref_summary(row)
        elif row["scheduler"] == RAMULATOR_SCHEDULER.get(scheduler):
            out[f"Ramulator2 {row['scheduler']}"] = _ref_summary(row)
    return out


def run_case(memory, config: str, trace_name: str, trace_path: Path, rows: list[dict]) -> CaseResult:
    result = replay(memory, read_trace(str(trace_path), memory, "dramsim3"))
    ours = result.to_json()
    ours["act_cmds"] = ours["commands"].get(memory.part.commands[find_roles(memory.part.commands).act].name, 0)
    refs = comparable(rows, memory.controller.scheduler)
    nearer, error = None, None
    for label, ref in refs.items():
        e = (ours["cycles"] / ref["cycles"] - 1) * 100
        if error is None or abs(e) < abs(error):
            nearer, error = label, e
    idle_ok = None
    if trace_name in IDLE_TRACES and nearer:
        ref = refs[nearer]
        idle_ok = (abs(ours["min_read_latency_cycles"] - ref["min_read_latency_cycles"]) <= IDLE_TARGET_CYCLES
                   and abs(ours["p50_read_latency_cycles"] - ref["p50_read_latency_cycles"]) <= IDLE_TARGET_CYCLES)
    return CaseResult(config, trace_name, ours, refs, nearer,
                      round(error, 3) if error is not None else None, idle_ok)


def load_reference_memories():
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"))
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.memories


def all_cases(ref: Path) -> list[tuple[str, str]]:
    return [(m["config"], m["trace"]) for m in manifest(ref)]


def run_all(trace_dir: Path, cases=None, progress=None) -> list[CaseResult]:
    ref = reference_dir()
    rows = reference_rows(ref)
    cases = cases or all_cases(ref)
    paths = ensure_traces(ref, trace_dir, cases)
    memories = load_reference_memories()
    out = []
    for config, trace in cases:
        out.append(run_case(memories[config], config, trace, paths[(config, trace)], rows.get((config, trace), [])))
        if progress:
            progress(out[-1])
    return out
