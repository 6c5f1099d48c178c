"""One decoder layer's work, from the op graph, cut into the segments a serving device runs in turn.

The ops are those `graph/build.py` builds for one layer of a device's shard (`graph/parallel.py`),
so every feature of the model (a gated FFN, grouped-query attention, its norm and activation)
shapes the work. In data-flow order they fall into four segments, cut where the work changes
resource (attention on PIM) or a tensor-parallel all-reduce falls (after the two row-parallel
linears, [NEUPIMS] Sec. 7.2):

    qkv   everything before the first attention op (norm, Q/K/V projections, the KV append)
    mha   the attention ops (score, softmax, context)
    proj  from there to the first residual add (output projection, residual)
    ffn   the rest (norm, up and gate projections, activation, gate product, down, residual)

In a parallel block (`Model.parallel_attention`) the FFN does not depend on attention: `proj` is
the output projection alone and `ffn` starts at the first op that attention does not reach; the
block's one residual add (of both branches) closes `ffn`. The chain still runs them in turn.

Sibling linears that read one activation (Q, K and V; gate and up) are one GEMM of their summed
width that reads the activation once, as a fused projection does on the NPU.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import networkx as nx

from ..graph.build import Op, build_graph
from ..ir.workload import Model

SEGMENTS = ("qkv", "mha", "proj", "ffn")
ATTENTION_KINDS = ("attn_score", "softmax", "attn_context")
LINEAR_KINDS = ("gemm", "gemv")


def layer_segments(model: Model, phase: str, contexts: Sequence[int], tokens: int = 1) -> dict[str, list[Op]]:
    """The ops of one layer of `model` (a device's shard), by segment (see the module docstring):
    a decode step of one request per entry of `contexts` (its earlier tokens), or a prefill of
    `tokens` new tokens per request."""
    one = dataclasses.replace(model, layers=1)
    g = build_graph(one, phase, batch=len(contexts), tokens=tokens, context=list(contexts))
    out: dict[str, list[Op]] = {s: [] for s in SEGMENTS}
    fused: dict[tuple, int] = {}              # (segment, inputs) -> index of the fused linear
    segment = "qkv"
    after_attention: set[str] = set()
    for name in g.nodes:                      # insertion order is data-flow order
        op = g.nodes[name]["op"]
        if op.layer != 0:
            continue
        if op.kind in ATTENTION_KINDS:
            if segment != "mha":
                after_attention = nx.descendants(g, name)
            segment = "mha"
        elif segment == "mha":
            segment = "proj"
        if segment == "proj" and name not in after_attention:
            segment = "ffn"                   # a parallel block's FFN branch
        key = (segment, tuple(g.predecessors(name)))
        if op.kind in LINEAR_KINDS and key in fused:
            ops = out[segment]
            ops[fused[key]] = _fuse(ops[fused[key]], op)
        else:
            if op.kind in LINEAR_KINDS:
                fused[key] = len(out[segment])
            out[segment].append(op)
        if segment == "proj" and op.kind == "add":
            segment = "ffn"
    return out


def _fuse(a: Op, b: Op) -> Op:
    """Two linears over the same input as one: widths and weights add, the input is read once."""
    return dataclasses.replace(
        a, name=f"{a.name}+{b.name}", shape={**a.shape, "n": a.shape["n"] + b.shape["n"]},
        flops=a.flops + b.flops, weight=None, weight_elements=a.weight_elements + b.weight_elements,
        weight_bytes=a.weight_bytes + b.weight_bytes, write_bytes=a.write_bytes + b.write_bytes)
