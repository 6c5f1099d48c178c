"""Values through the HBM-PIM commands equal numpy on random shapes (the NeuPIMs attention
programs' values are tests/test_attention_programs.py).

Exact against numpy in the executor's accumulation order (the docstring of pim_values), and within the datatype's tolerance against a float64 product: so a misplaced
weight, a wrong register or a skipped tile fails, while rounding differences of the order do not
hide them.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter import pim_values as PV
from pimdsl.lowering.hbm_pim_gemv import gemv_stream

from .conftest import ROOT


@pytest.fixture(scope="module")
def aquabolt():
    spec, diags = load_spec(str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim"))
    return spec.memories["aquabolt_xl"]


def run_gemv(memory, w, x, dtype):
    banks = PV.Banks(memory, dtype)
    PV.place_gemv_weights(memory, banks, w)
    ex = PV.HbmPimExecutor(memory, banks)
    for cmd in gemv_stream(memory, w.shape[0], w.shape[1], x=x):
        ex.execute(cmd)
    return PV.read_gemv_result(memory, banks, w.shape[0], w.shape[1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out=st.integers(1, 160), n=st.integers(1, 400), dtype=st.sampled_from(["fp16", "bf16"]),
       seed=st.integers(0, 2**32 - 1))
def test_hbm_pim_gemv_equals_numpy(aquabolt, out, n, dtype, seed):
    dt = PV.NUMPY_DTYPES[dtype]
    rng = np.random.default_rng(seed)
    w = rng.uniform(-1, 1, (out, n)).astype(dt)
    x = rng.uniform(-1, 1, n).astype(dt)
    y = run_gemv(aquabolt, w, x, dtype)
    assert np.array_equal(y, PV.hbm_pim_gemv_reference(w, x, dtype))
    exact = w.astype(np.float64) @ x.astype(np.float64)
    eps = float(ml_dtypes.finfo(dt).eps)
    assert np.all(np.abs(y - exact) <= 2 * eps * np.sqrt(n) * np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)) + 1e-6)


def test_a_misplaced_weight_is_caught(aquabolt):
    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, (64, 256)).astype(np.float16)
    x = rng.uniform(-1, 1, 256).astype(np.float16)
    banks = PV.Banks(aquabolt, "fp16")
    PV.place_gemv_weights(aquabolt, banks, w)
    banks.rows[(0, 0)][[0, 1]] = banks.rows[(0, 0)][[1, 0]]      # swap two bursts of bank 0
    ex = PV.HbmPimExecutor(aquabolt, banks)
    for cmd in gemv_stream(aquabolt, 64, 256, x=x):
        ex.execute(cmd)
    y = PV.read_gemv_result(aquabolt, banks, 64, 256)
    assert not np.allclose(y, w.astype(np.float64) @ x.astype(np.float64), atol=1e-2)
