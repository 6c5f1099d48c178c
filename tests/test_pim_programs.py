"""PIM programs declared in `.pim`: a new family from spec files alone, run and timed generically.

The fixture tests/pim/gbmac.pim declares a PIM family none of the bundled specs uses (a MAC unit
per bank fed from a global input buffer per channel, its own command names, result readback).
Its GEMV runs through the generic expander and values executor: values equal numpy (exactly, in
the executor's stated accumulation order), cycles equal a count worked by hand from the
fixture's rules, and fast timing equals exact.
"""
from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.interpreter.values.banks import NUMPY_DTYPES, hbm_pim_gemv_reference
from pimdsl.interpreter.values.programs import run_gemv
from pimdsl.interpreter.dram.stream_timer import StreamTimer
from pimdsl.lowering.pim_program import check, expand, layout_problem
from pimdsl.lowering.stream import count_commands

from .conftest import ROOT

FIXTURE = ROOT / "tests" / "pim" / "gbmac.pim"


@pytest.fixture(scope="module")
def memory():
    spec, diags = load_spec(str(FIXTURE))
    assert not diags.errors
    return spec.memories["gbmac_memory"]


def shape(n, k):
    return {"n": n, "k": k, "m": 1}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 200), k=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_gemv_through_the_declared_program_equals_numpy(memory, n, k, seed):
    rng = np.random.default_rng(seed)
    dt = NUMPY_DTYPES["fp16"]
    w = rng.uniform(-1, 1, (n, k)).astype(dt)
    x = rng.uniform(-1, 1, k).astype(dt)
    program = memory.pim.program("gemv")
    assert layout_problem(memory, program, shape(n, k), "weight", (n, k)) is None
    assert check(memory, program, shape(n, k)) == []
    y = run_gemv(memory, program, w, x)
    # the executor's order: per output and lane, products and sums rounded to fp16 in input
    # order (the padding of the last input tile adds exact zeros); lanes added in float32
    assert np.array_equal(y, hbm_pim_gemv_reference(w, x, "fp16"))
    exact = w.astype(np.float64) @ x.astype(np.float64)
    eps = float(ml_dtypes.finfo(dt).eps)
    assert np.all(np.abs(y - exact) <= 2 * eps * np.sqrt(k) * np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)) + 1e-6)


def hand_count(n: int, k: int) -> int:
    """Cycles of one channel's GEMV, worked by hand from gbmac.pim's rules.

    An input tile is 4 words x 16 lanes = 64 inputs, an output tile 2 channels x 8 banks x 4 ACC
    = 64 outputs: T = ceil(n / 64) output tiles of S = ceil(k / 64) input tiles. From an input
    tile's MAC_ACT at cycle A: its 16 MACs at A + tOPEN (10) .. A + 10 + 15 tMAC (2) = A + 40,
    MAC_PRE at + tDONE (4) = A + 44, the next MAC_ACT at + tCLOSE (12) = A + 56 (its 4 GB_LOADs,
    one cycle apart after the PRE on the command bus and tGB apart, are done by A + 52). The
    result phase from its MAC_ACT at A: 4 ACC_STOREs at A + 10 .. A + 16, 8 banks x 4 RES_RDs
    from the next cycle, A + 17 .. A + 17 + 31 x 2 = A + 79, MAC_PRE at + tDONE = A + 83, the
    next tile's MAC_ACT at + tCLOSE = A + 95. The first MAC_ACT follows the first 4 loads
    (cycles 0, 2, 4, 6) at cycle 7. The stream ends one cycle after the last MAC_PRE:
    7 + T (56 S + 95) - 95 + 83 + 1."""
    t, s = math.ceil(n / 64), math.ceil(k / 64)
    return t * (56 * s + 95) - 4


@pytest.mark.parametrize("n,k", [(64, 64), (100, 150), (300, 700), (1, 1)])
def test_cycles_equal_the_hand_worked_count(memory, n, k):
    program = memory.pim.program("gemv")
    ends = []
    for fast in (False, True):
        timer = StreamTimer(CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows), fast=fast)
        ends.append(timer.run(expand(memory, program, shape(n, k))))
    assert ends == [hand_count(n, k)] * 2


def test_loops_stay_structured_and_fast_skips(memory):
    program = memory.pim.program("gemv")
    items = expand(memory, program, shape(4096, 4096))
    assert len(items) == 1 and items[0].count == 64 and items[0].period == 1
    # 64 output tiles x (64 input tiles x (4 + 1 + 16 + 1) + 1 + 4 + 32 + 1) commands
    assert count_commands(items) == 64 * (64 * 22 + 38)
    timer = StreamTimer(CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows))
    assert timer.run(items) == hand_count(4096, 4096)
    assert timer.skipped > count_commands(items) // 2


def test_a_tile_that_does_not_fit_is_reported(memory, tmp_path):
    # 32 accumulators x 4 words = 128 bursts of MAC columns: more than LPDDR4's 64 per row
    text = FIXTURE.read_text().replace("register_file ACC { count = 4;", "register_file ACC { count = 32;")
    path = tmp_path / "gbmac32.pim"
    path.write_text(text.replace('import "dram/lpddr4.pim";', f'import "{ROOT}/specs/dram/lpddr4.pim";'))
    spec, diags = load_spec(str(path))
    big = spec.memories["gbmac_memory"]
    problems = check(big, big.pim.program("gemv"), shape(1024, 64))
    assert problems and "MAC: column 124 is outside the declared 0..63" in problems[0].message
    assert "outside 0..63" in layout_problem(big, big.pim.program("gemv"), shape(1024, 64), "weight", (1024, 64))


UNIT = """
import "dram/lpddr4.pim";
pim_unit u {
  placement = bank; simd_width = 256 bit; dtype = fp16; global_buffer = 64 B;
  register_file ACC { count = 2; width = 256 bit; }
  command LOAD { scope = channel; writes = [global_buffer]; effect = load; }
  command MAC  { scope = all_banks; reads = [row, global_buffer]; writes = [ACC]; effect = mac; }
  command BAD  { scope = all_banks; reads = [row, GRF]; writes = [ACC]; effect = mac; }
  program %s
}
memory m { part = LPDDR4; address_map = [row, bank, column]; pim = u; }
"""


def test_program_mistakes_are_all_reported_in_one_run(errors):
    found = errors(UNIT % """gemv {
    for t[cdiv(n, lanez)] {
      LOAD(reg = t);
      MAC(row = t, column = 0, src = 0, acc = 0, bank_grp = 1);
      MACC(row = t);
    }
  }""")
    text = "\n".join(found)
    assert "command BAD (mac) names 'GRF', which the unit does not declare" in text
    assert "'lanez' is not defined in this program" in text and "did you mean 'lanes'" in text
    assert "LOAD (load) needs the argument(s) input" in text
    assert "MAC takes no argument 'bank_grp'" in text
    assert "program issues the undeclared command 'MACC'" in text and "did you mean 'MAC'" in text
    assert all(":" in line.split("\n")[0] for line in found)        # located: path:line:col


def test_a_program_for_an_unknown_op_class(errors):
    found = errors(UNIT % "gemw { }")
    assert any("'gemw' is not an op class a program can be written for" in e and "did you mean 'gemv'" in e
               for e in found)


SYSTEM = ROOT / "tests" / "pim" / "gbmac_system.pim"


def test_a_system_on_the_new_family_compiles_and_runs(capsys):
    from pimdsl.cli.main import main
    assert main(["check", str(SYSTEM)]) == 0
    capsys.readouterr()
    assert main(["run", str(SYSTEM), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counts = report["pim"]["command_counts"]
    assert counts["mac.MAC"] > 0 and report["tpot_s"] > 0


def test_ops_placed_on_a_unit_without_their_program_are_all_reported_at_check(tmp_path, capsys):
    from pimdsl.cli.main import main
    text = SYSTEM.read_text().replace("decode  { fc = pim;", "decode  { fc = pim; attention = pim;")
    path = tmp_path / "bad.pim"
    path.write_text(text.replace('import "gbmac.pim";', f'import "{ROOT}/tests/pim/gbmac.pim";'))
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    for kind in ("attn_score", "attn_context", "softmax"):
        assert f"({kind}) is placed on PIM unit 'gbmac', which has no program for {kind}" in err
    assert "hint: unit 'gbmac' runs gemv: map attn_score to a processor, or declare `program attn_score" in err
    assert "bad.pim:7:1: error: decode step:" in err


def test_language_md_shows_the_fixture_as_its_worked_example():
    body = FIXTURE.read_text().split("\n", 3)[3]        # without the fixture's own header comment
    assert body in (ROOT / "LANGUAGE.md").read_text()


@pytest.mark.parametrize("n,k,first_row", [(2048, 2048, 0), (512, 8192, 7), (300, 200, 5), (5000, 300, 0)])
def test_the_lpddr5x_pim_program_issues_algorithm_1_command_for_command(n, k, first_row):
    """The GEMV program declared in galaxy_s24p.pim issues exactly the stream of the built-in
    lowering it replaces (names, places, rows and columns), on every channel."""
    from pimdsl.lowering.mode_protocol_gemv import GemvLayout, gemv_program
    from pimdsl.lowering.stream import unroll
    spec, _ = load_spec(str(ROOT / "specs" / "hardware" / "galaxy_s24p.pim"))
    phone = next(m for m in spec.memories.values() if m.pim is not None)
    place = lambda c: (c.name, c.channel, c.pseudo_channel, c.rank, c.bank_group, c.bank, c.row, c.column)
    for channel in (0, phone.organization.channels - 1):
        old = gemv_program(phone, GemvLayout.of(phone, n, k, first_row=first_row), channel)
        new = expand(phone, phone.pim.program("gemv"), shape(n, k), channel, first_row)
        assert list(map(place, unroll(new))) == list(map(place, unroll(old)))


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 3000), k=st.integers(1, 600), which=st.sampled_from(["gbmac", "phone"]))
def test_fast_timing_of_declared_programs_equals_exact(n, k, which):
    """Loops whose period the expander found statically: extrapolating them changes no cycle."""
    if which == "gbmac":
        memory = load_spec(str(FIXTURE))[0].memories["gbmac_memory"]
    else:
        spec, _ = load_spec(str(ROOT / "specs" / "hardware" / "galaxy_s24p.pim"))
        memory = next(m for m in spec.memories.values() if m.pim is not None)
    ends, counts = [], []
    for fast in (False, True):
        timer = StreamTimer(CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows), fast=fast)
        ends.append(timer.run(expand(memory, memory.pim.program("gemv"), shape(n, k))))
        counts.append(timer.counts)
    assert ends[0] == ends[1] and counts[0] == counts[1]


def test_a_layout_that_does_not_cover_the_weight_is_reported_at_check(tmp_path, capsys):
    from pimdsl.cli.main import main
    unit = FIXTURE.read_text().replace("      bank = mod(o, banks);\n", "      bank = 0;\n")
    unit = unit.replace('import "dram/lpddr4.pim";', f'import "{ROOT}/specs/dram/lpddr4.pim";')
    (tmp_path / "gbmac.pim").write_text(unit)
    (tmp_path / "system.pim").write_text(SYSTEM.read_text())
    assert main(["check", str(tmp_path / "system.pim")]) == 1
    err = capsys.readouterr().err
    assert "gbmac.pim:42:5: error: decode step: op L0.q_proj: the layout does not cover its 256 x 256 weight" in err
    assert "places of weight hold more than one element" in err
