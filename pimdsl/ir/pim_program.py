"""PIM programs: the command program a PIM unit runs for one op class, as data (LANGUAGE.md).

A `PimProgram` is an ordered body of `Let`s, `For` loops over tiles and
command `Issue`s, plus the data `Layout` of the op's weight tensor and the
row indices the op takes. Every argument is an integer `Expr` over loop
variables, `let`s and named constants (the op's shape, the memory's
organization, the unit's register files); `evaluate` is the whole expression
language: + - * / (floor division) ^, and cdiv, mod, min, max. Nothing is
eval-ed. Expressions evaluate over Python ints or numpy integer arrays alike,
so a layout can be checked for a whole tensor at once.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from ..bounded_cache import BoundedCache
from .errors import PimdslError, Span


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Name:
    name: str
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Apply:
    op: str                       # + - * / ^ neg, or a function of FUNCTIONS
    args: tuple
    span: Span = field(compare=False, repr=False)


Expr = Union[Num, Name, Apply]

FUNCTIONS = {"cdiv": 2, "mod": 2, "min": 2, "max": 2}


def _cdiv(a, b):
    return -(-a // b)


_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv, "^": operator.pow,
    "neg": operator.neg, "mod": operator.mod, "cdiv": _cdiv, "min": np.minimum, "max": np.maximum,
}


class ProgramError(PimdslError):
    """A program that cannot run for this op: an index out of its declared state, a zero divisor."""


def evaluate(expr: Expr, env: dict):
    """The value of `expr` over `env` (ints, or numpy integer arrays for whole-tensor checks)."""
    out = compiled(expr)(env)
    return int(out) if isinstance(out, np.integer) else out


def compiled(expr: Expr):
    """`expr` as a function of the environment (built once per expression); over ints it gives
    ints, which is all an expander needs."""
    entry = _COMPILED.get(id(expr))
    if entry is None:
        entry = _COMPILED[id(expr)] = (expr, _closure(expr))   # the expr is kept: its id stays its own
    return entry[1]


def specialized(expr: Expr, constants: dict):
    """`expr` as a function of the environment, the names of `constants` taken as those values:
    every subexpression of constants alone is computed once here (one that fails, a division by
    zero, is left to fail when it runs), so a divisor known here needs no check."""
    return _closure(_folded(expr, constants))


def _folded(expr: Expr, constants: dict) -> Expr:
    if isinstance(expr, Name):
        return Num(constants[expr.name]) if expr.name in constants else expr
    if isinstance(expr, Num):
        return expr
    args = tuple(_folded(a, constants) for a in expr.args)
    folded = Apply(expr.op, args, expr.span)
    if all(isinstance(a, Num) for a in args):
        try:
            value = _closure(folded)({})
        except (ProgramError, ArithmeticError):
            return folded
        return Num(int(value) if isinstance(value, np.integer) else value)
    return folded


# Each expression becomes a tree of closures once (expanders evaluate the same few expressions
# for every command of a stream), never Python source: nothing is eval-ed.
_COMPILED: dict[int, tuple] = BoundedCache(50_000)


def _closure(expr: Expr):
    if isinstance(expr, Num):
        value = expr.value
        return lambda env: value
    if isinstance(expr, Name):
        return operator.itemgetter(expr.name)
    fn, args = _OPS[expr.op], [_closure(a) for a in expr.args]
    if len(args) == 1:
        a = args[0]
        return lambda env: fn(a(env))
    a, b = args
    if expr.op in ("/", "mod", "cdiv"):
        divisor = expr.args[1]
        if isinstance(divisor, Num) and divisor.value != 0:       # a constant divisor needs no check
            value = divisor.value
            if isinstance(expr.args[0], Name):                    # the commonest: a loop variable / constant
                name = expr.args[0].name
                return lambda env: fn(env[name], value)
            return lambda env: fn(a(env), value)
        span, op = expr.span, expr.op

        def checked(env):
            y = b(env)
            if type(y) is int:
                if not y:
                    raise ProgramError(f"division by zero in '{op}'", span)
            elif np.any(np.asarray(y) == 0):
                raise ProgramError(f"division by zero in '{op}'", span)
            return fn(a(env), y)
        return checked
    if expr.op == "^":                       # integer programs: a negative exponent has no integer value
        span = expr.span

        def power(env):
            y = b(env)
            if np.any(np.asarray(y) < 0):
                raise ProgramError("negative exponent in '^' (a program's values are integers)", span)
            return fn(a(env), y)
        return power
    if expr.op in ("min", "max"):
        pick = min if expr.op == "min" else max
        def extreme(env):
            x, y = a(env), b(env)
            if isinstance(x, int) and isinstance(y, int):
                return pick(x, y)
            out = fn(x, y)
            return int(out) if isinstance(out, np.integer) else out
        return extreme
    return lambda env: fn(a(env), b(env))


def names_in(expr: Expr) -> set[str]:
    if isinstance(expr, Name):
        return {expr.name}
    if isinstance(expr, Apply):
        return set().union(*(names_in(a) for a in expr.args))
    return set()


@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Issue:
    command: str
    args: tuple[tuple[str, Expr], ...]     # (argument, value) in source order
    span: Span = field(compare=False, repr=False)

    def arg(self, name: str) -> Expr | None:
        return next((e for n, e in self.args if n == name), None)


@dataclass(frozen=True)
class For:
    var: str
    count: Expr
    body: tuple                   # Let, For, Issue
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Layout:
    """Where element (indices) of a tensor lives: channel, rank, bank, row, column (burst), lane."""
    tensor: str
    indices: tuple[str, ...]
    place: dict                   # field of PLACE_FIELDS -> Expr
    rows: Expr | None             # row indices the tensor spans in every bank (padding included)
    span: Span = field(compare=False, repr=False)
    dims: tuple | None = field(default=None, metadata={"json": "omit_default"})   # extent per index (Exprs): the coverage check


@dataclass(frozen=True)
class Operand:
    """One factor of a result's value: a laid-out tensor at one index expression per dimension,
    `input` (the op's input vector) at one element, or a register file placed per rank at one
    element (entry x lanes + lane)."""
    name: str
    args: tuple                   # Exprs over the program's names and the result's indices
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Result:
    """What a program computes (`result { ... }`, LANGUAGE.md), for `pimc check --values`: element
    `indices` (extents `dims`) is the product of `operands` summed over every other index they use
    (as einsum does), then softmax over the index `softmax` when given; the host receives it at
    output `output`, or, with `into`, it stays at element `output` of that register file. `lets`
    set the program's parameters for the check (`vectors = 1`: the vectors copied in by the program)."""
    indices: tuple[str, ...]
    dims: tuple                   # Exprs, one per index
    output: Expr
    into: str | None
    operands: tuple[Operand, ...]
    softmax: str | None
    lets: tuple[tuple[str, Expr], ...]
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class PimProgram:
    op_class: str
    lets: tuple[Let, ...]         # the program's constants, before its body
    body: tuple                   # Let, For, Issue
    layouts: tuple[Layout, ...]
    rows: Expr | None             # row indices the op takes in every bank (weights and results)
    span: Span = field(compare=False, repr=False)
    # op kinds that directly follow this op class and that the program performs as well (`covers =
    # [softmax];`): such an op placed on the unit is absorbed by it, not run again (passes/tiling.py)
    covers: tuple[str, ...] = field(default=(), metadata={"json": "omit_default"})
    result: Result | None = field(default=None, metadata={"json": "omit_default"})

    def layout(self, tensor: str) -> Layout | None:
        return next((l for l in self.layouts if l.tensor == tensor), None)


# Where a command goes (besides its channel, the stream's) and where an element lives.
PLACE_ARGS = ("pseudo_channel", "rank", "bank", "row", "column")
PLACE_FIELDS = ("channel", "pseudo_channel", "rank", "bank", "row", "column", "lane")

# What a command does to the declared state, and the arguments each effect takes (LANGUAGE.md):
#   load      writes = [<buffer or register file>]; reg = entry, input = first input element
#   mac       reads = [row, <source>], writes = [<accumulators>]; src, acc = entries
#   store     reads = [<accumulators>], writes = [row]; acc = entry (cleared)
#   readback  reads = [row], scope = bank; output = output element of the burst's lane sum
#   copy      reads = [row], writes = [<buffer or register file>]; the row's SIMD words from entry reg
#   dot       reads = [row, <source>], writes = [host]; per bank, k SIMD words of the row from word src
#             dotted with entries src.. of the source, returned to output + stride x (the bank's index)
#   dot_acc   reads = [row, <source>], writes = [<register file>]; per bank, burst `column` of the row
#             dotted with entry `src` of the source (its products summed by an adder tree), the sum
#             accumulated into lane 0 of entry `acc` of the register file (a MAC register per bank)
#   group_dot as dot, but each word read as runs of `group` lanes (lanes past the last whole run unused)
#             and run j dotted with the same run of the source (an adder tree read at the level of
#             `group` inputs): run j's sum returned to output + stride x (the bank's index) + step x j
# Effects of a unit with state on its rank (a register file with `placement = rank`: a buffer chip's
# unit beside the bank units); b is a bank's index within its rank, elements are entry x lanes + lane:
#   scale     reads = [row, <file>], writes = [<accumulators>]; per bank, acc entry += row burst x one
#             element, src + b / share, of the file (one scalar broadcast to each run of `share` banks)
#   reduce    reads = [<accumulators>], writes = [<file> or host]; per bank, the entry's lanes summed by
#             an adder tree into element output + stride x b; the entry is cleared
#   accumulate reads = [<accumulators>], writes = [host]; per bank, lane l of the entry added into
#             output + stride x mod(b, share) + l; the entry is cleared
#   softmax   reads = [<file>], writes = [<file>]; elements src .. src + n - 1 replaced by their softmax
# A unit's activation function (AiM's AF_ABK):
#   activation reads = [<file>], writes = [<file>]; per unit, entry acc of the written file = the
#             activation function of entry acc of the read one, lane by lane (the read entry cleared
#             when the two differ)
EFFECTS = {"none": (), "load": ("reg", "input"), "mac": ("src", "acc"), "store": ("acc",),
           "readback": ("output",), "copy": ("reg",), "dot": ("src", "k", "output", "stride"),
           "dot_acc": ("src", "acc"),
           "group_dot": ("src", "k", "output", "stride", "group", "step"),
           "scale": ("src", "acc", "share"), "reduce": ("acc", "output", "stride"),
           "accumulate": ("acc", "output", "stride", "share"), "softmax": ("src", "n"),
           "activation": ("acc",)}

# The shape names of each op class a program may be written for.
OP_SHAPES = {"gemv": ("n", "k", "m"), "gemm": ("n", "k", "m"),
             "attn_score": ("kv", "heads", "head_dim", "requests"),
             "attn_context": ("kv", "heads", "head_dim", "requests"),
             "elementwise": ("n",)}

# The op kinds a program for an op class may cover (`covers = [...]`): those that directly follow
# it in a model step (graph/build.py: attn_score -> softmax -> attn_context; a projection -> the FFN's
# activation, the gate product or a residual add), so that the covering op's result is the covered
# op's input. Whether one does follow in a given system is checked on its op graph (passes/tiling.py).
COVERABLE = {"attn_score": ("softmax",), "gemv": ("activation", "mul", "add"), "gemm": ("activation", "mul", "add")}

# Constants every program may read (values from the memory the unit joins, see lowering/pim_program).
CONSTANTS = ("channels", "pseudo_channels", "ranks", "bank_groups", "banks_per_group", "banks", "rows",
             "bursts", "words", "lanes", "global_buffer", "first_row", "channel")
