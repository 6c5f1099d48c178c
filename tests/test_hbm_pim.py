"""The HBM-PIM (Aquabolt-XL) GEMV kernel: its command counts and its cycles against PIMSimulator."""
from __future__ import annotations

import json

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.lowering.hbm_pim_gemv import GemvTiling, gemv_stream
from pimdsl.validation import hbm_pim as H

from .conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "pim_hbm.json").read_text())


@pytest.fixture(scope="module")
def aquabolt():
    spec, diags = load_spec(str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim"), ["gemv.out=8192"])
    assert spec is not None, diags.render_all()
    assert spec.models["gemv"].params["out"] == 8192
    return spec.memories["aquabolt_xl"]


def test_tiles_follow_from_the_pim_unit(aquabolt):
    t = GemvTiling.of(aquabolt, 128, 300)
    assert (t.in_tile, t.out_tile, t.n_in, t.n_out, t.bursts_per_block) == (128, 64, 3, 2, 64)


@pytest.mark.parametrize("out,in_dim", [(64, 256), (128, 384)])
def test_command_counts_per_reference_readme(aquabolt, out, in_dim):
    """[REFDATA] pim README Sec. 1: 16 park-in and 16 park-out reads, one CRF write, 2 control writes, 8 drain writes
    per output tile, 8 GRF_A writes and 64 MAC reads per input tile per output tile."""
    _, kinds = H.pim_cycles(aquabolt, out, in_dim)
    t = GemvTiling.of(aquabolt, out, in_dim)
    assert kinds["park.RD"] == 32
    assert kinds["crf.WR"] == 1
    assert kinds["ctrl.WR"] == 2 * t.n_out
    assert kinds["drain.WR"] == 8 * t.n_out
    assert kinds["grf_a.WR"] == 8 * t.n_in * t.n_out
    assert kinds["mac.RD"] == 64 * t.n_in * t.n_out
    assert kinds["mode.WR"] == 8                          # enter and leave all-bank mode


def test_stream_is_lazy(aquabolt):
    stream = gemv_stream(aquabolt, 64 * 1000, 128 * 1000)      # 64 M MAC reads if materialised
    assert sum(1 for _, c in zip(range(1000), stream)) == 1000


@pytest.mark.parametrize("row", COMMITTED["kernels"], ids=lambda r: f"{r['out_per_pch']}x{r['in']}")
def test_no_regression_against_pimsimulator(aquabolt, row):
    ours, _ = H.pim_cycles(aquabolt, row["out_per_pch"], row["in"])
    error = (ours / row["reference"] - 1) * 100
    assert abs(error) <= abs(row["error_pct"]) + 1.0, f"{error:+.2f}% vs committed {row['error_pct']:+.2f}%"


def test_system_and_baseline(aquabolt):
    s = COMMITTED["system"]
    assert H.system_pim_cycles(aquabolt, 4096, 4096) == s["pim"]
    base = H.baseline_cycles(aquabolt, 4096, 4096)
    assert abs(base / s["reference_baseline"] - 1) * 100 <= abs(s["baseline_error_pct"]) + 1.0
