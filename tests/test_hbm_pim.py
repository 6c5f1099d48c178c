"""The HBM-PIM (Aquabolt-XL) GEMV, declared in specs/pim/hbm_pim.pim: its commands and its cycles against PIMSimulator."""
from __future__ import annotations

import json
import math

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.lowering.pim_program import environment
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
    program = aquabolt.pim.program("gemv")
    env = environment(aquabolt, program, {"n": 128 * 64, "k": 300, "m": 1})
    assert (env["in_tile"], env["out_tile"], env["n_in"], env["n_out"], env["tile_rows"]) == (128, 64, 3, 2, 2)


@pytest.mark.parametrize("out,in_dim", [(64, 256), (128, 384)])
def test_command_counts_per_reference_readme(aquabolt, out, in_dim):
    """[REFDATA] pim README Sec. 1 and 3: 16 park-in and 16 park-out reads, one CRF write, 4 + 2 mode
    writes, 2 control writes and 8 drain writes per output tile, 8 GRF_A writes and 64 MAC reads
    per input tile per output tile."""
    _, kinds = H.pim_cycles(aquabolt, out, in_dim)
    n_in, n_out = math.ceil(in_dim / 128), math.ceil(out / 64)
    assert kinds["park_rd.RD"] == 32
    assert kinds["crf_wr.WR"] == 1
    assert kinds["sb_to_ab.WR"] == 4 and kinds["ab_to_sb.WR"] == 2
    assert kinds["pim_enter.WR"] == kinds["pim_exit.WR"] == n_out
    assert kinds["store.WR"] == 8 * n_out
    assert kinds["load.WR"] == 8 * n_in * n_out
    assert kinds["mac.RD"] == 64 * n_in * n_out
    assert "readback.RD" not in kinds                 # the reference's count ends before the readback


def test_even_tiles_run_before_odd_ones_through_the_odd_bank(aquabolt):
    """[REFDATA] pim README Sec. 3: GRF_A writes and the drain through the odd bank; even input tiles first."""
    cmds = [c for c in H.gemv_commands(aquabolt, 64, 512) if c.kind in ("load", "mac", "store")]
    assert {(c.bank_group, c.bank) for c in cmds if c.kind in ("load", "store")} == {(0, 1)}
    mac_banks = [c.bank for c in cmds if c.kind == "mac"]
    assert mac_banks == [0] * 128 + [1] * 128         # tiles 0, 2 on the even bank, then 1, 3 on the odd


@pytest.mark.parametrize("row", COMMITTED["kernels"], ids=lambda r: f"{r['out']}x{r['in']}")
def test_no_regression_against_pimsimulator(aquabolt, row):
    ours, _ = H.pim_cycles(aquabolt, math.ceil(row["out"] / 64), row["in"])
    assert ours == row["ours"]
    error = (ours / row["reference"] - 1) * 100
    assert abs(error) <= 5.0, f"{error:+.2f}% (target 5%, [REFDATA] pim README Sec. 1 and extra.json)"


def test_system_and_baseline(aquabolt):
    s = COMMITTED["system"]
    assert H.system_pim_cycles(aquabolt, 4096, 4096) == s["pim"]
    base = H.baseline_cycles(aquabolt, 4096, 4096)
    assert abs(base / s["reference_baseline"] - 1) * 100 <= abs(s["baseline_error_pct"]) + 1.0


def test_staggered_refresh_is_a_controller_option(aquabolt):
    """[REFDATA] pim README Sec. 3: the computing rank's first refresh is due at tREFI / 2 (2 ranks,
    staggered), which puts one refresh inside the 4096 x 1024 kernel (3,685 cycles); unstaggered, none."""
    from dataclasses import replace
    from pimdsl.interpreter.dram.command_stream import CommandTimer
    assert CommandTimer(aquabolt, refresh="blocking").dues(0) == [1950, 3900]
    plain = replace(aquabolt, controller=replace(aquabolt.controller, refresh_stagger=False))
    assert CommandTimer(plain, refresh="blocking").dues(0) == [3900, 3900]
    assert H.pim_cycles(aquabolt, 64, 1024)[1]["REF"] == 1
    assert H.pim_cycles(plain, 64, 1024)[1]["REF"] == 0


def test_issued_as_names_a_command_of_the_part(tmp_path):
    library = (ROOT / "specs" / "pim" / "hbm_pim.pim").read_text()
    (tmp_path / "unit.pim").write_text(library.replace("command PARK_RD    { issued_as = RD; }",
                                                       "command PARK_RD    { issued_as = RDD; }"))
    spec = (ROOT / "specs" / "reference" / "hbm_pim_gemv.pim").read_text()
    spec = spec.replace('import "../dram/hbm2.pim";', f'import "{ROOT / "specs" / "dram" / "hbm2.pim"}";')
    spec = spec.replace('import "../pim/hbm_pim.pim";', 'import "unit.pim";')
    (tmp_path / "system.pim").write_text(spec)
    result, diags = load_spec(str(tmp_path / "system.pim"))
    text = diags.render_all()
    assert result is None and "issued as 'RDD'" in text and "RD" in text and "unit.pim" in text
