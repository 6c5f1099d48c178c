"""Per-layer prices of one data-parallel replica of a GPU + DIMM-PIM serving system.

Owns the cost model the sub-batch serving loop schedules with ([L3] Sec. 3, 4, 5.1): GPU kernels on
a roofline (weights and KV read from HBM, FLOPs at the spec's FP16 peak times its efficiency), or,
for a GPU with a `calibration` block, by the measured GPU kernel model (interpreter/host/gpu_kernel.py:
a layer's four projections and its element-wise operators, one GPU's tensor-parallel share each, and
attention and the LM head as shapeless kernels), tensor-parallel all-reduces on the GPU links (the
link's declared collective, interpreter/host/collectives.py), decode attention on the DIMM-PIM's bank PUs timed by
the DRAM engine on the spec's DDR4 part (the rate its declared attention programs take, see
attention_programs), the HBM-PIM baseline's decode attention by its unit's programs, PCIe transfers,
and rankset blocking (Sec. 5.1: a write engages one rankset, the others keep computing). Every price
is for one decoder layer of one replica, in seconds; the loop multiplies by the layer count.

A replica owns `tp` GPUs and `1 / dp` of the host memory's channels (all their ranks), so every
replica sees the same ranksets with `channels / dp` channels each (our reading: the paper does not
say how DP replicas share the DIMM-PIM).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import numpy as np

from ...interpreter.dram.command_stream import time_commands
from ...interpreter.host.collectives import all_reduce_time
from ...interpreter.host.gpu_kernel import SCALARS, shapeless_seconds
from ...interpreter.host.models import kernel_time
from ...interpreter.host.op_kernels import op_kernel
from ...ir.commands import Command
from ...ir.hardware import Link, Memory, Processor
from . import attention_programs as ap

# The hbm_pim baseline's programs as NeuPIMs runs them: the query and each chunk of softmax scores
# copied into the global buffer by PIM_GWRITE (`vectors = 1`), priced on a full head set of 4 heads
# sharing each 1 KB K row ([NEUPIMS] Sec. 6.3), per head = a quarter of it.
HBM_PIM_PARAMS = {"vectors": 1}
HBM_PIM_HEADS = 4


_ROW_CYCLES: dict = {}


def bank_row_cycles(memory: Memory, rows: int = 64, refresh: str = "blocking") -> float:
    """Cycles one bank takes per row when its PU streams it (ACT, every burst of the row, PRE),
    with blocking refresh: the DRAM engine on the spec's part. The bank PUs of a rank run in
    lockstep under all-bank commands ([L3] Sec. 4.2), so one bank's period is the rank's."""
    org = memory.organization
    key = (memory.part.name, tuple(sorted(memory.part.timing_cycles.items())), org, rows, refresh)
    if key in _ROW_CYCLES:
        return _ROW_CYCLES[key]
    cmds = []
    for r in range(rows):
        cmds.append(Command("ACT", row=r))
        cmds += [Command("RD", row=r, column=c) for c in range(org.bursts_per_row)]
        cmds.append(Command("PRE", row=r))
    _ROW_CYCLES[key] = time_commands(memory, cmds, refresh=refresh)[-1] / rows
    return _ROW_CYCLES[key]


def refresh_share(memory: Memory) -> float:
    """Fraction of time a rank is refreshing: tRFC / tREFI ([JESD79-4])."""
    t = memory.part.timing_cycles
    return t.get("tRFC", 0) / t["tREFI"] if t.get("tREFI") else 0.0


@dataclass(frozen=True)
class Hardware:
    """Rates of one replica (bytes/s, FLOP/s) read from the spec."""
    tp: int
    gpu_flops: float              # per GPU, fp16 peak x efficiency
    hbm_bw: float                 # per GPU
    gpu_mem: float                # per GPU, bytes
    nvlink_bw: float              # per GPU, one way
    pcie_bw: float                # per GPU, one way
    pcie_latency: float
    ranksets: int                 # ranks per channel ([L3] Sec. 5.1: one rank per channel forms a rankset)
    rankset_bw: float             # bank-PU read rate of one rankset of this replica
    rank_pu_bw: float             # rank-level PIM (R-PIM) read rate of the whole replica
    rankset_write_bw: float       # channel bus into one rankset (a write engages one rank per channel)
    cpu_bw: float                 # host CPU memory bandwidth of this replica
    hbm_pim: ap.Calibration | None  # decode MHA by the programs of one GPU's HBM-PIM (hbm_pim baseline)
    hbm_pim_channels: int         # channels of one GPU's HBM-PIM, each running its share of the heads
    kv_capacity_host: float       # bytes of KV this replica may keep in host memory
    kv_capacity_hbm: float        # bytes of KV this replica may keep in HBM beside its weights
    gpu: Processor | None = None  # one GPU, when it has a calibration: the measured GPU kernel model
    nvlink: Link | None = None    # the GPU-GPU link (its collective times the all-reduces)



def hardware(gpu, cpu, memory: Memory, nvlink, pcie, tp: int, dp: int, kv_region_bytes: float,
             weight_bytes: float, hbm_pim: Memory | None = None, head_dim: int = 128) -> Hardware:
    org, part = memory.organization, memory.part
    channels = org.channels * memory.count / dp
    bank_bw = org.row_bytes / (bank_row_cycles(memory) * part.tck_s)
    channel_bw = part.peak_bandwidth_bytes_per_s
    return Hardware(
        tp=tp,
        gpu_flops=gpu.peak_flops["fp16"] * gpu.efficiency,
        hbm_bw=gpu.memory_bandwidth_bytes_per_s,
        gpu_mem=gpu.memory_bytes,
        nvlink_bw=nvlink.bandwidth_bytes_per_s if nvlink else float("inf"),
        pcie_bw=pcie.bandwidth_bytes_per_s,
        pcie_latency=pcie.latency_s,
        ranksets=org.ranks,
        rankset_bw=channels * org.banks_per_rank * bank_bw,
        rank_pu_bw=channels * org.ranks * channel_bw * (1 - refresh_share(memory)),
        rankset_write_bw=channels * channel_bw,
        cpu_bw=cpu.memory_bandwidth_bytes_per_s * cpu.count / dp if cpu else 0.0,
        hbm_pim=(ap.calibrate(hbm_pim, head_dim, params=HBM_PIM_PARAMS, heads=HBM_PIM_HEADS)
                 if hbm_pim is not None else None),
        hbm_pim_channels=hbm_pim.organization.channels if hbm_pim is not None else 0,
        kv_capacity_host=kv_region_bytes / dp,
        kv_capacity_hbm=tp * gpu.memory_bytes - weight_bytes,
        gpu=dataclasses.replace(gpu, count=1) if gpu.calibration is not None else None,
        nvlink=nvlink,
    )


@dataclass(frozen=True)
class Shape:
    """One decoder layer of the model, split over `tp` GPUs."""
    hidden: int
    layer_params: int             # weights of one layer (attention projections + FFN)
    kv_token_bytes: int           # K and V of one token in one layer
    head_bytes: int               # LM head read once per iteration
    dtype_bytes: int = 2
    head_dim: int = 128
    # the layer's operators for the measured GPU kernel model: (op, N, K, TP split) GEMMs and
    # (op, width) element-wise ops, as interpreter/host/op_kernels.py names them
    gemms: tuple = ()
    elementwise: tuple = ()

    @staticmethod
    def of(model) -> "Shape":
        h, f = model.hidden, model.ffn
        kv_dim = model.kv_heads * model.head_dim
        attn = h * (model.heads * model.head_dim) * 2 + h * kv_dim * 2
        ffn = (3 if model.gated_ffn else 2) * h * f
        q_dim = model.heads * model.head_dim
        gemms = (("qkv", q_dim + 2 * kv_dim, h, "n"), ("proj", h, q_dim, "k"),
                 ("ffn_up", (2 if model.gated_ffn else 1) * f, h, "n"), ("ffn_down", h, f, "k"))
        elementwise = (("rmsnorm", h), ("rmsnorm", h), ("rotary", q_dim + kv_dim),
                       ("silu_mul" if model.gated_ffn else "gelu", f), ("add", h), ("add", h))
        return Shape(h, attn + ffn, 2 * kv_dim * 2, model.vocab * h * 2, head_dim=model.head_dim,
                     gemms=gemms, elementwise=elementwise)


@dataclass(frozen=True)
class Costs:
    hw: Hardware
    shape: Shape
    _layer_s: dict = field(default_factory=dict, compare=False, repr=False)   # tokens -> measured-model layer

    def _roof(self, flops, nbytes):
        hw = self.hw
        if hw.gpu is not None:
            return shapeless_seconds(hw.gpu, np.asarray(flops) / hw.tp, np.asarray(nbytes) / hw.tp, hw.gpu.peak_flops["fp16"])
        return np.maximum(np.asarray(flops) / (hw.tp * hw.gpu_flops), np.asarray(nbytes) / (hw.tp * hw.hbm_bw))

    def fc(self, tokens):
        """QKV, projection and FFN of `tokens` tokens batched, plus the two ring all-reduces of TP."""
        hw, s = self.hw, self.shape
        if hw.gpu is not None:
            return self._measured_fc(tokens)
        tokens = np.asarray(tokens, dtype=float)
        gemm = self._roof(2 * tokens * s.layer_params, s.layer_params * s.dtype_bytes)
        reduce = 0.0 if hw.tp == 1 else 2 * 2 * (hw.tp - 1) / hw.tp * tokens * s.hidden * s.dtype_bytes / hw.nvlink_bw
        return gemm + reduce

    def _measured_fc(self, tokens) -> float:
        """One GPU's share of the layer's projections and element-wise operators (the measured GPU
        kernel model), plus two all-reduces of the layer's output over the GPU link's collective."""
        m = int(round(float(tokens)))
        if m < 1:
            return 0.0
        if m not in self._layer_s:
            hw, s = self.hw, self.shape
            gpu, tp = hw.gpu, hw.tp
            seconds = sum(kernel_time(gpu, op_kernel("gemm", (m, n, k), gpu.name, tp=tp, split=split)).seconds
                          for _, n, k, split in s.gemms)
            seconds += sum(kernel_time(gpu, op_kernel(op, (m, width), gpu.name, tp=tp)).seconds
                           for op, width in s.elementwise)
            if tp > 1 and hw.nvlink is not None:
                seconds += 2 * all_reduce_time(hw.nvlink, m * s.hidden * s.dtype_bytes, tp)
            self._layer_s[m] = seconds
        return self._layer_s[m]

    def prefill_attention(self, chunk, prefix):
        """Causal attention of a `chunk` of prompt tokens after `prefix` cached ones, on the GPUs."""
        s = self.shape
        if isinstance(chunk, SCALARS) and isinstance(prefix, SCALARS):     # one chunk: plain floats
            chunk, prefix = float(chunk), float(prefix)
            flops = 4 * chunk * (prefix + (chunk + 1) / 2) * s.hidden
            return float(self._roof(flops, (prefix + chunk) * s.kv_token_bytes)) if chunk > 0 else 0.0
        chunk, prefix = np.asarray(chunk, dtype=float), np.asarray(prefix, dtype=float)
        flops = 4 * chunk * (prefix + (chunk + 1) / 2) * s.hidden
        return np.where(chunk > 0, self._roof(flops, (prefix + chunk) * s.kv_token_bytes), 0.0)

    def hbm_pim_attention(self, contexts):
        """Decode MHA on the replica's HBM-PIM by its unit's programs: contexts (..., n) of n requests
        -> seconds (...); every request's heads spread evenly over the channels of the tp GPUs."""
        hw, s = self.hw, self.shape
        heads = s.kv_token_bytes // (2 * s.dtype_bytes * s.head_dim)
        work = hw.hbm_pim.head_seconds(contexts).sum(axis=-1) * heads
        return work / (hw.tp * hw.hbm_pim_channels)

    def hbm_pim_bandwidth(self) -> float:
        """K and V bytes per second the replica's HBM-PIM reads in the programs' steady state."""
        hw, s = self.hw, self.shape
        per_head = 2 * hw.hbm_pim.period_tokens * s.head_dim * s.dtype_bytes
        return per_head / float(hw.hbm_pim.head_seconds(hw.hbm_pim.period_tokens)) * hw.tp * hw.hbm_pim_channels

    def decode_attention_gpu(self, tokens):
        """Decode MHA over `tokens` cached tokens in HBM: reads every K and V once."""
        return self._roof(4 * np.asarray(tokens, float) * self.shape.hidden,
                          np.asarray(tokens, float) * self.shape.kv_token_bytes)

    def kv_bytes(self, tokens):
        if isinstance(tokens, SCALARS):            # one number (the loop asks one at a time): plain float
            return float(tokens) * self.shape.kv_token_bytes
        return np.asarray(tokens, float) * self.shape.kv_token_bytes

    def pcie(self, nbytes):
        """Bytes split over the replica's `tp` PCIe links (each GPU sends its heads' share)."""
        hw = self.hw
        if isinstance(nbytes, SCALARS):            # one transfer: the same arithmetic in plain floats
            nbytes = float(nbytes)
            return hw.pcie_latency + nbytes / (hw.tp * hw.pcie_bw) if nbytes > 0 else 0.0
        return np.where(np.asarray(nbytes) > 0, hw.pcie_latency + np.asarray(nbytes, float) / (hw.tp * hw.pcie_bw), 0.0)

    def decode_vectors(self, requests):
        """Decode Q/K/V to the host and the attention output back ([L3] Sec. 5.1: on the critical path)."""
        s = self.shape
        n = float(requests) if isinstance(requests, SCALARS) else np.asarray(requests, float)
        up = n * (s.hidden + s.kv_token_bytes // s.dtype_bytes) * s.dtype_bytes
        down = n * s.hidden * s.dtype_bytes
        return self.pcie(up) + self.pcie(down)

    def rankset_pim(self, loads, blocks, ranksets_on: bool):
        """Decode MHA on the bank PUs: per-rankset token loads (..., R) plus the seconds each rankset
        spends receiving writes (..., R). With ranksets a write blocks its rankset only; without,
        every write blocks the whole memory ([L3] Sec. 5.1, Fig. 6a)."""
        return np.max(self.rankset_finish(loads, blocks, ranksets_on), axis=-1)

    def rankset_finish(self, loads, blocks, ranksets_on: bool):
        """When each rankset is done with a layer (see rankset_pim)."""
        compute = self.kv_bytes(loads) / self.hw.rankset_bw
        if ranksets_on:
            return compute + blocks
        # without ranksets a layer's KV is interleaved over every rank: balanced, but any write stalls all
        done = np.mean(compute, axis=-1, keepdims=True) + np.sum(blocks, axis=-1, keepdims=True)
        return np.broadcast_to(done, np.shape(compute))

    def write_block(self, tokens):
        """Seconds a rankset spends taking `tokens` tokens of K and V for one layer."""
        return self.kv_bytes(tokens) / self.hw.rankset_write_bw

    def lm_head(self, tokens):
        return self._roof(2 * np.asarray(tokens, float) * self.shape.head_bytes / self.shape.dtype_bytes,
                          self.shape.head_bytes)
