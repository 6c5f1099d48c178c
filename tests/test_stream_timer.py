"""Structured streams: fast timing equals exact timing, and the LPDDR5X-PIM GEMV computes what numpy does.

Fast mode skips steady-state loop periods; exact mode issues every command. The two must agree
on the end cycle, on every command count and on the refreshes, on random small streams of both a
plain DRAM (DDR4, random bank loops) and the PIM-SHERPA LPDDR5X-PIM GEMV, with and without
blocking refresh.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.ir.commands import Command
from pimdsl.interpreter.values.banks import NUMPY_DTYPES, hbm_pim_gemv_reference
from pimdsl.interpreter.values.mode_protocol import ModeProtocolExecutor, channel_banks, place_weights, read_result
from pimdsl.interpreter.dram.stream_timer import StreamTimer
from pimdsl.lowering.mode_protocol_gemv import GemvLayout, Protocol, gemv_program
from pimdsl.lowering.stream import Loop, check_uniform, count_commands, unroll

from .conftest import ROOT

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def phone():
    spec, diags = load_spec(str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim"))
    assert spec is not None, diags.render_all()
    return spec.systems["pim_sherpa_llama3_2_1b"].memories[0]


@pytest.fixture(scope="module")
def ddr4():
    spec, diags = load_spec(str(ROOT / "specs" / "reference" / "dram.pim"))
    return spec.memories["ddr4_3200"]


def pim_timer(memory, refresh):
    return CommandTimer(memory, memory.pim.commands, memory.pim.rules, memory.pim.windows, refresh=refresh)


def both(make_timer, items):
    exact, fast = StreamTimer(make_timer(), fast=False), StreamTimer(make_timer(), fast=True)
    exact.run(items)
    fast.run(items)
    return exact, fast


@SETTINGS
@given(out=st.integers(1, 3000), in_dim=st.integers(1, 1200), refresh=st.sampled_from(["none", "blocking"]))
def test_fast_equals_exact_on_pim_gemv(phone, out, in_dim, refresh):
    items = gemv_program(phone, GemvLayout.of(phone, out, in_dim, first_row=3))
    exact, fast = both(lambda: pim_timer(phone, refresh), items)
    assert (fast.end, fast.read_end) == (exact.end, exact.read_end)
    assert fast.counts == exact.counts
    assert fast.timer.refreshes == exact.timer.refreshes
    assert sum(exact.counts.values()) == count_commands(items)


def random_loop(draw, depth=0):
    """A loop whose body opens, reads and closes random banks (uniform shape, rows vary)."""
    banks = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True))
    reads = draw(st.integers(1, 6))
    count = draw(st.integers(1, 40))
    inner = random_loop(draw, depth + 1) if depth == 0 and draw(st.booleans()) else None

    def body(i):
        out = []
        for b in banks:
            bg, ba = divmod(b, 4)
            out.append(Command("ACT", 0, 0, 0, bg, ba, row=i % 7, kind="act"))
            out += [Command("RD", 0, 0, 0, bg, ba, row=i % 7, column=c) for c in range(reads)]
            out.append(Command("PRE", 0, 0, 0, bg, ba))
        return out + ([inner] if inner else [])
    return Loop(count, body, "random")


@SETTINGS
@given(data=st.data(), refresh=st.sampled_from(["none", "blocking"]))
def test_fast_equals_exact_on_random_loops(ddr4, data, refresh):
    items = [random_loop(data.draw) for _ in range(data.draw(st.integers(1, 3)))]
    exact, fast = both(lambda: CommandTimer(ddr4, refresh=refresh), items)
    assert (fast.end, fast.read_end, fast.counts, fast.timer.refreshes) == \
        (exact.end, exact.read_end, exact.counts, exact.timer.refreshes)


def test_fast_mode_skips_most_of_a_large_gemv(phone):
    """The point of fast mode: a 8192 x 2048 GEMV issues only a fraction of its commands."""
    layout = GemvLayout.of(phone, 8192, 2048)
    fast = StreamTimer(pim_timer(phone, "none"))
    fast.run(gemv_program(phone, layout))
    assert fast.skipped > 0.8 * sum(fast.counts.values())


def test_loop_bodies_are_uniform(phone):
    items = gemv_program(phone, GemvLayout.of(phone, 5000, 700))
    loops = [x for x in items if isinstance(x, Loop)]
    for loop in loops:
        check_uniform(loop)
    check_uniform(loops[0].body(0)[0])         # the input-tile loop inside an output tile


def test_protocol_roles_come_from_declarations(phone):
    p = Protocol.of(phone)
    assert (p.act_ab, p.mac_rd, p.grf_wr, p.drain_rd, p.out_wr, p.result_rd) == (
        "PIM_ACT_AB", "PIM_MAC_RD", "PIM_GRF_WR", "PIM_DRAIN_RD", "PIM_OUT_WR", "PIM_RESULT_RD")
    assert (p.mode_ab, p.mode_abpim, p.mode_exit, p.mode_sb) == (
        "PIM_MODE_AB", "PIM_MODE_ABPIM", "PIM_MODE_AB_EXIT", "PIM_MODE_SB")
    assert (p.input_rf, p.output_rf) == ("grf_in", "grf_out")


def test_command_counts_follow_algorithm_1(phone):
    """Per output tile and input tile and rank: 8 input writes (Write8), one all-bank ACT and PRE,
    64 MAC reads (Read32 x 2 rows of 32 in HBM, one 64-burst row here); per output tile: 5 drain
    reads (Read5) and 8 output writes (Write8)."""
    layout = GemvLayout.of(phone, 4096, 1024)
    t = StreamTimer(pim_timer(phone, "none"), fast=False)
    t.run(gemv_program(phone, layout))
    ranks, n_out, n_in = phone.part.organization.ranks, layout.n_out, layout.n_in
    c = {kind: sum(n for (_, k), n in t.counts.items() if k == kind) for _, kind in t.counts}
    # 4 channels x 2 ranks x 16 banks = 128 blocks: 4096 / 128 = 32 outputs per block = 4 tiles of 8;
    # 1024 inputs / 128 per input tile (8 registers x 16 lanes) = 8
    assert ranks == 2 and (n_out, n_in) == (4, 8)
    assert c["mac"] == ranks * n_out * n_in * 64
    assert c["grf_in"] == ranks * n_out * n_in * 8
    assert c["drain"] == ranks * n_out * 5
    assert c["out"] == ranks * n_out * 8
    assert c["readback"] == ranks * 16 * (2 * layout.result_rows + n_out * 8)


@SETTINGS
@given(out=st.integers(1, 400), in_dim=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_gemv_through_the_commands_equals_numpy(phone, out, in_dim, seed):
    rng = np.random.default_rng(seed)
    dt = NUMPY_DTYPES[phone.pim.dtype]
    w = rng.standard_normal((out, in_dim)).astype(dt)
    x = rng.standard_normal(in_dim).astype(dt)
    layout = GemvLayout.of(phone, out, in_dim, first_row=rng.integers(0, 100))
    banks = channel_banks(phone)
    place_weights(phone, layout, banks, w)
    xp = np.zeros(layout.n_in * layout.in_regs * layout.lanes, dtype=dt)
    xp[:in_dim] = x
    for channel in range(phone.organization.channels):
        ex = ModeProtocolExecutor(phone, layout, banks, channel)
        for cmd in unroll(gemv_program(phone, layout, channel, x=xp)):
            ex.execute(cmd)
    y = read_result(phone, layout, banks)
    assert np.array_equal(y, hbm_pim_gemv_reference(w, x, phone.pim.dtype))
    exact = w.astype(np.float64) @ x.astype(np.float64)
    # bf16 keeps 8 significant bits; each of in/16 rounded sums adds at most 2^-8 relative error
    bound = 2.0 ** -8 * (in_dim / 16 + 2) * (np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64))) + 1e-6
    assert np.all(np.abs(y - exact) <= bound)
