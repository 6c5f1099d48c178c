"""The pipelined-loading run loop: a model whose layers are read from storage while it runs.

Selected by a mapping with `loop = pipelined_loading;`. Three strategies (`mapping.strategy`),
after [PIPELOAD] Sec. V-A-2:
  baseline    load the whole model, then run every pass (peak memory: the whole model);
  pipeswitch  one loader streams layers while the inference agent runs them, nothing is freed;
  pipeload    m loading agents round robin, in-order inference, a daemon that frees each layer after
              use and keeps the layers within `workload.memory_limit` ([PIPELOAD] Sec. III).
`mapping.params.loading_agents` is m, or `auto` for the Pipeline Planner (Sec. IV-2), which pre-runs
every m that fits the limit and keeps the fastest. `mapping.params.profile` names a layer-profile
file (written by `pimc execute`); without it the per-layer times come from the spec
(layer_profile.from_spec). `mapping.params.agent_load_bandwidth` caps one agent's load rate;
`mapping.params.load_contention` (alpha, default 0) slows k concurrent loads by 1 + alpha (k - 1).

A decoder generates `workload.output_len` tokens: pass 1 runs the `input_len`-token prompt and gives
the first token, each later pass one token; the pipelined strategies reload every layer for every
pass (Sec. V-B-2). An encoder runs one pass.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ...ir.run_result import RunResult
from ...ir.workload import System
from ...frontend.diagnostics import did_you_mean
from ...ir.errors import CompileError
from ...ir import units as U
from ...ir.params import FILE, NAME, WHOLE, Param
from ...ir.files import InputFileError
from . import layer_profile
from .loading_schedule import Job, Machine, Policy, plan, simulate

STRATEGIES = ("baseline", "pipeswitch", "pipeload")
# loading agents are threads of one process: past MAX_AGENTS the plan is no longer a pipeline of a few
# loaders ([PIPELOAD] Sec. III-B uses a handful) but a thread per layer of a huge model
MAX_AGENTS = 1024
PARAMS = {"loading_agents": Param(WHOLE, f"1..{MAX_AGENTS}", "loading agents m, or auto (the Pipeline Planner)", ("auto",)),
          "profile": Param(FILE, meaning="a layer-profile file written by pimc execute"),
          "agent_load_bandwidth": Param(U.BANDWIDTH, "> 0", "one agent's load rate"),
          "load_contention": Param(U.NONE, ">= 0", "alpha: k concurrent loads run 1 + alpha (k - 1) times slower"),
          "inference_agents": Param(WHOLE, ">= 1", "inference agents (1: stated, not varied)"),
          "daemon_agents": Param(WHOLE, ">= 1", "daemon agents (1: stated, not varied)"),
          "layer_assignment": Param(NAME, meaning="how layers go to loading agents (round_robin: stated, not varied)")}
OP_CLASSES = ("layers",)          # one processor runs every layer
LINKS = 0
# one inference agent, one daemon, round-robin loading ([PIPELOAD] Sec. III-B): stated, not varied
FIXED = {"inference_agents": 1, "daemon_agents": 1, "layer_assignment": "round_robin"}



@dataclass(frozen=True)
class Setup:
    """What a run of this loop needs, checked: the spec, the profile, the budget."""
    system: System
    profile: layer_profile.Profile
    machine: Machine
    strategy: str
    agents: int | None            # None: the planner chooses
    limit_bytes: int | None       # workload.memory_limit
    activation_bytes: int
    passes: int


def _fail(message: str, span, hint: str | None = None):
    raise CompileError(message, span, hint)


def activation_bytes(system: System) -> int:
    """KV cache of every layer over the whole sequence plus the largest layer's working set, fp32."""
    m, wl = system.model, system.workload
    seq = wl.input_len + wl.output_len
    kv = 2 * m.layers * m.kv_heads * m.head_dim * seq * 4 if m.architecture == "decoder" else 0
    work = wl.input_len * max(m.ffn, 3 * m.hidden, m.heads * wl.input_len) * 4 * 2
    return kv + work


def setup(system: System) -> Setup:
    mapping, wl = system.mapping, system.workload
    if not system.storage:
        _fail(f"system '{system.name}' loads its layers from storage but declares none", system.span,
              "declare `storage disk { kind = disk; read_bandwidth = ...; }` and add `storage = [disk];`")
    if not system.processors:
        _fail(f"system '{system.name}' has no processor to run the layers", system.span)
    if wl is None:
        _fail(f"system '{system.name}' has no workload", system.span)
    if mapping.strategy not in STRATEGIES:
        _fail(f"strategy '{mapping.strategy}' is not one of the pipelined-loading strategies", mapping.span,
              "choose " + ", ".join(STRATEGIES))
    params = mapping.params
    for name in params:
        if name not in PARAMS:
            _fail(f"the pipelined-loading loop has no param '{name}'", mapping.span,
                  did_you_mean(name, PARAMS, "params"))
    for name, only in FIXED.items():
        if name in params and params[name] != only:
            _fail(f"{name} = {params[name]} is not modelled; the mechanism has {name} = {only}", mapping.span,
                  f"remove it or set {name} = {only}")
    agents = params.get("loading_agents", 1)
    if agents == "auto":
        agents = None
    elif not (isinstance(agents, (int, float)) and agents >= 1 and float(agents).is_integer()):
        _fail(f"loading_agents must be a positive whole number or auto, not {agents!r}", mapping.span)
    else:
        agents = int(agents)
    path = params.get("profile")
    if path:
        span = mapping.param_spans.get("profile", mapping.span)
        try:
            if system.data is not None:         # a loaded spec: the file must be one it may read
                path = str(system.data.resolve(str(path), Path(span.path).parent if span.path.endswith(".pim")
                                               else Path(system.span.path).parent, "layer profile", ".json"))
            elif not os.path.isabs(path):
                path = str(Path(system.span.path).parent / path)
            profile = layer_profile.read(path)
        except InputFileError as exc:
            _fail(exc.message, span, exc.hint)
        except ValueError as exc:
            _fail(str(exc), span, "write one with `pimc execute SPEC --profile-out FILE`")
        if len(profile.layers) != system.model.layers:
            _fail(f"the profile has {len(profile.layers)} layers, model '{system.model.name}' has "
                  f"{system.model.layers}", mapping.span, "profile this model with `pimc execute`")
    else:
        rate = params.get("agent_load_bandwidth")
        if rate is not None and not (isinstance(rate, (int, float)) and rate > 0):
            _fail(f"agent_load_bandwidth must be a positive bandwidth, not {rate!r}", mapping.span,
                  "e.g. agent_load_bandwidth = 1.2 GB/s;")
        profile = layer_profile.from_spec(system, rate)
    cpu = system.processors[0]
    passes = wl.output_len if system.model.architecture == "decoder" else 1
    contention = params.get("load_contention", 0.0)
    if not isinstance(contention, (int, float)) or contention < 0:
        _fail(f"load_contention must be a number >= 0, not {contention!r}", mapping.span)
    machine = Machine(cpu.cores, system.storage[0].read_bandwidth_bytes_per_s, float(contention))
    return Setup(system, profile, machine,
                 mapping.strategy, agents, wl.memory_limit_bytes, activation_bytes(system), passes)


def jobs(profile: layer_profile.Profile, passes: int) -> list[Job]:
    return [Job(l, lp.bytes, lp.load_s, lp.prefill_s if p == 0 else lp.decode_s)
            for p in range(passes) for l, lp in enumerate(profile.layers)]


def layer_budget(s: Setup) -> float | None:
    """Room the daemon has for layers: the limit less the resident parts and the activations."""
    if s.limit_bytes is None:
        return None
    room = s.limit_bytes - s.profile.resident_bytes - s.activation_bytes
    largest = max(l.bytes for l in s.profile.layers)
    if room < largest:
        wl = s.system.workload
        _fail(f"memory_limit {s.limit_bytes / 1e6:.1f} MB cannot hold the resident parts "
              f"({s.profile.resident_bytes / 1e6:.1f} MB), the activations ({s.activation_bytes / 1e6:.1f} MB) "
              f"and one layer ({largest / 1e6:.1f} MB)", wl.span,
              f"raise it to at least {(s.limit_bytes - room + largest) / 1e6:.1f} MB")
    return room


def predict(s: Setup, strategy: str | None = None, agents: int | None = None) -> dict:
    """One strategy's predicted timeline: end, first pass end, peak bytes, loads and computes."""
    strategy = strategy or s.strategy
    p, all_jobs = s.profile, jobs(s.profile, s.passes)
    head = [p.head_prefill_s if i == 0 else p.head_decode_s for i in range(s.passes)]
    layers_total = sum(l.bytes for l in p.layers)
    per_pass = len(p.layers)
    out = {"strategy": strategy, "planner": None}
    if strategy == "baseline":
        t, ends = p.whole_load_s, []
        for i in range(s.passes):
            t += head[i] + sum(j.compute_s for j in all_jobs[i * per_pass:(i + 1) * per_pass])
            ends.append(t)
        out.update(end_s=t, pass_ends_s=ends, layers_peak=layers_total, load_s=p.whole_load_s,
                   compute_s=t - p.whole_load_s, agents=1, schedule=None)
        return out
    budget = layer_budget(s) if strategy == "pipeload" else None
    if strategy == "pipeswitch":
        agents = 1
    elif agents is None:
        agents = s.agents
    if agents is None:
        agents, times = plan(all_jobs, s.machine, budget, range(1, per_pass + 1))
        out["planner"] = {str(m): t for m, t in times.items()}
    sched = simulate(all_jobs, Policy(agents, strategy == "pipeload", budget), s.machine)
    # the resident parts load first; the head runs after each pass's last layer
    shift, ends, extra = p.resident_load_s, [], 0.0
    for i in range(s.passes):
        extra += head[i]
        ends.append(shift + extra + sched.computes[(i + 1) * per_pass - 1][2])
    out.update(end_s=ends[-1], pass_ends_s=ends, layers_peak=sched.peak_bytes,
               load_s=p.resident_load_s + sum(e - st for _, _, st, e in sched.loads),
               compute_s=sched.compute_s + sum(head), agents=agents, schedule=sched)
    return out


def report(s: Setup, pred: dict) -> dict:
    system, wl, p = s.system, s.system.workload, s.profile
    end, ends = pred["end_s"], pred["pass_ends_s"]
    weights = p.resident_bytes + pred["layers_peak"]
    total = weights + s.activation_bytes
    # an encoder generates nothing: its throughput is the tokens it reads
    generated = wl.batch * (wl.output_len if system.model.architecture == "decoder" else wl.input_len)
    out = {
        "system": system.name, "model": system.model.name, "strategy": pred["strategy"],
        "loop": "pipelined_loading", "loading_agents": pred["agents"],
        "batch": wl.batch, "input_len": wl.input_len, "output_len": wl.output_len, "passes": s.passes,
        "ttft_s": ends[0],
        "tpot_s": (end - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ends[0],
        "tokens_per_s": generated / end if end else 0.0,
        "end_to_end_s": end,
        "memory_bytes": {"weights": weights, "activations": s.activation_bytes, "total": total,
                         "weights_by_part": {"resident": p.resident_bytes, "layers_peak": pred["layers_peak"]}},
        "storage_bytes": {"weights": p.resident_bytes + sum(l.bytes for l in p.layers)},
        "memory_limit_bytes": s.limit_bytes,
        "within_limit": s.limit_bytes is None or total <= s.limit_bytes,
        "utilization": {"loading_agents": min(1.0, pred["load_s"] / (end * pred["agents"])) if end else 0.0,
                        "inference_agent": pred["compute_s"] / end if end else 0.0,
                        # the processor that runs the layers, busy while the inference agent computes
                        # (its energy: interpreter/run_energy.py; the loading agents' CPU time is not in it)
                        f"{system.processors[0].kind}:{system.processors[0].name}":
                            pred["compute_s"] / end if end else 0.0},
        "breakdown_s": {"loading_agents_busy": pred["load_s"], "compute": pred["compute_s"],
                        "inference_waits_for_loads": max(0.0, end - pred["compute_s"])},
        "profile": p.source,
    }
    if pred["planner"]:
        out["planner_latency_s"] = pred["planner"]
    return out


def intervals(s: Setup, pred: dict) -> list:
    from ...ir.intervals import Interval
    sched = pred["schedule"]
    if sched is None:
        return [Interval("loader", "load model", 0.0, s.profile.whole_load_s, "load")]
    shift = s.profile.resident_load_s
    per_pass = len(s.profile.layers)
    out = [Interval(f"loading_agent_{a}", f"layer {g % per_pass}", shift + st, shift + e, "load",
                    {"pass": g // per_pass}) for a, g, st, e in sched.loads]
    out += [Interval("inference_agent", f"layer {g % per_pass}", shift + st, shift + e, "compute",
                     {"pass": g // per_pass}) for g, st, e in sched.computes]
    return out


def run(system: System, timeline: bool = False, **_) -> RunResult:
    s = setup(system)
    pred = predict(s)
    return RunResult(report(s, pred), intervals(s, pred) if timeline else [])



def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def execute(system: System, options) -> dict:
    """`pimc execute`: write the weights once, profile the layers, run each configuration for real,
    and predict each from the measured profile on this machine's cores. Returns the comparison.
    The inference agent is one thread, so numpy's BLAS runs single-threaded (a BLAS thread pool
    competing with the loader threads on a few cores is many times slower, and is not the mechanism)."""
    from threadpoolctl import threadpool_limits
    from .pipelined_executor import return_freed_memory_to_the_os
    return_freed_memory_to_the_os()                # before the first layer buffer is ever freed
    with threadpool_limits(limits=1, user_api="blas"):
        return _execute(system, options)


def _execute(system: System, options) -> dict:
    from . import pipelined_executor as ex
    from ..model_layers import weight_files
    from ..model_layers.layer_blobs import partition
    from ..model_layers.numpy_forward import forward_plain, inputs_for
    model, wl = system.model, system.workload
    s = setup(system)                              # checks the spec before any file is written
    blobs = partition(model)
    folder = weight_files.ensure(model.name, blobs, options.seed,
                                 Path(options.cache) / "weights" if options.cache else None)
    layer_bytes = [b.bytes for b in blobs if b.part == "layer"]
    prof = ex.profile(model, folder, layer_bytes, wl.input_len, wl.output_len, options.cold, options.seed)
    profile_path = options.profile_out or str(folder / "profile.json")
    layer_profile.write(profile_path, prof, {"model": model.name, "dtype": model.dtype, "cores": usable_cores(),
                                             "input_len": wl.input_len, "cold": bool(options.cold)})
    # numpy computes a 16-bit layer in fp32: one upcast copy of a layer lives while it runs
    upcast = max(b.elements for b in blobs if b.part == "layer") * 4 if model.dtype != "fp32" else 0
    here = Setup(system, layer_profile.read(profile_path), replace(s.machine, cores=usable_cores()),
                 s.strategy, s.agents, s.limit_bytes, s.activation_bytes + upcast, s.passes)
    inputs = inputs_for(model, wl.input_len, options.seed)
    reference = forward_plain(model, {b.name: weight_files.read(folder / f"{b.name}.safetensors") for b in blobs},
                              inputs, wl.output_len)
    configs = [(st, m) for st in options.strategies for m in (options.agents if st == "pipeload" else [None])]
    rows = []
    for strategy, m in configs:
        pred = predict(here, strategy, m if m is not None else here.agents)
        agents = pred["agents"]
        budget = layer_budget(here) if strategy == "pipeload" else None
        got = ex.run(model, folder, layer_bytes, inputs, wl.output_len, strategy, agents, budget, options.cold)
        predicted = report(here, pred)
        rows.append({
            "strategy": strategy, "loading_agents": agents,
            "measured_latency_s": got.latency_s, "predicted_latency_s": predicted["end_to_end_s"],
            "latency_error": predicted["end_to_end_s"] / got.latency_s - 1,
            "measured_ttft_s": got.ttft_s, "predicted_ttft_s": predicted["ttft_s"],
            "measured_peak_rss_growth_bytes": got.peak_rss_growth_bytes,
            "predicted_memory_bytes": predicted["memory_bytes"]["total"],
            "memory_error": (predicted["memory_bytes"]["total"] / got.peak_rss_growth_bytes - 1
                             if got.peak_rss_growth_bytes > 0 else None),     # a tiny model may not grow it
            "daemon_layers_peak_bytes": got.layers_peak_bytes,
            "predicted_layers_peak_bytes": predicted["memory_bytes"]["weights_by_part"]["layers_peak"],
            "output_equals_plain_forward": bool(np.array_equal(got.output, reference)),
        })
    return {"system": system.name, "model": model.name, "cores": usable_cores(), "cold": bool(options.cold),
            "weights_folder": str(folder), "profile": profile_path, "memory_limit_bytes": s.limit_bytes,
            "runs": rows}
