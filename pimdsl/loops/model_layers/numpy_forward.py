"""A transformer forward pass in numpy, one layer at a time, for the real executor.

Pre-norm layers (norm, attention, residual; norm, FFN, residual; or, for a parallel block,
x + attention(norm(x)) + FFN(norm(x)), with ln2 as the FFN's norm when it has two) over the blobs of layer_blobs.py,
computed in fp32 (fp16 weights are upcast one layer at a time). A decoder keeps a KV cache and
generates greedily, one pass per token; an encoder runs one pass with full attention. The same
functions serve the plain forward and the pipelined executor, so their outputs are bit-identical.
"""
from __future__ import annotations

import numpy as np

from ...ir.workload import Model


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3))),
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def attention(q, k, v, model: Model, causal: bool, offset: int):
    t, s, hd = q.shape[0], k.shape[0], model.head_dim
    q = q.reshape(t, model.heads, hd).transpose(1, 0, 2)
    k = k.reshape(s, model.kv_heads, hd).transpose(1, 0, 2)
    v = v.reshape(s, model.kv_heads, hd).transpose(1, 0, 2)
    if model.kv_heads != model.heads:              # grouped-query attention shares K, V
        k = np.repeat(k, model.heads // model.kv_heads, axis=0)
        v = np.repeat(v, model.heads // model.kv_heads, axis=0)
    scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(hd))
    if causal:
        future = np.arange(s)[None, :] > (offset + np.arange(t))[:, None]
        scores = np.where(future, np.float32(-1e30), scores)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    p = scores / scores.sum(-1, keepdims=True)
    return (p @ v).transpose(1, 0, 2).reshape(t, model.heads * hd)


def layer(x, w: dict, model: Model, cache: dict | None, offset: int):
    """One encoder/decoder layer; `cache` (a decoder's) gains this pass's K and V."""
    w = {name: a.astype(np.float32, copy=False) for name, a in w.items()}
    h = layer_norm(x, w["ln1_g"], w["ln1_b"])
    q, k, v = h @ w["wq"] + w["bq"], h @ w["wk"] + w["bk"], h @ w["wv"] + w["bv"]
    if cache is not None:
        if "k" in cache:
            k, v = np.concatenate([cache["k"], k]), np.concatenate([cache["v"], v])
        cache["k"], cache["v"] = k, v
    attended = attention(q, k, v, model, cache is not None, offset) @ w["wo"] + w["bo"]
    if not model.parallel_attention:
        x = x + attended
    if not model.parallel_attention or model.parallel_norms == 2:
        h = layer_norm(x, w["ln2_g"], w["ln2_b"])
    a = ACTIVATIONS[model.activation](h @ w["w1"] + w["b1"])
    if "w3" in w:
        a = a * (h @ w["w3"])
    out = x + a @ w["w2"] + w["b2"]
    return out + attended if model.parallel_attention else out


def embed(inputs, emb: dict, offset: int):
    """Token ids (a decoder, BERT) or embedded vectors (ViT) plus the position table."""
    pos = emb["positions"][offset:offset + len(inputs)].astype(np.float32)
    if inputs.ndim == 1:
        return emb["tokens"][inputs].astype(np.float32) + pos
    return inputs + pos


def head(x, other: dict, emb: dict, model: Model):
    """Logits (a model with a vocabulary; a decoder only for its last token), else the normed states."""
    if model.architecture == "decoder":
        x = x[-1:]
    h = layer_norm(x, other["lnf_g"].astype(np.float32), other["lnf_b"].astype(np.float32))
    if not model.vocab:
        return h
    weight = other["head"] if "head" in other else emb["tokens"].T
    return h @ weight.astype(np.float32, copy=False)


def inputs_for(model: Model, input_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    if model.vocab:
        return rng.integers(0, model.vocab, input_len)
    return rng.standard_normal((input_len, model.hidden), dtype=np.float32)


def passes(model: Model, output_len: int) -> int:
    return output_len if model.architecture == "decoder" else 1


def forward(model: Model, get_layer, resident: dict, inputs, output_len: int, done=None):
    """The passes of a run. `get_layer(pass, i)` hands over layer i's weights (from memory, or from a
    loader); `done(pass, i)` is told when the layer has been computed (the destruction signal)."""
    caches = [{} if model.architecture == "decoder" else None for _ in range(model.layers)]
    outputs, tokens, offset = [], inputs, 0
    for p in range(passes(model, output_len)):
        x = embed(tokens, resident["embedding"], offset)
        for i in range(model.layers):
            x = layer(x, get_layer(p, i), model, caches[i], offset)
            if done is not None:
                done(p, i)
        out = head(x, resident["other"], resident["embedding"], model)
        outputs.append(out)
        offset += len(tokens)
        if model.vocab:
            tokens = np.array([int(out[-1].argmax())])
    return np.concatenate(outputs)


def forward_plain(model: Model, blobs: dict, inputs, output_len: int):
    """The non-pipelined reference: every blob in memory, the passes one after the other."""
    return forward(model, lambda p, i: blobs[f"layer_{i:02d}"], blobs, inputs, output_len)
