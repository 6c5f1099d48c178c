"""The compiled stream core against the Python `CommandTimer` it stands in for: identical cycles and errors.

Every bundled PIM program (each spec's unit, each program it declares, refresh on and off, fast and
exact) and random streams over several parts (plain DDR4/HBM2/LPDDR5 and the PIM memories, their
PIM commands mixed in, dual and single row buffers, `estimate`-announced work, illegal commands)
are timed three ways: by the reference (`command_stream.CommandTimer`), on the compiled core from
the first command, and moving onto it part-way (`compiled_timer.COMPILED_MIN_COMMANDS`). Every
issue cycle, the stream error's position and text, the refreshes taken and fast mode's skipped
commands must be the same.
"""
from __future__ import annotations

import dataclasses
from functools import cache

import pytest

pytest.importorskip("numba")

from hypothesis import HealthCheck, given, settings                             # noqa: E402
from hypothesis import strategies as st                                          # noqa: E402

from pimdsl.interpreter.dram import compiled_timer                               # noqa: E402
from pimdsl.interpreter.dram.command_stream import CommandTimer                  # noqa: E402
from pimdsl.interpreter.dram.stream_timer import StreamTimer                     # noqa: E402
from pimdsl.ir.commands import ESTIMATE_ARG, Command, StreamError                # noqa: E402
from pimdsl.loops.sub_batch_serving.attention_programs import shape as attention_shape            # noqa: E402
from pimdsl.lowering.pim_program import expand                                   # noqa: E402
from pimdsl.lowering.stream import Loop                                          # noqa: E402

from .conftest import ROOT, bundled_spec                                         # noqa: E402

SPECS = ["specs/hardware/galaxy_s24p.pim", "specs/hardware/neupims.pim", "specs/hardware/dgx_a100_pim.pim",
         "specs/hardware/rtx4090_ndp.pim", "specs/reference/hbm_pim_gemv.pim", "tests/pim/gbmac.pim"]


def _pim_memories():
    out = {}
    for path in SPECS:
        for m in bundled_spec(ROOT / path).memories.values():
            if m.pim is not None and m.pim.name not in {x.pim.name for x in out.values()}:
                out[m.name] = m
    dual = out["neupims_hbm"]                       # the same unit blocked: one row buffer
    out["neupims_single"] = dataclasses.replace(dual, pim=dataclasses.replace(dual.pim, row_buffers="single"))
    return out


MEMORIES = _pim_memories()
PLAIN = bundled_spec(ROOT / "specs" / "reference" / "dram.pim").memories


@pytest.fixture(autouse=True)
def _process_count():
    """Tests here set the process's count of Python-issued commands; later tests get it back."""
    before = compiled_timer.CompiledCommandTimer.python_issued, compiled_timer.CompiledCommandTimer.switch_at
    compiled_timer.CompiledCommandTimer.switch_at = compiled_timer.COMPILED_MIN_COMMANDS    # as with a cached core
    yield
    compiled_timer.CompiledCommandTimer.python_issued, compiled_timer.CompiledCommandTimer.switch_at = before


def timers(memory, refresh, switch_at=None):
    """The reference, the compiled timer from the start, and one that moves onto the core after
    `switch_at` commands."""
    pim = memory.pim
    decls = (pim.commands, pim.rules, pim.windows) if pim is not None else ()
    ref = CommandTimer(memory, *decls, refresh=refresh, record_refreshes=True)
    out = [ref, compiled_timer.make_timer(memory, *decls, refresh=refresh, record_refreshes=True, engine="compiled")]
    if switch_at is not None:
        moving = compiled_timer.CompiledCommandTimer(memory, *decls, refresh=refresh, record_refreshes=True)
        compiled_timer.CompiledCommandTimer.python_issued = compiled_timer.COMPILED_MIN_COMMANDS - switch_at
        out.append(moving)
    return out


def stream_results(timer, items, fast):
    cycles = []
    st = StreamTimer(timer, fast=fast, on_issue=None if fast else lambda c, t: cycles.append(t))
    try:
        st.run(items)
        error = None
    except StreamError as exc:
        error = str(exc)
    return (cycles, error, st.end, st.read_end, dict(st.counts), st.skipped, timer.refreshes,
            list(timer.refresh_log))


def program_cases():
    for name, memory in MEMORIES.items():
        for program in memory.pim.programs:
            if program.op_class == "gemv":
                shapes = [{"n": 300, "k": 700, "m": 1}, {"n": 2048, "k": 256, "m": 1}]
            else:
                shapes = [attention_shape(100, 64, 2), attention_shape(1100, 128, 1)]
            for sh in shapes:
                yield pytest.param(name, program.op_class, sh, id=f"{name}-{program.op_class}-{'x'.join(map(str, sh.values()))}")


def expanded_once(items: list) -> list:
    """The same stream with each loop body expanded once, when first walked: the timings below walk
    one expansion twelve times (the expander is held to its own walks in test_placed_commands.py)."""
    return [Loop(it.count, cache(lambda i, body=it.body: expanded_once(list(body(i)))), it.label, it.period, it.op)
            if type(it) is Loop else it for it in items]


@pytest.mark.parametrize("name,op_class,shape", list(program_cases()))
def test_bundled_programs_time_identically(name, op_class, shape):
    memory = MEMORIES[name]
    items = expanded_once(expand(memory, memory.pim.program(op_class), shape))
    for refresh in ("none", "blocking"):
        for fast in (False, True):
            results = [stream_results(t, items, fast) for t in timers(memory, refresh, switch_at=777)]
            assert results[0][1] is None and results[0][2] > 0
            assert results[1] == results[0] and results[2] == results[0], (refresh, fast)


# ---- random streams ---------------------------------------------------------------------------------
PARTS = ["ddr4_3200", "hbm2", "lpddr5_6400", "s24_lpddr5x", "neupims_hbm", "neupims_single", "aquabolt_xl",
         "hermes_ndp_dimm"]


def memory_of(name):
    return PLAIN[name] if name in PLAIN else MEMORIES[name]


@st.composite
def random_stream(draw):
    """Mostly legal traffic (ACT before reads and writes of a bank, PRE after), with the PIM unit's
    commands, announced estimates and now and then an arbitrary command that may be illegal."""
    memory = memory_of(draw(st.sampled_from(PARTS)))
    timer = CommandTimer(memory, *((memory.pim.commands, memory.pim.rules, memory.pim.windows)
                                   if memory.pim else ()))
    t, org = timer.tables, memory.organization
    names = [d.name for d in t.commands] + ["NOT_A_COMMAND"]
    announcing = [d.name for d in t.commands if ESTIMATE_ARG in d.args]
    # commands whose rules depend on an argument (a GEMV's k): now and then one, with a drawn value
    arg_timed = [d.name for i, d in enumerate(t.commands) if t.arg_dependent[i]]
    roles = t.roles
    act, pre, rd, wr = (t.commands[i].name for i in (roles.act, roles.pre, roles.rd, roles.wr))
    channels = min(6, org.channels)          # more than the first allocation (4 slots)
    open_rows: dict = {}
    commands = []
    for _ in range(draw(st.integers(1, 300))):
        place = dict(channel=draw(st.integers(0, channels - 1)), pseudo_channel=draw(st.integers(0, org.pseudo_channels - 1)),
                     rank=draw(st.integers(0, org.ranks - 1)), bank_group=draw(st.integers(0, org.bank_groups - 1)),
                     bank=draw(st.integers(0, min(org.banks_per_group, 4) - 1)))
        key = tuple(place.values())
        pick = draw(st.integers(0, 19))
        if pick == 0:                                  # anything, legal or not
            name = draw(st.sampled_from(names))
        elif pick == 1 and announcing:
            name = draw(st.sampled_from(announcing))
        elif pick == 2 and arg_timed:
            name = draw(st.sampled_from(arg_timed))
        elif key not in open_rows:
            name = act
        else:
            name = pre if pick < 6 else (wr if pick < 9 else rd)
        row = open_rows.get(key, draw(st.integers(0, 3)))
        if name == act:
            open_rows[key] = row
        elif name == pre:
            open_rows.pop(key, None)
        estimate = draw(st.sampled_from([0, 0, 50, 2000, 5000, 100000])) if name in announcing or pick == 0 else 0
        timing_arg = draw(st.integers(0, 40)) if name in arg_timed else 0
        commands.append(Command(name, row=row, column=draw(st.integers(0, 3)), estimate=estimate,
                                timing_arg=timing_arg, **place))
    return memory, commands


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(case=random_stream(), refresh=st.sampled_from(["none", "blocking"]), switch_at=st.integers(0, 300))
def test_random_streams_issue_identically(case, refresh, switch_at):
    memory, commands = case
    results = []
    for timer in timers(memory, refresh, switch_at):
        cycles, error = timer.issue_many(commands, 5)
        peeks = [timer.earliest(c, 7) for c in commands if c.name in timer.tables.index]
        results.append((cycles, str(error) if error else None, timer.refreshes, timer.refresh_log,
                        dict(timer.last), peeks))
    assert results[1] == results[0] and results[2] == results[0]


@SETTINGS
@given(case=random_stream(), refresh=st.sampled_from(["none", "blocking"]), count=st.integers(1, 60),
       period=st.integers(1, 3), switch_at=st.integers(0, 3000))
def test_random_loops_time_identically_fast_and_exact(case, refresh, count, period, switch_at):
    """A random stream's legal prefix as the body of a loop (rows vary with the iteration): the
    steady state is found at the same iterations, so even the skipped counts agree."""
    memory, commands = case
    legal, error = CommandTimer(memory, *((memory.pim.commands, memory.pim.rules, memory.pim.windows)
                                          if memory.pim else ())).issue_many(commands)
    body = commands[:len(legal)]
    roles = CommandTimer(memory).tables.roles
    act, pre = (CommandTimer(memory).tables.commands[i].name for i in (roles.act, roles.pre))
    open_at = {}
    for c in body:                                    # close what the body leaves open
        if c.name in (act, pre):
            open_at[(c.channel, c.pseudo_channel, c.rank, c.bank_group, c.bank)] = c.name == act
    body += [Command(pre, *place) for place, is_open in open_at.items() if is_open]
    items = [Loop(count, lambda i: [dataclasses.replace(c, row=c.row + 4 * (i % period)) for c in body],
                  "random", period)]
    for fast in (False, True):
        results = [stream_results(t, items, fast) for t in timers(memory, refresh, switch_at)]
        assert results[1] == results[0] and results[2] == results[0], fast


@pytest.mark.parametrize("cached", [True, False])
def test_a_process_compiles_the_core_only_when_that_pays(cached, monkeypatch):
    """The switch: after COMPILED_MIN_COMMANDS when the core is a load away, after
    COMPILED_MIN_COMMANDS_UNCACHED when it would be compiled first (a cold cache)."""
    monkeypatch.setattr(compiled_timer, "core_is_cached", lambda: cached)
    monkeypatch.setattr(compiled_timer.CompiledCommandTimer, "compile", lambda self: setattr(self, "compiled", True))
    compiled_timer.CompiledCommandTimer.switch_at = None
    at = compiled_timer.COMPILED_MIN_COMMANDS if cached else compiled_timer.COMPILED_MIN_COMMANDS_UNCACHED
    timer = compiled_timer.CompiledCommandTimer(PLAIN["ddr4_3200"])
    compiled_timer.CompiledCommandTimer.python_issued = compiled_timer.COMPILED_MIN_COMMANDS - 10
    assert timer._in_python(9) and (timer._in_python(10) is not cached)
    timer = compiled_timer.CompiledCommandTimer(PLAIN["ddr4_3200"])
    compiled_timer.CompiledCommandTimer.python_issued = at - 2
    assert timer._in_python(1) and not timer.compiled
    assert not timer._in_python(2) and timer.compiled
