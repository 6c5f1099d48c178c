"""What one decoder layer costs on one NeuPIMs device, per (sub-)batch: the serving loop's prices.

NeuPIMs paper [NEUPIMS]. A device runs `layers / pp` decoder layers ([NEUPIMS]
section 7.1) with `heads / tp` heads and `1 / tp` of every weight matrix (section 7.2); the
serving strategies of section 8.1 and Figure 13 are rows of `SERVING_STRATEGIES`.

A layer is a chain of segments, each on one resource:

    qkv  (npu)   layernorm, QKV GEMM, the new K and V written to the cache
    mha  (pim)   per channel: Algorithm 1 over the channel's requests; softmax on the vector units
    proj (npu)   output projection, residual
    ar1  (link)  ring all-reduce of the projection (tensor parallelism, section 7.2)
    ffn  (npu)   layernorm, FFN up, GELU, FFN down, residual
    ar2  (link)  ring all-reduce of the FFN output

Without PIM (npu_only, gpu_only) `mha` runs on the processor: K.q, softmax and s.V read the KV
cache at the processor's bandwidth. Host kernels are timed by `interpreter/host/models.py` (the
systolic model of the NPU, the roofline of the GPU); PIM tiles by the DRAM engine
(`interpreter/dram/command_stream.py`) on the spec's memory with the strategy's row buffers.

PIM time of a channel is Algorithm 1 summed over its requests (section 6.3), with L_tile and
L_GWRITE measured, not assumed: the steady-state period of score and attend tiles and the
marginal cost of a GWRITE, each timed on the memory with refresh. Softmax overlaps the PIM GEMVs
with dual row buffers (section 6.1, Figure 10: the vector units take partial logits through the
MEM row buffer while PIM computes); with a single row buffer it runs after them. While the NPU
reads weights beside PIM work (dual row buffers and sub-batch interleaving), its memory roof is
divided by the read share `interleave.contention` measures (section 5.3: PIM commands first).
With a single row buffer behind a controller with `pim_blocking = channel`, each request's
attention also carries the write-back of its softmax scores between K.q and s.V on its channel,
timed on the DRAM engine (`DeviceCosts.channel_blocked`). The mapping parameters `pipeline` and
`all_reduce` select how pp splits the work and whether the all-reduces cost anything
(PIPELINE_SPLITS, ALL_REDUCES).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..graph.build import ACTIVATION_FLOPS, NORM_FLOPS, SOFTMAX_FLOPS
from ..interpreter.host.models import kernel_time, transfer_time
from ..interpreter.dram.interleave import contention, timer_for
from ..ir.hardware import Memory, Processor
from ..ir.workload import DTYPE_BYTES, System
from ..graph.parallel import device_model, parallelism
from ..lowering.records import Kernel
from ..ir.errors import CompileError
from ..serving.channel_assignment import mha_tile_counts
from .pim_attention import attention_lets, attention_stream, scores_writeback, vector_banks


@dataclass(frozen=True)
class ServingStrategy:
    name: str
    pim: bool                     # attention GEMVs on PIM (else on the processor)
    row_buffers: str | None       # single (blocked PIM) or dual (section 5.1)
    allocation: str | None        # round_robin (section 8.1) or greedy_min_load (Algorithm 2)
    sub_batches: int              # 2: sub-batch interleaving (section 6.2, Algorithm 3)
    processor: str                # npu, or gpu (the mapping's `gpu` parameter)
    description: str


SERVING_STRATEGIES = {s.name: s for s in (
    ServingStrategy("npu_only", False, None, None, 1, "npu",
                    "NPU with the same bandwidth, no PIM (section 8.1)"),
    ServingStrategy("npu_pim", True, "single", "round_robin", 1, "npu",
                    "blocked PIM, round-robin channels, no interleaving (section 8.1)"),
    ServingStrategy("npu_pim_drb", True, "dual", "round_robin", 1, "npu",
                    "+ dual row buffers (Figure 13)"),
    ServingStrategy("npu_pim_drb_gmlbp", True, "dual", "greedy_min_load", 1, "npu",
                    "+ greedy min-load bin packing (Figure 13)"),
    ServingStrategy("neupims", True, "dual", "greedy_min_load", 2, "npu",
                    "+ sub-batch interleaving: NeuPIMs (sections 5-6)"),
    ServingStrategy("gpu_only", False, None, None, 1, "gpu",
                    "A100 roofline, no PIM (section 8.1)"),
)}

RESOURCES = ("npu", "pim", "link")

# Mapping parameter `pipeline`: how pp stages share the work (the first is the default).
# micro_batches: the physical pipeline ([NEUPIMS] Sec. 7.1): an iteration's batch splits into pp
#   micro-batches that every stage serves in turn, so each device runs batch / pp requests at a time.
# full_batch: every stage holds the full batch; pp divides only the layers, the weights and the KV
#   capacity, as the NeuPIMs authors' trace generator builds a device's batch ([NEUPIMS_SIM]
#   trace-generator/get_distributions.py). A filled pipeline emits one batch per stage time, and the
#   activations a stage sends on overlap the next batch's work, so no send is charged.
PIPELINE_SPLITS = ("micro_batches", "full_batch")
# Mapping parameter `all_reduce`: ring (two ring all-reduces per layer on the system's first link,
# [NEUPIMS] Sec. 7.2) or none (tensor parallelism shards weights and heads only, as the authors'
# simulator, which models no link between devices: [NEUPIMS_SIM] src/Simulator.cc).
ALL_REDUCES = ("ring", "none")


def _fail(system: System, message: str, hint: str | None = None):
    raise CompileError(message, system.mapping.span if system.mapping else system.span, hint)


@dataclass(frozen=True)
class Segment:
    """One segment of a layer for one (sub-)batch: its resource, seconds and what it moves."""
    name: str
    resource: str
    seconds: float
    flops: float = 0.0            # systolic / tensor FLOPs (NPU utilisation)
    dram_bytes: float = 0.0       # the processor's DRAM traffic (bandwidth utilisation)
    pim_busy_s: float = 0.0       # PIM: busy time summed over the channels (PIM utilisation)


class DeviceCosts:
    """Prices of one device of `system` under `strategy` (see the module text)."""

    def __init__(self, system: System, strategy: ServingStrategy):
        self.system, self.strategy = system, strategy
        model = system.model
        if model is None or model.architecture != "decoder":
            _fail(system, "NeuPIMs serving needs a decoder model")
        self.tp, self.pp = parallelism(system)
        shard = device_model(model, self.tp, self.pp)
        self.layers, self.heads, self.kv_heads = shard.layers, shard.heads, shard.kv_heads
        self.head_dim, self.hidden, self.ffn = shard.head_dim, shard.hidden, shard.ffn
        self.dtype, self.b = model.dtype, DTYPE_BYTES[model.dtype]
        self.processor = self._processor()
        self.memory = self._memory()
        self.link = system.links[0] if system.links else None
        # how pipeline parallelism splits the work, and whether tensor parallelism's all-reduces
        # cost anything (see PIPELINE_SPLITS and ALL_REDUCES)
        self.pipeline = self._choice("pipeline", PIPELINE_SPLITS)
        self.all_reduce = self._choice("all_reduce", ALL_REDUCES)
        if self.pp > 1 and self.link is None and self.pipeline == "micro_batches":
            _fail(system, f"pp = {self.pp} micro-batches need a link between the stages", "add a link to the system")
        if self.tp > 1 and self.link is None and self.all_reduce != "none":
            _fail(system, f"tp = {self.tp} needs a link between the devices", "add a link to the system")

    def _choice(self, name: str, choices: tuple[str, ...]) -> str:
        value = self.system.mapping.params.get(name, choices[0])
        if value not in choices:
            _fail(self.system, f"mapping parameter '{name}' must be one of {', '.join(choices)}, got {value!r}",
                  f"write {name} = {choices[0]}; in the mapping's params")
        return value

    # ---- hardware -------------------------------------------------------------------------

    def _processor(self) -> Processor:
        kind = self.strategy.processor
        wanted = self.system.mapping.params.get("gpu") if kind == "gpu" else None
        for p in self.system.processors:
            if p.kind == kind and (wanted is None or p.name == wanted):
                return p
        _fail(self.system, f"strategy '{self.strategy.name}' needs a {kind} processor"
              + (f" named '{wanted}'" if wanted else "") + " in the system")

    def _memory(self) -> Memory | None:
        pims = [m for m in self.system.memories if m.pim is not None]
        if not self.strategy.pim:
            return pims[0] if pims else (self.system.memories[0] if self.system.memories else None)
        if not pims:
            _fail(self.system, f"strategy '{self.strategy.name}' needs a memory with a PIM unit")
        memory = pims[0]
        # the strategy's row buffers: the spec's unit, or its blocked (single) variant
        return dataclasses.replace(memory, pim=dataclasses.replace(memory.pim, row_buffers=self.strategy.row_buffers))

    @property
    def channels(self) -> int:
        return self.memory.organization.channels if self.memory is not None else 1

    @property
    def banks(self) -> int:
        org = self.memory.organization
        return org.ranks * org.banks_per_rank

    def weight_bytes_per_device(self) -> float:
        return self.system.model.weight_bytes / (self.tp * self.pp)

    def kv_bytes_per_token(self) -> float:
        """One token's K and V over this device's layers and heads."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.b

    def kv_capacity_bytes(self) -> float:
        """The memory's kv_cache regions plus the room this device's weights leave in the weights
        regions (KV pages are taken at run time; the authors' simulator likewise gives the KV
        cache all the memory the tp-sharded weights leave, src/scheduler/Scheduler.cc), else
        what the weights leave of the processor's memory."""
        if self.memory is not None:
            held = sum(r.size_bytes for r in self.memory.regions if "kv_cache" in r.holds)
            if held:
                weights = sum(r.size_bytes for r in self.memory.regions
                              if "weights" in r.holds and "kv_cache" not in r.holds)
                return held + max(0.0, weights - self.weight_bytes_per_device())
        return self.processor.memory_bytes - self.weight_bytes_per_device()

    # ---- PIM tiles, measured on the DRAM engine -------------------------------------------------

    @cached_property
    def tile_seconds(self) -> dict[str, float]:
        """L_tile of a score and an attend tile and L_GWRITE (Algorithm 1), in seconds: steady-state
        periods on one channel with blocking refresh (the marginal cost between two stream sizes)."""
        m, d = self.memory, self.head_dim
        clock = m.part.clock_hz
        hs = attention_lets(m, "attn_score", 1, self.heads, d)["per_row"]
        lanes_tok = attention_lets(m, "attn_context", 1, 1, d)["per_row"]

        def cycles(stream) -> int:
            return max(timer_for(m, refresh="blocking").run(stream))

        per = lambda a, b, n: (b - a) / n / clock
        few, many = 64, 128
        score = per(cycles(attention_stream(m, "attn_score", few * self.banks, hs, d)),
                    cycles(attention_stream(m, "attn_score", many * self.banks, hs, d)), many - few)
        dims = attention_lets(m, "attn_context", lanes_tok, 1, d)["dim_tiles"]
        attend = per(cycles(attention_stream(m, "attn_context", lanes_tok, few // dims, d)),
                     cycles(attention_stream(m, "attn_context", lanes_tok, many // dims, d)), many - few)
        # a GWRITE per head and chunk of s.V: the stream with GWRITEs minus the one without
        heads = many // dims
        gwrite = (cycles(attention_stream(m, "attn_context", lanes_tok, heads, d, gwrite=True))
                  - cycles(attention_stream(m, "attn_context", lanes_tok, heads, d))) / heads / clock
        return {"score": score, "attend": attend, "gwrite": max(gwrite, 0.0)}

    @cached_property
    def read_share(self) -> float:
        """The NPU's share of its bandwidth beside PIM work (dual row buffers), measured."""
        if not self.strategy.pim or self.strategy.row_buffers != "dual":
            return 1.0
        m, d = self.memory, self.head_dim
        hs = attention_lets(m, "attn_score", 1, self.heads, d)["per_row"]
        lanes_tok = attention_lets(m, "attn_context", 1, 1, d)["per_row"]
        pim = [*attention_stream(m, "attn_score", 16 * self.banks, hs, d, gwrite=True),
               *attention_stream(m, "attn_context", lanes_tok, 8, d, gwrite=True)]
        return contention(m, pim, read_rows=64, skip_banks=vector_banks(m)).read_share

    @property
    def channel_blocked(self) -> bool:
        """A single-row-buffer unit behind a controller with `pim_blocking = channel`: per channel,
        PIM commands issue only when the read and write queues are empty and no read or write is
        accepted while PIM work is queued (the Newton controller of the authors' NPU+PIM baseline,
        [NEUPIMS_SIM] extern/NewtonSim/src/newton_command_queue.cc). The NPU's write-back of a
        request's softmax scores then sits between its K.q and s.V GEMVs on its channel."""
        s = self.strategy
        return s.pim and s.row_buffers == "single" and self.memory.controller.pim_blocking == "channel"

    @cached_property
    def writeback_seconds(self) -> float:
        """A channel-blocked controller's cost of one scores row written back between K.q and s.V:
        K.q, the write-back, s.V in program order on one channel, less K.q and s.V alone, per row
        (timed with blocking refresh like tile_seconds; measured, not assumed)."""
        m, page = self.memory, self.memory.organization.row_bytes // DTYPE_BYTES[self.memory.pim.dtype]
        seq = 2 * page
        cycles = lambda *streams: max(timer_for(m, refresh="blocking").run([c for st in streams for c in st]))
        gemvs = lambda: (attention_stream(m, "attn_score", seq, self.heads, self.head_dim, gwrite=True),
                         attention_stream(m, "attn_context", seq, self.heads, self.head_dim, gwrite=True))
        kq, sv = gemvs()
        alone = cycles(kq, sv)
        kq, sv = gemvs()
        blocked = cycles(kq, scores_writeback(m, seq, self.heads, self.head_dim), sv)
        rows = self.heads * attention_lets(m, "attn_context", seq, self.heads, self.head_dim)["chunks"]
        return (blocked - alone) / rows / m.part.clock_hz

    def mha_seconds(self, seq_lens: np.ndarray) -> np.ndarray:
        """Algorithm 1 for each request (one channel, this device's heads), vectorised; behind a
        channel-blocked controller, plus the write-back of its scores rows (`channel_blocked`)."""
        t = self.tile_seconds
        page = self.memory.organization.row_bytes // DTYPE_BYTES[self.memory.pim.dtype]
        e = self.heads * self.head_dim
        seq = np.asarray(seq_lens, dtype=np.int64)
        score_gw = -(-e // page)
        score_tiles = -(-seq // self.banks) * score_gw
        attend_gw = -(-seq // page) * self.heads
        attend_tiles = -(-self.head_dim // self.banks) * attend_gw
        writeback = attend_gw * self.writeback_seconds if self.channel_blocked else 0.0
        return ((score_gw + attend_gw) * t["gwrite"] + score_tiles * t["score"]
                + attend_tiles * t["attend"] + writeback)

    def mha_tile_counts(self, seq_len: int) -> dict[str, int]:
        page = self.memory.organization.row_bytes // DTYPE_BYTES[self.memory.pim.dtype]
        return mha_tile_counts(seq_len, heads=self.heads, head_dim=self.head_dim, page_elems=page,
                               banks=self.banks)

    # ---- host kernels ----------------------------------------------------------------------

    def _kernel(self, name: str, kind: str, flops: float, nbytes: float, shape: dict | None = None,
                share: float = 1.0) -> Segment:
        p = self.processor
        rate = p.count * p.memory_bandwidth_bytes_per_s * share or None
        t = kernel_time(p, Kernel(name, kind, p.name, self.dtype, flops, nbytes, shape or {}, bandwidth=rate))
        return Segment(name, "npu", t.seconds, flops if kind in ("gemm", "gemv") else 0.0, nbytes)

    def _gemm(self, name: str, m: int, k: int, n: int, share: float) -> Segment:
        nbytes = (k * n + m * k + m * n) * self.b
        return self._kernel(name, "gemm", 2.0 * m * k * n, nbytes, {"m": m, "k": k, "n": n}, share)

    def _vector(self, name: str, flops: float, elements: float) -> Segment:
        return self._kernel(name, "elementwise", flops, 2 * elements * self.b)

    @staticmethod
    def _merge(name: str, resource: str, parts: list[Segment]) -> Segment:
        return Segment(name, resource, sum(s.seconds for s in parts), sum(s.flops for s in parts),
                       sum(s.dram_bytes for s in parts))

    def _allreduce(self, name: str, rows: int) -> Segment:
        if self.tp == 1 or self.all_reduce == "none":
            return Segment(name, "link", 0.0)
        # ring all-reduce: 2 (tp - 1) steps of 1/tp of the tensor each
        chunk = rows * self.hidden * self.b / self.tp
        steps = 2 * (self.tp - 1)
        return Segment(name, "link", steps * transfer_time(self.link, chunk, instances=1))

    def layer(self, seq_lens: np.ndarray, channel_of: np.ndarray) -> list[Segment]:
        """The segments of one decoder layer for a (sub-)batch: `seq_lens` are the requests'
        context lengths (past tokens + this one), `channel_of` their PIM channels."""
        bsz, d, m = len(seq_lens), self.hidden, self.system.model
        s = self.strategy
        share = self.read_share if s.sub_batches > 1 else 1.0
        norm = NORM_FLOPS.get(m.norm, 8)
        kv_new = 2 * bsz * self.kv_heads * self.head_dim * self.b
        qkv_out = (self.heads + 2 * self.kv_heads) * self.head_dim
        qkv = self._merge("qkv", "npu", [self._vector("ln1", norm * bsz * d, bsz * d),
                                        self._gemm("qkv_proj", bsz, d, qkv_out, share),
                                        Segment("kv_write", "npu", kv_new / self.processor.memory_bandwidth_bytes_per_s,
                                                0.0, kv_new)])
        scores = float(np.sum(seq_lens)) * self.heads
        softmax = self._vector("softmax", SOFTMAX_FLOPS * scores, scores)
        if s.pim:
            loads = np.bincount(channel_of, weights=self.mha_seconds(seq_lens), minlength=self.channels)
            pim_s = float(loads.max()) if bsz else 0.0
            # Figure 10: dual row buffers let softmax run under the GEMVs; blocked PIM serialises
            mha_s = max(pim_s, softmax.seconds) if s.row_buffers == "dual" else pim_s + softmax.seconds
            mha = Segment("mha", "pim", mha_s, pim_busy_s=float(loads.sum()))
        else:
            # every request's heads as GEMVs on the processor, reading the KV cache: K.q as one
            # 1 x head_dim by head_dim x (heads x tokens) GEMV, s.V as 1 x (heads x tokens) by
            # (heads x tokens) x head_dim (the systolic tiles of the per-head GEMVs, summed)
            tokens = int(np.sum(seq_lens))
            kv_bytes = float(tokens) * self.kv_heads * self.head_dim * self.b
            n = self.heads * tokens
            logit = self._kernel("logit", "gemv", 2.0 * n * self.head_dim,
                                 kv_bytes + bsz * self.heads * self.head_dim * self.b,
                                 {"m": 1, "k": self.head_dim, "n": max(n, 1)})
            attend = self._kernel("attend", "gemv", 2.0 * n * self.head_dim, kv_bytes + scores * self.b,
                                  {"m": 1, "k": max(n, 1), "n": self.head_dim})
            mha = self._merge("mha", "npu", [logit, softmax, attend])
        proj = self._merge("proj", "npu", [self._gemm("o_proj", bsz, self.heads * self.head_dim, d, share),
                                          self._vector("residual1", bsz * d, bsz * d)])
        act = ACTIVATION_FLOPS.get(m.activation, 8)
        ffn = self._merge("ffn", "npu", [self._vector("ln2", norm * bsz * d, bsz * d),
                                        self._gemm("ffn_up", bsz, d, self.ffn, share),
                                        self._vector("act", act * bsz * self.ffn, bsz * self.ffn),
                                        self._gemm("ffn_down", bsz, self.ffn, d, share),
                                        self._vector("residual2", bsz * d, bsz * d)])
        return [qkv, mha, proj, self._allreduce("ar1", bsz), ffn, self._allreduce("ar2", bsz)]

    def prefill_seconds(self, tokens: int) -> float:
        """One request's summarisation of `tokens` prompt tokens through every layer: on
        standalone NPUs modelled as this device's NPU, sharded as the devices are (tp per stage,
        pp stages in turn; section 4 item 1). GEMMs with m = tokens, the per-head score and
        context matmuls, the all-reduces; norms and softmax are left out (vector work)."""
        if tokens < 1:
            return 0.0
        e = self.heads * self.head_dim
        qkv_out = (self.heads + 2 * self.kv_heads) * self.head_dim
        gemms = [self._gemm("qkv_proj", tokens, self.hidden, qkv_out, 1.0),
                 self._gemm("o_proj", tokens, e, self.hidden, 1.0),
                 self._gemm("ffn_up", tokens, self.hidden, self.ffn, 1.0),
                 self._gemm("ffn_down", tokens, self.ffn, self.hidden, 1.0)]
        per_head = [self._gemm("score", tokens, self.head_dim, tokens, 1.0),
                    self._gemm("context", tokens, tokens, self.head_dim, 1.0)]
        layer = (sum(g.seconds for g in gemms) + self.heads * sum(g.seconds for g in per_head)
                 + 2 * self._allreduce("ar", tokens).seconds)
        return self.pp * self.layers * layer + (self.pp - 1) * self.pipeline_send(tokens)

    def pipeline_send(self, rows: int) -> float:
        """Activations of `rows` requests to the next pipeline stage (section 7.1)."""
        if self.pp == 1 or self.link is None:
            return 0.0
        return transfer_time(self.link, rows * self.hidden * self.b, instances=1)
