"""Running a system: compile each step of the workload, time its ops, schedule them, report.

A decoder workload is one prefill step (every request's `input_len` tokens;
its logits give the first token, so TTFT is this step) and then
`output_len` decode steps, one token per request each, with the KV cache
growing from `input_len`. `input_len=1 output_len=1` is thus one prefill
token and one real decode step. Encoders and graph models run one step.

Reported (ARCHITECTURE.md, `pimc run --json`):
  ttft_s         the prefill step (an encoder: its one step)
  tpot_s         mean decode step
  tokens_per_s   generated tokens (batch x output_len) per second, end to end; an encoder generates
                 none: the tokens it reads (batch x input_len) per second
  op_s           a graph model (one op, a GEMV): its time, instead of the three above
  end_to_end_s   prefill + every decode step
  memory_bytes   weights (every copy), KV cache at the end, largest activation
  utilization    busy time / end-to-end time, per resource (each instance of a
                 PIM memory with a count is its own resource, `pim:d[i]`)
  breakdown_s    per phase: its wall time and each resource's busy time
  capacity       the footprint against the host's memory (`fits`)
  pim            the PIM ops of the first decode step (with a count: `instances`,
                 each instance's ops, seconds and commands for its share)
  dram_traffic_bytes  bytes the host CPU's kernels move to and from its memory over the run
                 (prefill, then the decode steps' mean of the first and last compiled one),
                 for the run's energy (interpreter/run_energy.py)
With a weight strategy (strategy.py) the report also gives the host-only
baseline, the same workload under `c_gemm` (PIM-SHERPA Fig. 12):
  tpot_pim_s, tpot_no_pim_s                 decode time per token with and without PIM
  end_to_end_no_pim_s, speedup_vs_no_pim    end to end without PIM, and the speedup over it
Steps run back to back; nothing overlaps across steps.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from ...graph.build import build_graph
from ...graph.parallel import device_model, parallelism
from ...ir.run_result import RunResult
from ...ir.workload import DTYPE_BYTES, System
from ...lowering.records import Kernel, PimWork
from ...passes.manager import PassManager
from ...passes.program import Program
from ...passes.strategy import STRATEGIES
from .affine_steps import AffineSteps
from ...interpreter.op_timing import OpTimer, refresh_policy
from ...interpreter.schedule import StepSchedule, schedule


def step_program(system: System, phase: str, batch: int, tokens: int, context: int) -> Program:
    """One step's op graph, before any pass."""
    # one device's shard when the mapping spreads the model (tp, pp); else the whole model
    graph = build_graph(device_model(system.model, *parallelism(system)), phase, batch, tokens, context)
    return Program(system, phase, batch, tokens, context, graph)


def compile_step(system: System, phase: str, batch: int, tokens: int, context: int,
                 manager: PassManager | None = None) -> Program:
    return (manager or PassManager()).run(step_program(system, phase, batch, tokens, context))


def run_system(system: System, fast: bool = True, manager: PassManager | None = None,
               progress=None, timeline: bool = False) -> RunResult:
    manager = manager or PassManager()
    model, work = system.model, system.workload
    timer = OpTimer(system, fast=fast)
    seconds_of = timer                  # op by op, or a whole step with the refresh phase carried
    batch = work.batch if work else 1
    input_len = work.input_len if work else 1
    output_len = (work.output_len if work else 1) if model.architecture == "decoder" else 0

    phases: dict[str, dict] = {}
    intervals, clock = [], 0.0
    pim_step = None

    def record(phase: str, step: StepSchedule):
        nonlocal clock
        entry = phases.setdefault(phase, {"seconds": 0.0, "steps": 0, "busy": defaultdict(float)})
        entry["seconds"] += step.seconds
        entry["steps"] += 1
        for resource, busy in step.busy_s.items():
            entry["busy"][resource] += busy
        if timeline:
            intervals.extend(step.shifted(clock, phase))
        clock += step.seconds

    prefill = compile_step(system, "prefill", batch, input_len, 0, manager)
    prefill_step = schedule(prefill, seconds_of)
    record("prefill", prefill_step)
    last = prefill
    decode_at, fitted = _decode_steps(system, batch, input_len, output_len, manager)
    # without a timeline, the fitted steps are scheduled all at once (same numbers, one pass)
    ahead = {} if fitted is None or timeline else fitted.schedule_many(
        [c for c in range(input_len, input_len + output_len) if decode_at(c)[0] is None], seconds_of)
    first_decode = None
    for s in range(output_len):
        program, fitted = decode_at(input_len + s)
        first_decode = first_decode or program
        step = ahead.get(input_len + s) or (fitted.schedule(input_len + s, seconds_of, timeline) if fitted
                                             else schedule(program, seconds_of))
        record("decode", step)
        if s == 0:                         # the first decode step is always compiled
            pim_step = _pim_summary(program, timer)
        last = program or last
        if progress is not None:
            progress(s + 1, output_len)

    end_to_end = clock
    decode = phases.get("decode")
    generated = batch * output_len
    memory = memory_bytes(prefill, last)
    busy_total: dict[str, float] = defaultdict(float)
    for entry in phases.values():
        for resource, busy in entry["busy"].items():
            busy_total[resource] += busy
    report = {
        "system": system.name,
        "model": model.name,
        "strategy": system.mapping.strategy if system.mapping else None,
        "batch": batch, "input_len": input_len, "output_len": output_len,
        **({"op_s": end_to_end} if model.architecture == "graph" else {
            "ttft_s": prefill_step.seconds,
            "tpot_s": decode["seconds"] / decode["steps"] if decode else prefill_step.seconds,
            "tokens_per_s": ((generated or batch * input_len) / end_to_end) if end_to_end else 0.0}),
        "end_to_end_s": end_to_end,
        "memory_bytes": memory,
        "memories": memories_report(system, prefill, last),
        "utilization": {r: (b / end_to_end if end_to_end else 0.0) for r, b in sorted(busy_total.items())},
        "breakdown_s": {phase: {"total": e["seconds"], **dict(sorted(e["busy"].items()))}
                        for phase, e in phases.items()},
        "timing": {"mode": "fast" if fast else "exact",
                   "refresh": {m.name: refresh_policy(m) for m in system.memories if m.pim}},
    }
    host = system.processors[0] if system.processors else None
    if host is not None and host.memory_bytes:
        report["capacity"] = {"device": host.name, "device_bytes": host.memory_bytes,
                              "required_bytes": memory["total"], "fits": memory["total"] <= host.memory_bytes}
    if model.architecture == "graph":
        pim = _pim_summary(prefill, timer)
        if pim:
            report["pim_cycles"] = pim["read_cycles"]
            report["pim"] = pim
    elif pim_step:
        report["pim"] = pim_step
    traffic = host_traffic(system, prefill)
    if first_decode is not None:
        for name, moved in host_traffic(system, first_decode, last).items():
            traffic[name] = traffic.get(name, 0.0) + moved * output_len
    if traffic:
        report["dram_traffic_bytes"] = traffic
    mapping = system.mapping
    if mapping is not None and mapping.strategy in STRATEGIES and model.architecture == "decoder":
        report.update(_host_only_baseline(system, report, fast))
    return RunResult(report, intervals, dict(manager.times_s))


# Runs with at least this many decode steps compile three, the middle and the last one, and
# schedule the others from the first's structure when the compiled ones lie on its lines.
AFFINE_MIN_STEPS = 8


def _decode_steps(system: System, batch: int, input_len: int, output_len: int, manager: PassManager):
    """`(context -> (compiled program or None, AffineSteps or None), the AffineSteps or None)` for
    the run's decode steps: a compiled program for the steps compiled, else the fitted structure
    to schedule from."""
    compile_at = lambda c: compile_step(system, "decode", batch, 1, c, manager)
    if output_len < AFFINE_MIN_STEPS:
        return (lambda c: (compile_at(c), None)), None
    first = [compile_at(input_len + s) for s in range(3)]
    fitted = AffineSteps.fit(first)
    checks = {c: compile_at(c) for c in (input_len + output_len // 2, input_len + output_len - 1)}
    if fitted is not None and not all(fitted.verify(p) for p in checks.values()):
        fitted = None
    compiled = {p.context: p for p in first} | checks
    if fitted is None:
        return (lambda c: (compiled.get(c) or compile_at(c), None)), None
    return (lambda c: (compiled[c], None) if c in compiled else (None, fitted)), fitted


def _host_only_baseline(system: System, report: dict, fast: bool) -> dict:
    """The same workload with one cacheable host-friendly copy and no PIM (`c_gemm`)."""
    if system.mapping.strategy == "c_gemm":
        base = report
    else:
        host_only = replace(system, mapping=replace(system.mapping, strategy="c_gemm"))
        base = run_system(host_only, fast=fast).report
    uses_pim = "pim" in report and system.mapping.strategy != "c_gemm"
    return {"tpot_pim_s": report["tpot_s"] if uses_pim else None,
            "tpot_no_pim_s": base["tpot_s"],
            "end_to_end_no_pim_s": base["end_to_end_s"],
            "speedup_vs_no_pim": base["end_to_end_s"] / report["end_to_end_s"] if report["end_to_end_s"] else None}


def memory_bytes(*programs: Program) -> dict:
    """Weights (every copy the programs allocated, by region), SMC buffers, KV cache and activations
    at their largest."""
    copies, unplaced = {}, {}
    for program in programs:
        for _, attrs in program.ops():
            alloc = attrs.get("alloc")
            if alloc is not None:
                copies[(alloc.region, alloc.offset_bytes)] = alloc
            elif (op := attrs["op"]).weight:     # no memory declared: the processor's own memory holds it
                unplaced[(attrs["device"], op.weight)] = math.ceil(op.weight_elements * DTYPE_BYTES[op.dtype])
    by_region: dict[str, int] = defaultdict(int)
    for alloc in copies.values():
        by_region[alloc.region or "memory"] += alloc.size_bytes
    for (device, _), nbytes in unplaced.items():
        by_region[device] += nbytes
    out = {"weights": sum(by_region.values()),
           "buffers": max(p.memory_bytes["buffers"] for p in programs),
           "kv_cache": max(p.memory_bytes["kv_cache"] for p in programs),
           "activations": max(p.memory_bytes["activations"] for p in programs)}
    out["total"] = sum(out.values())
    out["weights_by_region"] = dict(sorted(by_region.items()))
    return out


def host_memory(system: System, device: str):
    """The declared memory a CPU's kernels read and write: the system's one memory without a PIM unit,
    else its one memory; None for other processors (a GPU's or NPU's own memory is not declared)."""
    cpu = next((p for p in system.processors if p.name == device and p.kind == "cpu"), None)
    plain = [m for m in system.memories if m.pim is None]
    choice = plain if len(plain) == 1 else list(system.memories)
    return choice[0] if cpu is not None and len(choice) == 1 else None


def host_traffic(system: System, *programs: Program) -> dict[str, float]:
    """Bytes the CPU kernels of one step move to and from their memory (the mean over `programs`)."""
    out: dict[str, float] = defaultdict(float)
    for program in programs:
        for _, attrs in program.ops():
            kernel = attrs.get("lowered")
            memory = host_memory(system, kernel.device) if isinstance(kernel, Kernel) else None
            if memory is not None:
                out[memory.name] += kernel.bytes / len(programs)
    return dict(out)


def memories_report(system: System, *programs: Program) -> dict:
    """Memory by memory: its capacity (every instance), what it holds (weights of every copy, SMC
    buffers, KV cache and activations at their largest, by the mapping's `data` block), and the
    bytes each instance holds, the data striped evenly over the instances."""
    held = {m.name: defaultdict(int) for m in system.memories}
    copies = {(a.memory, a.region, a.offset_bytes): a for p in programs for _, attrs in p.ops()
              if (a := attrs.get("alloc")) is not None}
    for alloc in copies.values():
        held[alloc.memory]["weights"] += alloc.size_bytes
    last = programs[-1]
    for kind in ("buffers", "kv_cache", "activations"):
        home = last.home("weights" if kind == "buffers" else kind)
        if home is not None:
            held[home.name][kind] += max(p.memory_bytes[kind] for p in programs)
    out = {}
    for m in system.memories:
        total = sum(held[m.name].values())
        out[m.name] = {"instances": m.count, "capacity_bytes": m.capacity_bytes * m.count,
                       **{k: held[m.name].get(k, 0) for k in ("weights", "buffers", "kv_cache", "activations")},
                       "total": total, "per_instance_bytes": math.ceil(total / m.count),
                       "fits": total <= m.capacity_bytes * m.count}
    return out


def _pim_summary(program: Program, timer: OpTimer) -> dict | None:
    """The PIM ops of one step: cycles (whole ops), read cycles (to the last column read), commands."""
    works = [a["lowered"] for _, a in program.ops() if isinstance(a["lowered"], PimWork)]
    if not works:
        return None
    times = timer.pim_step(works)           # each from the refresh phase the ops before it leave
    counts: dict[str, int] = defaultdict(int)
    for t in times:
        for k, n in t.counts.items():
            counts[k] += n
    out = {"phase": program.phase, "ops": len(works),
           "cycles": sum(t.cycles for t in times), "read_cycles": sum(t.read_cycles for t in times),
           "seconds": sum(t.seconds for t in times),
           "commands": sum(t.commands for t in times), "commands_issued": sum(t.issued for t in times),
           "refreshes": sum(t.refreshes for t in times), "command_counts": dict(sorted(counts.items()))}
    # a PIM memory with a count: each instance's own share of the step's PIM ops
    by_resource: dict[str, list] = defaultdict(list)
    for _, a in program.ops():
        for resource, work in zip(a.get("resources", ()), a.get("instances", ())):
            by_resource[resource].append(work)
    instances: dict[str, dict] = {}
    for resource, share in by_resource.items():        # each instance carries its own refresh phase
        times = timer.pim_step(share)
        instances[resource] = {"ops": len(times), "seconds": sum(t.seconds for t in times),
                               "commands": sum(t.commands for t in times)}
    if instances:
        out["instances"] = instances
    return out
