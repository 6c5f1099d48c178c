"""The op graph of one model step: a NetworkX DiGraph of ops with shapes, FLOPs and bytes.

A step is `prefill` (each of `batch` requests processes `tokens` new tokens,
attending to them causally) or `decode` (each request processes one token
against a KV cache of `context` earlier tokens; `context` may differ per
request). Encoders have one step, `prefill`, attending over all tokens.

Data flow of a decoder layer (pre-norm, as Llama, GPT-2/3/J, OPT, Falcon):

    x -> norm_attn -> q, k, v projections -> kv_append (K and V of the new tokens)
      -> attn_score (q . K^T per head; grouped-query heads share K) -> softmax
      -> attn_context (s . V) -> o projection -> residual_attn (+ x)
      -> norm_ffn -> gate and up projections (gated FFN) or up -> activation (x up)
      -> down projection -> residual_ffn

A parallel block (`parallel_attention`: GPT-J, Falcon, GPT-NeoX) feeds the FFN from norm_attn
(or from its own norm_ffn of x when `parallel_norms = 2`) and ends in one `residual` add of x,
the attention output and the FFN output, so the FFN does not depend on attention. Its FFN ops
are inserted after the Q/K/V projections (node order is the tie-break of the program order).

then `norm_final` and `lm_head` (logits of the last token of each request
only, as generation needs). Nodes are named `L{i}.{name}` inside layers.

Each node's `op` attribute is an `Op`: what it computes (`kind`), the class a
mapping policy places (`cls`), its shape, the weight tensor it reads (shared
weights such as tied embeddings name the same tensor), FLOPs and bytes.
FLOP counts: a linear layer 2*M*K*N; attention 2 per multiply-add; softmax 5
per score (max, subtract, exp, sum, divide); RMSNorm 4 and LayerNorm 8 per
element; SiLU/GELU 4/8 and ReLU 1 per element; elementwise ops 1. Positional
encodings (RoPE) and biases are not modelled (under 0.1% of the FLOPs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..ir.errors import PimdslError
from ..ir.workload import DTYPE_BYTES, Model

if TYPE_CHECKING:                   # networkx is imported where a graph is built: loops that build none
    import networkx as nx           # (and `pimc check`) do not pay its 0.3 s import

PHASES = ("prefill", "decode")
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 8}
ACTIVATION_FLOPS = {"silu": 4, "swish": 4, "gelu": 8, "gelu_new": 8, "relu": 1}
SOFTMAX_FLOPS = 5
# what the ops of a transformer step are (`Op.kind`) and the classes a mapping places (`Op.cls`)
KINDS = ("embedding", "norm", "gemm", "gemv", "kv_append", "attn_score", "softmax", "attn_context",
         "activation", "mul", "add")
CLASSES = ("embedding", "norm", "qkv", "o", "ffn", "attention", "lm_head", "elementwise", "kv_cache", "fc")


class GraphError(PimdslError):
    pass


@dataclass(frozen=True)
class Op:
    name: str
    kind: str              # embedding, norm, gemm, gemv, kv_append, attn_score, softmax, attn_context,
                           # activation, mul, add
    cls: str               # what a mapping places: embedding, norm, qkv, o, ffn, attention, lm_head,
                           # elementwise, kv_cache
    layer: int | None
    dtype: str
    shape: dict = field(default_factory=dict)   # linear: m, k, n; attention: requests, heads, kv_heads, q, kv, head_dim
    flops: float = 0.0
    weight: str | None = None                   # weight tensor read (name)
    weight_elements: int = 0                    # elements of that tensor
    weight_bytes: float = 0.0                   # bytes of weights this op streams
    read_bytes: float = 0.0                     # activations and KV cache read
    write_bytes: float = 0.0                    # activations and KV cache written

    def to_json(self) -> dict:
        return asdict(self)


def build_graph(model: Model, phase: str = "decode", batch: int = 1, tokens: int = 1,
                context: int | Sequence[int] = 0) -> nx.DiGraph:
    """The ops of one `phase` step of `model` for `batch` requests (see the module docstring)."""
    if phase not in PHASES:
        raise GraphError(f"unknown phase '{phase}' (use {' or '.join(PHASES)})")
    if model.architecture == "graph":
        return _declared_graph(model)
    contexts = [context] * batch if isinstance(context, int) else list(context)
    if len(contexts) != batch or batch < 1:
        raise GraphError(f"{batch} requests but {len(contexts)} context lengths")
    if phase == "decode":
        if model.architecture != "decoder":
            raise GraphError(f"model '{model.name}' is an encoder: it has no decode step")
        tokens = 1
    elif tokens < 1:
        raise GraphError("prefill needs at least one token per request")
    return _TransformerStep(model, phase, batch, tokens, contexts).graph


class _TransformerStep:
    def __init__(self, model: Model, phase: str, batch: int, tokens: int, contexts: list[int]):
        self.m, self.phase, self.batch, self.tokens, self.contexts = model, phase, batch, tokens, contexts
        self.b = DTYPE_BYTES[model.dtype]
        self.rows = batch * tokens                  # activation rows through the linear layers
        import networkx as nx
        self.graph = nx.DiGraph(model=model.name, phase=phase, batch=batch, tokens=tokens,
                                context=contexts if len(set(contexts)) > 1 else contexts[0], dtype=model.dtype)
        m = model
        x = self._add(Op("embedding", "embedding", "embedding", None, m.dtype, {"m": self.rows, "n": m.hidden},
                         weight="embed_tokens", weight_elements=m.vocab * m.hidden,
                         weight_bytes=self.rows * m.hidden * self.b, write_bytes=self.rows * m.hidden * self.b))
        for layer in range(m.layers):
            x = self._layer(layer, x)
        if m.architecture == "decoder":
            x = self._norm("norm_final", None, x, self.rows)
            # logits of each request's last token only
            head = "embed_tokens" if m.tied_embeddings else "lm_head"
            self._linear("lm_head", "lm_head", None, x, batch, m.hidden, m.vocab, head)

    # ---- builders -----------------------------------------------------------
    def _add(self, op: Op, *preds: str) -> str:
        self.graph.add_node(op.name, op=op)
        for p in preds:
            self.graph.add_edge(p, op.name, bytes=self.graph.nodes[p]["op"].write_bytes)
        return op.name

    def _linear(self, name, cls, layer, x, rows, k, n, weight):
        kind = "gemv" if rows == 1 else "gemm"
        return self._add(Op(name, kind, cls, layer, self.m.dtype, {"m": rows, "k": k, "n": n},
                            flops=2.0 * rows * k * n, weight=weight, weight_elements=k * n,
                            weight_bytes=k * n * self.b, read_bytes=rows * k * self.b,
                            write_bytes=rows * n * self.b), x)

    def _norm(self, name, layer, x, rows):
        h = self.m.hidden
        return self._add(Op(name, "norm", "norm", layer, self.m.dtype, {"m": rows, "n": h},
                            flops=NORM_FLOPS.get(self.m.norm, 8) * rows * h,
                            read_bytes=rows * h * self.b, write_bytes=rows * h * self.b), x)

    def _elementwise(self, name, kind, layer, rows, n, *preds):
        return self._add(Op(name, kind, "elementwise", layer, self.m.dtype, {"m": rows, "n": n},
                            flops=float(max(1, len(preds) - 1) * rows * n),   # n inputs: n - 1 operations
                            read_bytes=len(preds) * rows * n * self.b,
                            write_bytes=rows * n * self.b), *preds)

    def _layer(self, i: int, x: str) -> str:
        m, rows, b = self.m, self.rows, self.b
        p = f"L{i}."
        h = self._norm(p + "norm_attn", i, x, rows)
        q_width, kv_width = m.heads * m.head_dim, m.kv_heads * m.head_dim
        q = self._linear(p + "q_proj", "qkv", i, h, rows, m.hidden, q_width, p + "q_proj")
        k = self._linear(p + "k_proj", "qkv", i, h, rows, m.hidden, kv_width, p + "k_proj")
        v = self._linear(p + "v_proj", "qkv", i, h, rows, m.hidden, kv_width, p + "v_proj")
        if m.parallel_attention:
            # the FFN reads the layer input's norm, not the attention's residual; built before the
            # attention ops so that the in-order list schedule runs it beside them on another unit
            ffn = self._ffn(i, h if m.parallel_norms == 1 else self._norm(p + "norm_ffn", i, x, rows))
        kv = self._add(Op(p + "kv_append", "kv_append", "kv_cache", i, m.dtype,
                          {"requests": self.batch, "tokens": self.tokens, "kv_heads": m.kv_heads,
                           "head_dim": m.head_dim},
                          read_bytes=2 * rows * kv_width * b, write_bytes=2 * rows * kv_width * b), k, v)
        score, context = self._attention(i, q, kv)
        o = self._linear(p + "o_proj", "o", i, context, rows, q_width, m.hidden, p + "o_proj")
        if m.parallel_attention:          # one add of both branches
            return self._elementwise(p + "residual", "add", i, rows, m.hidden, x, o, ffn)
        x = self._elementwise(p + "residual_attn", "add", i, rows, m.hidden, x, o)
        h = self._norm(p + "norm_ffn", i, x, rows)
        return self._elementwise(p + "residual_ffn", "add", i, rows, m.hidden, x, self._ffn(i, h))

    def _ffn(self, i: int, h: str) -> str:
        """Up (and gate) projections, activation (and gate product), down projection of `h`."""
        m, rows, b = self.m, self.rows, self.b
        p = f"L{i}."
        up = self._linear(p + "up_proj", "ffn", i, h, rows, m.hidden, m.ffn, p + "up_proj")
        act_flops = ACTIVATION_FLOPS.get(m.activation, 8)
        if m.gated_ffn:
            gate = self._linear(p + "gate_proj", "ffn", i, h, rows, m.hidden, m.ffn, p + "gate_proj")
            act = self._add(Op(p + "act", "activation", "elementwise", i, m.dtype, {"m": rows, "n": m.ffn},
                               flops=float(act_flops * rows * m.ffn), read_bytes=rows * m.ffn * b,
                               write_bytes=rows * m.ffn * b), gate)
            up = self._elementwise(p + "gated", "mul", i, rows, m.ffn, act, up)
        else:
            up = self._add(Op(p + "act", "activation", "elementwise", i, m.dtype, {"m": rows, "n": m.ffn},
                              flops=float(act_flops * rows * m.ffn), read_bytes=rows * m.ffn * b,
                              write_bytes=rows * m.ffn * b), up)
        return self._linear(p + "down_proj", "ffn", i, up, rows, m.ffn, m.hidden, p + "down_proj")

    def _attention(self, i, q, kv):
        """Score and context over each request's keys: its cache plus (causally) its new tokens."""
        score, soft, context = attention_ops(self.m, i, self.tokens, self.contexts)
        self._add(score, q, kv)
        self._add(soft, score.name)
        self._add(context, soft.name, kv)
        return score.name, context.name


def attention_ops(m: Model, i: int, t: int, contexts: list[int]) -> tuple[Op, Op, Op]:
    """Layer `i`'s score, softmax and context ops for requests with `contexts` cached tokens and
    `t` new tokens each: the only ops of a step whose numbers depend on the contexts."""
    b, batch = DTYPE_BYTES[m.dtype], len(contexts)
    p = f"L{i}."
    causal = m.architecture == "decoder"
    # (query, key) pairs per head: new tokens see the cache and, causally, the earlier new ones
    pairs = sum(t * c + (t * (t + 1) // 2 if causal else t * t) for c in contexts)
    kv_lens = [c + t for c in contexts]
    shape = {"requests": batch, "heads": m.heads, "kv_heads": m.kv_heads, "q": t,
             "kv": kv_lens if len(set(kv_lens)) > 1 else kv_lens[0], "head_dim": m.head_dim}
    kv_bytes = sum(kv_lens) * m.kv_heads * m.head_dim * b       # K (or V) of every request
    q_bytes = batch * t * m.heads * m.head_dim * b
    scores = pairs * m.heads
    score = Op(p + "attn_score", "attn_score", "attention", i, m.dtype, shape,
               flops=2.0 * scores * m.head_dim, read_bytes=q_bytes + kv_bytes, write_bytes=scores * b)
    soft = Op(p + "softmax", "softmax", "attention", i, m.dtype, shape,
              flops=float(SOFTMAX_FLOPS * scores), read_bytes=scores * b, write_bytes=scores * b)
    context = Op(p + "attn_context", "attn_context", "attention", i, m.dtype, shape,
                 flops=2.0 * scores * m.head_dim, read_bytes=scores * b + kv_bytes, write_bytes=q_bytes)
    return score, soft, context


def _declared_graph(model: Model) -> nx.DiGraph:
    """A graph model's own ops (`tensor` and `op` blocks), with shapes from its tensors."""
    import networkx as nx
    g = nx.DiGraph(model=model.name, phase="graph", batch=1, tokens=1, context=0, dtype=model.dtype)
    tensors = {t.name: t for t in model.tensors}
    producer = {}
    for op in model.ops:
        ins = [tensors[n] for n in op.inputs if n in tensors]
        weights = [t for t in ins if t.role == "weight"]
        b = DTYPE_BYTES[ins[0].dtype if ins else model.dtype]
        if op.op in ("gemv", "gemm") and weights and len(weights[0].shape) == 2:
            n, k = weights[0].shape
            rows = 1
            for t in ins:
                if t.role != "weight" and len(t.shape) == 2:
                    rows = t.shape[0]
            kind = "gemv" if rows == 1 else "gemm"
            node = Op(op.name, kind, "fc", None, weights[0].dtype, {"m": rows, "k": k, "n": n},
                      flops=2.0 * rows * k * n, weight=weights[0].name, weight_elements=n * k,
                      weight_bytes=n * k * b, read_bytes=rows * k * b, write_bytes=rows * n * b)
        else:
            elements = max((_elements(t.shape) for t in ins), default=0)
            node = Op(op.name, op.op, "elementwise", None, model.dtype, {"n": elements},
                      flops=float(elements), read_bytes=sum(_elements(t.shape) for t in ins) * b,
                      write_bytes=elements * b)
        g.add_node(op.name, op=node)
        for n in op.inputs:
            if n in producer:
                g.add_edge(producer[n], op.name, bytes=g.nodes[producer[n]]["op"].write_bytes)
        producer[op.output] = op.name
    return g


def _elements(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def totals(g: nx.DiGraph) -> dict:
    """FLOPs, bytes and distinct weight elements of a graph."""
    ops = [d["op"] for _, d in g.nodes(data=True)]
    weights = {op.weight: op.weight_elements for op in ops if op.weight}
    return {"ops": len(ops), "flops": sum(op.flops for op in ops),
            "weight_bytes": sum(op.weight_bytes for op in ops),
            "read_bytes": sum(op.read_bytes for op in ops), "write_bytes": sum(op.write_bytes for op in ops),
            "weight_elements": sum(weights.values())}
