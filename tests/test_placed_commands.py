"""The expander's two walks agree: `placed` (in order, no Loop or Command objects, what
`pimc compile --unroll` writes from) gives exactly the commands of `unroll(expand(...))` for every
bundled PIM program, announced estimates included; both give a loop the scope where it stands; whole
loops evaluated over numpy arrays give the tuples of the command-by-command walk; and expressions specialized to an expansion's constants compute what the plain ones do."""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.ir.commands import ESTIMATE_ARG
from pimdsl.ir.errors import Span
from pimdsl.ir.pim_program import Apply, For, Issue, Let, Name, Num, PimProgram, ProgramError, compiled, specialized
from pimdsl.lowering import pim_program
from pimdsl.lowering.pim_program import CHUNK, expand, placed, placed_batch, to_command
from pimdsl.lowering.stream import unroll

from .conftest import ROOT, bundled_spec

SPAN = Span("test.pim", 1, 1)


def _memories():
    """(PIM unit, a memory with it) of every bundled unit with programs, and the test fixture's."""
    found = {}
    paths = sorted((ROOT / "specs" / "hardware").glob("*.pim")) + [ROOT / "specs" / "reference" / "hbm_pim_gemv.pim",
                                                                  ROOT / "tests" / "pim" / "gbmac.pim"]
    for path in paths:
        for m in bundled_spec(path).memories.values():
            if m.pim is not None and m.pim.programs:
                found.setdefault(m.pim.name, (m.pim.name, m))
    return sorted(found.values(), key=lambda x: x[0])


MEMORIES = _memories()
SHAPES = {"gemv": [{"n": 300, "k": 200, "m": 1}, {"n": 1500, "k": 700, "m": 1}],
          "attn_score": [{"kv": 40, "heads": 2, "head_dim": 64, "requests": 1},
                         {"kv": 300, "heads": 3, "head_dim": 128, "requests": 1}]}
SHAPES["attn_context"] = SHAPES["attn_score"]


def test_every_bundled_unit_with_programs_is_covered():
    assert len(MEMORIES) >= 6
    assert {p.op_class for _, m in MEMORIES for p in m.pim.programs} <= set(SHAPES)


@pytest.mark.parametrize("label,memory", MEMORIES, ids=[label for label, _ in MEMORIES])
def test_placed_commands_are_the_unrolled_stream(label, memory):
    announcing = 0
    for program in memory.pim.programs:
        for shape in SHAPES[program.op_class]:
            for channel, first_row in ((0, 0), (memory.organization.channels - 1, 3)):
                chunks = list(placed(memory, program, shape, channel, first_row, times=2))
                flat = [to_command(p, channel) for chunk in chunks for p in chunk]
                once = list(unroll(expand(memory, program, shape, channel, first_row)))
                assert flat == once + once        # Command equality: names, places, kind and estimate
                assert all(len(c) >= CHUNK for c in chunks[:-1])
                announcing += sum(c.estimate > 0 for c in once)
    if any(ESTIMATE_ARG in c.args for c in memory.pim.commands):   # e.g. [NEUPIMS] Sec. 5.2's PIM_HEADER
        assert announcing > 0


def test_a_loop_sees_the_scope_where_it_stands_not_a_later_let():
    memory = dict(MEMORIES)["gbmac"]
    mac = lambda: Issue("MAC_ACT", (("row", Name("x", SPAN)),), SPAN)
    body = (Let("x", Num(3), SPAN), For("i", Num(2), (mac(),), SPAN), Let("x", Num(5), SPAN), mac())
    program = PimProgram("gemv", (), body, (), None, SPAN)
    shape = {"n": 1, "k": 1, "m": 1}
    lazy = [c.row for c in unroll(expand(memory, program, shape))]
    eager = [p[5] for chunk in placed(memory, program, shape) for p in chunk]
    assert lazy == eager == [3, 3, 5]


NAMES = ("i", "j", "c", "z")       # c and z are the expansion's constants (z = 0)
OPS = ("+", "-", "*", "/", "mod", "cdiv", "min", "max")


def _exprs():
    leaf = st.one_of(st.integers(-4, 9).map(Num), st.sampled_from(NAMES).map(lambda n: Name(n, SPAN)))
    return st.recursive(leaf, lambda sub: st.builds(lambda op, a, b: Apply(op, (a, b), SPAN), st.sampled_from(OPS),
                                                    sub, sub), max_leaves=8)


def _value(f, env):
    try:
        return f(env)
    except ProgramError as exc:
        return ("error", exc.message)


@settings(max_examples=300, deadline=None)
@given(expr=_exprs(), i=st.integers(-5, 20), j=st.integers(0, 7), c=st.integers(-3, 9))
def test_specialized_expressions_compute_what_plain_ones_do(expr, i, j, c):
    env = {"i": i, "j": j, "c": c, "z": 0}
    assert _value(specialized(expr, {"c": c, "z": 0}), env) == _value(compiled(expr), env)


def _flat(memory, program, shape, fast, **kw):
    """The placed commands, each issue site by its names (each expansion has sites of its own)."""
    return [(p[0].name, p[0].command, p[0].kind) + p[1:]
            for chunk in placed(memory, program, shape, fast=fast, **kw) for p in chunk]


@pytest.mark.parametrize("label,memory", MEMORIES, ids=[label for label, _ in MEMORIES])
def test_whole_loops_over_arrays_give_the_commands_of_the_walk(label, memory, monkeypatch):
    batches = []
    monkeypatch.setattr(pim_program, "placed_batch", lambda *a: batches.append(1) or placed_batch(*a))
    for program in memory.pim.programs:
        for shape in SHAPES[program.op_class]:
            for channel, first_row in ((0, 0), (memory.organization.channels - 1, 3)):
                fast = _flat(memory, program, shape, True, channel=channel, first_row=first_row, args=True)
                slow = _flat(memory, program, shape, False, channel=channel, first_row=first_row, args=True)
                assert fast == slow
                values = [v for p in fast for v in p[3:11] + p[11]]       # places ... timing_arg, args
                assert {type(v) for v in values} == {int}                   # Python ints, as the walk's
    # the arrays did the work, not only the walk (a loop that heads announced work is walked)
    assert bool(batches) != any(ESTIMATE_ARG in c.args for c in memory.pim.commands)


@cache          # one strategy per scope: hypothesis validates each new strategy object (most of the test's time)
def _program_exprs(names):
    leaf = st.one_of(st.integers(-3, 9).map(Num), st.sampled_from(names).map(lambda n: Name(n, SPAN)))
    return st.recursive(leaf, lambda sub: st.builds(lambda op, a, b: Apply(op, (a, b), SPAN),
                                                    st.sampled_from(OPS), sub, sub), max_leaves=5)


@st.composite
def _programs(draw):
    """A loop nest of lets and issues over the fixture's commands, whose nested trip counts may
    differ between iterations, with places and arguments any expression (zero divisors included)."""
    def issue(names):
        cmd = draw(st.sampled_from(("RES_RD", "MAC", "MAC_ACT")))
        args = tuple((a, draw(_program_exprs(names))) for a in draw(
            st.lists(st.sampled_from(("bank", "row", "column", "rank", "src")), max_size=3)))
        return Issue(cmd, args, SPAN)

    def body(names, depth):
        out = []
        for n in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(("issue", "let", "for") if depth < 3 else ("issue", "let")))
            if kind == "issue":
                out.append(issue(names))
            elif kind == "let":
                name = f"l{depth}{n}"
                out.append(Let(name, draw(_program_exprs(names)), SPAN))
                names = names + (name,)
            else:
                var = f"v{depth}{n}"
                count = draw(st.one_of(st.integers(0, 40).map(Num), _program_exprs(names)))
                out.append(For(var, count, body(names + (var,), depth + 1), SPAN))
        return tuple(out)
    return PimProgram("gemv", (), body(("n", "k"), 0), (), None, SPAN)


def _outcome(memory, program, fast):
    try:
        return _flat(memory, program, {"n": 5, "k": 3, "m": 1}, fast, args=True)
    except ProgramError as exc:
        return ("error", exc.message)


@settings(max_examples=150, deadline=None)
@given(program=_programs(), lanes=st.sampled_from((1 << 17, 7)))
def test_any_loop_nest_over_arrays_gives_the_walk_s_commands_or_error(program, lanes):
    memory = dict(MEMORIES)["gbmac"]
    original = pim_program.MAX_LANES
    pim_program.MAX_LANES = lanes                 # 7: most loops too large at once, split or walked
    try:
        assert _outcome(memory, program, True) == _outcome(memory, program, False)
    finally:
        pim_program.MAX_LANES = original


def test_a_negative_exponent_is_a_located_program_error_not_a_crash():
    """Program values are integers: `0 ^ -1` (or any negative exponent, one value or a whole loop's
    array) is the program's error at the expression, never Python's ZeroDivisionError."""
    power = Apply("^", (Name("i", SPAN), Name("e", SPAN)), SPAN)
    for exponent in (-1, np.array([2, -1])):
        with pytest.raises(ProgramError, match="negative exponent") as caught:
            compiled(power)({"i": 0, "e": exponent})
        assert caught.value.span == SPAN
    assert compiled(power)({"i": 3, "e": 2}) == 9
