"""Op graphs of one model step: structure, shapes, FLOPs and bytes against hand counts."""
from __future__ import annotations

import dataclasses
import glob
import json

import networkx as nx
import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.graph.build import GraphError, build_graph, totals
from pimdsl.graph.export import graph_to_dot, graph_to_json

from .conftest import ROOT


def _bundled_models():
    out = {}
    for path in sorted(glob.glob(str(ROOT / "specs" / "models" / "*.pim"))):
        spec, diags = load_spec(path)
        assert spec is not None, diags.render_all()
        out.update({m.name: m for m in spec.models.values() if m.architecture != "graph"})
    return out


MODELS = _bundled_models()

TINY = """
model tiny {
  architecture = decoder;
  layers = 2; hidden = 32; heads = 4; kv_heads = 2; head_dim = 8; ffn = 64; vocab = 100;
  activation = silu; gated_ffn = true; norm = rmsnorm; tied_embeddings = false; dtype = fp16;
}
"""


@pytest.fixture
def tiny(elaborate):
    spec, diags = elaborate(TINY)
    assert spec is not None, diags.render_all()
    return spec.models["tiny"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_weight_once_and_linear_flops(name):
    m = MODELS[name]
    phase = "decode" if m.architecture == "decoder" else "prefill"
    g = build_graph(m, phase, batch=2, tokens=3, context=5)
    assert nx.is_directed_acyclic_graph(g) and nx.is_weakly_connected(g)
    t = totals(g)
    assert t["weight_elements"] == m.parameters          # the IR's parameter count, recomputed
    rows = 2 * (1 if phase == "decode" else 3)
    linear = sum(d["op"].flops for _, d in g.nodes(data=True) if d["op"].kind in ("gemm", "gemv"))
    per_layer = 2 * m.hidden * (m.heads + m.kv_heads) * m.head_dim + (3 if m.gated_ffn else 2) * m.hidden * m.ffn
    lm_head = 2 * m.vocab * m.hidden * 2 if m.architecture == "decoder" else 0     # last token of 2 requests
    assert linear == 2 * rows * m.layers * per_layer + lm_head
    assert sum(1 for n in g if n.endswith("attn_score")) == m.layers


def test_attention_counts_by_hand(tiny):
    # prefill of 3 tokens on an empty cache: causal pairs 1 + 2 + 3 = 6 per head
    g = build_graph(tiny, "prefill", batch=1, tokens=3)
    score = g.nodes["L0.attn_score"]["op"]
    assert score.flops == 2 * 6 * 4 * 8
    assert g.nodes["L0.softmax"]["op"].flops == 5 * 6 * 4
    # decode, two requests with caches of 10 and 20 tokens: 11 and 21 keys per head
    g = build_graph(tiny, "decode", batch=2, context=[10, 20])
    score = g.nodes["L1.attn_score"]["op"]
    assert score.shape["kv"] == [11, 21] and score.flops == 2 * (11 + 21) * 4 * 8
    # grouped-query attention: K of 2 KV heads per key, 2 bytes each (fp16)
    assert score.read_bytes == 2 * 4 * 8 * 2 + (11 + 21) * 2 * 8 * 2
    kv = g.nodes["L0.kv_append"]["op"]
    assert kv.write_bytes == 2 * 2 * (2 * 8) * 2         # K and V of 2 new tokens


def test_layer_structure(tiny):
    g = build_graph(tiny, "decode", context=4)
    assert list(g.successors("L0.norm_ffn")) == ["L0.up_proj", "L0.gate_proj"]
    assert set(g.predecessors("L0.gated")) == {"L0.act", "L0.up_proj"}
    assert set(g.predecessors("L0.residual_ffn")) == {"L0.residual_attn", "L0.down_proj"}
    assert g.nodes["L0.q_proj"]["op"].kind == "gemv"
    assert g.nodes["lm_head"]["op"].weight == "lm_head"   # untied
    assert build_graph(tiny, "prefill", tokens=2).nodes["L0.q_proj"]["op"].kind == "gemm"
    gpt2 = build_graph(MODELS["gpt2"], "decode", context=4)
    assert list(gpt2.predecessors("L0.act")) == ["L0.up_proj"] and "L0.gate_proj" not in gpt2
    assert gpt2.nodes["lm_head"]["op"].weight == "embed_tokens"    # tied


def test_declared_graph_model(elaborate):
    spec, diags = elaborate("""
        model g {
          architecture = graph;
          let out = 4096;
          let in = 1024;
          tensor W { shape = [out, in]; dtype = fp16; role = weight; }
          tensor x { shape = [in]; dtype = fp16; role = input; }
          op y { op = gemv; inputs = [W, x]; }
        }
        """, ["g.out=512"])
    g = build_graph(spec.models["g"])
    op = g.nodes["y"]["op"]
    assert (op.kind, op.shape, op.flops, op.weight_bytes) == ("gemv", {"m": 1, "k": 1024, "n": 512},
                                                               2 * 512 * 1024, 512 * 1024 * 2)


def test_bad_requests(tiny):
    with pytest.raises(GraphError, match="unknown phase 'generate'"):
        build_graph(tiny, "generate")
    with pytest.raises(GraphError, match="2 requests but 3 context lengths"):
        build_graph(tiny, "decode", batch=2, context=[1, 2, 3])
    with pytest.raises(GraphError, match="is an encoder"):
        build_graph(MODELS["bert_large"], "decode")


def test_exports(tiny):
    g = build_graph(tiny, "decode", context=4)
    data = json.loads(json.dumps(graph_to_json(g)))
    assert [n["name"] for n in data["nodes"]][:3] == ["embedding", "L0.norm_attn", "L0.q_proj"]
    assert len(data["edges"]) == g.number_of_edges()
    dot = graph_to_dot(g)
    assert dot.startswith('digraph "tiny decode" {')
    assert '"L0.q_proj" [label="L0.q_proj\\ngemv k=32 m=1 n=32\\n2.05e-06 GFLOP"];' in dot
    assert '"L0.norm_attn" -> "L0.q_proj" [label="64 B"];' in dot


PARALLEL = """
model par {
  architecture = decoder;
  layers = 2; hidden = 32; heads = 4; head_dim = 8; ffn = 128; vocab = 100;
  activation = gelu; norm = layernorm; dtype = fp16; parallel_attention = true;
}
"""


@pytest.mark.parametrize("norms", [1, 2])
def test_parallel_attention_block(elaborate, norms):
    spec, diags = elaborate(PARALLEL.replace("parallel_attention = true;",
                                             f"parallel_attention = true; parallel_norms = {norms};"))
    assert spec is not None, diags.render_all()
    par = spec.models["par"]
    seq = dataclasses.replace(par, parallel_attention=False)
    g, s = build_graph(par, "prefill", tokens=3), build_graph(seq, "prefill", tokens=3)
    # the FFN is not reachable from attention, and reads the layer input's norm
    assert not nx.has_path(g, "L0.attn_score", "L0.up_proj") and nx.has_path(s, "L0.attn_score", "L0.up_proj")
    ffn_norm = "L0.norm_attn" if norms == 1 else "L0.norm_ffn"
    assert list(g.predecessors("L0.up_proj")) == [ffn_norm]
    if norms == 2:
        assert list(g.predecessors("L0.norm_ffn")) == ["embedding"]      # x, not the attention residual
    # one residual add per layer, of x, attention and FFN: 2 additions per element
    assert "L0.residual_attn" not in g and "L0.residual_ffn" not in g
    assert set(g.predecessors("L1.residual")) == {"L0.residual", "L1.o_proj", "L1.down_proj"}
    add = g.nodes["L0.residual"]["op"]
    rows, h = 3, 32
    assert (add.flops, add.read_bytes, add.write_bytes) == (2 * rows * h, 3 * rows * h * 2, rows * h * 2)
    # hand count per layer: a sequential block has two adds (rows*h each) and two norms (8 rows*h
    # each, LayerNorm); the parallel one has one add of 2 rows*h and `norms` norms
    assert totals(s)["flops"] - totals(g)["flops"] == 2 * (2 - norms) * 8 * rows * h
    assert len(s) - len(g) == 2 * (1 + 2 - norms)
    # the weights and linear FLOPs are those of the sequential block
    linear = lambda gr: sum(d["op"].flops for _, d in gr.nodes(data=True) if d["op"].kind in ("gemm", "gemv"))
    assert linear(g) == linear(s) and totals(g)["weight_elements"] == totals(s)["weight_elements"]


def test_bundled_parallel_models():
    assert {n for n, m in MODELS.items() if m.parallel_attention} == {"gpt_j_6b", "falcon_40b"}
    assert (MODELS["gpt_j_6b"].parallel_norms, MODELS["falcon_40b"].parallel_norms) == (1, 2)


@pytest.mark.parametrize("text, message", [
    ("parallel_norms = 3;", "1 or 2 norms"),
    ("parallel_attention = false; parallel_norms = 2;", "parallel_attention is false"),
])
def test_parallel_norms_checked(elaborate, text, message):
    spec, diags = elaborate(PARALLEL.replace("parallel_attention = true;", text))
    assert message in diags.render_all()
