"""Tiling: the tile shapes of each PIM op, from its PIM unit's register files and SIMD width.

Assumes placement and layout. Guarantees: every op on PIM has `family` (the
PIM command family its unit declares) and `tiling` (that family's tiling of
the op), or a CompileError says why the op cannot run there. A host op that
reads a PIM-aware copy of a GEMV weight (a single-copy weight strategy) gets
the same `family` and `tiling` as the PIM op on that weight would, so the copy
is laid out and allocated alike in every step.

A unit's PIM programs (LANGUAGE.md, PIM programs) are how its ops run: an
op on PIM gets family `program`, its `program` the unit's program for its
class (a GEMM without one runs the GEMV program once per token), its `tiling`
the op's shape, and every problem of every op (no program for the class, a
layout that does not cover the weight, a tile outside the declared state, a
unit with no programs at all) is reported at once. An op on PIM with no
program of its own that directly follows an op whose program covers its kind
(`covers = [softmax];`) gets family `covered` and `covered_by` that op: it is
absorbed, not run again. The same op placed on a processor is an error: the
host would redo what the program did.
"""
from __future__ import annotations

import math
import weakref

from ..ir.pim_program import OP_SHAPES, ProgramError, evaluate
from ..lowering.pim_program import check, environment, layout_problem
from .placement import candidates
from .program import Program
from ..ir.errors import CompileError

def run(program: Program) -> Program:
    memory = program.pim_memory
    problems: list[CompileError] = []
    checked: set = set()
    matrices = {}                 # weight -> (n, k) of the matrix op that reads it
    for _, attrs in program.ops():
        op = attrs["op"]
        if op.weight and op.kind in ("gemm", "gemv"):
            matrices.setdefault(op.weight, (op.shape["n"], op.shape["k"]))
    for name, attrs in program.ops():
        op = attrs["op"]
        if not attrs["device"].startswith("pim:"):
            problems += _run_twice(program, name, op, attrs, checked)
            single_copy = attrs.get("layout") == "pim_aware" and op.weight in matrices and memory is not None
            if single_copy and memory.pim.programs and program_for(memory.pim, "gemv") is not None:
                n, k = matrices[op.weight]
                attrs["family"], attrs["program"] = "program", program_for(memory.pim, "gemv")
                attrs["tiling"] = {"n": n, "k": k, "m": 1}
            continue
        problems += _declared(program, memory, name, op, attrs, checked)
    if problems:
        raise CompileError(problems[0].message, problems[0].span, problems[0].hint, problems[1:])
    return program


def covering_op(program: Program, name: str, op):
    """The op right before `name` on the same device whose declared program covers `op`'s kind
    (`covers = [...]`, LANGUAGE.md), if any: its commands already did this op's work."""
    g, device = program.graph, program.graph.nodes[name]["device"]
    for pred in g.predecessors(name):
        a = g.nodes[pred]
        if a.get("device") == device and op.kind in getattr(a.get("program"), "covers", ()):
            return pred
    return None


def _run_twice(program: Program, name: str, op, attrs: dict, checked: set) -> list[CompileError]:
    """An op placed on a processor that directly follows a PIM op whose program covers it: the
    program already did it, so the host would apply it a second time (softmax of probabilities).
    Reported for the first such op of each kind (every layer repeats it)."""
    g = program.graph
    for pred in g.predecessors(name):
        a = g.nodes[pred]
        declared = a.get("program")
        conditional = any(let.name == op.kind for let in getattr(declared, "lets", ()))   # runs it only when covering
        if a.get("device", "").startswith("pim:") and op.kind in getattr(declared, "covers", ()) and not conditional:
            if ("twice", op.kind) in checked:
                return []
            checked.add(("twice", op.kind))
            mapping = program.system.mapping
            table = mapping.placement.get(program.phase, {}) if mapping else {}
            key = next((c for c in candidates(op) if c in table), None)
            span = mapping.placement_spans.get((program.phase, key), mapping.span) if mapping else declared.span
            return [CompileError(f"op {name} ({op.kind}) is placed on {attrs['device']}, but {pred} runs program "
                                 f"{declared.op_class} of PIM unit '{program.pim_memory.pim.name}', which already "
                                 f"performs {op.kind} (covers = [{', '.join(declared.covers)}])", span,
                                 f"place {op.kind} on pim (`{op.kind} = pim;`) so that it is absorbed, or remove "
                                 f"{op.kind} from the program's `covers`")]
    return []


def program_for(pim, kind: str):
    """The unit's program for an op kind; a GEMM falls back to the GEMV program, run per token."""
    return pim.program(kind) or (pim.program("gemv") if kind == "gemm" else None)


# Tensors up to this many elements have their layout checked element by element; larger ones on
# their edges (the first and last 64 indices of each dimension, where remainder tiles sit).
EXHAUSTIVE_ELEMENTS = 1 << 20

# Problems of a (memory, program, shape), found once per process: every step of a run compiles
# the same ops again. Keyed by id, with a weak reference that tells a reused id from its object.
_PROBLEMS: dict[tuple, tuple[weakref.ref, list]] = {}


def _declared(program: Program, memory, name: str, op, attrs: dict, checked: set) -> list[CompileError]:
    pim = memory.pim
    declared = program_for(pim, op.kind)
    if declared is None and (by := covering_op(program, name, op)) is not None:
        attrs["family"], attrs["covered_by"] = "covered", by     # done by `by`'s program: absorbed
        return []
    if declared is None:
        if ("class", op.kind) in checked:
            return []
        checked.add(("class", op.kind))
        mapping = program.system.mapping
        declare = (f", or declare `program {op.kind} {{ ... }}` in it" if op.kind in OP_SHAPES else
                   f" (programs are written for {', '.join(OP_SHAPES)})")
        coverers = [p.op_class for p in pim.programs if op.kind in p.covers]
        if coverers:                # a program covers it, but not the op right before this one
            preds = ", ".join(f"{p} ({program.graph.nodes[p]['op'].kind} on {program.graph.nodes[p].get('device')})"
                              for p in program.graph.predecessors(name)) or "none"
            declare += (f"; program {' and '.join(coverers)} covers {op.kind}, but only right after an op of its "
                        f"class on this unit, and this op follows {preds}")
        return [CompileError(f"op {name} ({op.kind}) is placed on PIM unit '{pim.name}', which has no program "
                             f"for {op.kind}", mapping.span if mapping else pim.span,
                             f"unit '{pim.name}' runs {', '.join(p.op_class for p in pim.programs) or 'no op class (it declares no programs)'}: "
                             f"map {op.kind} to a processor{declare} (LANGUAGE.md, PIM programs)")]
    attrs["family"], attrs["program"], attrs["tiling"] = "program", declared, dict(op.shape)
    key = (declared.op_class, tuple(sorted(op.shape.items())))
    if key in checked:
        return []
    checked.add(key)
    cache_key = (id(memory), key)
    entry = _PROBLEMS.get(cache_key)
    if entry is None or entry[0]() is not memory:
        entry = _PROBLEMS[cache_key] = (weakref.ref(memory), _problems(memory, declared, op, name))
    return entry[1]


def _problems(memory, declared, op, name: str) -> list[CompileError]:
    shape = dict(op.shape)
    out = [CompileError(f"op {name}: {p.message}", p.span or declared.span, p.hint) for p in check(memory, declared, shape)]
    for layout in declared.layouts:
        try:
            if layout.dims is not None:     # the layout says its tensor's extent
                env = environment(memory, declared, shape)
                dims = tuple(int(evaluate(d, env)) for d in layout.dims)
            elif layout.tensor == "weight" and op.weight and "n" in shape and "k" in shape:
                dims = (shape["n"], shape["k"])
            else:
                continue
            why = _layout_problem(memory, declared, shape, layout.tensor, dims)
        except ProgramError as exc:
            why = exc.message
        if why:
            out.append(CompileError(f"op {name}: the layout does not cover its {' x '.join(map(str, dims))} "
                                    f"{layout.tensor}: {why}", layout.span,
                                    "every element needs its own place inside the memory's channels, banks, "
                                    "rows, bursts and lanes"))
    return out


def _layout_problem(memory, declared, shape, tensor: str, dims: tuple[int, ...]) -> str | None:
    if math.prod(dims) <= EXHAUSTIVE_ELEMENTS:
        return layout_problem(memory, declared, shape, tensor, dims)
    return layout_problem(memory, declared, shape, tensor, dims, edges=64)
