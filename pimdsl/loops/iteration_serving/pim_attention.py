"""PIM attention as the unit's declared programs run it: the K.q (`attn_score`) and s.V
(`attn_context`) command streams of one channel, the names a program derives for a shape, the
NPU's write-back of softmax scores between the two GEMVs, the instructions a host issues for a
stream, and the banks the attention vectors occupy. The serving loop's per-layer costs time these streams on the DRAM engine
(`loops/iteration_serving/layer_segments.py`).
"""
from __future__ import annotations

from ...ir.commands import Command
from ...ir.hardware import Memory
from ...lowering.pim_program import environment, expand, op_stream, place_of
from ...lowering.stream import unroll


def attention_shape(kv: int, heads: int, head_dim: int) -> dict:
    return {"kv": kv, "heads": heads, "head_dim": head_dim, "requests": 1}


def attention_stream(memory: Memory, op_class: str, kv: int, heads: int, head_dim: int, gwrite: bool = False,
                     channel: int = 0, first_row: int = 0):
    """One channel's K.q (`attn_score`) or s.V (`attn_context`) commands; with `gwrite`, each vector
    is copied into the global buffer first (the programs' `vectors` parameter)."""
    return op_stream(memory, op_class, attention_shape(kv, heads, head_dim), channel, first_row,
                     {"vectors": int(gwrite)})


def attention_lets(memory: Memory, op_class: str, kv: int, heads: int, head_dim: int) -> dict:
    """The names of the program for one shape: its tiles, chunks, heads per row, ..."""
    return environment(memory, memory.pim.program(op_class), attention_shape(kv, heads, head_dim))


def scores_writeback(memory: Memory, kv: int, heads: int, head_dim: int, channel: int = 0):
    """The NPU's ordinary writes of the softmax scores that s.V's GWRITEs then read: per head and
    chunk of tokens one whole row of the declared `scores` layout, opened, written column by
    column and closed (the authors' simulator MOVOUTs each head's scores between K.q and s.V:
    [NEUPIMS_SIM] src/operations/NeuPIMSLogitSoftmax.cc). With dual row buffers these run through
    the MEM row buffers beside PIM work; a channel-blocked controller runs them between the GEMVs."""
    program, shape = memory.pim.program("attn_context"), attention_shape(kv, heads, head_dim)
    org, per_row = memory.organization, attention_lets(memory, "attn_context", kv, heads, head_dim)["per_row"]
    for h in range(heads):
        for t in range(0, kv, per_row):
            at = place_of(memory, program, shape, "scores", (h, t))
            place = dict(rank=at["rank"], bank_group=at["bank"] // org.banks_per_group,
                         bank=at["bank"] % org.banks_per_group)
            yield Command("ACT", channel, row=at["row"], kind="npu", **place)
            for column in range(org.columns):
                yield Command("WR", channel, row=at["row"], column=column, kind="npu", **place)
            yield Command("PRE", channel, kind="npu", **place)


def host_instructions(memory: Memory, op_class: str, kv: int, heads: int, head_dim: int, gwrite: bool = False,
                      per_step: bool = False) -> int:
    """The instructions a host issues for one channel's stream: each PIM command but those that open
    or close rows (the controller adds those around them), a GEMV one instruction or, `per_step`,
    one per k step plus one that reads its result back (a command set without the fused GEMV:
    [NEUPIMS_SIM] src/operations/NeuPIMSLogitSoftmax.cc, NeuPIMSAttend.cc issue PIM_COMP x k and
    PIM_READRES to the Newton controller, one PIM_COMPS_READRES to NeuPIMs')."""
    decls = {c.name: c for c in memory.pim.commands}
    items = expand(memory, memory.pim.program(op_class), attention_shape(kv, heads, head_dim),
                   values=True, params={"vectors": int(gwrite)})
    count = 0
    for c in unroll(items):
        decl = decls.get(c.data.get("command", c.name))
        if decl is None or decl.opens or decl.closes:
            continue
        count += c.data.get("k", 1) + 1 if per_step and decl.effect == "dot" else 1
    return count


def vector_banks(memory: Memory) -> int:
    """Banks 0.. that hold the vectors the attention programs copy in (the `query` and `scores`
    layouts), which ordinary traffic beside PIM keeps off: the highest such bank + 1."""
    shape = attention_shape(1, 1, 1)
    return 1 + max(place_of(memory, memory.pim.program(cls), shape, tensor, (0, 0))["bank"]
                   for cls, tensor in (("attn_score", "query"), ("attn_context", "scores")))
