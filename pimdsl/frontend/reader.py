"""Typed, checked access to one block's fields.

The builders in elaborate_*.py read every field they understand through a
Reader; the set of names they ask for *is* the block's schema. After a builder
ran, any field it never asked for is an unknown field (with did-you-mean),
and any sub-block it never visited is an unknown block.
"""
from __future__ import annotations

import math

from ..ir import units as U
from ..ir.units import Quantity
from .diagnostics import SpecError, Span, did_you_mean
from .evaluate import Evaluator, Symbol
from .nodes import Node
from .syntax import ListExpr, Ref

MISSING = object()
MAX_INTEGER = 2**53                      # whole numbers past this are not exact as floats
RATES = (U.FREQUENCY, U.BANDWIDTH, U.FLOPS, U.DATA_RATE)
FAILED = object()      # the field is there but its value has an error (already reported)


def _fallback(default):
    return None if default is MISSING else default


class Reader:
    def __init__(self, ev: Evaluator, node: Node):
        self.ev = ev
        self.diags = ev.diags
        self.node = node
        self.asked: set[str] = set()
        self.blocks_asked: set[str] = set()
        self.failed = False

    # ---- plumbing ---------------------------------------------------------
    def span(self, name: str) -> Span:
        stmt = self.node.fields.get(name)
        return stmt.expr.span if stmt is not None and hasattr(stmt.expr, "span") else self.node.span

    def has(self, name: str) -> bool:
        self.asked.add(name)
        return name in self.node.fields

    def _raw(self, name: str):
        self.asked.add(name)
        if name not in self.node.fields:
            return MISSING
        try:
            return self.ev.member(self.node, name)
        except SpecError:
            self.failed = True
            return FAILED

    def _missing(self, name: str, what: str, default):
        if default is MISSING:
            self.failed = True
            self.diags.error(f"{self.node.label} needs '{name}' ({what})", self.node.span,
                             f"add `{name} = ...;` to the block")
            return None
        return default

    def fail(self, message: str, name: str | None = None, hint: str | None = None) -> None:
        self.failed = True
        self.diags.error(message, self.span(name) if name else self.node.span, hint)

    # ---- typed getters ----------------------------------------------------
    def quantity(self, name: str, dims, default=MISSING, what: str | None = None):
        """The field in SI units, as float. `dims` is one dimension or a tuple of them."""
        allowed = dims if isinstance(dims, list) else [dims]
        what = what or U.dimension_name(allowed[0])
        value = self._raw(name)
        if value is FAILED:
            return _fallback(default)
        if value is MISSING:
            return self._missing(name, what, default)
        if not isinstance(value, Quantity):
            self._wrong_type(name, value, what)
            return default if default is not MISSING else None
        if value.dims not in allowed:
            self.fail(f"{what} was expected for '{name}', this is {value.dimension}", name,
                      _unit_hint(allowed[0]))
            return default if default is not MISSING else None
        if not math.isfinite(value.value):
            self.fail(f"'{name}' must be a finite number, not {value.value}", name)
            return default if default is not MISSING else None
        if value.dims in RATES and value.value <= 0:
            # every model divides by a rate: a zero bandwidth or clock is a mistake, never "infinitely slow"
            self.fail(f"'{name}' must be positive, not {value.value:g} ({U.dimension_name(value.dims)})", name,
                      "a bandwidth, clock or compute rate above zero")
            return default if default is not MISSING else None
        return value if len(allowed) > 1 else value.value

    def _wrong_type(self, name, value, what):
        if isinstance(value, Symbol):
            self.fail(f"unknown name '{value.name}'", name,
                      did_you_mean(value.name, self.ev.names_in_scope(self.node)))
        else:
            kind = {str: "a string", bool: "a boolean", tuple: "a list"}.get(type(value), "a block")
            self.fail(f"{what} was expected for '{name}', this is {kind}", name)

    def integer(self, name: str, default=MISSING, minimum: int | None = 1, what="a whole number") -> int:
        value = self.quantity(name, U.NONE, default, what)
        if value is None or value is default:
            return value
        if not float(value).is_integer():
            self.fail(f"'{name}' must be a whole number, not {value:g}", name)
            return default if default is not MISSING else 1
        if minimum is not None and value < minimum:
            self.fail(f"'{name}' must be at least {minimum}, not {int(value)}", name)
        if abs(value) > MAX_INTEGER:
            self.fail(f"'{name}' is {value:.3g}, past the largest count pimc takes (2^53)", name,
                      "counts, sizes and lengths must be exact in a double (at most 2^53)")
            return default if default is not MISSING else 1
        return int(value)

    def number(self, name: str, default=MISSING) -> float:
        return self.quantity(name, U.NONE, default, "a plain number")

    def bits(self, name: str, default=MISSING) -> int:
        value = self.quantity(name, U.BYTES, default, "a width in bits (e.g. 64 bit)")
        if value is None or value is default:
            return value
        if not 0 < value * 8 <= MAX_INTEGER:
            self.fail(f"'{name}' must be a positive width, not {value * 8:g} bit", name, "e.g. 64 bit")
            return default if default is not MISSING else None
        return int(round(value * 8))

    def bytes(self, name: str, default=MISSING) -> int:
        value = self.quantity(name, U.BYTES, default)
        if value is None or value is default:
            return value
        if abs(value) > MAX_INTEGER:
            self.fail(f"'{name}' is {value:.3g} B, past the largest size pimc takes (2^53 B)", name)
            return default if default is not MISSING else 0
        return int(round(value))

    def flag(self, name: str, default=MISSING) -> bool:
        value = self._raw(name)
        if value is FAILED:
            return _fallback(default)
        if value is MISSING:
            return self._missing(name, "true or false", default)
        if not isinstance(value, bool):
            self.fail(f"true or false was expected for '{name}'", name)
            return bool(default) if default is not MISSING else False
        return value

    def string(self, name: str, default=MISSING):
        value = self._raw(name)
        if value is FAILED:
            return _fallback(default)
        if value is MISSING:
            return self._missing(name, "a string in quotes", default)
        if not isinstance(value, str):
            self.fail(f"a string in quotes was expected for '{name}'", name)
            return None
        return value

    def choice(self, name: str, choices, default=MISSING) -> str:
        """A bare name out of `choices` (not resolved as a reference)."""
        self.asked.add(name)
        stmt = self.node.fields.get(name)
        if stmt is None:
            return self._missing(name, "one of " + ", ".join(choices), default)
        expr = stmt.expr
        if not (isinstance(expr, Ref) and len(expr.parts) == 1):
            self.fail(f"'{name}' takes one of: {', '.join(choices)}", name)
            return default if default is not MISSING else choices[0]
        value = expr.parts[0]
        if value not in choices:
            self.fail(f"'{value}' is not a valid {name}", name, did_you_mean(value, choices, f"{name} values"))
            return default if default is not MISSING else choices[0]
        return value

    def symbols(self, name: str, choices=None, default=MISSING) -> tuple[str, ...]:
        """A list of bare names, `[row, bank, column]`, optionally out of `choices`."""
        self.asked.add(name)
        stmt = self.node.fields.get(name)
        if stmt is None:
            return self._missing(name, "a list of names", default)
        items = stmt.expr.items if isinstance(stmt.expr, ListExpr) else (stmt.expr,)
        out = []
        for item in items:
            if not (isinstance(item, Ref) and len(item.parts) == 1):
                self.failed = True
                self.diags.error(f"'{name}' takes a list of names", getattr(item, "span", self.node.span))
                continue
            value = item.parts[0]
            if choices is not None and value not in choices:
                self.failed = True
                self.diags.error(f"'{value}' is not valid in {name}", item.span, did_you_mean(value, choices))
                continue
            out.append(value)
        return tuple(out)

    def refs(self, name: str, kinds, default=MISSING) -> list[Node]:
        """Names of declared blocks of the given kinds."""
        self.asked.add(name)
        stmt = self.node.fields.get(name)
        if stmt is None:
            return self._missing(name, "a list of " + "/".join(kinds) + " names", default)
        items = stmt.expr.items if isinstance(stmt.expr, ListExpr) else (stmt.expr,)
        out = []
        for item in items:
            node = self._resolve(item, kinds)
            if node is not None:
                out.append(node)
        return out

    def ref(self, name: str, kinds, default=MISSING) -> Node | None:
        self.asked.add(name)
        stmt = self.node.fields.get(name)
        if stmt is None:
            return self._missing(name, "the name of a " + " or ".join(kinds), default)
        return self._resolve(stmt.expr, kinds)

    def _resolve(self, expr, kinds) -> Node | None:
        span = getattr(expr, "span", self.node.span)
        candidates = [n for n, g in self.ev.globals.items() if g.kind in kinds]
        try:
            value = self.ev.eval(expr, self.node)
        except SpecError:
            self.failed = True
            return None
        if isinstance(value, Symbol):
            self.failed = True
            self.diags.error(f"unknown {' or '.join(kinds)} '{value.name}'", span,
                             did_you_mean(value.name, candidates, " / ".join(kinds) + " names"))
            return None
        if not isinstance(value, Node) or value.kind not in kinds:
            self.failed = True
            got = value.label if isinstance(value, Node) else "a value"
            self.diags.error(f"a {' or '.join(kinds)} was expected here, this is {got}", span,
                             did_you_mean("", candidates, " / ".join(kinds) + " names"))
            return None
        return value

    def open_fields(self) -> dict[str, object]:
        """Every field of a free-form block (timing parameters, peak rates), evaluated."""
        out = {}
        for name in self.node.fields:
            value = self._raw(name)
            if value is not MISSING and value is not FAILED:
                out[name] = value
        return out

    # ---- sub-blocks -------------------------------------------------------
    def block(self, kind: str) -> Node | None:
        self.blocks_asked.add(kind)
        return self.node.child(kind)

    def blocks(self, kind: str) -> list[Node]:
        self.blocks_asked.add(kind)
        return self.node.children_of(kind)

    def finish(self, open_schema: bool = False) -> None:
        """Report fields and sub-blocks that no builder asked for."""
        if not open_schema:
            for name, stmt in self.node.fields.items():
                if name not in self.asked:
                    self.failed = True
                    self.diags.error(f"unknown field '{name}' in {self.node.label}", stmt.span,
                                     did_you_mean(name, self.asked, f"fields of a {self.node.kind}"))
        for child in self.node.children:
            if child.kind not in self.blocks_asked:
                self.failed = True
                self.diags.error(f"a {self.node.kind} has no '{child.kind}' block", child.span,
                                 did_you_mean(child.kind, self.blocks_asked, f"blocks in a {self.node.kind}"))


def _unit_hint(dims) -> str:
    examples = {U.TIME: "e.g. 18 ns", U.FREQUENCY: "e.g. 1600 MHz", U.BANDWIDTH: "e.g. 68.264 GB/s",
                U.BYTES: "e.g. 2 GiB or 64 bit", U.FLOPS: "e.g. 321 GFLOPS", U.DATA_RATE: "e.g. 3200 MT/s",
                U.NONE: "a plain number, no unit", U.ENERGY: "e.g. 4 pJ", U.POWER: "e.g. 5 W",
                U.CURRENT: "e.g. 57 mA", U.VOLTAGE: "e.g. 1.2 V"}
    return "write it with a unit of that kind, " + examples.get(dims, "") if dims != U.NONE else \
        "write a plain number with no unit"


def is_power_of_two(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def log2_int(n: int) -> int:
    return int(math.log2(n)) if n > 0 else 0
