"""Expression evaluation: our own evaluator, never Python's `eval`.

Names resolve lazily, from the innermost block outwards (its `let`s, fields,
the fields of its unnamed sub-blocks such as `timing`, its named sub-blocks),
then to top-level declarations. A dotted name walks into blocks and into
fields that refer to blocks (`model.hidden`). A bare name that resolves to
nothing is a Symbol: fields that take a choice (`page_policy = open`) accept
it, arithmetic reports it as an unknown name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import units as U
from ..ir.units import Quantity
from .diagnostics import Diagnostics, SpecError, Span, did_you_mean
from .nodes import Node
from .syntax import BinOp, Bool, Call, ListExpr, Neg, Num, Ref, Str


@dataclass(frozen=True)
class Symbol:
    name: str
    span: Span


_NOT_FOUND = object()
_FAILED = object()
FUNCTIONS = ("min", "max", "ceil", "floor", "round", "log2", "abs")
MAX_MAGNITUDE = 1e300


class Evaluator:
    def __init__(self, globals_: dict[str, Node], diags: Diagnostics):
        self.globals = globals_
        self.diags = diags
        self._cache: dict[tuple[int, str], object] = {}
        self._active: list[tuple[Node, str]] = []
        self.read: set[tuple[int, str]] = set()
        self._alive: dict[int, Node] = {}      # every node a value is cached for (temporary twins included)
        # names elaboration gives a block: id -> (the block, its names); the block is kept so that its id
        # is not reused by another (a temporary organization twin would otherwise lend its names)
        self.provided: dict[int, tuple[Node, dict[str, object]]] = {}

    def provide(self, node: Node, name: str, value) -> None:
        """Give `node` a name its own fields do not declare (a memory's `capacity`, a region's
        `remaining`): seen from inside the block, after its fields and lets."""
        self.provided.setdefault(id(node), (node, {}))[1][name] = value

    # ---- fields -----------------------------------------------------------
    def member(self, node: Node, name: str, span: Span | None = None):
        """The value of `name` as seen from inside `node` (own scope and sub-blocks)."""
        if name in node.lets or name in node.fields:
            return self._slot(node, name)
        for child in node.anonymous():
            if name in child.lets or name in child.fields:
                return self._slot(child, name)
        given = self.provided.get(id(node), (None, {}))[1]
        if name in given:
            return given[name]
        named = node.named(name) or node.child(name)
        return named if named is not None else _NOT_FOUND

    def has(self, node: Node, name: str) -> bool:
        return name in node.fields

    def _slot(self, node: Node, name: str):
        key = (id(node), name)
        self._alive.setdefault(key[0], node)   # cached by id: the node stays alive, so its id is not reused
        self.read.add(key)
        if key in self._cache:
            value = self._cache[key]
            if value is _FAILED:
                raise SpecError(name)
            return value
        stmt = node.lets.get(name) or node.fields[name]
        if (node, name) in self._active:
            chain = [n for _, n in self._active[self._active.index((node, name)):]] + [name]
            self._cache[key] = _FAILED
            raise self.diags.error(f"'{name}' depends on itself ({' -> '.join(chain)})", stmt.span,
                                   "break the cycle by giving one of these a plain value")
        self._active.append((node, name))
        try:
            value = self.eval(stmt.expr, node)
        except SpecError:
            self._cache[key] = _FAILED
            raise
        finally:
            self._active.pop()
        self._cache[key] = value
        return value

    def lookup(self, name: str, node: Node | None):
        scope = node
        while scope is not None:
            value = self.member(scope, name)
            if value is not _NOT_FOUND:
                return value
            scope = scope.parent
        return self.globals.get(name, _NOT_FOUND)

    def names_in_scope(self, node: Node | None) -> list[str]:
        names: list[str] = list(self.globals)
        scope = node
        while scope is not None:
            names += list(scope.lets) + list(scope.fields) + [c.name for c in scope.children if c.name]
            names += list(self.provided.get(id(scope), (None, {}))[1])
            for child in scope.anonymous():
                names += list(child.lets) + list(child.fields)
            scope = scope.parent
        return names

    # ---- expressions ------------------------------------------------------
    def eval(self, expr, node: Node | None):
        if isinstance(expr, Num):
            return self._number(expr)
        if isinstance(expr, Ref):
            return self._ref(expr, node)
        if isinstance(expr, Str):
            return expr.value
        if isinstance(expr, Bool):
            return expr.value
        if isinstance(expr, ListExpr):
            return tuple(self.eval(item, node) for item in expr.items)
        if isinstance(expr, Neg):
            value = self.quantity(expr.operand, node)
            return Quantity(-value.value, value.dims, value.clock)
        if isinstance(expr, BinOp):
            return self._binop(expr, node)
        if isinstance(expr, Call):
            return self._call(expr, node)
        raise self.diags.error("this is not an expression", getattr(expr, "span", None))

    def quantity(self, expr, node: Node | None) -> Quantity:
        value = self.eval(expr, node)
        if isinstance(value, Quantity):
            return value
        raise self._not_a_number(value, expr, node)

    def _not_a_number(self, value, expr, node) -> SpecError:
        span = getattr(expr, "span", None)
        if isinstance(value, Symbol):
            return self.diags.error(f"unknown name '{value.name}'", value.span,
                                    did_you_mean(value.name, self.names_in_scope(node)))
        what = {str: "a string", bool: "a boolean", tuple: "a list"}.get(type(value), None)
        if isinstance(value, Node):
            what = f"the block {value.label}"
        return self.diags.error(f"a number was expected here, this is {what}", span,
                                "arithmetic works on numbers with units")

    def _number(self, expr: Num) -> Quantity:
        text = expr.text.replace("_", "")
        try:
            value = float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        except (ValueError, OverflowError):
            raise self.diags.error(f"'{expr.text}' is not a number pimc can hold", expr.span,
                                   "numbers must stay below 1e300") from None
        if not math.isfinite(value) or abs(value) > MAX_MAGNITUDE:
            raise self.diags.error(f"'{expr.text}' is too large", expr.span, "numbers must stay below 1e300")
        if expr.unit is None:
            return Quantity(value)
        parsed = U.parse_unit(expr.unit)
        if parsed is None:
            raise self.diags.error(f"unknown unit '{expr.unit}'", expr.span,
                                   did_you_mean(expr.unit.partition("@")[0], U.known_units(), "units"))
        factor, dims, clock = parsed
        return Quantity(value * factor, dims, clock)

    def _ref(self, ref: Ref, node: Node | None):
        value = self.lookup(ref.parts[0], node)
        if value is _NOT_FOUND:
            if len(ref.parts) == 1:
                return Symbol(ref.parts[0], ref.span)
            raise self.diags.error(f"unknown name '{ref.parts[0]}'", ref.span,
                                   did_you_mean(ref.parts[0], self.names_in_scope(node)))
        for i, part in enumerate(ref.parts[1:], start=1):
            if not isinstance(value, Node):
                raise self.diags.error(f"'{'.'.join(ref.parts[:i])}' is a value, not a block; it has no '{part}'",
                                       ref.span)
            inner = self.member(value, part)
            if inner is _NOT_FOUND:
                members = list(value.fields) + list(value.lets) + [c.name or c.kind for c in value.children]
                for child in value.anonymous():
                    members += list(child.fields)
                raise self.diags.error(f"{value.label} has no '{part}'", ref.span, did_you_mean(part, members))
            value = inner
        return value

    def clock_period(self, node: Node | None, clock: str | None, span: Span) -> float:
        """Seconds per cycle of the named clock, or of the nearest enclosing clock."""
        scope = self.lookup(clock, node) if clock else node
        if clock and not isinstance(scope, Node):
            raise self.diags.error(f"unknown clock '{clock}'", span,
                                   "name a block with a `clock` field, as in `4 cycles@npu`")
        while scope is not None:
            for holder in [scope] + scope.anonymous():
                for name, invert in (("clock", True), ("tCK", False)):
                    if name in holder.fields and (holder, name) not in self._active:
                        q = self.quantity(holder.fields[name].expr, holder)
                        if q.dims == (U.FREQUENCY if invert else U.TIME) and q.value > 0:
                            return 1.0 / q.value if invert else q.value
            scope = scope.parent
        raise self.diags.error("cycles are used here, but no clock is known", span,
                               "give the block a `clock = ... MHz` or name one: `4 cycles@npu`")

    def to_time(self, q: Quantity, node: Node | None, span: Span) -> Quantity:
        if q.dims != U.CYCLES:
            return q
        return Quantity(q.value * self.clock_period(node, q.clock, span), U.TIME)

    def _same_dims(self, a: Quantity, b: Quantity, node, span, verb: str) -> tuple[Quantity, Quantity]:
        if a.dims == b.dims and a.clock == b.clock:
            return a, b
        if {a.dims, b.dims} <= {U.CYCLES, U.TIME}:
            return self.to_time(a, node, span), self.to_time(b, node, span)
        raise self.diags.error(f"cannot {verb} {a.dimension} and {b.dimension}", span,
                               "both sides need the same dimension; check the units")

    def _binop(self, expr: BinOp, node):
        a = self.quantity(expr.left, node)
        b = self.quantity(expr.right, node)
        if expr.op in "+-":
            a, b = self._same_dims(a, b, node, expr.span, "add" if expr.op == "+" else "subtract")
            value = a.value + b.value if expr.op == "+" else a.value - b.value
            return self._checked(Quantity(value, a.dims, a.clock), expr.span)
        if expr.op == "*":
            dims = tuple(x + y for x, y in zip(a.dims, b.dims))
            return self._checked(Quantity(a.value * b.value, dims, a.clock or b.clock), expr.span)
        if expr.op == "/":
            if b.value == 0:
                raise self.diags.error("division by zero", expr.span)
            if {a.dims, b.dims} == {U.CYCLES, U.TIME}:
                a, b = self.to_time(a, node, expr.span), self.to_time(b, node, expr.span)
            dims = tuple(x - y for x, y in zip(a.dims, b.dims))
            clock = a.clock if a.dims == U.CYCLES and b.dims != U.CYCLES else None
            return self._checked(Quantity(a.value / b.value, dims, clock), expr.span)
        # power
        if b.dims != U.NONE or (a.dims != U.NONE and not b.is_integer()):
            raise self.diags.error("an exponent must be a plain number (an integer if the base has a unit)",
                                   expr.span)
        try:
            value = a.value ** b.value
        except (OverflowError, ZeroDivisionError):
            raise self.diags.error("this power is out of range", expr.span) from None
        if isinstance(value, complex):
            raise self.diags.error("this power has no real value", expr.span)
        return self._checked(Quantity(value, tuple(int(x * b.value) for x in a.dims)), expr.span)

    def _checked(self, q: Quantity, span: Span) -> Quantity:
        if not math.isfinite(q.value) or abs(q.value) > MAX_MAGNITUDE:
            raise self.diags.error("the result is too large", span, "numbers must stay below 1e300")
        return q

    def _call(self, expr: Call, node):
        if expr.name not in FUNCTIONS:
            raise self.diags.error(f"unknown function '{expr.name}'", expr.span,
                                   did_you_mean(expr.name, FUNCTIONS, "functions"))
        args = [self.quantity(a, node) for a in expr.args]
        if expr.name in ("min", "max"):
            if not args:
                raise self.diags.error(f"{expr.name}() needs at least one value", expr.span)
            for i in range(1, len(args)):
                args[0], args[i] = self._same_dims(args[0], args[i], node, expr.span, "compare")
            args = [self.to_time(a, node, expr.span) if args[0].dims == U.TIME else a for a in args]
            pick = min if expr.name == "min" else max
            return pick(args, key=lambda q: q.value)
        if len(args) != 1:
            raise self.diags.error(f"{expr.name}() takes one value, {len(args)} given", expr.span)
        (x,) = args
        if expr.name == "abs":
            return Quantity(abs(x.value), x.dims, x.clock)
        if x.dims not in (U.NONE, U.CYCLES):
            raise self.diags.error(f"{expr.name}() takes a plain number, this is {x.dimension}", expr.span,
                                   "divide by a unit first, as in ceil(size / 1 KiB)")
        if expr.name == "log2":
            if x.value <= 0:
                raise self.diags.error("log2() of a value that is not positive", expr.span)
            return Quantity(math.log2(x.value))
        fn = {"ceil": math.ceil, "floor": math.floor, "round": round}[expr.name]
        return Quantity(float(fn(x.value + (-1e-9 if expr.name == "ceil" else 1e-9 if expr.name == "floor" else 0))),
                        x.dims, x.clock)
