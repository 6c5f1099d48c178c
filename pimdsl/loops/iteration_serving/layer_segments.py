"""What one decoder layer costs on one device of the iteration serving loop, per (sub-)batch.

The mechanisms are NeuPIMs' [NEUPIMS]. A device runs `layers / pp` decoder layers ([NEUPIMS]
section 7.1) with `heads / tp` heads and `1 / tp` of every weight matrix (section 7.2); the
serving strategies of section 8.1 and Figure 13 are rows of `SERVING_STRATEGIES`.

A layer's work is the op graph of one decoder layer of the device's shard, cut into a chain of
segments (`layer_work.py`), each on one resource:

    qkv  (npu)   norm, Q/K/V projections (one fused GEMM), the new K and V written to the cache
    mha  (pim)   per channel: Algorithm 1 over the channel's requests; softmax on the vector units
    proj (npu)   output projection, residual
    ar1  (link)  ring all-reduce of the projection (tensor parallelism, section 7.2)
    ffn  (npu)   norm, FFN up (and gate, fused), activation (and gate product), FFN down, residual
    ar2  (link)  ring all-reduce of the FFN output

A parallel block (`Model.parallel_attention`) sums its two branches' partial outputs before one
all-reduce (as Megatron-style GPT-J/NeoX code does): its `ar1` costs nothing.

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
timed on the DRAM engine (`DeviceCosts.channel_blocked`). A processor with a `pim_issue_rate`
issues every channel's PIM instructions from one queue, so a (sub-)batch's attention takes at
least its instructions over that rate (`DeviceCosts.mha_issue_seconds`). The mapping parameters `pipeline` and
`all_reduce` select how pp splits the work and whether the all-reduces cost anything
(PIPELINE_SPLITS, ALL_REDUCES).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...graph.build import Op
from ...interpreter.host.models import kernel_time, serial_gemv_cycles, transfer_time
from ...interpreter import timing_cache
from ...interpreter.dram.interleave import contention, timer_for
from ...interpreter.dram.stream_timer import StreamTimer
from ...ir.hardware import Memory, Processor
from ...ir.workload import DTYPE_BYTES, System
from ...graph.parallel import device_model, parallelism
from ...lowering.records import Kernel
from ...ir.errors import CompileError
from ...serving.channel_assignment import mha_tile_counts
from ..model_layers.layer_work import LINEAR_KINDS, layer_segments
from .pim_attention import attention_lets, attention_stream, host_instructions, scores_writeback, vector_banks


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
# Mapping parameter `interleave`: how the two sub-batches of sub-batch interleaving share the NPU and
# PIM (the first is the default).
# list: list scheduling of the two chains of segments, no barrier; the NPU's weight reads beside PIM
#   work run at the read share for the whole of every NPU segment.
# stages: lock-step stages (Figure 11(b)): each stage runs one sub-batch's NPU segments beside the
#   other's attention and ends when both are done, as the authors' scheduler does ([NEUPIMS_SIM]
#   src/scheduler/Scheduler.cc: a stage ends when its systolic-array and PIM programs both finish;
#   stages A-F of src/scheduler/Scheduler.h); the NPU reads at the read share only while the PIM
#   attention runs and at full bandwidth after it (`stage_seconds`).
INTERLEAVES = ("list", "stages")


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
    alone_s: float | None = None  # NPU: seconds without PIM work beside it (None: `seconds`)

    @property
    def alone(self) -> float:
        return self.seconds if self.alone_s is None else self.alone_s


class DeviceCosts:
    """Prices of one device of `system` under `strategy` (see the module text)."""

    def __init__(self, system: System, strategy: ServingStrategy):
        self.system, self.strategy = system, strategy
        model = system.model
        if model is None or model.architecture != "decoder":
            _fail(system, "the iteration serving loop needs a decoder model")
        self.tp, self.pp = parallelism(system)
        self.shard = shard = device_model(model, self.tp, self.pp)
        self._prefill: dict[int, float] = {}      # prompt tokens -> prefill seconds
        self._by_batch: dict[tuple, dict] = {}    # (batch, read share) -> the segments but attention
        self._on_npu: dict[tuple, dict] = {}      # the same, each with its time without PIM work beside it
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
        self.interleave = self._choice("interleave", INTERLEAVES)
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

    def _kept(self, what: str, measure):
        """`measure()`, a pure function of the memory (with the strategy's row buffers) and the shard's
        heads and head size, kept on disk by content like a PIM op's time (interpreter/timing_cache.py):
        each is a few hundred thousand commands through the DRAM engine, the same in every run, sweep
        point and strategy of a memory. JSON keeps the floats exact."""
        name = timing_cache.entry_key(self.memory, ("layer_segments", what, self.heads, self.head_dim), "exact")
        return timing_cache.kept(name, measure)

    @cached_property
    def tile_seconds(self) -> dict[str, float]:
        """L_tile of a score and an attend tile and L_GWRITE (Algorithm 1), in seconds: steady-state
        periods on one channel with blocking refresh (the marginal cost between two stream sizes)."""
        return self._kept("tile_seconds", self._measure_tile_seconds)

    def _measure_tile_seconds(self) -> dict[str, float]:
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
    def command_sample(self) -> dict:
        """The commands of one channel's K.q and s.V streams (with their GWRITEs) and their seconds,
        timed with blocking refresh: the PIM work whose command energy a run counts per busy second
        (interpreter/run_energy.py)."""
        return self._kept("command_sample", self._measure_command_sample)

    def _measure_command_sample(self) -> dict:
        m, d = self.memory, self.head_dim
        hs = attention_lets(m, "attn_score", 1, self.heads, d)["per_row"]
        lanes_tok = attention_lets(m, "attn_context", 1, 1, d)["per_row"]
        timer = timer_for(m, refresh="blocking")
        st = StreamTimer(timer)
        st.run([*attention_stream(m, "attn_score", 16 * self.banks, hs, d, gwrite=True),
                *attention_stream(m, "attn_context", lanes_tok, 8, d, gwrite=True)])
        counts = {f"{kind or 'cmd'}.{name}": n for (name, kind), n in sorted(st.counts.items(), key=str)}
        return {"command_counts": counts, "seconds": st.end * m.part.tck_s, "refreshes": timer.refreshes}

    @cached_property
    def read_share(self) -> float:
        """The NPU's share of its bandwidth beside PIM work (dual row buffers), measured."""
        if not self.strategy.pim or self.strategy.row_buffers != "dual":
            return 1.0
        return self._kept("read_share", self._measure_read_share)

    def _measure_read_share(self) -> float:
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
        return self._kept("writeback_seconds", self._measure_writeback_seconds)

    def _measure_writeback_seconds(self) -> float:
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

    def _mha_counts(self, seq_lens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Algorithm 1's counts for each request (one channel, this device's heads): K.q GWRITEs,
        K.q tiles, s.V GWRITEs (one per head and chunk of tokens) and s.V tiles. Query heads, also
        under grouped-query attention: the query heads of a group share their KV head's rows (the
        cache holds kv_heads), but each runs its own GEMV, and the global buffer holds one row of
        query vectors or one chunk of one head's scores, so the GWRITEs and tiles stay per query head."""
        page = self.memory.organization.row_bytes // DTYPE_BYTES[self.memory.pim.dtype]
        seq = np.asarray(seq_lens, dtype=np.int64)
        score_gw = np.full_like(seq, -(-(self.heads * self.head_dim) // page))
        score_tiles = -(-seq // self.banks) * score_gw
        attend_gw = -(-seq // page) * self.heads
        attend_tiles = -(-self.head_dim // self.banks) * attend_gw
        return score_gw, score_tiles, attend_gw, attend_tiles

    def mha_seconds(self, seq_lens: np.ndarray) -> np.ndarray:
        """Algorithm 1 for each request (one channel, this device's heads), vectorised; behind a
        channel-blocked controller, plus the write-back of its scores rows (`channel_blocked`)."""
        t = self.tile_seconds
        score_gw, score_tiles, attend_gw, attend_tiles = self._mha_counts(seq_lens)
        writeback = attend_gw * self.writeback_seconds if self.channel_blocked else 0.0
        return ((score_gw + attend_gw) * t["gwrite"] + score_tiles * t["score"]
                + attend_tiles * t["attend"] + writeback)

    @cached_property
    def _gemv_per_step(self) -> bool:
        """A GEMV is issued per step: behind a channel-blocked controller whose `blocked_gemv_issue = per_step`."""
        return self.channel_blocked and self.memory.controller.blocked_gemv_issue == "per_step"

    @cached_property
    def tile_instructions(self) -> dict[str, float]:
        """Host instructions per K.q tile, s.V tile and GWRITE, counted in the declared programs'
        streams (`pim_attention.host_instructions`, `_gemv_per_step`); kept on disk (`_kept`)."""
        return self._kept(("tile_instructions", self._gemv_per_step), self._count_tile_instructions)

    def _count_tile_instructions(self) -> dict[str, float]:
        m, d, banks, per_step = self.memory, self.head_dim, self.banks, self._gemv_per_step
        count = lambda cls, kv, heads, gwrite=False: host_instructions(m, cls, kv, heads, d, gwrite, per_step)
        hs = attention_lets(m, "attn_score", 1, self.heads, d)["per_row"]
        lanes_tok = attention_lets(m, "attn_context", 1, 1, d)["per_row"]
        dims = attention_lets(m, "attn_context", lanes_tok, 1, d)["dim_tiles"]
        return {"score": count("attn_score", 2 * banks, hs) - count("attn_score", banks, hs),
                "attend": (count("attn_context", lanes_tok, 2) - count("attn_context", lanes_tok, 1)) / dims,
                "gwrite": count("attn_context", lanes_tok, 1, True) - count("attn_context", lanes_tok, 1)}

    def mha_issue_seconds(self, seq_lens: np.ndarray) -> float:
        """The time the processor takes to issue a (sub-)batch's PIM instructions at its
        `pim_issue_rate` (all channels share one instruction queue: [NEUPIMS_SIM]
        src/NeuPIMSystolicWS.cc, pim_ld_queue_cycle pops one PIM instruction a core cycle); 0
        without a limit."""
        p = self.processor
        if not p.pim_issue_rate:
            return 0.0
        if not p.clock_hz:
            _fail(self.system, f"processor '{p.name}' gives pim_issue_rate but no clock", "add clock = ...; to it")
        n = self.tile_instructions
        score_gw, score_tiles, attend_gw, attend_tiles = self._mha_counts(seq_lens)
        total = ((score_gw + attend_gw) * n["gwrite"] + score_tiles * n["score"] + attend_tiles * n["attend"]).sum()
        return float(total - self._short_chunk_savings(seq_lens).sum()) / (p.pim_issue_rate * p.clock_hz)

    def _short_chunk_savings(self, seq_lens: np.ndarray) -> np.ndarray:
        """Instructions each request's s.V does not issue because its last chunk of tokens is
        short: its GEMVs take k = ceil(tokens / lanes) steps (the declared program), which counts
        only when a GEMV is issued per step. (In DRAM time the GEMV spacing binds only between the
        GEMVs of one tile, and an s.V tile has one: the tiles' time is the full chunk's.)"""
        page, lanes, dims = self._context_lets
        k = -(-(np.asarray(seq_lens, dtype=np.int64) % page) // lanes)      # 0: the last chunk is full
        return self._saved_by_steps[k] * self.heads * dims

    @cached_property
    def _context_lets(self) -> tuple[int, int, int]:
        """s.V's tokens per row, lanes and dimension tiles, as the program derives them for one token."""
        lets = attention_lets(self.memory, "attn_context", 1, 1, self.head_dim)
        return lets["per_row"], lets["lanes"], lets["dim_tiles"]

    @cached_property
    def _saved_by_steps(self) -> np.ndarray:
        """The instructions one s.V tile saves when its last chunk takes k steps, for every k a
        chunk can take (0: a full chunk saves none); kept on disk (`_kept`)."""
        return np.array(self._kept(("short_chunk_savings", self._gemv_per_step), self._count_short_chunk_savings))

    def _count_short_chunk_savings(self) -> list[float]:
        page, lanes, _ = self._context_lets
        full = self.tile_instructions["attend"]
        return [0.0] + [full - self._attend_instructions(k * lanes) for k in range(1, -(-(page - 1) // lanes) + 1)]

    def grouped_pim_seconds(self, seq_lens: np.ndarray, channel_of: np.ndarray) -> float:
        """A (sub-)batch's PIM attention with `pim_dispatch = grouped`, the dispatch of the
        authors' core as read (validation/reference/pim/neupims_simulator.md section 12, not run):
        the batch, ordered by channel, is cut into request groups whose operands fit the processor's
        scratchpad (K.q: (2 s + d) h e bytes a request, s.V: 3 d h e), and one group is in flight:
        its instructions issue in batch order at `pim_issue_rate`, a request starts once its first
        instruction has issued and its channel is free, and the next group starts when this one's
        last channel finishes. K.q's groups, then s.V's. Left out: the boundary request two
        groups share and the ~40-cycle tail between groups.

        `pim_dispatch = batch` is the same with the whole (sub-)batch as one group, as the authors'
        simulator ran ([NEUPIMS_RUNS]: its logs show one PIM tile per attention op): the batch's
        instructions issue in channel-major order, so a channel's work starts only once the
        instructions of the channels before it have issued, and s.V starts after all of K.q."""
        p = self.processor
        budget = p.scratchpad_bytes if p.pim_dispatch == "grouped" else np.inf
        order = np.argsort(np.asarray(channel_of), kind="stable")
        seq, chan = np.asarray(seq_lens, dtype=np.int64)[order], np.asarray(channel_of)[order]
        t, n = self.tile_seconds, self.tile_instructions
        score_gw, score_tiles, attend_gw, attend_tiles = self._mha_counts(seq)
        writeback = attend_gw * self.writeback_seconds if self.channel_blocked else 0.0
        e, h, d = DTYPE_BYTES[self.memory.pim.dtype], self.heads, self.head_dim
        phases = ((score_gw * t["gwrite"] + score_tiles * t["score"], score_gw * n["gwrite"] + score_tiles * n["score"],
                   (2 * seq + d) * h * e),
                  (attend_gw * t["gwrite"] + attend_tiles * t["attend"] + writeback,
                   attend_gw * n["gwrite"] + attend_tiles * n["attend"] - self._short_chunk_savings(seq),
                   np.full(len(seq), 3 * d * h * e)))
        per_instruction = 1.0 / (p.pim_issue_rate * p.clock_hz) if p.pim_issue_rate and p.clock_hz else 0.0
        total = 0.0
        for busy, instructions, nbytes in phases:
            i = 0
            while i < len(seq):
                j = i + max(1, int(np.searchsorted(np.cumsum(nbytes[i:]), budget, side="right")))
                issued = np.cumsum(instructions[i:j]) * per_instruction      # when each request's last one issues
                first = np.concatenate(([0.0], issued[:-1]))
                free: dict[int, float] = {}
                end = float(issued[-1])
                for r in range(i, j):
                    start = max(float(first[r - i]), free.get(int(chan[r]), 0.0))
                    free[int(chan[r])] = start + float(busy[r])
                    end = max(end, free[int(chan[r])])
                total += end
                i = j
        return total

    def _attend_instructions(self, tokens: int) -> float:
        """Host instructions of one s.V tile over a single chunk of `tokens`, counted in the
        program's stream like `tile_instructions`."""
        m, d, per_step = self.memory, self.head_dim, self._gemv_per_step
        dims = attention_lets(m, "attn_context", tokens, 1, d)["dim_tiles"]
        return (host_instructions(m, "attn_context", tokens, 2, d, False, per_step)
                - host_instructions(m, "attn_context", tokens, 1, d, False, per_step)) / dims

    def mha_tile_counts(self, seq_len: int) -> dict[str, int]:
        page = self.memory.organization.row_bytes // DTYPE_BYTES[self.memory.pim.dtype]
        return mha_tile_counts(seq_len, heads=self.heads, head_dim=self.head_dim, page_elems=page,
                               banks=self.banks)

    # ---- host kernels: the ops of one layer of the op graph (layer_work.py) ----------------------

    def _kernel(self, name: str, kind: str, flops: float, nbytes: float, shape: dict | None = None,
                share: float = 1.0) -> Segment:
        t = self._kernel_time(name, kind, flops, nbytes, shape, share)
        return Segment(name, "npu", t.seconds, flops if kind in ("gemm", "gemv") else 0.0, nbytes)

    def _kernel_time(self, name: str, kind: str, flops: float, nbytes: float, shape: dict | None = None,
                     share: float = 1.0):
        p = self.processor
        rate = p.count * p.memory_bandwidth_bytes_per_s * share or None
        return kernel_time(p, Kernel(name, kind, p.name, self.dtype, flops, nbytes, shape or {}, bandwidth=rate))

    def _op(self, op: Op, share: float = 1.0) -> Segment:
        """A graph op on the processor, its bytes the weights plus the activations and KV cache it
        reads and writes (as passes/lowering.py counts a host kernel's). A linear is a GEMM of
        m = the batch's rows (one request too: the NPU runs a batch's linear as one GEMM), its weight
        stream at the read share beside PIM; attention is GEMVs or GEMMs (`_attention`); the rest
        runs on the vector units."""
        nbytes = op.weight_bytes + op.read_bytes + op.write_bytes
        if op.kind in LINEAR_KINDS:
            return self._kernel(op.name, "gemm", op.flops, nbytes, dict(op.shape), share)
        if op.kind in ("attn_score", "attn_context"):
            return self._attention(op, nbytes)
        return self._kernel(op.name, op.kind, op.flops, nbytes)

    def _attention(self, op: Op, nbytes: float) -> Segment:
        """K.q or s.V on the processor, reading the KV cache. Decode: every request's heads as one
        GEMV, K.q 1 x head_dim by head_dim x (heads x tokens), s.V 1 x (heads x tokens) by
        (heads x tokens) x head_dim (the systolic tiles of the per-head GEMVs, summed). Prefill: a
        q x head_dim by head_dim x kv GEMM per request and head (and its transpose for s.V); the
        arrays compute the whole square, masked or not."""
        s = op.shape
        kv = s["kv"] if isinstance(s["kv"], list) else [s["kv"]] * s["requests"]
        d, q, heads = s["head_dim"], s["q"], s["heads"]
        if q == 1:
            if self.processor.systolic_gemv_issue == "serial":
                return self._serial_gemvs(op, kv, heads, d, nbytes)
            n = heads * sum(kv)
            shape = {"m": 1, "k": d, "n": n} if op.kind == "attn_score" else {"m": 1, "k": n, "n": d}
            return self._kernel(op.name, "gemv", op.flops, nbytes, shape)
        seconds = launch = 0.0
        for length in kv:
            shape = {"m": q, "k": d, "n": length} if op.kind == "attn_score" else {"m": q, "k": length, "n": d}
            one = self._kernel_time(op.name, "gemm", 2.0 * q * d * length, nbytes / (heads * len(kv)), shape)
            seconds += heads * (one.seconds - one.launch_s)
            launch = max(launch, one.launch_s)
        # a GPU launches one kernel for every request's heads (a fused attention kernel), not one each
        return Segment(op.name, "npu", seconds + launch, op.flops, nbytes)

    def _serial_gemvs(self, op: Op, kv: list, heads: int, d: int, nbytes: float) -> Segment:
        """Decode K.q or s.V as one GEMV per request and head issued one after another
        (`systolic_array { gemv_issue = serial; }`, `serial_gemv_cycles`): K.q a head_dim vector by
        head_dim x kv, s.V a kv vector by kv x head_dim; the KV cache streams in under them."""
        p = self.processor
        if not p.clock_hz:
            _fail(self.system, f"processor '{p.name}' gives gemv_issue = serial but no clock", "add clock = ...; to it")
        kv = np.asarray(kv, dtype=np.int64)
        k, n = (d, kv) if op.kind == "attn_score" else (kv, d)
        cycles = heads * int(np.sum(serial_gemv_cycles(p, k, n))) / p.count
        compute = cycles / (p.clock_hz * p.efficiency)
        memory = nbytes / (p.count * p.memory_bandwidth_bytes_per_s)
        return Segment(op.name, "npu", max(compute, memory), op.flops, nbytes)

    def host_ops(self, seq_lens: np.ndarray) -> dict[str, list[Segment]]:
        """Every host op of one layer for a (sub-)batch, by segment (qkv, mha, proj, ffn), each
        timed alone on the processor (no PIM beside it): what `layer` sums."""
        work = layer_segments(self.shard, "decode", [int(n) - 1 for n in seq_lens])
        return {name: [self._op(op) for op in ops] for name, ops in work.items()}

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
        context lengths (past tokens + this one), `channel_of` their PIM channels. The work is the
        op graph's for this device's shard (`layer_work.layer_segments`)."""
        bsz, s = len(seq_lens), self.strategy
        if not bsz:
            return [Segment(name, resource, 0.0) for name, resource in
                    (("qkv", "npu"), ("mha", "pim" if s.pim else "npu"), ("proj", "npu"), ("ar1", "link"),
                     ("ffn", "npu"), ("ar2", "link"))]
        share = self.read_share if s.sub_batches > 1 else 1.0
        work = layer_segments(self.shard, "decode", [int(n) - 1 for n in seq_lens])
        # only attention depends on the context lengths: the other segments are timed once per batch size
        if (bsz, share) not in self._on_npu:
            for key in {(bsz, share), (bsz, 1.0)}:
                if key not in self._by_batch:
                    self._by_batch[key] = {name: self._merge(name, "npu", [self._op(op, key[1]) for op in work[name]])
                                           for name in ("qkv", "proj", "ffn")}
            alone = self._by_batch[(bsz, 1.0)]
            self._on_npu[(bsz, share)] = {name: dataclasses.replace(seg, alone_s=alone[name].seconds)
                                          for name, seg in self._by_batch[(bsz, share)].items()}
        on_npu = self._on_npu[(bsz, share)]
        if s.pim:
            softmax = self._merge("softmax", "npu", [self._op(op) for op in work["mha"] if op.kind == "softmax"])
            loads = np.bincount(channel_of, weights=self.mha_seconds(seq_lens), minlength=self.channels)
            # the busiest channel, or the processor issuing every channel's instructions; or its
            # request groups one at a time (`pim_dispatch = grouped`, or the whole batch as one: `batch`)
            pim_s = (self.grouped_pim_seconds(seq_lens, channel_of) if self.processor.pim_dispatch != "overlapped"
                     else max(float(loads.max()), self.mha_issue_seconds(seq_lens)))
            # Figure 10: dual row buffers let softmax run under the GEMVs; blocked PIM serialises
            mha_s = max(pim_s, softmax.seconds) if s.row_buffers == "dual" else pim_s + softmax.seconds
            mha = Segment("mha", "pim", mha_s, pim_busy_s=float(loads.sum()))
        else:
            mha = self._merge("mha", "npu", [self._op(op) for op in work["mha"]])
        ar1 = Segment("ar1", "link", 0.0) if self.shard.parallel_attention else self._allreduce("ar1", bsz)
        return [on_npu["qkv"], mha, on_npu["proj"], ar1, on_npu["ffn"], self._allreduce("ar2", bsz)]

    def prefill_seconds(self, tokens: int) -> float:
        """One request's summarisation of `tokens` prompt tokens through every layer: on
        standalone NPUs modelled as this device's NPU, sharded as the devices are (tp per stage,
        pp stages in turn; section 4 item 1). Every op of the layer's graph, the all-reduces."""
        if tokens < 1:
            return 0.0
        if tokens not in self._prefill:
            work = layer_segments(self.shard, "prefill", [0], tokens)
            layer = (sum(self._op(op).seconds for ops in work.values() for op in ops)
                     + (1 if self.shard.parallel_attention else 2) * self._allreduce("ar", tokens).seconds)
            self._prefill[tokens] = self.pp * self.layers * layer + (self.pp - 1) * self.pipeline_send(tokens)
        return self._prefill[tokens]

    def pipeline_send(self, rows: int) -> float:
        """Activations of `rows` requests to the next pipeline stage (section 7.1)."""
        if self.pp == 1 or self.link is None:
            return 0.0
        return transfer_time(self.link, rows * self.hidden * self.b, instances=1)
