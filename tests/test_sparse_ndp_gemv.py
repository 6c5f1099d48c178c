"""The NDP core's GEMV over the activated rows of a cold block, through the commands its unit declares
(`program gemv` of hermes_ndp_core, specs/hardware/rtx4090_ndp.pim): values equal numpy on the
activated rows; cycles, timed by the DRAM engine on the DIMM's DDR4-3200, hold to the loop's
analytic cost and to the two bounds it is the larger of."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.interpreter.dram.stream_timer import StreamTimer
from pimdsl.interpreter.values.programs import adder_tree_dot, run
from pimdsl.loops.hot_cold_offload import neuron_split as hot_cold_offload
from pimdsl.loops.hot_cold_offload.sparse_ndp_gemv import neuron_seconds, program_seconds
from pimdsl.lowering.pim_program import check, expand, layout_problem
from pimdsl.lowering.stream import unroll

from .conftest import ROOT

PAIR = 8                     # neurons read at once: 2 bank groups x 4 ranks ([HERMES_NDP] Table II)


@pytest.fixture(scope="module")
def dimm():
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "rtx4090_ndp.pim"))
    assert not diags.errors
    return spec.memories["hermes_ndp_dimm"]


def through_commands(dimm, w, x):
    """y[token, neuron] of the activated rows `w` (n x k) for the tokens `x` (m x k), as the host
    collects it from the program's NDP_DOT results."""
    n, k = w.shape
    m = x.shape[0]
    slots = math.ceil(n / PAIR) * PAIR
    y = run(dimm, dimm.pim.program("gemv"), {"n": n, "k": k, "m": m}, {"weight": w}, m * slots, x.reshape(-1))
    return y.reshape(m, slots)[:, :n]


def in_program_order(w, x, lanes=2048):
    """numpy in the program's order: per neuron, row and SIMD word of 2,048 weights, one pass of the
    reduction tree (float32, rounded to fp16), the passes added in float32 in order."""
    n, k = w.shape
    y = np.zeros((x.shape[0], n), np.float32)
    for start in range(0, k, lanes):
        # a row's words past the neuron's end hold zeros and are not computed
        ww = np.zeros((n, lanes), w.dtype)
        ww[:, :min(lanes, k - start)] = w[:, start:start + lanes]
        xx = np.zeros((x.shape[0], lanes), x.dtype)
        xx[:, :min(lanes, k - start)] = x[:, start:start + lanes]
        part = adder_tree_dot(ww[None, :, :], xx[:, None, :], lanes).astype(np.float16).astype(np.float32)
        y = (y + part).astype(np.float32)
    return y


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=st.integers(1, 40), k=st.integers(1, 5000), m=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_sparse_gemv_through_the_commands_equals_numpy_on_the_activated_rows(dimm, block, k, m, seed):
    rng = np.random.default_rng(seed)
    weights = rng.uniform(-1, 1, (block, k)).astype(np.float16)      # the DIMM's cold neurons of a block
    active = rng.random(block) < 0.4
    active[rng.integers(block)] = True
    x = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    w = weights[active]                                               # the host queues the activated rows
    y = through_commands(dimm, w, x)
    assert np.array_equal(y, in_program_order(w, x))
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    eps = float(ml_dtypes.finfo(np.float16).eps)
    bound = eps * (1 + math.ceil(k / 2048)) * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T) + 1e-6
    assert np.all(np.abs(y - exact) <= bound)


@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (9, 10240, 2), (360, 24576, 16), (17, 9216, 3)])
def test_layout_covers_the_block_and_every_issue_fits(dimm, n, k, m):
    program = dimm.pim.program("gemv")
    shape = {"n": n, "k": k, "m": m}
    assert layout_problem(dimm, program, shape, "weight", (n, k), edges=64) is None
    assert check(dimm, program, shape) == []


def test_fast_timing_equals_exact(dimm):
    items = lambda: expand(dimm, dimm.pim.program("gemv"), {"n": 20, "k": 6000, "m": 3})
    ends = [StreamTimer(CommandTimer(dimm, dimm.pim.commands, dimm.pim.rules, dimm.pim.windows), fast=f).run(items())
            for f in (False, True)]
    assert ends[0] == ends[1]


@pytest.mark.parametrize("n,k,m", [(64, 8192, 1), (64, 8192, 16), (40, 10240, 4)])
def test_cycles_are_bounded_by_the_reads_and_the_passes(dimm, n, k, m):
    """The ranks' reads (one burst per tCCD_S = 4 cycles per rank, 4 ranks) and the GEMV unit's passes
    (tPASS = 26 cycles each) both bound the program from below; the row overheads stay small."""
    seconds = program_seconds(dimm, n, k, m)
    tck = dimm.part.tck_s
    reads = math.ceil(n / 4) * math.ceil(k / 32) * 4 * tck               # busiest rank's bursts
    passes = n * m * math.ceil(k / 2048) * 26 * tck
    assert seconds >= max(reads, passes)
    assert seconds <= 1.12 * max(reads, passes)
    commands = list(unroll(expand(dimm, dimm.pim.program("gemv"), {"n": n, "k": k, "m": m})))
    assert sum(c.name == "NDP_DOT" for c in commands) == n * m * math.ceil(k / 2048)
    assert sum(c.name == "NDP_RD" for c in commands) == n * math.ceil(k / 32)


@pytest.fixture(scope="module")
def llama2_70b():
    spec, diags = load_spec(str(ROOT / "specs" / "systems" / "hermes_ndp_llama2_70b.pim"))
    return hot_cold_offload.setup(spec.systems["hermes_ndp_llama2_70b"])


@pytest.mark.parametrize("block", ["qkv", "mlp"])
def test_the_loop_takes_its_neuron_cost_from_the_program_within_ten_percent_of_the_analytic(llama2_70b, block):
    s = llama2_70b
    elems = s.qkv_elems if block == "qkv" else s.mlp_elems
    analytic = float(hot_cold_offload.dimm_s(s, elems * s.dt, 1))     # max(bytes / 102.4 GB/s, MACs / 128 G/s)
    timed = neuron_seconds(s.dimm, elems, 1)
    assert hot_cold_offload.cold_neuron_s(s, elems * s.dt, 1) == timed
    assert 1.0 <= timed / analytic <= 1.10


def test_neuron_cost_is_kept_on_disk_by_content(dimm, tmp_path, monkeypatch):
    from pimdsl.loops.hot_cold_offload import sparse_ndp_gemv
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    monkeypatch.setattr(sparse_ndp_gemv, "_CACHE", {})
    want = (program_seconds(dimm, 32, 5000, 1) - program_seconds(dimm, 16, 5000, 1)) / 16
    assert neuron_seconds(dimm, 5000, 1) == want
    assert len(list(tmp_path.glob("*.json"))) == 1
    monkeypatch.setattr(sparse_ndp_gemv, "_CACHE", {})                  # a new process: read back, not timed
    monkeypatch.setattr(sparse_ndp_gemv, "program_seconds", lambda *a: pytest.fail("timed again"))
    assert neuron_seconds(dimm, 5000, 1) == want
    monkeypatch.setattr(sparse_ndp_gemv, "_CACHE", {})                  # another shape is another entry
    with pytest.raises(pytest.fail.Exception):
        neuron_seconds(dimm, 5001, 1)


def test_command_sample_is_kept_on_disk_by_content(dimm, tmp_path, monkeypatch):
    from pimdsl.loops.hot_cold_offload import sparse_ndp_gemv
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    want = sparse_ndp_gemv.command_sample(dimm, 5000, 1)
    assert want["seconds"] > 0 and sum(want["command_counts"].values()) > 0
    assert len(list(tmp_path.glob("*.json"))) == 1
    monkeypatch.setattr(sparse_ndp_gemv, "StreamTimer", lambda *a, **k: pytest.fail("timed again"))
    assert sparse_ndp_gemv.command_sample(dimm, 5000, 1) == want      # a new run: read back, not timed
    with pytest.raises(pytest.fail.Exception):                         # another shape is another entry
        sparse_ndp_gemv.command_sample(dimm, 5000, 2)


@pytest.mark.parametrize("n, k, m", [(16, 10240, 1), (32, 24576, 1), (5, 4096, 4)])
def test_program_seconds_same_on_both_dram_engines(dimm, monkeypatch, n, k, m):
    # the calibration runs on the compiled core from its first command; the reference is the Python engine
    compiled = program_seconds(dimm, n, k, m)
    monkeypatch.setenv("PIMDSL_DRAM_ENGINE", "python")
    assert program_seconds(dimm, n, k, m) == compiled
