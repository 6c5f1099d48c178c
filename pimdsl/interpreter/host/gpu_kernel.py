"""The measured GPU kernel model: a tiled roofline with achieved efficiencies, wave quantization
and a per-kernel floor, for a `gpu` that declares a `calibration` block.

A GPU runs a GEMM as output tiles spread over its SMs in waves, as tile-level GPU models do
([LLMCOMPASS]), at achieved rather than nominal rates (a roofline with efficiencies, fitted on the
operator times [VIDUR] profiled). For an M x K by K x N GEMM (M tokens, N outputs, K inputs) on one
device:

* compute: the library picks, among the tile shapes ``TILES`` (tm x tn) and split-K factors
  ``s`` (``SPLITS``, used while the tiles leave SMs idle), the one that finishes first
  (``min`` over the choices, as a GEMM library's heuristics aim to):
  ``tiles = ceil(M / tm) * ceil(N / tn)``, ``waves = ceil(tiles * s / SMs)``,
  ``compute_s = waves * 2 tm tn ceil(K / s) / (peak[dtype] / SMs * tensor_efficiency)``.
  ``tm`` is never padded past M's next multiple of 16 (a GEMV-like call of few tokens uses a
  thin tile), so decoding is not charged for 128-row tiles it does not compute.
* memory: ``memory_s = bytes / (memory_bandwidth * memory_efficiency)``, ``bytes`` the kernel's
  DRAM traffic (weights N x K, activations M x K in, M x N out).
* ``seconds = launch_latency + max(compute_s, memory_s) + exposed_fraction * min(compute_s, memory_s)``:
  the per-kernel floor (launch, pipeline fill, tail) is paid once, and the roofs overlap but not
  perfectly: near the ridge point a tile waits for its operands part of the time, so a share of
  the shorter roof shows (0: the roofline's perfect overlap, 1: no overlap).

Element-wise kernels (norm, activation, add, rotary, softmax, copies) and kernels that carry no
GEMM shape are bandwidth plus launch, with the same exposed share: ``compute_s = flops / (peak[dtype]
* tensor_efficiency)``, ``memory_s = bytes / (memory_bandwidth * elementwise_efficiency)`` (or
``memory_efficiency`` for shapeless GEMM / GEMV / attention kernels).

The five calibration quantities (launch_latency, memory_efficiency, tensor_efficiency,
elementwise_efficiency, exposed_fraction) are fitted together on one model at TP 1 of one GPU
(`validation/run_gpu.py --fit`); everything else is the datasheet. ``Processor.count`` devices
share a GEMM's N (column-parallel tensor parallelism) and the other kernels' work evenly; a
collective between them is a separate transfer (host/collectives.py). The L2 cache is not
modelled: weights are streamed from DRAM on every call.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.hardware import Processor
from ...lowering.records import Kernel

# Output tile shapes (rows x cols) of the tensor-core GEMM kernels of a GEMM library (CUTLASS's
# default threadblock tiles for 16-bit tensor cores); the model picks per call, as cuBLAS does.
TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
SPLITS = (1, 2, 4, 8, 16)            # split-K factors, tried while tiles leave SMs idle
MATMUL_KINDS = ("gemm", "gemv", "attention")
THIN_TILE_ROWS = 16                  # a tile's rows are rounded to this (the tensor-core MMA's M)
SCALARS = (int, float, np.integer, np.floating)   # one number, not an array (plain-float fast paths)


def gemm_compute_s(processor: Processor, m: int, n: int, k: int, rate_per_sm: float) -> tuple[float, str]:
    """The fastest tile x split-K choice for an m x k by k x n GEMM on one device, and its name."""
    sms = processor.cores
    best = (math.inf, "")
    for tm, tn in TILES:
        tm = min(tm, THIN_TILE_ROWS * math.ceil(m / THIN_TILE_ROWS))
        tiles = math.ceil(m / tm) * math.ceil(n / tn)
        for s in SPLITS:
            if s > 1 and tiles * s // 2 >= sms:
                break
            waves = math.ceil(tiles * s / sms)
            t = waves * 2 * tm * tn * math.ceil(k / s) / rate_per_sm
            if t < best[0]:
                best = (t, f"{tm}x{tn}" + (f"/split{s}" if s > 1 else ""))
    return best


def combine(processor: Processor, launch_s, compute_s, memory_s):
    """``launch_s + max(compute_s, memory_s) + exposed_fraction * min(compute_s, memory_s)``
    (numbers or numpy arrays)."""
    exposed = processor.calibration.exposed_fraction
    return launch_s + np.maximum(compute_s, memory_s) + exposed * np.minimum(compute_s, memory_s)


def shapeless_parts(processor: Processor, flops, nbytes, peak: float, matmul: bool = True):
    """(launch_s, compute_s, memory_s) of kernels with no GEMM shape on `processor`'s `count`
    devices: numbers or numpy arrays of FLOPs and bytes; zero work takes no time."""
    cal, count = processor.calibration, processor.count
    flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
    efficiency = cal.memory_efficiency if matmul else cal.elementwise_efficiency
    compute = flops / (count * peak * cal.tensor_efficiency) if peak else np.zeros_like(flops)
    memory = nbytes / (count * processor.memory_bandwidth_bytes_per_s * efficiency)
    launch = np.where((flops > 0) | (nbytes > 0), cal.launch_latency_s, 0.0)
    return launch, compute, memory


def shapeless_seconds(processor: Processor, flops, nbytes, peak: float, matmul: bool = True):
    """Seconds of `shapeless_parts`: the roofline at achieved rates + the floor (one number in plain
    floats, the same operations in the same order, as the serving loops ask one at a time)."""
    if not (isinstance(flops, SCALARS) and isinstance(nbytes, SCALARS)):
        return combine(processor, *shapeless_parts(processor, flops, nbytes, peak, matmul))
    cal, count, flops, nbytes = processor.calibration, processor.count, float(flops), float(nbytes)
    efficiency = cal.memory_efficiency if matmul else cal.elementwise_efficiency
    compute = flops / (count * peak * cal.tensor_efficiency) if peak else 0.0
    memory = nbytes / (count * processor.memory_bandwidth_bytes_per_s * efficiency)
    launch = cal.launch_latency_s if (flops > 0 or nbytes > 0) else 0.0
    return launch + max(compute, memory) + cal.exposed_fraction * min(compute, memory)


def gpu_kernel_parts(processor: Processor, kernel: Kernel, peak: float) -> tuple[float, float, float, str]:
    """(launch_s, compute_s, memory_s, tile) of `kernel` on `processor`'s `count` devices, with
    `peak` the FLOP/s of one device at the kernel's dtype."""
    launch, compute, memory = (float(v) for v in shapeless_parts(
        processor, kernel.flops, 0.0 if kernel.bandwidth else kernel.bytes, peak, kernel.kind in MATMUL_KINDS))
    if kernel.bandwidth:
        memory = kernel.bytes / kernel.bandwidth
        launch = processor.calibration.launch_latency_s if (kernel.flops or kernel.bytes) else 0.0
    shape, tile = kernel.shape, ""
    if kernel.kind in ("gemm", "gemv") and peak > 0 and all(key in shape for key in ("m", "k", "n")):
        m, k, n = (int(shape[key]) for key in ("m", "k", "n"))
        compute, tile = gemm_compute_s(processor, m, math.ceil(n / processor.count), k,
                                       peak / processor.cores * processor.calibration.tensor_efficiency) \
            if m and k and n else (0.0, "")
    return launch, compute, memory, tile
