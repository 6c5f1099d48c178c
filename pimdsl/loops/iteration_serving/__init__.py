"""The iteration-level serving loop (`loop = iteration_serving;`): requests served in batches by
devices of an NPU beside PIM memory, with channel placement and sub-batch interleaving.

The mechanisms are NeuPIMs' ([NEUPIMS]); the strategies of `layer_segments.SERVING_STRATEGIES`
(the mapping's `strategy`) switch them on one by one. A layer's work is the op graph of one decoder
layer of the device's shard (`layer_segments.DeviceCosts.layer`), so every model feature counts.
Each iteration (Orca-style, `scheduler.IterationScheduler`)
every running request decodes one token; requests join and leave at iteration boundaries and a
paged KV cache bounds how many run. Summarisation (prefill) runs on standalone NPUs (section 4
item 1), so an admitted request costs the device nothing in the iteration that admits it and
decodes from the next one.

Per iteration:
1. Admitted requests get a PIM channel for their whole life: Algorithm 2 (greedy min-load, by the
   Algorithm 1 estimate at their input length) or round-robin (the NPU+PIM baseline, section 8.1).
2. With pipeline parallelism the decoding requests form `pp` equal micro-batches (section 7.1);
   a device serves them one after another, so the iteration takes the sum of their stage times.
   With the mapping parameter `pipeline = full_batch` every stage holds the whole batch instead
   (pp divides layers, weights and KV capacity only) and the iteration takes one stage time.
3. With sub-batch interleaving each micro-batch splits into two sub-batches by Algorithm 3, and the
   layers of both run as chains of segments (`layer_segments.DeviceCosts.layer`) on the NPU, the
   PIM channels and the link, list-scheduled: each step starts whichever sub-batch's next segment
   can start first (ties: sub-batch 1), which gives Figure 11(b)'s alternation. Without it the one
   chain runs serially (Figure 11(a)).

Throughput is generated tokens over device time, measured over the iterations that start with
requests still waiting (a full, warmed-up batch, as section 8.1 samples batches), or over every
iteration when the run never has a backlog. Utilisation (Table 4) over the same window: NPU =
systolic FLOPs / (peak x time) (MAC utilisation; `npu_busy` is the share of time the NPU has a
kernel running, memory-bound ones included: the paper does not say which it reports); PIM = busy time summed over channels / (channels x time);
bandwidth = the processor's DRAM traffic / (peak bandwidth x time), the traffic PIM does inside
the banks not counted. `mean_decode_batch` and `iteration_s` (the mean iteration) are over the same
window. Per request (`serving/metrics.py`: mean, p50, p99): TTFT runs from arrival to the first
token, the wait for admission plus the prompt's summarisation on the standalone NPUs
(`DeviceCosts.prefill_seconds`); TPOT from the first token to the last, over the later tokens; the
end-to-end latency from arrival to the last token, which leaves after its iteration. `makespan_s`
is the whole run's device time, as `breakdown_s`'s `decode`, with each resource's busy time, every
layer counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ...ir.intervals import Interval
from ...interpreter.host.models import peak_dtype
from ...ir.workload import System
from ...ir.errors import CompileError
from ...ir.params import NAME, WHOLE, Param
from ...serving.channel_assignment import greedy_min_load, partition_sub_batches, round_robin
from ...serving.metrics import request_latencies
from ...serving.requests import requests_for
from ...serving.scheduler import IterationScheduler, PagedKVCache
from .layer_segments import ALL_REDUCES, INTERLEAVES, PIPELINE_SPLITS, SERVING_STRATEGIES, DeviceCosts, Segment

TIMELINE_LAYER = 0                # the layer whose segments the timeline draws


# What this loop reads of a spec (see pimdsl/unread.py): its strategies choose row buffers, channel
# allocation and sub-batches (layer_segments.SERVING_STRATEGIES); it times the first link.
STRATEGIES = tuple(SERVING_STRATEGIES)
PARAMS = {"tp": Param(WHOLE, ">= 1", "tensor-parallel devices"), "pp": Param(WHOLE, ">= 1", "pipeline stages"),
          "gpu": Param(NAME, meaning="the processor of the gpu_only strategy"),
          "pipeline": Param(NAME, meaning="how pp stages share the work: " + " or ".join(PIPELINE_SPLITS)),
          "all_reduce": Param(NAME, meaning="the tensor-parallel all-reduces: " + " or ".join(ALL_REDUCES)),
          "interleave": Param(NAME, meaning="how the two sub-batches share NPU and PIM: " + " or ".join(INTERLEAVES))}
OP_CLASSES: tuple[str, ...] = ()
LINKS = 1
PROGRESS = "requests"          # what `progress(done, total)` counts (pimc run's bar)
ATTENTION = ("attention", "attn_score", "attn_context")     # the GEMVs a PIM strategy runs on PIM


def placement_ignored(system: System) -> list[tuple[str, str, str]]:
    """(phase, op class, what runs it instead) for each phase-block entry this loop does not follow:
    it places by strategy, everything on the strategy's processor but decode attention on PIM."""
    strategy = SERVING_STRATEGIES[system.mapping.strategy]
    wanted = system.mapping.params.get("gpu") if strategy.processor == "gpu" else None
    processor = next((p.name for p in system.processors if p.kind == strategy.processor
                      and wanted in (None, p.name)), strategy.processor)
    pims = {"pim", *(m.name for m in system.memories if m.pim is not None)}
    out = []
    for phase, table in system.mapping.placement.items():
        for key, device in table.items():
            on_pim = strategy.pim and phase == "decode" and key in ATTENTION
            if (device in pims) != on_pim or (not on_pim and device != processor):
                out.append((phase, key, "PIM" if on_pim else processor))
    return out


def run(system: System, timeline: bool = False, progress=None) -> "ServingResult":
    """The registered loop's entry (loops/__init__.py): serve the workload's requests."""
    return simulate(system, progress=progress, timeline=timeline)


@dataclass
class _Totals:
    seconds: float = 0.0
    tokens: int = 0
    flops: float = 0.0
    dram_bytes: float = 0.0
    pim_busy_s: float = 0.0
    iterations: int = 0
    batch: int = 0                # decoding requests, summed over iterations
    busy_s: dict = field(default_factory=dict)   # resource -> seconds its segments take

    def add(self, other: "_Totals") -> None:
        for name in ("seconds", "tokens", "flops", "dram_bytes", "pim_busy_s", "iterations", "batch"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for resource, seconds in other.busy_s.items():
            self.busy_s[resource] = self.busy_s.get(resource, 0.0) + seconds


@dataclass
class ServingResult:
    report: dict
    intervals: list[Interval] = field(default_factory=list)


def schedule_chains(chains: list[list[Segment]], layers: int, blocked: bool = False,
                    record=None, exact: bool = False) -> float:
    """Makespan of `layers` repetitions of each chain (one per sub-batch) on shared resources.

    Greedy list scheduling: the next segment of whichever chain can start earliest goes first
    (ties: the lower chain). A blocked PIM (single row buffer) shares the device with the NPU,
    so PIM segments then take the NPU resource. `record(chain, layer, segment, start, end)`
    sees every segment.

    Every layer repeats the same segments, so the schedule becomes periodic: when chain 0 starts
    a layer in a state (the other chains' positions, every ready and free time relative to now)
    seen at an earlier layer, the layers between repeat until the end, and whole periods are
    skipped (never the last one). `exact` (or a `record`) schedules every segment; the two agree
    to rounding (tests/test_iteration_serving.py)."""
    if not chains:
        return 0.0
    n = len(chains[0])
    skip = not exact and record is None and all(len(c) == n for c in chains) and n > 0
    resources = [["npu" if blocked and seg.resource == "pim" else seg.resource for seg in c] for c in chains]
    free: dict[str, float] = {r: 0.0 for rs in resources for r in rs}
    ready = [0.0] * len(chains)
    pos = [0] * len(chains)
    total = [layers * len(c) for c in chains]
    seen: dict[tuple, tuple[int, float]] = {}
    while True:
        best = None
        for i, chain in enumerate(chains):
            if pos[i] < total[i]:
                res = resources[i][pos[i] % len(chain)]
                start = max(free[res], ready[i])
                if best is None or start < best[0]:
                    best = (start, i, res)
        if best is None:
            return max(ready)
        start, i, res = best
        if skip and i == 0 and pos[0] % n == 0:
            now = ready[0]
            floor = min(ready)
            key = (tuple(p - pos[0] for p in pos),
                   tuple(round((t - now) * 1e12) for t in ready),
                   tuple(round((max(t, floor) - now) * 1e12) for t in free.values()))
            if key in seen:
                then_pos, then = seen.pop(key)
                step = pos[0] - then_pos
                periods = min((total[j] - pos[j]) // step for j in range(len(chains))) - 1
                if periods > 0:
                    shift = periods * (now - then)
                    pos = [p + periods * step for p in pos]
                    ready = [t + shift for t in ready]
                    free = {r: t + shift for r, t in free.items()}
                    seen.clear()
                    continue
            seen[key] = (pos[0], now)
        seg = chains[i][pos[i] % len(chains[i])]
        end = start + seg.seconds
        if seg.seconds > 0:
            free[res] = end
        ready[i] = end
        if record is not None:
            record(i, pos[i] // len(chains[i]), seg, start, end)
        pos[i] += 1


def stage_seconds(npu: list[Segment], pim: Segment | None) -> float:
    """One lock-step stage (`interleave = stages`): `npu`, one sub-batch's NPU (and link) segments
    in order, beside `pim`, the other's attention; the stage ends when both are done. The NPU's
    weight reads run at the read share while the attention runs (its segments take `seconds`)
    and alone after it (`alone`): with A the NPU work alone and S beside PIM, P the attention,
    the stage is P when S <= P, else P + A (1 - P / S)."""
    alone = sum(seg.alone for seg in npu)
    shared = sum(seg.seconds for seg in npu)
    p = pim.seconds if pim is not None else 0.0
    if p <= 0.0 or shared <= 0.0:
        return max(alone, p)
    return p if shared <= p else p + alone * (1.0 - p / shared)


def stage_schedule(chains: list[list[Segment]], layers: int, record=None) -> tuple[float, dict[str, float]]:
    """`layers` layers of two sub-batches' chains in the lock-step stages of sub-batch interleaving
    (Figure 11(b); [NEUPIMS_SIM] src/scheduler/Scheduler.h, stages A-F): A = QKV(1); B = QKV(2) ||
    MHA(1); then per further layer C = rest(1) + QKV(1) || MHA(2) and D = rest(2) + QKV(2) || MHA(1),
    "rest" being the segments after attention; E = rest(1) || MHA(2); F = rest(2). The makespan is
    A + B + (C + D)(layers - 1) + E + F; also returns each stage's seconds. `record(chain, layer,
    segment, start, end)` sees every segment (placed back to back from its stage's start)."""
    if len(chains) != 2 or any(len(c) != len(chains[0]) for c in chains):
        raise ValueError("lock-step stages need two sub-batches with the same segments")
    at = next(i for i, seg in enumerate(chains[0]) if seg.resource == "pim")
    qkv, mha, rest = [c[:at] for c in chains], [c[at] for c in chains], [c[at + 1:] for c in chains]
    plan = {"A": ([(0, qkv[0])], None), "B": ([(1, qkv[1])], 0),
            "C": ([(0, rest[0]), (0, qkv[0])], 1), "D": ([(1, rest[1]), (1, qkv[1])], 0),
            "E": ([(0, rest[0])], 1), "F": ([(1, rest[1])], None)}
    stages = {name: stage_seconds([seg for _, segs in parts for seg in segs],
                                  mha[other] if other is not None else None) for name, (parts, other) in plan.items()}
    order = ["A", "B"] + ["C", "D"] * (layers - 1) + ["E", "F"]
    if record is not None:
        clock, layer = 0.0, [0, 0]
        for name in order:
            parts, other = plan[name]
            if other is not None:
                record(other, layer[other], mha[other], clock, clock + mha[other].seconds)
            t = clock
            for chain, segs in parts:
                for seg in segs:
                    record(chain, layer[chain], seg, t, t + seg.seconds)
                    t += seg.seconds
                if segs is rest[chain]:
                    layer[chain] += 1
            clock += stages[name]
    total = stages["A"] + stages["B"] + (layers - 1) * (stages["C"] + stages["D"]) + stages["E"] + stages["F"]
    return total, stages


def simulate(system: System, progress=None, timeline: bool = False) -> ServingResult:
    strategy = SERVING_STRATEGIES[system.mapping.strategy]
    costs = DeviceCosts(system, strategy)
    work = system.workload
    if work is None:
        raise CompileError("the iteration serving loop needs a workload", system.span, "add 'workload = ...;' to the system")
    _check_weights_fit(system, costs)
    requests = requests_for(work)
    page_tokens = costs.banks if costs.memory is not None and costs.memory.pim is not None else 16
    kv = PagedKVCache(int(costs.kv_capacity_bytes()), page_tokens, int(costs.kv_bytes_per_token()))
    try:
        sched = IterationScheduler(requests, work.batch, kv, work.kv_admission)
    except ValueError as exc:
        raise CompileError(f"the KV cache cannot serve this workload: {exc}", work.span,
                           "shorten the requests or give the kv_cache region more room") from None

    estimate = lru_cache(maxsize=None)(lambda seq: float(costs.mha_seconds(np.array([seq]))[0])) \
        if strategy.pim else (lambda seq: 0.0)
    placed: list[list[tuple[int, int]]] = [[] for _ in range(costs.channels)]
    channel_of: dict[int, int] = {}
    rr_next = 0
    steady, everything = _Totals(), _Totals()
    intervals: list[Interval] = []
    clock, peak_pages, preemptions = 0.0, 0, 0
    first_token: dict[int, float] = {}         # request -> when its prefill's first token is out
    finish: dict[int, float] = {}              # request -> when its last token is out
    arrival = {r.id: r.arrival for r in requests}
    while (it := sched.step()) is not None:
        preemptions += len(it.preempted)
        for e in it.entries:
            if e.phase == "prefill" and e.request_id not in first_token:
                first_token[e.request_id] = it.start_s + costs.prefill_seconds(e.new_tokens)
        if it.preempted and strategy.pim:       # recompute preemption: they leave their channels
            gone = set(it.preempted)
            placed = [[item for item in chnl if item[0] not in gone] for chnl in placed]
        # 1. channels for the newcomers (their estimate at their input length)
        new = [(e.request_id, e.new_tokens) for e in it.entries if e.phase == "prefill"]
        if new and strategy.pim:
            if strategy.allocation == "greedy_min_load":
                placed = greedy_min_load(new, placed, estimate).channels
            else:
                placed = round_robin(new, placed, estimate, start=rr_next).channels
                rr_next += len(new)
            channel_of.update({rid: c for c, chnl in enumerate(placed) for rid, _ in chnl})
        decode = [e for e in it.entries if e.phase == "decode"]
        backlog = sched.waiting > 0            # the batch is full and requests wait
        totals = _iteration(costs, decode, channel_of, it.index, clock, intervals if timeline else None)
        sched.clock_s += totals.seconds
        if timeline:
            intervals.append(Interval("device:iterations", f"iteration {it.index}", clock, clock + totals.seconds,
                                      "iteration", {"decoding": len(decode), "admitted": len(it.admitted),
                                                    "finished": len(it.finished), "kv_pages": it.kv_used_pages}))
        clock += totals.seconds
        finish.update((rid, clock) for rid in it.finished)
        everything.add(totals)
        if backlog:
            steady.add(totals)
        peak_pages = max(peak_pages, it.kv_used_pages)
        # 4. the finished leave their channels
        if it.finished and strategy.pim:
            gone = set(it.finished)
            placed = [[item for item in chnl if item[0] not in gone] for chnl in placed]
        if progress is not None:
            progress(len(requests) - sched.waiting - sched.running, len(requests))
    window = steady if steady.tokens else everything
    report = _report(system, costs, work, requests, window, everything, kv, peak_pages)
    out_len = {r.id: r.output_len for r in requests}
    report.update(request_latencies([first_token[r] - arrival[r] for r in first_token],
                                    [(finish[r] - first_token[r]) / (out_len[r] - 1) for r in finish if out_len[r] > 1],
                                    [finish[r] - arrival[r] for r in finish]), preemptions=preemptions)
    return ServingResult(report, intervals)


def _iteration(costs: DeviceCosts, decode, channel_of: dict[int, int], index: int, clock: float,
               intervals: list | None) -> _Totals:
    """One iteration's device time and work, over its pp micro-batches."""
    totals = _Totals(iterations=1, tokens=len(decode), batch=len(decode))
    if not decode:
        return totals
    s = costs.strategy
    seqs = np.array([e.past_len + e.new_tokens for e in decode], dtype=np.int64)     # context_len
    chans = np.array([channel_of.get(e.request_id, 0) for e in decode], dtype=np.int64)
    at = clock
    stages = costs.pp if costs.pipeline == "micro_batches" else 1
    everyone = np.arange(len(decode))
    for mb in np.array_split(everyone, stages) if stages > 1 else [everyone]:
        if not len(mb):
            continue
        groups = sub_batch_groups(costs, mb, chans)
        chains = [costs.layer(seqs[g], chans[g]) for g in groups]
        record = None
        if intervals is not None:
            record = _recorder(costs, intervals, index, at)
        if len(chains) == 2 and costs.interleave == "stages":
            seconds = stage_schedule(chains, costs.layers, record)[0]
        else:
            seconds = schedule_chains(chains, costs.layers, blocked=s.pim and s.row_buffers == "single",
                                      record=record)
        seconds += costs.pipeline_send(len(mb)) if stages > 1 else 0.0
        at += seconds
        totals.seconds += seconds
        for chain in chains:
            totals.flops += costs.layers * sum(seg.flops for seg in chain)
            totals.dram_bytes += costs.layers * sum(seg.dram_bytes for seg in chain)
            totals.pim_busy_s += costs.layers * sum(seg.pim_busy_s for seg in chain)
            for seg in chain:
                totals.busy_s[seg.resource] = totals.busy_s.get(seg.resource, 0.0) + costs.layers * seg.seconds
    return totals


def sub_batch_groups(costs: DeviceCosts, mb: np.ndarray, chans: np.ndarray) -> list[np.ndarray]:
    """The sub-batches of the requests `mb` (indices into `chans`, their channels): with
    sub-batch interleaving each channel's requests in batch order, halved by Algorithm 3 over the
    channels; else the one batch."""
    if costs.strategy.sub_batches <= 1:
        return [mb]
    by_channel = mb[np.argsort(chans[mb], kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(chans[mb], minlength=costs.channels)))).tolist()
    halves = partition_sub_batches([by_channel[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    groups = [np.sort(np.concatenate(half).astype(np.int64)) for half in halves]
    return [g for g in groups if len(g)]


def _recorder(costs: DeviceCosts, intervals: list, index: int, offset: float):
    names = {"npu": f"npu:{costs.processor.name}", "link": f"link:{costs.link.name if costs.link else 'link'}",
             "pim": f"pim:{costs.memory.name if costs.memory is not None else 'pim'}"}

    def record(chain: int, layer: int, seg: Segment, start: float, end: float) -> None:
        if layer == TIMELINE_LAYER and end > start:
            intervals.append(Interval(names[seg.resource], f"{seg.name} sb{chain + 1}", offset + start,
                                      offset + end, "decode", {"iteration": index, "sub_batch": chain + 1,
                                                               "layer": layer}))
    return record


def _check_weights_fit(system: System, costs: DeviceCosts) -> None:
    need = costs.weight_bytes_per_device()
    regions = [r for r in (costs.memory.regions if costs.memory is not None else ()) if "weights" in r.holds]
    if costs.strategy.processor == "gpu" or not regions:
        room, where, span = costs.processor.memory_bytes, f"{costs.processor.name}'s memory", costs.processor.span
    else:
        room, where, span = sum(r.size_bytes for r in regions), "the weights region", regions[0].span
    if need > room:
        raise CompileError(f"{need / 2**30:.2f} GiB of weights per device (tp = {costs.tp}, pp = {costs.pp}) "
                           f"do not fit in {where} ({room / 2**30:.2f} GiB)", span,
                           "raise tp or pp in the mapping's params, or give the weights more room")


def _report(system: System, costs: DeviceCosts, work, requests, window: _Totals, everything: _Totals,
            kv: PagedKVCache, peak_pages: int) -> dict:
    s, p = costs.strategy, costs.processor
    peak = p.peak_flops[peak_dtype(p, costs.dtype)] * (p.efficiency if p.kind != "npu" else 1.0)
    t = window.seconds or math.inf
    util = {"npu": window.flops / (peak * t),
            "pim": window.pim_busy_s / (costs.channels * t) if s.pim else 0.0,
            "bandwidth": window.dram_bytes / (p.memory_bandwidth_bytes_per_s * t),
            "npu_busy": window.busy_s.get("npu", 0.0) / t}
    out = {
        "system": system.name, "model": system.model.name, "strategy": s.name,
        "mode": "serving", "tokens_per_s": window.tokens / t,
        "utilization": util,
        "tp": costs.tp, "pp": costs.pp, "devices": costs.tp * costs.pp,
        "pipeline": costs.pipeline, "all_reduce": costs.all_reduce,
        # a CSV of requests stands in for the dataset
        "batch": work.batch, "dataset": work.requests_csv or work.dataset, "requests": len(requests),
        "mean_input_len": float(np.mean([r.input_len for r in requests])) if requests else 0.0,
        "mean_output_len": float(np.mean([r.output_len for r in requests])) if requests else 0.0,
        "iterations": everything.iterations, "measured_iterations": window.iterations,
        "measured_tokens": window.tokens,
        "iteration_s": window.seconds / window.iterations if window.iterations else 0.0,
        "makespan_s": everything.seconds,
        "end_to_end_tokens_per_s": everything.tokens / everything.seconds if everything.seconds else 0.0,
        "mean_decode_batch": window.batch / window.iterations if window.iterations else 0.0,
        "breakdown_s": {"decode": everything.seconds,
                        **{f"{r}_busy": everything.busy_s.get(r, 0.0) for r in ("npu", "pim", "link")}},
        "row_buffers": s.row_buffers, "channel_allocation": s.allocation, "sub_batches": s.sub_batches,
        "processor": p.name,
        "memory_bytes": {"weights": int(costs.weight_bytes_per_device()),
                         "kv_cache": int(peak_pages * kv.page_bytes),
                         "total": int(costs.weight_bytes_per_device() + peak_pages * kv.page_bytes),
                         "kv_cache_capacity": int(kv.total_pages * kv.page_bytes)},
    }
    if s.pim:
        out["pim"] = {"tile_s": costs.tile_seconds, "npu_read_share": costs.read_share,
                      "channels": costs.channels, **costs.command_sample}
    if costs.memory is not None:     # the processor's DRAM traffic, for its energy (interpreter/run_energy.py)
        out["dram_traffic_bytes"] = {costs.memory.name: everything.dram_bytes}
    return out
