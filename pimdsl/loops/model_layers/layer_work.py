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

Segments follow data flow: ops attention depends on are `qkv`, ops it reaches are `proj` up to
the first add and `ffn` after it. In a parallel block (`Model.parallel_attention`) the FFN branch
neither feeds nor follows attention: it is `ffn`, with the block's one residual add (of both
branches), and `proj` is the output projection alone. The chain still runs them in turn.

Sibling linears that read one activation (Q, K and V; gate and up) are one GEMM of their summed
width that reads the activation once, as a fused projection does on the NPU.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import networkx as nx

from ...graph.build import Op, attention_ops, build_graph
from ...ir.workload import Model
from ...bounded_cache import BoundedCache

SEGMENTS = ("qkv", "mha", "proj", "ffn")
ATTENTION_KINDS = ("attn_score", "softmax", "attn_context")
LINEAR_KINDS = ("gemm", "gemv")


def layer_segments(model: Model, phase: str, contexts: Sequence[int], tokens: int = 1) -> dict[str, list[Op]]:
    """The ops of one layer of `model` (a device's shard), by segment (see the module docstring):
    a decode step of one request per entry of `contexts` (its earlier tokens), or a prefill of
    `tokens` new tokens per request."""
    # Only the attention ops' numbers depend on the contexts (graph/build.py): the cut of a
    # (model, phase, batch, tokens) is built once, and later calls swap in their attention ops.
    key = (id(model), phase, len(contexts), tokens)
    known = _CUTS.get(key)
    if known is not None and known[0] is model:
        fresh = {op.name: op for op in attention_ops(model, 0, 1 if phase == "decode" else tokens,
                                                      list(contexts))}
        return {name: [fresh[op.name] for op in ops] if name == "mha" else list(ops)
                for name, ops in known[1].items()}
    out = _cut(model, phase, contexts, tokens)
    _CUTS[key] = (model, out)               # the model is kept, so its id is not reused
    return {name: list(ops) for name, ops in out.items()}


_CUTS: dict[tuple, tuple[Model, dict[str, list[Op]]]] = BoundedCache(256)


def _cut(model: Model, phase: str, contexts: Sequence[int], tokens: int) -> dict[str, list[Op]]:
    one = dataclasses.replace(model, layers=1)
    g = build_graph(one, phase, batch=len(contexts), tokens=tokens, context=list(contexts))
    out: dict[str, list[Op]] = {s: [] for s in SEGMENTS}
    fused: dict[tuple, int] = {}              # (segment, inputs) -> index of the fused linear
    layer = [n for n in g.nodes if g.nodes[n]["op"].layer == 0]     # insertion order: data-flow order
    attention = [n for n in layer if g.nodes[n]["op"].kind in ATTENTION_KINDS]
    before = set().union(*(nx.ancestors(g, n) for n in attention))
    after = set().union(*(nx.descendants(g, n) for n in attention))
    branch = [n for n in layer if n not in before and n not in after and n not in attention]
    joined = set(branch).union(*(nx.descendants(g, n) for n in branch))     # a parallel FFN and its sum
    proj_open = True                          # proj runs up to the first residual add after attention
    for name in layer:
        op = g.nodes[name]["op"]
        if op.kind in ATTENTION_KINDS:
            segment = "mha"
        elif name in before:
            segment = "qkv"
        elif name in joined:
            segment = "ffn"
        elif proj_open:
            segment = "proj"
            proj_open = op.kind != "add"
        else:
            segment = "ffn"
        key = (segment, tuple(g.predecessors(name)))
        if op.kind in LINEAR_KINDS and key in fused:
            ops = out[segment]
            ops[fused[key]] = _fuse(ops[fused[key]], op)
        else:
            if op.kind in LINEAR_KINDS:
                fused[key] = len(out[segment])
            out[segment].append(op)
    return out


def _fuse(a: Op, b: Op) -> Op:
    """Two linears over the same input as one: widths and weights add, the input is read once."""
    return dataclasses.replace(
        a, name=f"{a.name}+{b.name}", shape={**a.shape, "n": a.shape["n"] + b.shape["n"]},
        flops=a.flops + b.flops, weight=None, weight_elements=a.weight_elements + b.weight_elements,
        weight_bytes=a.weight_bytes + b.weight_bytes, write_bytes=a.write_bytes + b.write_bytes)
