"""Placement: which device runs each op, by the system's mapping policy.

Assumes: a Program whose graph nodes carry `op`. Guarantees: every op has
`device` (a processor name, or `pim:<memory>` for the system's PIM memory)
and `resource` (the schedule resource it occupies).

The mapping's phase block names op classes freely (`fc`, `attention`,
`lm_head`, `softmax`, `layers`, ...). An op matches the first of: its kind
(`attn_score`, `softmax`, `gemv`), its class (`qkv`, `ffn`, `lm_head`,
`attention`), the broader classes in `BROADER`, then `layers`. An op no
entry matches runs on the system's first processor (the host), as does an op
placed on `pim` when the weight strategy uses no PIM (`c_gemm`, see
strategy.py). Graph models have one step, placed with the `prefill` block.
"""
from __future__ import annotations

from ..frontend.elaborate_model import OP_KINDS
from ..graph.build import CLASSES, KINDS
from .program import Program
from ..ir.errors import CompileError
from .strategy import strategy_of

BROADER = {"qkv": ("fc",), "o": ("projection", "fc"), "ffn": ("fc",), "lm_head": ("fc",),
           "kv_cache": ("attention",), "softmax": ("attention",)}
# every name a phase block may place: the standard op classes (a graph model's ops by their kind)
OP_CLASSES = tuple(dict.fromkeys((*KINDS, *CLASSES, *OP_KINDS, *(c for b in BROADER.values() for c in b), "layers")))


def candidates(op) -> tuple[str, ...]:
    return (op.kind, op.cls, *BROADER.get(op.kind, ()), *BROADER.get(op.cls, ()), "layers")


def run(program: Program) -> Program:
    system = program.system
    mapping = system.mapping
    table = mapping.placement.get(program.phase, {}) if mapping else {}
    host = system.processors[0].name if system.processors else None
    pim = program.pim_memory
    uses_pim = strategy_of(system).pim
    for name, attrs in program.ops():
        op = attrs["op"]
        key = next((c for c in candidates(op) if c in table), None)
        device = table[key] if key else host
        if device == "pim" and not uses_pim:
            device = host
        if device == "pim":
            if pim is None:
                raise CompileError(f"op {name} is mapped to pim, but system '{system.name}' has no memory "
                                   "with a PIM unit", mapping.placement_spans.get((program.phase, key), mapping.span),
                                   "add `pim = <unit>;` to a memory, or map it to a processor")
            device = f"pim:{pim.name}"
        elif device is None:
            raise CompileError(f"op {name} has no device: system '{system.name}' has no processor and its "
                               "mapping does not place this op", system.span,
                               f"place it in the mapping's {program.phase} block ({op.cls} = ...)")
        attrs["device"] = device
        attrs["resource"] = device if device.startswith("pim:") else f"{_kind(system, device)}:{device}"
    return program


def _kind(system, name: str) -> str:
    return next((p.kind for p in system.processors if p.name == name), "device")
