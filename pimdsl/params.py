"""Typed mapping params: each given param checked against the declaration of the loop that reads it
(`PARAMS`, ir/params.py), at `pimc check` and before every run, as a located error.

A param no loop declares is unread.py's (a warning); one declared without a `Param` (a bare meaning)
is not checked here.
"""
from __future__ import annotations

from .driver import loop_module
from .ir.errors import CompileError
from .ir.params import Param


def problems(system) -> list[tuple[str, object, str]]:
    """(message, span, hint) for each mapping param of `system` that does not fit its declaration."""
    mapping = system.mapping
    if mapping is None or not mapping.params:
        return []
    try:
        declared = loop_module(system).PARAMS
    except CompileError:
        return []                                   # an unknown loop: the run reports it
    out = []
    for name, value in mapping.params.items():
        decl = declared.get(name)
        if not isinstance(decl, Param):
            continue
        why = decl.problem(value, mapping.param_dims.get(name))
        if why:
            out.append((f"mapping param '{name}': {why}", mapping.param_spans.get(name, mapping.span),
                        f"{name} is {decl.meaning}" if decl.meaning else None))
    return out


def check(system, diags) -> None:
    for message, span, hint in problems(system):
        diags.error(message, span, hint)
