"""`pimc check --values`: every declared GEMV program of a spec run on random inputs and compared
with numpy.

For each memory with a PIM unit, each `program gemv` is run by the values executor
(interpreter/values/programs.py) on every channel at a few small shapes (remainder tiles included)
and at the user's `--shape n=..,k=..`: the weight placed by the program's layout, the input loaded by
its commands, the host's outputs compared with a float64 numpy product. The tolerance follows the
unit's datatype: 4 eps |W| |x| per output, eps the datatype's machine epsilon (the products and sums
a unit rounds to its datatype lose at most a few eps of the magnitudes they add). A mismatch is a
diagnostic at the program naming the shape, the output element and both values. Programs for other
op classes (attention) have no output order the checker can know, and are reported as not checked.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..interpreter.values.banks import NUMPY_DTYPES
from ..interpreter.values.programs import run
from ..ir.errors import PimdslError
from ..lowering.pim_program import check, layout_problem

# (n, k): one output and input; a few whole tiles of most units plus remainders; more inputs than a
# global buffer of 2 KiB holds.
SHAPES = ((1, 1), (37, 100), (130, 1100))


def parse_shape(text: str) -> tuple[int, int]:
    """`n=64,k=300` -> (64, 300); ValueError with the reason."""
    out = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in ("n", "k") or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"--shape takes n=N,k=K with whole numbers >= 1, not '{text}'")
        out[name.strip()] = int(value)
    if set(out) != {"n", "k"}:
        raise ValueError(f"--shape needs both n and k, as n=64,k=300 (got '{text}')")
    return out["n"], out["k"]


def check_values(spec, diags, shapes: tuple = (), seed: int = 0) -> list[str]:
    """Run every GEMV program of the spec's memories; mismatches go to `diags`. Returns one line
    per program: what was checked, or why not."""
    lines, seen = [], set()
    systems = [m for system in spec.systems.values() for m in system.memories]
    for memory in (*spec.memories.values(), *systems):          # a system's memories may be imported
        pim = memory.pim
        if pim is None:
            continue
        for program in pim.programs:
            key = (pim.name, program.op_class, memory.part.name, memory.organization)
            if key in seen:
                continue
            seen.add(key)
            where = f"program {program.op_class} of unit '{pim.name}' (memory {memory.name})"
            if program.op_class != "gemv" or program.layout("weight") is None:
                lines.append(f"{where}: not checked (--values compares gemv programs with a weight layout)")
                continue
            checked = list(dict.fromkeys((*SHAPES, *shapes)))
            if all([_one(memory, program, n, k, seed, where, diags) for n, k in checked]):
                lines.append(f"{where}: values equal numpy at " + ", ".join(f"{n}x{k}" for n, k in checked))
    return lines


def _one(memory, program, n: int, k: int, seed: int, where: str, diags) -> bool:
    shape = {"n": n, "k": k, "m": 1}
    problem = layout_problem(memory, program, shape, "weight", (n, k)) or next(
        (p.message for p in check(memory, program, shape)), None)
    if problem:
        diags.error(f"{where} cannot run a {n} x {k} GEMV: {problem}", program.span,
                    "check --values runs the program at this shape; fix the layout or the tiles")
        return False
    dt = NUMPY_DTYPES[memory.pim.dtype]
    rng = np.random.default_rng([seed, n, k])
    w = rng.uniform(-1, 1, (n, k)).astype(dt)
    x = rng.uniform(-1, 1, k).astype(dt)
    try:
        y = run(memory, program, shape, {"weight": w}, n, x)
    except PimdslError as exc:
        diags.error(f"{where} at {n} x {k}: {exc.message}", exc.span or program.span, exc.hint)
        return False
    exact = w.astype(np.float64) @ x.astype(np.float64)
    eps = float(ml_dtypes.finfo(dt).eps)
    tolerance = 4 * eps * (np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64))) + 1e-6
    bad = np.flatnonzero(~(np.abs(y - exact) <= tolerance))
    if bad.size:
        o = int(bad[np.argmax(np.abs(y - exact)[bad])])
        diags.error(f"{where} at {n} x {k} (seed {seed}): output {o} is {float(y[o]):.6g} by the program, "
                    f"numpy gives {float(exact[o]):.6g} (tolerance {float(tolerance[o]):.3g} for "
                    f"{memory.pim.dtype}); {bad.size} of {n} outputs differ", program.span,
                    "the program's layout, its loops or a command's effect arguments do not compute W x")
        return False
    return True
