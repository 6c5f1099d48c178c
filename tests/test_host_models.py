"""Host kernel and link timing models, with numbers worked by hand from the bundled specs."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.host.models import ModelError, kernel_time, peak_dtype, serial_gemv_cycles, transfer_time
from pimdsl.lowering.records import Kernel

from .conftest import ROOT

MiB = 1 << 20


@lru_cache(maxsize=None)
def bundled(name: str):
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / f"{name}.pim"))
    assert not diags.errors
    return spec


def s24():
    return bundled("galaxy_s24p").processors["s24_cpu"]


def npu():
    return bundled("neupims").processors["neupims_npu"]


def matmul(m, k, n, *, dtype="bf16", device="s24_cpu", kind=None, threads=None, bytes_per=2):
    """A matmul kernel; bytes: weights K x N plus activations in and out, `bytes_per` each."""
    return Kernel(op="L0.proj", kind=kind or ("gemv" if m == 1 else "gemm"), device=device,
                  dtype=dtype, flops=2.0 * m * k * n, bytes=float(bytes_per * (k * n + m * k + m * n)),
                  shape={"m": m, "k": k, "n": n}, threads=threads)


# ---- roofline on the Galaxy S24+ CPU ([PIM_SHERPA] Table 3: 321 GFLOPS bf16, 68.264 GB/s) ---------

def test_s24_gemv_is_memory_bound():
    # 2048 x 2048 bf16 weights = 8 MiB, read once at 68.264 GB/s
    k = Kernel("L0.q_proj", "gemv", "s24_cpu", "bf16", flops=2 * 2048 * 2048, bytes=8 * MiB,
               shape={"m": 1, "k": 2048, "n": 2048}, threads=4)
    t = kernel_time(s24(), k)
    assert t.model == "roofline" and t.bound == "memory" and t.peak_dtype == "bf16"
    assert t.memory_s == pytest.approx(8 * MiB / 68.264e9)          # 122.9 us
    # four of six cores at the spec's calibrated efficiency 0.40: 98 us
    assert t.compute_s == pytest.approx(2 * 2048 * 2048 / (321e9 * 4 / 6 * 0.40))
    assert t.seconds == t.memory_s


def test_s24_gemm_is_compute_bound_on_four_of_six_cores():
    # [PIM_SHERPA] Sec. 5: four cores run GEMM, two copy
    t = kernel_time(s24(), matmul(4096, 4096, 4096, threads=4))
    assert t.bound == "compute"
    assert t.compute_s == pytest.approx(2 * 4096 ** 3 / (214e9 * 0.40))   # 1.61 s: 321 x 4/6 GFLOPS x 0.40
    assert t.memory_s == pytest.approx(3 * 4096 * 4096 * 2 / 68.264e9)
    assert t.seconds == t.compute_s
    every_core = kernel_time(s24(), matmul(4096, 4096, 4096))
    assert every_core.compute_s == pytest.approx(t.compute_s * 4 / 6)


def test_threads_beyond_the_core_count_add_nothing():
    assert kernel_time(s24(), matmul(512, 512, 512, threads=12)) == kernel_time(s24(), matmul(512, 512, 512))


def test_gpu_ignores_threads_and_divides_over_count():
    # 8 GPUs, tensor parallel, on the roofline (without the calibration of the measured kernel model)
    a100 = dataclasses.replace(bundled("dgx_a100_pim").processors["l3_a100"], calibration=None)
    t = kernel_time(a100, matmul(8192, 8192, 8192, dtype="fp16", device="l3_a100", threads=1))
    assert t.compute_s == pytest.approx(2 * 8192 ** 3 / (8 * 312e12))
    assert t.memory_s == pytest.approx(3 * 8192 ** 2 * 2 / (8 * 2039e9))


def test_efficiency_scales_compute_only():
    full_cpu = dataclasses.replace(s24(), efficiency=1.0)
    cpu = dataclasses.replace(s24(), efficiency=0.5)
    full, half = kernel_time(full_cpu, matmul(1024, 1024, 1024)), kernel_time(cpu, matmul(1024, 1024, 1024))
    assert half.compute_s == pytest.approx(2 * full.compute_s)
    assert half.memory_s == full.memory_s


# ---- dtype fallback -------------------------------------------------------------------------

def test_dtype_fallback():
    assert peak_dtype(s24(), "fp16") == "bf16"                       # s24 has bf16 only
    assert peak_dtype(s24(), "int8") == "bf16"                       # widened to 16-bit units
    rtx = bundled("rtx4090_ndp").processors["hermes_rtx4090"]        # no bf16 entry
    assert peak_dtype(rtx, "bf16") == "fp16"
    epyc = bundled("dgx_a100_pim").processors["l3_epyc"]             # fp32 only
    t = kernel_time(epyc, matmul(256, 256, 256, dtype="bf16", device="l3_epyc"))
    assert t.peak_dtype == "fp32"
    assert t.compute_s == pytest.approx(2 * 256 ** 3 / (2 * 4.608e12))


def test_missing_dtype_is_a_clear_error():
    with pytest.raises(ModelError) as err:
        kernel_time(s24(), matmul(64, 64, 64, dtype="fp32"))
    message = str(err.value)
    assert "s24_cpu" in message and "fp32" in message and "bf16" in message


# ---- NeuPIMs NPU: 8 weight-stationary 128 x 128 arrays at 1 GHz, 8 vector units of 128 --------

def test_npu_systolic_gemm_by_hand():
    # 64 x 4096 by 4096 x 4096: 32 x 32 = 1024 weight tiles, 128 per array;
    # each holds its array max(64, 128) = 128 cycles (weight preload bound), plus one fill and
    # drain of 128 + 128: 128 x 128 + 256 = 16,640 cycles = 16.64 us at 1 GHz
    k = Kernel("L0.ffn", "gemm", "neupims_npu", "fp16", flops=2 * 64 * 4096 * 4096,
               bytes=4096 * 4096 * 2, shape={"m": 64, "k": 4096, "n": 4096})
    t = kernel_time(npu(), k)
    assert (t.model, t.systolic_tiles, t.systolic_cycles) == ("systolic", 1024, 16640)
    assert t.compute_s == pytest.approx(16.64e-6)
    assert t.memory_s == pytest.approx(32 * MiB / 1024e9)            # 32.8 us
    assert t.bound == "memory" and t.seconds == t.memory_s


def test_npu_in_order_gemm_by_hand():
    # `issue = in_order` (the NeuPIMs authors' core): 256 x 7168 by 7168 x 5376 (30B QKV on one of
    # 4 tp devices). A pass over one 128-row batch tile and one K tile: a 128-cycle preload, then
    # 16 cycles (128 outputs over 8 arrays) for each of the other 41 output blocks = 784 cycles;
    # 56 K tiles = 43,904 cycles = 43.904 us. The first batch tile runs under the 77 MB weight
    # stream (75.3 us at 1,024 GB/s), the second after it.
    proc = dataclasses.replace(npu(), systolic_issue="in_order")
    t = kernel_time(proc, matmul(256, 7168, 5376, dtype="fp16", device="neupims_npu"))
    memory = 2 * (7168 * 5376 + 256 * 7168 + 256 * 5376) / 1024e9
    assert t.memory_s == pytest.approx(memory)
    assert t.systolic_cycles == 2 * 56 * 784
    assert t.seconds == pytest.approx(memory + 43.904e-6)
    # the overlapped rule hides the second tile under the stream: max(compute, memory)
    overlapped = kernel_time(npu(), matmul(256, 7168, 5376, dtype="fp16", device="neupims_npu"))
    assert overlapped.seconds == pytest.approx(max(overlapped.compute_s, overlapped.memory_s))
    assert t.seconds / overlapped.seconds == pytest.approx(1.54, abs=0.01)
    # up to 128 rows the in-order GEMM is the weight stream; a GEMV keeps the overlapped rule
    small = matmul(100, 7168, 5376, dtype="fp16", device="neupims_npu")
    assert kernel_time(proc, small).seconds == pytest.approx(kernel_time(proc, small).memory_s)
    gemv = matmul(1, 7168, 5376, dtype="fp16", device="neupims_npu")
    assert kernel_time(proc, gemv) == kernel_time(npu(), gemv)


def test_serial_gemvs_by_hand():
    # `gemv_issue = serial` (the authors' npu-only branch): a preload of 128 + 128 - 1 cycles plus
    # its outputs over the 8 arrays, one per 128-element tile of the vector. K.q of one head at
    # 465 tokens: a 128-vector, 465 outputs: 255 + ceil(465 / 8) = 314; s.V: a 465-vector in
    # ceil(465 / 128) = 4 tiles of 255 + 128 / 8 = 271: 1,084
    assert serial_gemv_cycles(npu(), 128, 465) == 314
    assert serial_gemv_cycles(npu(), 465, 128) == 4 * 271
    assert list(serial_gemv_cycles(npu(), np.array([1, 128, 129]), 128)) == [271, 271, 542]


def test_serial_gemvs_time_decode_attention_per_head():
    # the serving loop's decode attention on the NPU: 8 heads x 256 requests x (314 + 1,084)
    # cycles at 1 GHz, above the KV stream; the overlapped default is the KV stream
    from pimdsl.loops.iteration_serving.layer_segments import DeviceCosts, SERVING_STRATEGIES
    def mha(overrides):
        spec, diags = load_spec(str(ROOT / "specs" / "systems" / "neupims_gpt3_7b.pim"), overrides)
        assert spec is not None, diags.render_all()
        costs = DeviceCosts(spec.systems["neupims_gpt3_7b"], SERVING_STRATEGIES["npu_only"])
        return dict((s.name, s) for s in costs.layer(np.full(256, 466), np.arange(256) % 32))["mha"].seconds
    roofline, serial = mha([]), mha(["neupims_npu.systolic_array.gemv_issue=serial"])
    kv_stream = 256 * 465 * 2 * 1024 * 2 / 1024e9
    assert kv_stream < roofline < 1.1 * kv_stream
    # plus K.q's single GEMV and s.V's GEMVs at 466 tokens (the new token's row included)
    assert serial == pytest.approx(8 * 256 * (255 + 59 + 4 * 271) / 1e9, rel=0.02)


def test_npu_systolic_issue_is_checked():
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "neupims.pim"),
                            ["neupims_npu.systolic_array.issue=inorder"])
    assert spec is None
    text = diags.render_all()
    assert "'inorder' is not a valid issue" in text and "in_order" in text


def test_npu_systolic_ragged_tiles():
    # K = 300 -> 3 row tiles, N = 200 -> 2 col tiles: 6 tiles fit the 8 arrays in one wave
    t = kernel_time(npu(), matmul(10, 300, 200, dtype="fp16", device="neupims_npu"))
    assert (t.systolic_tiles, t.systolic_cycles) == (6, 128 + 128 + 128)
    # 17 tiles need three waves
    t = kernel_time(npu(), matmul(10, 128 * 17, 1, dtype="fp16", device="neupims_npu"))
    assert (t.systolic_tiles, t.systolic_cycles) == (17, 3 * 128 + 256)


def test_npu_vector_units_run_softmax():
    k = Kernel("L0.softmax", "softmax", "neupims_npu", "fp16", flops=5 * 1024 * 1024, bytes=0)
    t = kernel_time(npu(), k)
    assert t.model == "vector" and t.bound == "compute"
    assert t.compute_s == pytest.approx(5 * 1024 * 1024 / (8 * 128 * 1e9))


def test_npu_gemm_needs_a_shape():
    k = Kernel("L0.ffn", "gemm", "neupims_npu", "fp16", flops=1e9, bytes=1e6)
    with pytest.raises(ModelError, match="'m'"):
        kernel_time(npu(), k)


# ---- links ----------------------------------------------------------------------------------

def test_transfer_time():
    icnt = bundled("neupims").links["neupims_icnt"]                  # 32 GB/s, one instance
    assert transfer_time(icnt, 32e6) == pytest.approx(1e-3)
    slow = dataclasses.replace(icnt, latency_s=2e-6)
    assert transfer_time(slow, 32e6) == pytest.approx(1e-3 + 2e-6)
    assert transfer_time(slow, 0) == 0.0
    pcie = bundled("dgx_a100_pim").links["l3_pcie"]                  # 8 x 31.5 GB/s
    assert transfer_time(pcie, 8 * 31.5e6) == pytest.approx(1e-3)
    assert transfer_time(pcie, 31.5e6, instances=1) == pytest.approx(1e-3)
    with pytest.raises(ModelError):
        transfer_time(pcie, 1.0, instances=9)


# ---- properties -----------------------------------------------------------------------------

PROCESSORS = [("galaxy_s24p", "s24_cpu"), ("neupims", "neupims_npu"), ("neupims", "neupims_a100"),
              ("rtx4090_ndp", "hermes_host_cpu")]
work = st.floats(min_value=0, max_value=1e15, allow_nan=False)
dims = st.integers(min_value=1, max_value=20000)


@settings(max_examples=60, deadline=None)
@given(which=st.sampled_from(PROCESSORS), kind=st.sampled_from(["gemm", "gemv", "softmax", "norm"]),
       m=dims, k=dims, n=dims, flops=work, nbytes=work, extra=work,
       threads=st.one_of(st.none(), st.integers(min_value=1, max_value=64)))
def test_time_is_at_least_each_roof_and_monotone(which, kind, m, k, n, flops, nbytes, extra, threads):
    proc = bundled(which[0]).processors[which[1]]
    base = Kernel("op", kind, proc.name, "fp16", flops, nbytes, {"m": m, "k": k, "n": n}, threads)
    t = kernel_time(proc, base)
    assert t.seconds >= t.compute_s and t.seconds >= t.memory_s
    if t.model == "gpu_kernel":         # the measured GPU kernel model: a floor, achieved rates, part overlap
        cal = proc.calibration
        assert t.seconds == pytest.approx(t.launch_s + max(t.compute_s, t.memory_s)
                                          + cal.exposed_fraction * min(t.compute_s, t.memory_s))
        eff = cal.memory_efficiency if kind in ("gemm", "gemv") else cal.elementwise_efficiency
        assert t.memory_s == pytest.approx(nbytes / (proc.count * proc.memory_bandwidth_bytes_per_s * eff))
    else:
        assert t.seconds == max(t.compute_s, t.memory_s)
        assert t.memory_s == pytest.approx(nbytes / (proc.count * proc.memory_bandwidth_bytes_per_s))
    more_flops = kernel_time(proc, dataclasses.replace(base, flops=flops + extra))
    more_bytes = kernel_time(proc, dataclasses.replace(base, bytes=nbytes + extra))
    assert more_flops.seconds >= t.seconds and more_bytes.seconds >= t.seconds
    if t.model == "systolic":   # systolic time follows the shape, not the FLOP count
        bigger = kernel_time(proc, dataclasses.replace(base, shape={"m": m + 1, "k": k + 1, "n": n + 1}))
        assert bigger.compute_s >= t.compute_s
        assert math.isclose(t.compute_s, t.systolic_cycles / proc.clock_hz)


@settings(max_examples=40, deadline=None)
@given(nbytes=st.floats(min_value=0, max_value=1e12), extra=st.floats(min_value=0, max_value=1e12))
def test_transfer_is_monotone(nbytes, extra):
    link = bundled("rtx4090_ndp").links["hermes_dimm_link"]
    assert transfer_time(link, nbytes + extra) >= transfer_time(link, nbytes)
    assert transfer_time(link, nbytes, instances=1) >= transfer_time(link, nbytes)
