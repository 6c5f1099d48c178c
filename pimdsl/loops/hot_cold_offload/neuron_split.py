"""The hot/cold neuron offload run loop: one GPU holds the hot neurons, NDP-DIMMs hold every weight
and compute the cold neurons ([HERMES_NDP] Sec. IV). Selected by `loop = hot_cold_offload;`.

Per run: prefill on the GPU with every weight streamed over PCIe, overlapped layer by layer
([HERMES_NDP] Sec. IV-A-2, "a traditional offloading strategy"); then per generated token and layer:
QKV split into predicted-active hot neurons (GPU) and cold neurons (each DIMM its own), a barrier and
the merge on the NDP side; attention on the NDP-DIMMs (the KV cache lives there); the projection on
the GPU, under which the host moves newly hot neurons to the GPU over PCIe (online adjustment) and,
at the end of each window, cold neurons between DIMMs over the DIMM-links (Algorithm 1); the MLP
split like the QKV; the layer output reduced on the NDP side (Sec. IV-A-2, Fig. 6).

Times (what each covers):
  GPU block     active hot bytes at the GPU's memory bandwidth, or its FLOPs at peak x efficiency
                (interpreter/host/models.py roofline), + 2 T_sync (Eq. 3; T_sync = the PCIe link's latency);
  DIMM block    per DIMM its active cold neurons x one neuron's time, the slowest DIMM bounds the block
                (Eq. 2). A neuron's time is the NDP unit's declared `gemv` program (row activations,
                the ranks' burst reads, GEMV-unit passes) timed by the DRAM engine once per shape
                (sparse_ndp_gemv); for a unit without one, max(bytes / (ranks x channel rate),
                MACs / MAC rate): the centre-buffer core reads its ranks in parallel ([HERMES_NDP]
                Sec. IV-A), MAC rate = lanes x clock / tMAC of the declared NDP core;
  attention     KV bytes over all DIMMs' internal bandwidth, or its MACs at the MAC rate;
  predictor     the state and correlation tables read once per token by the host CPU (serial);
  copies        hot-neuron copies (PCIe) and remaps (DIMM-links) beyond the projection time.
The merge/reduce (a few KB, [HERMES_NDP] Sec. IV-A-2) and softmax on the activation unit are not timed.

Strategies (`mapping.strategy`, [HERMES_NDP] Sec. V-A-2, V-B, V-C) are in STRATEGIES; see
`sparse_switches` and the baseline functions. Activations come from `pimdsl.sparsity.activations`.

The per-neuron loops of a token (the activation chain, predict + update, `tally`, `adjust_compiled`,
Algorithm 1's walk) are compiled by numba and cached (jit_cache.py): the first run after an
install or an edit of those files spends a few seconds compiling them, once. The neuron's time per
shape and an optimal placement are kept on disk by content (interpreter/timing_cache.py), so a
second run of a system times no program and solves no placement.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...frontend.diagnostics import did_you_mean
from ...interpreter.host.models import kernel_time, transfer_time
from ...ir.workload import DTYPE_BYTES, System
from ...lowering.records import Kernel
from ...ir.errors import CompileError
from ...sparsity import activations, neuron_placement
from ...sparsity.activation_predictor import Predictor
from ...sparsity.window_remap import remap_window
from ...unread import leading_links
from .decode_token import COUNTS, TIMES, DecodeToken, token_time
from ...ir import units as U
from ...ir.params import NAME, WHOLE, Param

STRATEGIES = ("hermes", "hermes_base", "hermes_host", "accelerate", "flexgen", "deja_vu", "hermes_random",
              "hermes_partition", "hermes_adjustment", "hermes_token_adjustment", "hermes_layer_adjustment",
              "tensor_parallel")
# GPUs alone, every weight in their memory, sharded by tensor parallelism: the server the paper compares
# with ([HERMES_NDP] Sec. V-F, TensorRT-LLM on 5 x A100); no NDP-DIMMs, host CPU or PCIe needed
GPU_ONLY = ("tensor_parallel",)
FRACTION = U.NONE
PARAMS = {
    "activation_sparsity": Param(FRACTION, "0..1", "mean fraction of a sparse block's neurons that do not fire per token"),
    "hot_fraction": Param(FRACTION, "0..1", "power law: this fraction of neurons ..."),
    "hot_share": Param(FRACTION, "0..1", "... carries this share of the activations"),
    "similarity_rho": Param(U.NONE, "-1..1", "per-token correlation of a neuron's latent (token-wise similarity)"),
    "layer_coupling": Param(U.NONE, "0..1", "weight of the two correlated neurons of the previous block"),
    "input_drift": Param(U.NONE, ">= 0", "std of a run's per-neuron latent shift from the profiled frequencies"),
    "window_tokens": Param(WHOLE, ">= 1", "tokens per cold-neuron remapping window (Algorithm 1)"),
    "predictor_lambda": Param(U.NONE, "", "lambda of s1 + lambda * s2 > T"),
    "predictor_threshold": Param(U.NONE, "", "T of s1 + lambda * s2 > T"),
    "predictor_step": Param(U.NONE, "> 0", "state increase when a neuron fires"),
    "hot_threshold": Param(U.NONE, "", "T_h: a neuron whose state exceeds it is hot"),
    "state_bits": Param(WHOLE, "1..32", "bits of a neuron's predictor state"),
    "gpu_reserved": Param(U.BYTES, ">= 0", "GPU memory that does not hold weights (workspace); the rest holds weights"),
    "host_cpu": Param(NAME, meaning="processor that runs the scheduler and, for hermes_host, the cold neurons"),
    # the placement program has groups x DIMMs variables per block; past a few thousand groups it is no
    # longer the paper's coarse frequency grouping ([HERMES_NDP] Sec. IV-C) but a per-neuron program
    "ilp_groups": Param(WHOLE, "1..4096", "frequency groups per block in the placement program"),
    "ilp_time_limit": Param(U.TIME, "> 0", "time limit of the placement program"),
    "accelerate_bandwidth": Param(U.BANDWIDTH, "> 0", "Accelerate's effective host-to-GPU weight rate (calibrated)"),
    "flexgen_bandwidth": Param(U.BANDWIDTH, "> 0", "FlexGen's and Deja Vu's effective host-to-GPU weight rate (calibrated)"),
    "dejavu_predictor_share": Param(FRACTION, "0..1", "share of Deja Vu's compute time its MLP predictors take"),
}
OP_CLASSES = ("fc_hot", "fc_cold", "projection", "merge", "scheduler")
DEFAULTS = {"activation_sparsity": 0.9, "hot_fraction": 0.2, "hot_share": 0.8, "similarity_rho": 0.97,
            "layer_coupling": 0.6, "input_drift": 0.5, "window_tokens": 5, "predictor_lambda": 6,
            "predictor_threshold": 15, "predictor_step": 4, "hot_threshold": 10, "state_bits": 4,
            "ilp_groups": 16, "ilp_time_limit": 10.0, "dejavu_predictor_share": 0.181}
# strategies whose predictors forecast the neurons a ReLU leaves at zero: [HERMES_NDP] Sec. V-A-2 says Deja Vu
# "supports OPT models only", OPT being the ReLU models it was built for; a model is refused by its activation
RELU_ONLY = ("deja_vu",)


def links_read(system) -> int:
    """The links this loop times: the GPU's PCIe and the DIMM-links, or the GPUs' NVLink, by kind."""
    return leading_links(system, ("pcie", "dimm_link", "nvlink"))


@dataclass(frozen=True)
class Switches:
    """What a sparse strategy switches on ([HERMES_NDP] Sec. V-C)."""
    placement: str           # ilp or random
    adjust: bool             # online hot/cold adjustment (Sec. IV-C-2)
    mode: str                # predictor mode (activation_predictor.MODES)
    remap: bool              # window-based cold remapping (Sec. IV-D)
    cold: str = "ndp"        # ndp (the DIMMs) or host (the CPU, Hermes-host)


SPARSE = {
    "hermes": Switches("ilp", True, "combined", True),
    "hermes_host": Switches("ilp", True, "combined", False, "host"),
    "hermes_random": Switches("random", False, "combined", False),
    "hermes_partition": Switches("ilp", False, "combined", False),
    "hermes_adjustment": Switches("ilp", True, "combined", False),
    "hermes_token_adjustment": Switches("ilp", True, "token", False),
    "hermes_layer_adjustment": Switches("ilp", True, "layer", False),
}



def _fail(message, span, hint=None):
    raise CompileError(message, span, hint)


@dataclass(frozen=True)
class Setup:
    system: System
    strategy: str
    params: dict
    gpu: object
    host: object
    dimm: object                       # the NDP-DIMM memory
    pcie: object
    link: object | None                # the DIMM-links (the NVLink for GPU_ONLY strategies)
    dimms: int
    dimm_bw: float                     # one DIMM's internal read rate (all ranks)
    mac_rate: float                    # one NDP core's MACs per second
    dt: float                          # bytes per weight element
    qkv_elems: int                     # elements of one QKV neuron (input row of q, k, v)
    mlp_elems: int                     # elements of one FFN neuron (up, gate, down)
    oproj_bytes: float                 # one layer's projection
    other_bytes: float                 # embeddings, head, norms
    budget: float                      # GPU bytes for weights (memory less gpu_reserved)


def setup(system: System) -> Setup:
    mapping, model, wl = system.mapping, system.model, system.workload
    if wl is None or model is None or model.architecture != "decoder":
        _fail(f"system '{system.name}' needs a decoder model and a workload for the hot/cold offload loop",
              system.span)
    if mapping.strategy not in STRATEGIES:
        _fail(f"strategy '{mapping.strategy}' is not one of the hot/cold offload strategies", mapping.span,
              did_you_mean(mapping.strategy, STRATEGIES, "strategies") or "choose " + ", ".join(STRATEGIES))
    if mapping.strategy in RELU_ONLY and model.activation != "relu":
        _fail(f"strategy '{mapping.strategy}' needs a ReLU model: its predictors forecast the neurons a ReLU "
              f"leaves at zero ([HERMES_NDP] Sec. V-A-2: OPT models only); '{model.name}' uses {model.activation}",
              mapping.span, "choose a ReLU (OPT) system, or another strategy")
    params = dict(DEFAULTS)
    for name, value in mapping.params.items():
        if name not in PARAMS:
            _fail(f"the hot/cold offload loop has no param '{name}'", mapping.param_spans.get(name, mapping.span),
                  did_you_mean(name, tuple(PARAMS), "params") or "params: " + ", ".join(PARAMS))
        params[name] = value
    gpu_only = mapping.strategy in GPU_ONLY
    for name in () if gpu_only else ("gpu_reserved", "host_cpu", "accelerate_bandwidth", "flexgen_bandwidth"):
        if name not in params:
            _fail(f"the hot/cold offload loop needs mapping param '{name}' ({PARAMS[name]})", mapping.span)
    procs = {p.name: p for p in system.processors}
    gpu_name = mapping.placement.get("decode", {}).get("fc_hot")
    gpu = procs.get(gpu_name) or next((p for p in system.processors if p.kind == "gpu"), None)
    host = procs.get(params.get("host_cpu"))
    if gpu is None or (host is None and not gpu_only):
        _fail("the hot/cold offload loop needs a GPU (decode fc_hot) and the host CPU (param host_cpu) "
              "among the system's processors", system.span)
    dimm = next((m for m in system.memories if m.pim is not None), None)
    if dimm is None and not gpu_only:
        _fail(f"system '{system.name}' has no memory with an NDP core", system.span)
    pcie = next((l for l in system.links if l.kind == "pcie"), None)
    if pcie is None and not gpu_only:
        _fail(f"system '{system.name}' has no PCIe link between the GPU and the DIMMs", system.span)
    link = next((l for l in system.links if l.kind == ("nvlink" if gpu_only else "dimm_link")), None)
    pim = dimm.pim if dimm is not None else None
    if pim is not None and ("tMAC" not in pim.timing_cycles or not pim.clock_hz):
        _fail(f"NDP core '{pim.name}' needs a clock and `timing {{ tMAC = N cycles; }}` (cycles per MAC pass)",
              pim.span)
    dt = DTYPE_BYTES[model.dtype]
    q = model.heads * model.head_dim
    kv = model.kv_heads * model.head_dim
    qkv = q + 2 * kv
    mlp = (3 if model.gated_ffn else 2) * model.hidden
    oproj = q * model.hidden * dt
    other = model.weight_bytes - model.layers * ((model.hidden * qkv + model.ffn * mlp) * dt + oproj)
    budget = gpu.memory_bytes * gpu.count - float(params.get("gpu_reserved", 0.0))
    if dimm is None:
        return Setup(system, mapping.strategy, params, gpu, host, None, pcie, link, 0, 0.0, 0.0, dt, qkv, mlp, oproj,
                     max(0.0, other), budget)
    return Setup(system, mapping.strategy, params, gpu, host, dimm, pcie, link, dimm.count,
                 dimm.peak_bandwidth_bytes_per_s * dimm.organization.ranks,
                 pim.lanes * pim.clock_hz / pim.timing_cycles["tMAC"], dt, qkv, mlp, oproj, max(0.0, other), budget)


# ---- device times -------------------------------------------------------------------------------

def gpu_s(s: Setup, nbytes: float, batch: int, kind: str = "gemv", floor: bool = True) -> float:
    """A GPU kernel over `nbytes` of FP16 weights for `batch` tokens (interpreter/host/models.py);
    without its `floor`, the share of a kernel's time these weights add (a neuron's, in a block's kernel)."""
    elems = nbytes / s.dt
    t = kernel_time(s.gpu, Kernel("fc", kind, s.gpu.name, s.system.model.dtype, 2 * elems * batch, nbytes))
    return t.seconds if floor else t.seconds - t.launch_s


def gpu_floor_s(s: Setup) -> float:
    """The floor of one GPU kernel (the measured GPU kernel model's launch latency; 0 on a roofline)."""
    return s.gpu.calibration.launch_latency_s if s.gpu.calibration is not None else 0.0


def host_s(s: Setup, nbytes: float, batch: int) -> float:
    elems = nbytes / s.dt
    return kernel_time(s.host, Kernel("fc", "gemv", s.host.name, "fp32", 2 * elems * batch, nbytes)).seconds


def dimm_s(s: Setup, nbytes, batch: int):
    """One DIMM's time for `nbytes` of weights (array or scalar): max(read, MAC)."""
    return np.maximum(nbytes / s.dimm_bw, nbytes / s.dt * batch / s.mac_rate)


def cold_neuron_s(s: Setup, nbytes: float, batch: int) -> float:
    """One activated cold neuron of `nbytes` on its DIMM: the NDP unit's declared `gemv` program timed by
    the DRAM engine (sparse_ndp_gemv, once per shape), or `dimm_s` for a unit that declares none."""
    if s.dimm.pim.program("gemv") is None:
        return float(dimm_s(s, nbytes, batch))
    from .sparse_ndp_gemv import neuron_seconds
    return neuron_seconds(s.dimm, int(round(nbytes / s.dt)), batch)


def kv_bytes(s: Setup, seq: int, batch: int) -> float:
    m = s.system.model
    return 2 * m.kv_heads * m.head_dim * seq * batch * s.dt


def attention_ndp_s(s: Setup, seq: int, batch: int) -> float:
    m = s.system.model
    macs = 2 * m.heads * m.head_dim * seq * batch
    return max(kv_bytes(s, seq, batch) / (s.dimms * s.dimm_bw), macs / (s.dimms * s.mac_rate))


def layer_bytes(s: Setup) -> float:
    m = s.system.model
    return (m.hidden * s.qkv_elems + m.ffn * s.mlp_elems) * s.dt + s.oproj_bytes


def sync_s(s: Setup) -> float:
    return s.pcie.latency_s


def prefill(s: Setup, rate: float, resident_layers: int, overlap: bool) -> list[tuple[float, float]]:
    """Per layer (stream_s, compute_s) of the prompt on the GPU; layers past `resident_layers` stream
    their weights at `rate`."""
    m, wl = s.system.model, s.system.workload
    tokens = wl.input_len * wl.batch
    out = []
    for layer in range(m.layers):
        nbytes = layer_bytes(s)
        flops = 2 * nbytes / s.dt * tokens + 4 * m.heads * m.head_dim * wl.input_len ** 2 * wl.batch
        compute = kernel_time(s.gpu, Kernel("prefill", "gemm", s.gpu.name, m.dtype, flops, nbytes)).seconds
        out.append((nbytes / rate if layer >= resident_layers else 0.0, compute))
    return out


def prefill_s(parts: list[tuple[float, float]], overlap: bool) -> float:
    if not overlap:
        return sum(a + b for a, b in parts)
    t_load = t_done = 0.0                     # weights of layer i+1 load while layer i computes
    for load, compute in parts:
        t_load += load
        t_done = max(t_done, t_load) + compute
    return t_done


def resident_layers(s: Setup, reserve: float) -> int:
    """Whole layers the GPU holds beside the embeddings, the head and `reserve` bytes (KV cache)."""
    room = s.budget - s.other_bytes - reserve
    return int(max(0, min(s.system.model.layers, room // layer_bytes(s))))


def model_totals(s: Setup) -> dict:
    m = s.system.model
    return {"weights": float(m.weight_bytes), "kv_cache": kv_bytes(s, s.system.workload.input_len
                                                                     + s.system.workload.output_len,
                                                                     s.system.workload.batch) * m.layers}


# ---- the sparse strategies: Hermes, Hermes-host and the ablations -------------------------------

def blocks_of(s: Setup) -> tuple[list[tuple[str, int]], list[float]]:
    m = s.system.model
    sizes, nbytes = [], []
    for layer in range(m.layers):
        sizes += [(f"L{layer}.qkv", m.hidden), (f"L{layer}.mlp", m.ffn)]
        nbytes += [s.qkv_elems * s.dt, s.mlp_elems * s.dt]
    return sizes, nbytes


def generator(s: Setup) -> activations.Generator:
    p, wl = s.params, s.system.workload
    stats = activations.Statistics(float(p["activation_sparsity"]), float(p["hot_fraction"]), float(p["hot_share"]),
                                   float(p["similarity_rho"]), float(p["layer_coupling"]), float(p["input_drift"]),
                                   wl.seed)
    return activations.Generator(blocks_of(s)[0], stats, wl.batch)


def check_capacity(s: Setup) -> None:
    """Every weight and the KV cache live on the DIMMs ([HERMES_NDP] Sec. IV-C-2)."""
    need = sum(model_totals(s).values())
    have = s.dimms * s.dimm.capacity_bytes
    if need > have:
        _fail(f"the weights and KV cache ({need / 2**30:.1f} GiB) do not fit {s.dimms} x "
              f"{s.dimm.capacity_bytes / 2**30:.0f} GiB NDP-DIMMs", s.dimm.span,
              f"declare at least {int(-(-need // s.dimm.capacity_bytes))} DIMMs")


@dataclass
class Placed:
    on_gpu: list                       # per block: bool per neuron
    home: list                         # per block: DIMM (or 0 for the host) holding the neuron's weights
    info: dict


def place(s: Setup, gen: activations.Generator, sw: Switches, neuron_s: list, cold_s: list, devices: int) -> Placed:
    sizes, nbytes = blocks_of(s)
    hot_budget = s.budget - s.other_bytes - s.system.model.layers * s.oproj_bytes
    if hot_budget < 0:
        _fail(f"the GPU's {s.budget / 1e9:.1f} GB for weights cannot hold the projections and embeddings "
              f"({(s.budget - hot_budget) / 1e9:.1f} GB)", s.system.mapping.span)
    if sw.placement == "random":               # Hermes-random: a random hot set that fills the budget
        rng = np.random.default_rng(s.system.workload.seed + 1)
        flat = np.concatenate([np.full(n, b) for (_, n), b in zip(sizes, nbytes)])
        order = rng.permutation(len(flat))
        hot = np.zeros(len(flat), bool)
        hot[order[np.cumsum(flat[order]) <= hot_budget]] = True
        cuts = np.cumsum([n for _, n in sizes])[:-1]
        on_gpu = np.split(hot, cuts)
        home = [rng.integers(0, devices, n).astype(np.int16) for _, n in sizes]
        return Placed(on_gpu, home, {"method": "random", "hot_budget_bytes": hot_budget})
    groups, orders, counts = [], [], []
    per = int(s.params["ilp_groups"])
    batch = s.system.workload.batch
    for k, (b, nb) in enumerate(zip(gen.blocks, nbytes)):
        # a batch computes the union of its sequences' neurons: the profile's batch-union frequency
        g, order = neuron_placement.groups_of(1.0 - (1.0 - b.profile) ** batch, k, nb, per, b.by_rank)
        groups += g
        orders.append(order)
        counts.append([x.count for x in g])
    cold_cap = s.dimm.capacity_bytes if sw.cold == "ndp" else float(sum(n * b for (_, n), b in zip(sizes, nbytes)))
    problem = neuron_placement.Problem(tuple(groups), tuple(neuron_s), tuple(cold_s), sync_s(s), hot_budget,
                                       cold_cap, devices)
    try:
        sol = neuron_placement.solve(problem, float(s.params["ilp_time_limit"]), aggregate_dimms=devices > 1)
    except ValueError as exc:
        _fail(str(exc), s.system.mapping.span)
    on_gpu, home, start = [], [], 0
    for order, cnt in zip(orders, counts):
        dev = neuron_placement.assign(order, sol.on_gpu[start:start + len(cnt)], sol.on_dimm[start:start + len(cnt)], cnt)
        start += len(cnt)
        gpu = dev < 0
        dev[gpu] = np.arange(int(gpu.sum())) % devices          # all weights live on the DIMMs too
        on_gpu.append(gpu)
        home.append(dev)
    # (the solver's wall time is left out: a report must not depend on how busy the machine is)
    return Placed(on_gpu, home, {"method": "ilp", "status": sol.status, "gap": sol.gap, "objective_s": sol.objective_s,
                                 "groups": len(groups), "hot_budget_bytes": hot_budget})


def sparse_run(s: Setup, sw: Switches, timeline: bool) -> dict:
    from ...ir.intervals import Interval
    m, wl, p = s.system.model, s.system.workload, s.params
    b = wl.batch
    host = sw.cold == "host"
    if not host:
        check_capacity(s)
    devices = 1 if host else s.dimms
    gen = generator(s)
    _, nbytes = blocks_of(s)
    neuron_gpu = [gpu_s(s, nb, b, floor=False) for nb in nbytes]     # per neuron; a block's kernel adds one floor
    floor = gpu_floor_s(s)
    neuron_cold = [host_s(s, nb, b) if host else cold_neuron_s(s, nb, b) for nb in nbytes]
    placed = place(s, gen, sw, neuron_gpu, neuron_cold, devices)
    pred = Predictor(gen.prefill_frequency(wl.input_len), [blk.parents for blk in gen.blocks],
                     p["predictor_lambda"], p["predictor_threshold"], p["hot_threshold"], int(p["predictor_step"]),
                     int(p["state_bits"]), sw.mode)
    ttft = prefill_s(prefill(s, s.pcie.bandwidth_bytes_per_s, 0, True), True)
    intervals = [Interval("gpu", "prefill", 0.0, ttft, "prefill"), Interval("pcie", "weights", 0.0, ttft, "prefill")]
    neurons = sum(len(g) for g in placed.on_gpu)
    sync = sync_s(s)
    tables = neurons * (int(p["state_bits"]) / 8 + 4)       # state + two 16-bit correlation indices
    predictor_t = tables / s.host.memory_bandwidth_bytes_per_s   # read once per token (serial: ours)
    proj_t = gpu_s(s, s.oproj_bytes, b) + 2 * sync
    head_t = gpu_s(s, m.vocab * m.hidden * s.dt, b)
    window = int(p["window_tokens"])
    # firings per neuron in the current window: at most `window`, so a byte holds them for the usual
    # windows (a quarter of the memory traffic of the per-token tally and of Algorithm 1's walk)
    counts = np.uint8 if window <= np.iinfo(np.uint8).max else np.int32
    activity = [np.zeros(len(g), counts) for g in placed.on_gpu] if sw.remap or not host else None
    times, totals = np.zeros(len(TIMES)), np.zeros(len(COUNTS), np.int64)
    cold_busy = np.zeros(devices)
    acc = dict(head=0.0, predictor=0.0, link_bytes=0.0, link_s=0.0)
    imb_before, imb_after, pending_link = [], [], np.zeros(m.layers)
    t = ttft
    steps = max(0, wl.output_len - 1)
    token = DecodeToken(gen, pred, placed.on_gpu, placed.home, activity, devices, sw.adjust)
    offsets = np.cumsum([0] + [len(g) for g in placed.on_gpu])
    per_gpu, per_cold, block_bytes = np.array(neuron_gpu), np.array(neuron_cold), np.array(nbytes, float)
    marks, layer_marks = np.zeros((len(nbytes), 2)), np.zeros((m.layers, 3))
    for step in range(steps):
        seq = wl.input_len + step + 1
        counts, per_dev = token.run()
        att = kv_bytes(s, seq, b) / s.host.memory_bandwidth_bytes_per_s if host else attention_ndp_s(s, seq, b)
        t = token_time(t, counts, per_dev, per_gpu, per_cold, floor, sync, att, proj_t,
                       s.pcie.bandwidth_bytes_per_s, block_bytes, pending_link, sw.adjust, times, totals, cold_busy,
                       marks, layer_marks)
        if timeline:
            intervals += token_intervals(marks.tolist(), layer_marks.tolist(), per_dev, neuron_cold, att, proj_t,
                                         "host_cpu" if host else None)
        t += head_t + predictor_t
        acc["head"] += head_t
        times[TIMES.index("gpu_busy")] += head_t
        acc["predictor"] += predictor_t
        if activity is not None and (step + 1) % window == 0:     # a window ends: Algorithm 1
            before, after, moved = remap_window(token.flat_on_gpu, token.flat_home, token.activity, offsets,
                                                devices, sw.remap)
            imb_before += before[~np.isnan(before)].tolist()
            imb_after += after[~np.isnan(after)].tolist()
            for k, (total_moved, longest_moved) in enumerate(moved.tolist()):
                if total_moved:               # pairs move in parallel, each over its own DIMM-link
                    acc["link_bytes"] += total_moved * nbytes[k]
                    longest = transfer_time(s.link, longest_moved * nbytes[k], instances=1)
                    pending_link[k // 2] += longest
                    acc["link_s"] += longest
    acc |= {name: float(v) for name, v in zip(TIMES, times)} | {name: int(v) for name, v in zip(COUNTS, totals)}
    acc["total"] = steps * neurons                            # every neuron of every block, every token
    e2e = t
    out = report_common(s, ttft, e2e)
    decode = e2e - ttft
    out["breakdown_s"] = {"prefill": ttft, "decode": decode, "decode_fc": acc["fc"], "decode_qkv_blocks": acc["qkv"],
                          "decode_mlp_blocks": acc["mlp"], "decode_fc_gpu_busy": acc["fc_gpu"],
                          "decode_fc_cold_slowest": acc["fc_cold"], "decode_attention": acc["attention"],
                          "decode_projection": acc["projection"], "decode_exposed_copies": acc["exposed_copies"],
                          "decode_predictor": acc["predictor"], "decode_lm_head": acc["head"]}
    cold_name = "host_cpu" if host else "ndp_dimm_mean"
    out["utilization"] = {"gpu": (ttft + acc["gpu_busy"]) / e2e if e2e else 0.0,
                          cold_name: float(cold_busy.mean() + (0 if host else acc["attention"])) / e2e if e2e else 0.0,
                          "pcie": (ttft + acc["pcie_bytes"] / s.pcie.bandwidth_bytes_per_s) / e2e if e2e else 0.0}
    total = acc["total"] or 1
    out["predictor"] = {"accuracy": acc["correct"] / total, "recall": acc["hit"] / (acc["fired"] or 1),
                        "precision": acc["hit"] / (acc["predicted"] or 1), "mode": sw.mode,
                        "overhead_fraction": acc["predictor"] / e2e if e2e else 0.0, "state_table_bytes": neurons * int(p["state_bits"]) / 8}
    sparse_bytes = sum(len(g) * nb for g, nb in zip(placed.on_gpu, nbytes))
    out["hot_fraction"] = {"neurons_on_gpu": sum(int(g.sum()) for g in placed.on_gpu) / neurons,
                           "sparse_bytes_on_gpu": sum(int(g.sum()) * nb for g, nb in zip(placed.on_gpu, nbytes)) / sparse_bytes,
                           "active_computed_on_gpu": acc["on_gpu"] / (acc["predicted"] or 1)}
    out["dimm_imbalance"] = {"before_remap": float(np.mean(imb_before)) if imb_before else None,
                             "after_remap": float(np.mean(imb_after)) if imb_after else None}
    out["bytes_moved"] = {"pcie_prefill": float(m.weight_bytes), "pcie_hot_copies": acc["pcie_bytes"],
                          "dimm_link": acc["link_bytes"]}
    if not host and s.dimm.pim.program("gemv") is not None:
        # the DIMMs' PIM work and its commands, for the run's energy (interpreter/run_energy.py)
        from .sparse_ndp_gemv import command_sample
        out["utilization"][f"pim:{s.dimm.name}"] = out["utilization"][cold_name]
        out["pim"] = command_sample(s.dimm, int(round(max(nbytes) / s.dt)), b)
    out["placement"] = placed.info
    out["online_swaps"] = acc["swaps"]
    out["activation_density"] = acc["fired"] / total
    return out, intervals


def token_intervals(marks: list, layer_marks: list, per_dev: np.ndarray, neuron_cold: list, att: float,
                    proj_t: float, host: str | None) -> list:
    """A token's busy spans from `token_time`'s marks (block k's start and GPU time; layer l's attention
    start, copy and remap times): each block's GPU and cold devices (`host`, or one DIMM each), each
    layer's attention and projection, with its copies and remap."""
    from ...ir.intervals import Interval
    out = []
    for k, (start, t_gpu) in enumerate(marks):
        layer, which = divmod(k, 2)
        name = f"L{layer}.{'mlp' if which else 'qkv'}"
        out.append(Interval("gpu", f"{name} hot", start, start + t_gpu, "decode"))
        t_cold = per_dev[k] * neuron_cold[k]
        out += [Interval(host or f"dimm_{j}", f"{name} cold", start, start + float(t_cold[j]), "decode")
                for j in range(len(t_cold)) if t_cold[j] > 0]
        if which == 0:
            t, copy_t, link_t = layer_marks[layer]
            out.append(Interval(host or "dimms", f"L{layer}.attention", t, t + att, "decode"))
            t += att
            out.append(Interval("gpu", f"L{layer}.projection", t, t + proj_t, "decode"))
            if copy_t:
                out.append(Interval("pcie", f"L{layer} hot copies", t, t + copy_t, "decode"))
            if link_t:
                out.append(Interval("dimm_link", f"L{layer} remap", t, t + link_t, "decode"))
    return out


def report_common(s: Setup, ttft: float, e2e: float) -> dict:
    m, wl = s.system.model, s.system.workload
    steps = max(0, wl.output_len - 1)
    generated = wl.batch * wl.output_len
    totals = model_totals(s)
    return {"system": s.system.name, "model": m.name, "strategy": s.strategy, "loop": "hot_cold_offload",
            "gpu": s.gpu.name, "batch": wl.batch, "input_len": wl.input_len, "output_len": wl.output_len,
            "ndp_dimms": s.dimms,
            "ttft_s": ttft, "tpot_s": (e2e - ttft) / steps if steps else ttft,
            "tokens_per_s": generated / e2e if e2e else 0.0, "end_to_end_s": e2e,
            "memory_bytes": {"weights": totals["weights"], "kv_cache": totals["kv_cache"],
                             "gpu_weights": min(s.budget, totals["weights"]),
                             "total": totals["weights"] + totals["kv_cache"]}}

