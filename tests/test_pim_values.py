"""Values through the HBM-PIM commands equal numpy on random shapes (the NeuPIMs attention
programs' values are tests/test_attention_programs.py).

Exact against numpy in the executor's accumulation order (the docstring of interpreter/values/banks.py), and within the datatype's tolerance against a float64 product: so a misplaced
weight, a wrong register or a skipped tile fails, while rounding differences of the order do not
hide them.
"""
from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.values import banks as PV
from pimdsl.interpreter.values import programs as PVX
from pimdsl.interpreter.values.programs import run_gemv
from pimdsl.lowering.pim_program import expand
from pimdsl.lowering.stream import unroll

from .conftest import ROOT


@pytest.fixture(scope="module")
def aquabolt_2ch():
    """Two pCHs are enough to hold two channels' shares; values do not depend on the channel count."""
    spec, diags = load_spec(str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim"), ["AQUABOLT_XL.organization.channels=2"])
    return spec.memories["aquabolt_xl"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=st.integers(1, 160), n=st.integers(1, 400), dtype=st.sampled_from(["fp16", "bf16"]),
       seed=st.integers(0, 2**32 - 1))
def test_hbm_pim_gemv_equals_numpy(aquabolt_2ch, out, n, dtype, seed):
    """Through the declared program of specs/pim/hbm_pim.pim (even input tiles before odd ones)."""
    memory = aquabolt_2ch
    dt = PV.NUMPY_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1, 1, (out, n)).astype(dt)
    x = rng.uniform(-1, 1, n).astype(dt)
    y = run_gemv(_with_dtype(memory, dtype), memory.pim.program("gemv"), w, x)
    assert np.array_equal(y, PV.hbm_pim_gemv_reference(w, x, dtype, even_tiles_first=128))
    exact = w.astype(np.float64) @ x.astype(np.float64)
    eps = float(ml_dtypes.finfo(dt).eps)
    assert np.all(np.abs(y - exact) <= 2 * eps * np.sqrt(n) * np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)) + 1e-6)


def _with_dtype(memory, dtype):
    return replace(memory, pim=replace(memory.pim, dtype=dtype))


def test_a_misplaced_weight_is_caught(aquabolt_2ch):
    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, (64, 256)).astype(np.float16)
    x = rng.uniform(-1, 1, 256).astype(np.float16)
    program, shape = aquabolt_2ch.pim.program("gemv"), {"n": 64, "k": 256, "m": 1}
    ex = PVX.ProgramExecutor(aquabolt_2ch, x, 64)
    PVX.place(ex, program, shape, "weight", w)
    rows = ex.bank_rows(0, 0, 0).rows[(0, 0)]
    rows[[0, 1]] = rows[[1, 0]]                                  # swap two bursts of bank 0
    for cmd in unroll(expand(aquabolt_2ch, program, shape, 0, values=True)):
        ex.execute(cmd)
    assert not np.allclose(ex.y[:32], w[:32].astype(np.float64) @ x.astype(np.float64), atol=1e-2)
