"""The expander's two walks agree: `placed` (in order, no Loop or Command objects, what
`pimc compile --unroll` writes from) gives exactly the commands of `unroll(expand(...))` for every
bundled PIM program, announced estimates included; both give a loop the scope where it stands; and
expressions specialized to an expansion's constants compute what the plain ones do."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.ir.commands import ESTIMATE_ARG
from pimdsl.ir.errors import Span
from pimdsl.ir.pim_program import Apply, For, Issue, Let, Name, Num, PimProgram, ProgramError, compiled, specialized
from pimdsl.lowering.pim_program import CHUNK, expand, placed, to_command
from pimdsl.lowering.stream import unroll

from .conftest import ROOT

SPAN = Span("test.pim", 1, 1)


def _memories():
    """(PIM unit, a memory with it) of every bundled unit with programs, and the test fixture's."""
    found = {}
    paths = sorted((ROOT / "specs" / "hardware").glob("*.pim")) + [ROOT / "specs" / "reference" / "hbm_pim_gemv.pim",
                                                                  ROOT / "tests" / "pim" / "gbmac.pim"]
    for path in paths:
        spec, _ = load_spec(str(path))
        for m in spec.memories.values():
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
