"""Tiling: the tile shapes of each PIM op, from its PIM unit's register files and SIMD width.

Assumes placement and layout. Guarantees: every op on PIM has `family` (the
PIM command family its unit declares) and `tiling` (that family's tiling of
the op), or a CompileError says why the op cannot run there. A host op that
reads a PIM-aware copy of a GEMV weight (a single-copy weight strategy) gets
the same `family` and `tiling` as the PIM op on that weight would, so the copy
is laid out and allocated alike in every step.

Families, told apart by the unit's declarations (never by name):
  neupims   a command uses a PIM row buffer (dual row buffers): attention
            K.q and s.V over the KV cache (NeuPIMs section 5.2)
  samsung   named commands, a MAC read among them (LPDDR5X-PIM): GEMV
  hbm_pim   no commands of its own: the Aquabolt-XL kernel of plain RD/WR
            commands ([REFDATA] pim README Sec. 1): GEMV
"""
from __future__ import annotations

import math

from ..ir.hardware import PimUnit
from ..lowering.hbm_pim_gemv import GemvTiling
from ..lowering.neupims_attention import ScoreTiling
from ..lowering.samsung_pim_gemv import GemvLayout, LoweringError
from .program import CompileError, Program

FAMILY_KINDS = {"samsung": ("gemv", "gemm"), "hbm_pim": ("gemv", "gemm"),
                "neupims": ("attn_score", "attn_context")}


def family(pim: PimUnit) -> str:
    if any(c.row_buffer == "pim" for c in pim.commands):
        return "neupims"
    return "samsung" if pim.commands else "hbm_pim"


def run(program: Program) -> Program:
    memory = program.pim_memory
    matrices = {}                 # weight -> (n, k) of the matrix op that reads it
    for _, attrs in program.ops():
        op = attrs["op"]
        if op.weight and op.kind in ("gemm", "gemv"):
            matrices.setdefault(op.weight, (op.shape["n"], op.shape["k"]))
    for name, attrs in program.ops():
        op = attrs["op"]
        if not attrs["device"].startswith("pim:"):
            if (attrs.get("layout") == "pim_aware" and op.weight in matrices and memory is not None
                    and family(memory.pim) == "samsung"):
                attrs["family"] = "samsung"
                attrs["tiling"] = GemvLayout.of(memory, *matrices[op.weight])
            continue
        fam = family(memory.pim)
        if op.kind not in FAMILY_KINDS[fam]:
            raise CompileError(f"op {name} ({op.kind}) cannot run on PIM unit '{memory.pim.name}': its "
                               f"{fam} command family lowers {' and '.join(FAMILY_KINDS[fam])}",
                               memory.pim.span, "map this op class to a processor in the mapping")
        attrs["family"] = fam
        try:
            attrs["tiling"] = _tiling(fam, memory, op)
        except LoweringError as exc:
            raise CompileError(f"op {name}: {exc}", memory.pim.span) from None
    return program


def _tiling(fam, memory, op):
    s = op.shape
    if fam == "samsung":
        return GemvLayout.of(memory, s["n"], s["k"])
    if fam == "hbm_pim":
        return GemvTiling.of(memory, math.ceil(s["n"] / memory.organization.channels), s["k"])
    return ScoreTiling.of(memory, s["kv"], s["heads"], s["head_dim"])
