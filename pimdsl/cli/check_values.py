"""`pimc check --values`: every declared PIM program of a spec run on random inputs and compared
with numpy, by what the program says it computes (its `result`, LANGUAGE.md).

For each memory with a PIM unit, each program is run by the values executor
(interpreter/values/programs.py) at a few small shapes of its op class (remainder tiles included)
and at the user's `--shape`: every laid-out operand placed by its layout, `input` given as the input
vector, a register file operand written into the file; then the program's commands, on every channel
when a layout spreads the tensors over channels, else on one. What the host (or the `into` file)
holds at each result element's `output` is compared with the float64 einsum of the operands (softmax
over its index when the result says so). A program that covers the activation through a 0/1
parameter of that name is checked again with it set, for each function the unit's table may hold.

The tolerance follows the unit's datatype: 4 eps times the sum of the magnitudes of the products an
element adds (a unit rounding its products and sums to its datatype loses a few eps of what it adds);
a softmax's outputs p within p (2 max tol + 4 eps) (a shift of every logit by at most tol moves each
probability by that share); an activation's within 1.2 tol (the functions' slopes stay under 1.2) and
4 eps of the value. A mismatch is a diagnostic at the program naming the shape, the element, its
output and both values; a program with no `result` is a warning (an error with --strict).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..interpreter.values.banks import NUMPY_DTYPES
from ..interpreter.values.programs import execute
from ..ir.errors import PimdslError
from ..ir.pim_program import OP_SHAPES, Name, evaluate
from ..loops.model_layers.numpy_forward import ACTIVATIONS
from ..lowering.pim_program import check, environment, layout_problem

# Small shapes per op class: one output; a few whole tiles of most units plus remainders; more
# inputs than a global buffer of 2 KiB holds (gemv); a context longer than one row of tokens (attention).
_ATTENTION = ({"kv": 1, "heads": 1, "head_dim": 64}, {"kv": 37, "heads": 3, "head_dim": 64},
              {"kv": 600, "heads": 2, "head_dim": 128})
SHAPES = {"gemv": ({"n": 1, "k": 1}, {"n": 37, "k": 100}, {"n": 130, "k": 1100}),
          "attn_score": _ATTENTION, "attn_context": _ATTENTION}
SHAPES["gemm"] = SHAPES["gemv"]
DEFAULTS = {"m": 1, "requests": 1}          # one token, one request: not given in a --shape


def parse_shape(text: str) -> dict:
    """`n=64,k=300` or `kv=100,heads=2,head_dim=64` -> the shape; ValueError with the reason."""
    out = {}
    names = {n for c in SHAPES for n in OP_SHAPES[c]} - set(DEFAULTS)
    for part in text.split(","):
        name, _, value = (p.strip() for p in part.partition("="))
        if name not in names or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--shape takes NAME=N pairs of {', '.join(sorted(names))} with whole numbers >= 1, "
                             f"not '{text}'")
        out[name] = int(value)
    if not _classes(out):
        if set(out) <= {"n", "k"}:
            raise ValueError(f"--shape needs both n and k, as n=64,k=300 (got '{text}')")
        raise ValueError(f"--shape names every dimension of an op class: n,k (gemv) or kv,heads,head_dim "
                         f"(attention), not '{text}'")
    return out


def _classes(shape: dict) -> list[str]:
    return [c for c in SHAPES if set(shape) == set(OP_SHAPES[c]) - set(DEFAULTS)]


def _label(shape: dict) -> str:
    if set(shape) == {"n", "k"}:
        return f"{shape['n']}x{shape['k']}"
    return ",".join(f"{k}={v}" for k, v in shape.items())


def check_values(spec, diags, shapes: tuple = (), seed: int = 0) -> list[str]:
    """Run every program of the spec's memories; mismatches go to `diags`. Returns one line per
    program: what was checked."""
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
            if program.result is None:
                diags.warning(f"{where} declares no result: --values cannot check it", program.span,
                              "say what it computes: `result { indices = [...]; dims = [...]; output = ...; "
                              "value = ...; }` (LANGUAGE.md, PIM programs)")
                lines.append(f"{where}: not checked (no result)")
                continue
            checked = [s for s in (*SHAPES.get(program.op_class, ()), *shapes) if program.op_class in _classes(s)]
            checked = list({_label(s): s for s in checked}.values())
            variants = [(None, {})]
            if "activation" in program.covers and any(l.name == "activation" for l in program.lets):
                variants += [(f, {"activation": 1}) for f in sorted(ACTIVATIONS)]
            ok = all([_one(memory, program, {**DEFAULTS, **s}, seed, where, diags, f, p)
                      for s in checked for f, p in variants])
            if ok:
                also = f" (and with the covered activation: {', '.join(sorted(ACTIVATIONS))})" if len(variants) > 1 else ""
                unchecked = [k for k in program.covers if not (k == "softmax" and program.result.softmax)
                             and not (k == "activation" and len(variants) > 1)]
                if unchecked:          # performed by a command that changes no state the executor models
                    also += (f"; it covers {', '.join(unchecked)} by a command that changes no state the values "
                             f"executor models: its result is the values before that")
                lines.append(f"{where}: values equal numpy at " + ", ".join(_label(s) for s in checked) + also)
    return lines


def _one(memory, program, shape: dict, seed: int, where: str, diags, function=None, params=None) -> bool:
    res = program.result
    shape = {k: v for k, v in shape.items() if k in OP_SHAPES[program.op_class]}
    label = _label({k: v for k, v in shape.items() if k not in DEFAULTS})
    at = f"{where} at {label}" + (f" with {function} covered" if function else "")
    try:
        base = environment(memory, program, shape)
        params = {**{n: evaluate(e, base) for n, e in res.lets}, **(params or {})}
        env = environment(memory, program, shape, 0, 0, params)
        dims = {o.name: tuple(evaluate(d, env) for d in program.layout(o.name).dims or ())
                for o in res.operands if program.layout(o.name) is not None}
        problems = [layout_problem(memory, program, shape, t, d) for t, d in dims.items()]
        problem = next((p for p in problems if p), None) or next((p.message for p in check(memory, program, shape)), None)
        if problem:
            diags.error(f"{at} cannot run: {problem}", program.span,
                        "check --values runs the program at this shape; fix the layout or the tiles")
            return False
        exact, tolerance, output = _numpy(memory, program, shape, env, dims, seed)
        ex = execute(memory, program, shape, exact.tensors, int(output.max()) + 1 if res.into is None else 0,
                     exact.x, channels=None if any("channel" in program.layout(t).place for t in dims) else 1,
                     params=params, activation=ACTIVATIONS.get(function), files=exact.files)
        if res.into is None:
            got = ex.y[output]
        else:                                  # the elements the program left in a rank file
            got = np.array([flat[i] for flat, i in (ex.file_element(res.into, int(e)) for e in output.reshape(-1))],
                           np.float64).reshape(output.shape)
    except PimdslError as exc:
        diags.error(f"{at}: {exc.message}", exc.span or program.span, exc.hint)
        return False
    want = exact.value
    if function:
        f = ACTIVATIONS[function]
        want, tolerance = f(want), 1.2 * tolerance + 4 * exact.eps * np.abs(f(want)) + 1e-6
    bad = np.flatnonzero(~(np.abs(got - want) <= tolerance))
    if bad.size:
        worst = np.unravel_index(int(bad[np.argmax(np.abs(got - want).reshape(-1)[bad])]), want.shape)
        element = ", ".join(f"{i}={int(v)}" for i, v in zip(res.indices, worst))
        place = f"{res.into} element" if res.into else "output"
        diags.error(f"{at} (seed {seed}): element ({element}), {place} {int(output[worst])}, is "
                    f"{float(got[worst]):.6g} by the program, numpy gives {float(want[worst]):.6g} (tolerance "
                    f"{float(tolerance[worst]):.3g} for {memory.pim.dtype}); {bad.size} of {want.size} elements differ",
                    program.span, "the program's layouts, its loops or a command's effect arguments do not compute "
                    "its declared result")
        return False
    return True


class _Exact:
    """The operands drawn for one check and the float64 result they give."""
    def __init__(self):
        self.tensors, self.files, self.x, self.value, self.eps = {}, {}, None, None, 0.0


def _numpy(memory, program, shape: dict, env: dict, dims: dict, seed: int):
    """(the operands and the float64 result, the tolerance per element, the output of each element)."""
    res, out = program.result, _Exact()
    dt = NUMPY_DTYPES[memory.pim.dtype]
    out.eps = float(ml_dtypes.finfo(dt).eps)
    rng = np.random.default_rng([seed, *shape.values()])
    extents = {i: evaluate(d, env) for i, d in zip(res.indices, res.dims)}
    for o in res.operands:
        for a, d in zip(o.args, dims.get(o.name, ())):
            if isinstance(a, Name) and a.name not in env and a.name not in extents:
                extents[a.name] = d                                       # a summed index
    names = list(extents)
    grids = np.meshgrid(*(np.arange(extents[n], dtype=np.int64) for n in names), indexing="ij")
    genv = {**env, **dict(zip(names, grids))}
    product = np.ones(grids[0].shape if grids else (), np.float64)
    for o in res.operands:
        idx = [np.broadcast_to(np.asarray(evaluate(a, genv)), product.shape) for a in o.args]
        if o.name in dims:
            if o.name not in out.tensors:
                out.tensors[o.name] = rng.uniform(-1, 1, dims[o.name]).astype(dt)
            data = out.tensors[o.name]
            if any(((i < 0) | (i >= d)).any() for i, d in zip(idx, data.shape)):
                raise PimdslError(f"the result reads {o.name} outside its dims {list(data.shape)}", o.span)
            factor = data[tuple(idx)]
        else:
            size = int(idx[0].max()) + 1 if idx[0].size else 0
            values = rng.uniform(-1, 1, size).astype(dt)
            if o.name == "input":
                out.x = values
            else:
                used = np.unique(idx[0])
                out.files[o.name] = dict(zip(used.tolist(), values[used].tolist()))
            factor = values[idx[0]]
        product = product * factor.astype(np.float64)
    summed = tuple(range(len(res.indices), len(names)))
    out.value = product.sum(axis=summed)
    tolerance = 4 * out.eps * np.abs(product).sum(axis=summed) + 1e-6
    if res.softmax is not None:
        axis = res.indices.index(res.softmax)
        e = np.exp(out.value - out.value.max(axis=axis, keepdims=True))
        out.value = e / e.sum(axis=axis, keepdims=True)
        tolerance = out.value * (2 * tolerance.max(axis=axis, keepdims=True) + 4 * out.eps) + 1e-6
    first = (Ellipsis,) + (0,) * len(summed)                   # the result's indices alone
    output = np.broadcast_to(np.asarray(evaluate(res.output, {**env, **{n: g[first] for n, g in zip(names, grids)}})),
                             out.value.shape)
    if output.size and (output.min() < 0 or np.unique(output).size != output.size):
        raise PimdslError("the result's `output` puts two elements at one place, or one before 0", res.span)
    return out, tolerance, output
