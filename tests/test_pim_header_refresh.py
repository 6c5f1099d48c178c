"""PIM_HEADER lets the controller fit a NeuPIMs tile between two refreshes (NeuPIMs section 5.2).

Each tile's PIM_HEADER carries the tile's estimated cycles (`estimate`: the generic expander
times the rest of the header's loop body, one tile, alone by the spec's rules). With blocking refresh, a refresh that would fall due within the estimate is taken
before the header, so no REF ever lands between a tile's header and its last PIM_PRECHARGE; a
header without the estimate lets refreshes cut tiles. With no refresh the estimate changes
nothing, and fast structured timing still equals exact timing.
"""
from __future__ import annotations

import dataclasses

import pytest

from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.ir.commands import Command, StreamError
from pimdsl.interpreter.dram.stream_timer import StreamTimer
from pimdsl.lowering.pim_program import expand
from pimdsl.lowering.stream import Loop, check_uniform
from pimdsl.loops.iteration_serving.pim_attention import attention_shape, attention_stream
from pimdsl.validation import neupims as N


@pytest.fixture(scope="module")
def memory():
    return N.neupims_memory()


def timer(memory, refresh="blocking", **options):
    pim = memory.pim
    return CommandTimer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh, **options)


def tiles_and_refreshes(memory, commands):
    """(header cycle, last PIM_PRECHARGE cycle) of every tile, and every REF cycle, blocking refresh."""
    t = timer(memory, record_refreshes=True)
    tiles, header, last = [], None, None
    for i, c in enumerate(commands):
        cycle = t.issue(c, i)
        if c.name == "PIM_HEADER":
            if header is not None:
                tiles.append((header, last))
            header = cycle
        elif c.name == "PIM_PRECHARGE":
            last = cycle
    tiles.append((header, last))
    return tiles, [cycle for _, _, cycle in t.refresh_log]


def cut_tiles(tiles, refs):
    return [(h, p, r) for h, p in tiles for r in refs if h < r < p]


def no_estimate(commands):
    return (dataclasses.replace(c, estimate=0) if c.name == "PIM_HEADER" else c for c in commands)


STREAMS = [("score", 64 * 32, 4, 128), ("score", 200 * 32, 6, 128), ("score", 90 * 32, 2, 64),
           ("context", 2048, 4, 128), ("context", 4000, 3, 128), ("context", 8800, 2, 80)]


def stream(memory, which, seq_len, heads, head_dim, gwrite=False):
    return attention_stream(memory, f"attn_{which}", seq_len, heads, head_dim, gwrite)


def score_stream(memory, seq_len, heads, head_dim):
    return stream(memory, "score", seq_len, heads, head_dim)


def tile_estimate(memory, heads, head_dim=128, which="score", seq_len=32):
    """The estimate of the first header of a stream: one tile of that shape."""
    return next(c.estimate for c in stream(memory, which, seq_len, heads, head_dim) if c.name == "PIM_HEADER")


# (a) blocking refresh never cuts a tile; without the header's estimate it does -----------------
@pytest.mark.parametrize("case", STREAMS, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("gwrite", [False, True])
def test_no_refresh_inside_a_tile(memory, case, gwrite):
    commands = list(stream(memory, *case, gwrite=gwrite))
    tiles, refs = tiles_and_refreshes(memory, commands)
    assert len(refs) >= 2                                   # the stream spans several tREFI
    assert cut_tiles(tiles, refs) == []
    # in the stream a tile takes at least what its header announced (what fast mode relies on)
    estimates = [c.estimate for c in commands if c.name == "PIM_HEADER"]
    assert all(p - h >= e > 0 for (h, p), e in zip(tiles, estimates))
    # every refresh is still taken in time: the n-th falls due at n x tREFI and waits at most
    # for the open rows to close (tRC: an ACT's tRAS, then tRP)
    timing = memory.part.timing_cycles
    assert all(r <= (n + 1) * timing["tREFI"] + timing["tRC"] for n, r in enumerate(refs))


@pytest.mark.parametrize("case", STREAMS[:2] + STREAMS[3:5], ids=lambda c: "-".join(map(str, c)))
def test_without_the_estimate_a_refresh_cuts_a_tile(memory, case):
    tiles, refs = tiles_and_refreshes(memory, list(no_estimate(stream(memory, *case))))
    assert refs and cut_tiles(tiles, refs)


def test_the_header_check_costs_only_the_refresh(memory):
    """A refresh pulled in before a header costs tRP + tRFC: it issues tRP after the last tile's
    last PIM_PRECHARGE and the header tRFC after it; the header is never kept waiting for the
    refresh to fall due (the controller refreshes early instead of idling)."""
    commands = list(score_stream(memory, 64 * 32, 4, 128))
    t = timer(memory, record_refreshes=True)
    cycles = t.run(commands)
    headers = [cycle for c, cycle in zip(commands, cycles) if c.name == "PIM_HEADER"]
    timing = memory.part.timing_cycles
    refs = [r for _, _, r in t.refresh_log]
    for r in refs:
        before = max(h for h in headers if h < r)
        after = min(h for h in headers if h > r)
        assert after - before == tile_estimate(memory, 4) + timing["tRP"] + timing["tRFC"]
    assert all(r < (n + 1) * timing["tREFI"] + timing["tRP"] for n, r in enumerate(refs))


def test_the_estimate_comes_from_the_spec(memory):
    # [REFDATA] pim README Sec. 2 cold start: PIM_HEADER at 111, last of the 32 PIM_PRECHARGEs at 307
    assert tile_estimate(memory, 4) == 307 - 111
    strict = N.neupims_memory("neupims_pim_strict")              # the precharge waits tGEMV more
    assert tile_estimate(strict, 4) == 307 - 111 + 18
    headers = [c for c in score_stream(memory, 100, 6, 128) if c.name == "PIM_HEADER"]
    assert [c.estimate for c in headers] == [196] * 4 + [tile_estimate(memory, 2)] * 4
    assert tile_estimate(memory, 2) < 196                     # the short head set's tile: 2 GEMVs
    # an s.V tile's header: its own tile's cycles, header to last precharge, timed alone
    commands = list(stream(memory, "context", 1100, 2, 80))
    tile = commands[:next(i for i, c in enumerate(commands[1:], 1) if c.name == "PIM_HEADER")]
    cycles = timer(memory, "none").run(tile)
    assert tile[0].estimate == cycles[-1] - cycles[0] > 0


def test_only_a_command_that_declares_an_estimate_may_carry_one(memory):
    t = timer(memory)
    with pytest.raises(StreamError, match="PIM_ACT carries an estimate, but its declaration has no 'estimate'"):
        t.issue(Command("PIM_ACT", estimate=10), 3)


# (b) without refresh the estimate changes nothing ------------------------------------------------
def test_no_refresh_timing_is_unchanged(memory):
    cold = N.cold_start(memory)
    # the reference's commands, plus the GWRITE row's PRE it does not list (issued beside them)
    assert cold == N.REFERENCE_COLD | {"PRE": [111]}
    assert N.tile_period(memory) == N.REFERENCE_PERIOD == 197
    assert N.score_cycles(memory, 256) == N.REFERENCE[256] == 1557
    for case in STREAMS:
        commands = list(stream(memory, *case, gwrite=True))
        assert timer(memory, "none").run(commands) == timer(memory, "none").run(no_estimate(commands))


# (c) fast == exact on NeuPIMs tiles with blocking refresh ----------------------------------------
def score_loop(memory, seq_len, heads, head_dim):
    """The program's own loop over the tiles of the first head set."""
    items = expand(memory, memory.pim.program("attn_score"), attention_shape(seq_len, heads, head_dim))
    return next(i for i in items[0].body(0) if isinstance(i, Loop) and i.count > 1)


def context_loop(memory, seq_len, heads, head_dim):
    """The program's whole stream: loops over heads, chunks and dimension tiles."""
    items = expand(memory, memory.pim.program("attn_context"), attention_shape(seq_len, heads, head_dim))
    return items[0]


@pytest.mark.parametrize("make,seq_len", [(score_loop, 64 * 32), (score_loop, 301 * 32),
                                          (context_loop, 40000),
                                          pytest.param(context_loop, 123456, marks=pytest.mark.slow)])
def test_fast_equals_exact_with_blocking_refresh(memory, make, seq_len):
    """Tiles timed in a stream take at least their estimate (one tile alone), so fast mode, which
    skips periods up to the last cycle before a refresh falls due, never skips a header that would
    pull a refresh in."""
    loop = make(memory, seq_len, 4, 128)
    check_uniform(loop, 8)
    exact = StreamTimer(timer(memory, record_refreshes=True), fast=False)
    fast = StreamTimer(timer(memory, record_refreshes=True), fast=True)
    exact.run([loop])
    fast.run([loop])
    assert fast.skipped > 0
    assert (fast.end, fast.counts, fast.timer.refresh_log) == (exact.end, exact.counts, exact.timer.refresh_log)
    assert exact.timer.refreshes >= 2
