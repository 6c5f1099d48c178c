"""The PIM-SHERPA reproduction table stays what validation/pim_sherpa.json committed.

Recomputes the rows that take seconds (capacities, SMC latencies, NC-GEMM, a
TTFT point) and fails when one drifts; the Fig. 12 grid (minutes) is checked
at one point. Regenerate with `python validation/run_pim_sherpa.py` after a
deliberate change, and update the explanations in validation/pim_sherpa.md.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.validation import pim_sherpa as P

from .conftest import ROOT

# Each row reruns whole phone workloads (minutes): CI runs them in its slow step (`pytest -m slow`).
pytestmark = pytest.mark.slow

COMMITTED = json.loads((ROOT / "validation" / "pim_sherpa.json").read_text())
BY_QUANTITY = {r["quantity"]: r for r in COMMITTED["rows"]}


def check(rows):
    for r in rows:
        committed = BY_QUANTITY[r["quantity"]]
        assert r["ours"] == pytest.approx(committed["ours"], rel=1e-6), r["quantity"]
        assert r["paper"] == committed["paper"]


def test_capacity_rows():
    check(P.capacity_rows())


def test_smc_rows():
    check(P.smc_rows())


def test_nc_gemm_rows():
    check(P.nc_gemm_rows())


def test_fig12_point():
    point, speedup = P._speedup(("owr", 64, 64))
    assert speedup == pytest.approx(COMMITTED["fig12_speedups"]["owr 64 64"], rel=1e-6)


def test_calibration_points_match_and_the_table_explains_every_large_gap():
    md = (ROOT / "validation" / "pim_sherpa.md").read_text()
    for r in COMMITTED["rows"]:
        assert r["quantity"] in md, f"row missing from pim_sherpa.md: {r['quantity']}"
        if r["kind"] in ("calibrated", "calibrated reading"):
            assert abs(r["error"]) < 0.02, r["quantity"]
    # capacities are structural: within 1% of the paper
    for r in COMMITTED["rows"]:
        if r["unit"] == "%" and "capacity saving" in r["quantity"]:
            assert abs(r["error"]) < 0.01, r["quantity"]
