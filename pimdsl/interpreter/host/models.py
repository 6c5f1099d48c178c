"""Timing models of host kernels (CPU, GPU, NPU) and of link transfers.

What a time covers: a kernel's time is its compute and its own DRAM traffic
(`Kernel.bytes`), overlapped perfectly; no launch overhead, no cache model,
no inter-device reduction (that is a `Transfer` on a link). A transfer's time
is the link latency plus the bytes at the link bandwidth; no contention.

Models, chosen by the processor:

* roofline (CPU, GPU, and an NPU without systolic arrays):
  ``compute_s = flops / (count * peak_flops[dtype] * efficiency * share)``,
  ``memory_s = bytes / (count * memory_bandwidth_bytes_per_s)`` (or
  ``bytes / kernel.bandwidth`` when the kernel names its own rate),
  ``seconds = max(compute_s, memory_s)``. ``share`` is the fraction of a CPU's
  cores the kernel may use, ``min(kernel.threads, cores) / cores`` (1 when
  ``kernel.threads`` is None, and always 1 on a GPU).
* systolic (NPU gemm/gemv): a weight-stationary tile model, see `_systolic`; with
  `systolic_array { issue = in_order; }` GEMMs follow the in-order rule of `_in_order`
  (``seconds`` is then not ``max(compute_s, memory_s)``).
* vector (other NPU kernels): ``flops`` at one FLOP per vector lane per
  cycle, see `_vector`.
* gpu_kernel (a GPU with a `calibration` block): tiles in waves over the SMs at achieved
  rates plus a per-kernel floor, see `gpu_kernel.py`; ``seconds`` includes ``launch_s``.

``Processor.count > 1`` means identical devices used together (tensor
parallel): the work (FLOPs, bytes, systolic tiles) is divided evenly over them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.errors import PimdslError
from ...ir.hardware import Link, Processor
from ...lowering.records import Kernel
from .gpu_kernel import combine, gpu_kernel_parts

# Where a kernel's dtype has no peak_flops entry, the peaks tried next, in order. A type only
# falls back to units of the same or a wider type: narrow data (int4/int8/fp8 weights) is widened
# on load and computed there, as weight-only quantized kernels do; bf16 and fp16 share the
# 16-bit units of every bundled processor. fp32 has no fallback: narrower units cannot run it.
DTYPE_FALLBACK = {
    "bf16": ("fp16", "fp32"),
    "fp16": ("bf16", "fp32"),
    "fp8": ("fp16", "bf16", "fp32"),
    "int8": ("fp16", "bf16", "fp32"),
    "int4": ("int8", "fp16", "bf16", "fp32"),
}

SYSTOLIC_KINDS = ("gemm", "gemv")


class ModelError(PimdslError):
    """A kernel or a transfer cannot be timed on this hardware as specified."""


@dataclass(frozen=True)
class KernelTime:
    """The time of one kernel on one processor, with both roofs."""
    seconds: float                 # max(compute_s, memory_s) (+ launch_s)
    compute_s: float
    memory_s: float
    bound: str                     # compute or memory (memory on a tie); launch when the floor is longer
    model: str                     # roofline, systolic, vector or gpu_kernel
    peak_dtype: str | None = None  # roofline: the peak_flops entry used (after fallback)
    systolic_tiles: int = 0        # systolic: weight tiles of rows x cols
    systolic_cycles: int = 0       # systolic: cycles of the busiest array
    launch_s: float = 0.0          # gpu_kernel: the per-kernel floor
    tile: str = ""                 # gpu_kernel: the GEMM tile (and split-K) chosen


def kernel_time(processor: Processor, kernel: Kernel) -> KernelTime:
    """Time `kernel` on `processor` (all `processor.count` devices together)."""
    if kernel.flops < 0 or kernel.bytes < 0:
        raise ModelError(f"kernel '{kernel.op}' has negative work (flops {kernel.flops:g}, "
                         f"bytes {kernel.bytes:g})")
    if processor.kind == "gpu" and processor.calibration is not None:
        return _gpu(processor, kernel)
    memory_s = _memory_s(processor, kernel)
    if processor.kind == "npu" and kernel.kind in SYSTOLIC_KINDS and processor.systolic_arrays:
        return _systolic(processor, kernel, memory_s)
    if processor.kind == "npu" and kernel.kind not in SYSTOLIC_KINDS and processor.vector_units:
        return _vector(processor, kernel, memory_s)
    return _roofline(processor, kernel, memory_s)


def transfer_time(link: Link, nbytes: float, *, instances: int | None = None) -> float:
    """Seconds to move `nbytes` one way over `link`: ``latency_s + nbytes / (instances *
    bandwidth_bytes_per_s)``.

    ``instances`` link instances (default: all ``link.count``) carry equal shares of the bytes
    in parallel, so a tensor-parallel transfer over ``l3_pcie[8]`` uses all eight; pass
    ``instances=1`` for a transfer that one instance carries alone. Zero bytes take no time
    (nothing is sent, so no latency is paid).
    """
    n = link.count if instances is None else instances
    if not 1 <= n <= link.count:
        raise ModelError(f"link '{link.name}' has {link.count} instance(s); a transfer cannot use {n}")
    if nbytes < 0:
        raise ModelError(f"a transfer over link '{link.name}' of negative size ({nbytes:g} bytes)")
    if nbytes == 0:
        return 0.0
    if link.bandwidth_bytes_per_s <= 0:
        raise ModelError(f"link '{link.name}' has no bandwidth; set 'bandwidth' in its spec", link.span)
    return link.latency_s + nbytes / (n * link.bandwidth_bytes_per_s)


# ---- the models ------------------------------------------------------------------------------

def _memory_s(processor: Processor, kernel: Kernel) -> float:
    if kernel.bytes == 0:
        return 0.0
    if kernel.bandwidth is not None:
        return kernel.bytes / kernel.bandwidth
    if processor.memory_bandwidth_bytes_per_s <= 0:
        raise ModelError(f"{processor.kind} '{processor.name}' has no memory_bandwidth; kernel "
                         f"'{kernel.op}' moves {kernel.bytes:g} bytes", processor.span,
                         f"give the {processor.kind} its memory bandwidth: `memory_bandwidth = 51.2 GB/s;`")
    return kernel.bytes / (processor.count * processor.memory_bandwidth_bytes_per_s)


def _done(compute_s: float, memory_s: float, model: str, **detail) -> KernelTime:
    bound = "compute" if compute_s > memory_s else "memory"
    return KernelTime(max(compute_s, memory_s), compute_s, memory_s, bound, model, **detail)


def peak_dtype(processor: Processor, dtype: str) -> str:
    """The peak_flops entry a `dtype` kernel runs at: its own, else the first of DTYPE_FALLBACK."""
    for candidate in (dtype, *DTYPE_FALLBACK.get(dtype, ())):
        if candidate in processor.peak_flops:
            return candidate
    tried = ", ".join((dtype, *DTYPE_FALLBACK.get(dtype, ())))
    have = ", ".join(sorted(processor.peak_flops)) or "none"
    raise ModelError(f"{processor.kind} '{processor.name}' has no peak for a {dtype} kernel "
                     f"(tried {tried}; its peak block gives {have})", processor.span,
                     f"add `{dtype} = ... FLOPS;` to its peak block")


def _roofline(processor: Processor, kernel: Kernel, memory_s: float) -> KernelTime:
    """Roofline: compute and DRAM traffic overlap perfectly; the slower roof is the time."""
    if kernel.flops == 0:
        return _done(0.0, memory_s, "roofline")
    dtype = peak_dtype(processor, kernel.dtype)
    share = 1.0
    if processor.kind == "cpu" and kernel.threads is not None:
        if kernel.threads < 1:
            raise ModelError(f"kernel '{kernel.op}' is given {kernel.threads} threads on "
                             f"'{processor.name}'; it needs at least 1")
        # a thread beyond the core count (SMT) adds no FMA units
        share = min(kernel.threads, processor.cores) / processor.cores
    rate = processor.count * processor.peak_flops[dtype] * processor.efficiency * share
    return _done(kernel.flops / rate, memory_s, "roofline", peak_dtype=dtype)


def _gpu(processor: Processor, kernel: Kernel) -> KernelTime:
    """The measured GPU kernel model (gpu_kernel.py): ``launch_s + max(compute_s, memory_s)`` plus
    the exposed share of the shorter roof."""
    if kernel.bytes and processor.memory_bandwidth_bytes_per_s <= 0 and not kernel.bandwidth:
        raise ModelError(f"gpu '{processor.name}' has no memory_bandwidth; kernel '{kernel.op}' moves "
                         f"{kernel.bytes:g} bytes")
    dtype = peak_dtype(processor, kernel.dtype) if kernel.flops else None
    peak = processor.peak_flops[dtype] if dtype else 0.0
    launch_s, compute_s, memory_s, tile = gpu_kernel_parts(processor, kernel, peak)
    seconds = float(combine(processor, launch_s, compute_s, memory_s))
    bound = "launch" if 2 * launch_s > seconds else "compute" if compute_s > memory_s else "memory"
    return KernelTime(seconds, compute_s, memory_s, bound, "gpu_kernel", peak_dtype=dtype,
                      launch_s=launch_s, tile=tile)


def _shape(kernel: Kernel) -> tuple[int, int, int]:
    try:
        return tuple(int(kernel.shape[key]) for key in ("m", "k", "n"))
    except KeyError as missing:
        raise ModelError(f"{kernel.kind} kernel '{kernel.op}' has no {missing} in its shape "
                         f"{kernel.shape}; the systolic model needs m, k and n") from None


def _clock(processor: Processor) -> float:
    if not processor.clock_hz:
        raise ModelError(f"npu '{processor.name}' has no clock; its systolic arrays and vector "
                         f"units are timed in cycles", processor.span, "give the npu a `clock = ... GHz;`")
    return processor.clock_hz


def _systolic(processor: Processor, kernel: Kernel, memory_s: float) -> KernelTime:
    """Weight-stationary systolic arrays, the NPU of NeuPIMs (Sec. 4 "NeuPIMs accelerator":
    systolic arrays for GEMMs, vector units for the rest; Sec. 8.1 Table 2: 8 arrays of
    128 x 128; its simulator's core is weight stationary, configs/systolic_ws_128x128_dev.json).

    An M x K by K x N matmul is cut into ``ceil(K / rows) * ceil(N / cols)`` weight tiles, spread
    evenly over ``systolic_arrays * count`` arrays. Within an array the tiles are pipelined as in
    the NeuPIMs simulator (src/SystolicWS.cc, issue_ex_inst: "Preload can be hided"; a preload
    starts ``core_height`` cycles after the previous instruction): the next tile's weights load
    (``rows`` cycles) while the current tile's M activation rows stream through, so a tile
    occupies its array for ``max(M, rows)`` cycles, and the array fills and drains once per
    kernel (``rows + cols``):
    ``cycles = ceil(tiles / arrays) * max(M, rows) + rows + cols`` and
    ``compute_s = cycles / (clock_hz * efficiency)``. Each PE does one MAC per cycle whatever
    the dtype. Small-M tiles are bound by the weight preload, which is why splitting a batch in
    two (NeuPIMs sub-batch interleaving, Sec. 6.2 / 8.2) costs NPU time when M < rows.
    """
    m, k, n = _shape(kernel)
    rows, cols = processor.systolic_rows, processor.systolic_cols
    if rows < 1 or cols < 1:
        raise ModelError(f"npu '{processor.name}' has a systolic array of {rows} x {cols}; "
                         f"give its rows and cols")
    tiles = math.ceil(k / rows) * math.ceil(n / cols)
    arrays = processor.systolic_arrays * processor.count
    if processor.systolic_issue == "in_order" and kernel.kind == "gemm":
        return _in_order(processor, kernel, memory_s, tiles)
    cycles = math.ceil(tiles / arrays) * max(m, rows) + rows + cols if tiles and m else 0
    compute_s = cycles / (_clock(processor) * processor.efficiency) if cycles else 0.0
    return _done(compute_s, memory_s, "systolic", systolic_tiles=tiles, systolic_cycles=cycles)


def _in_order(processor: Processor, kernel: Kernel, memory_s: float, tiles: int) -> KernelTime:
    """`systolic_array { issue = in_order; }`: the arrays issue their instructions strictly in
    order, as the NeuPIMs authors' core does ([NEUPIMS_SIM] src/NeuPIMSystolicWS.cc, issue_ex_inst
    tests only the queue's front; src/operations/MatMul.cc tiles every dimension by the array
    width). The arrays act as one: a pass over one `cols`-row batch tile and one K tile preloads
    `rows` cycles, then streams each further block of `cols` outputs in ``ceil(cols / arrays)``
    cycles, so ``pass = ceil(K / cols) * (rows + ceil(cols / arrays) * (ceil(N / cols) - 1))``.
    The first batch tile's passes run as the weights stream in (the slower of the two); every
    further batch tile runs after them, from on-chip memory:
    ``seconds = max(memory_s, pass_s) + (ceil(M / cols) - 1) * pass_s``.
    GEMVs keep the overlapped rule: a vector operand leaves nothing to preload (with
    `gemv_issue = serial`, the attention GEMVs of the serving loop follow `serial_gemv_cycles`)."""
    m, k, n = _shape(kernel)
    rows, cols = processor.systolic_rows, processor.systolic_cols
    if not (m and k and n):
        return _done(0.0, memory_s, "systolic", systolic_tiles=tiles)
    block = math.ceil(cols / processor.systolic_arrays)
    k_tiles = math.ceil(math.ceil(k / cols) / processor.count)      # tensor-parallel devices share K
    per_pass = k_tiles * (rows + block * (math.ceil(n / cols) - 1))
    batch_tiles = math.ceil(m / cols)
    pass_s = per_pass / (_clock(processor) * processor.efficiency)
    seconds = max(memory_s, pass_s) + (batch_tiles - 1) * pass_s
    compute_s = batch_tiles * pass_s
    return KernelTime(seconds, compute_s, memory_s, "compute" if pass_s > memory_s else "memory", "systolic",
                      systolic_tiles=tiles, systolic_cycles=batch_tiles * per_pass)


def serial_gemv_cycles(processor: Processor, k, n):
    """`systolic_array { gemv_issue = serial; }`: the cycles of GEMVs (a k-vector by a k x n
    matrix; numbers or numpy arrays) issued one after another, as the NeuPIMs authors' NPU-only
    core runs decode attention ([NEUPIMS_SIM] branch npu-only, src/operations/FusedMHA.cc: per
    request and head a K.q GEMV and the s.V GEMVs, each a GEMM_PRELOAD; src/SystolicWS.cc
    issue_ex_inst: a preload starts when the previous instruction finishes and takes
    ``core_height + core_width + size - 1`` cycles, ``size`` its outputs over the core's
    `systolic_array_count` arrays). The vector is the stationary operand, one preload per
    `rows`-element tile of it, and the n outputs stream through:
    ``ceil(k / rows) * (rows + cols - 1 + ceil(n / count))``. Nothing overlaps one GEMV with the
    next, so short GEMVs are bound by the preload latency, not by the array's MACs."""
    rows, cols, arrays = processor.systolic_rows, processor.systolic_cols, processor.systolic_arrays
    if rows < 1 or cols < 1 or arrays < 1:
        raise ModelError(f"npu '{processor.name}' has no systolic arrays to issue GEMVs on")
    return -(-k // rows) * (rows + cols - 1 + -(-n // arrays))


def _vector(processor: Processor, kernel: Kernel, memory_s: float) -> KernelTime:
    """NPU vector units (NeuPIMs Sec. 8.1: "GPU-like vector processing units to support
    non-GEMM operators"; Table 2: 8 units of 128 x 1): each lane does one FLOP per cycle, so
    ``compute_s = flops / (vector_units * count * vector_width * clock_hz * efficiency)``.
    Multi-step operations (exp, a reduction tree) are counted in the kernel's FLOPs."""
    lanes = processor.vector_units * processor.count * processor.vector_width
    if lanes < 1:
        raise ModelError(f"npu '{processor.name}' has vector units of width {processor.vector_width}; "
                         f"give their width")
    compute_s = kernel.flops / (lanes * _clock(processor) * processor.efficiency) if kernel.flops else 0.0
    return _done(compute_s, memory_s, "vector")
