"""Layer-based partitioning of a model into weight blobs: embedding, one blob per encoder/decoder
layer, and the rest.

Only the encoder/decoder layers are loaded layer by layer; the embedding and the rest (final norm,
output head) are loaded once and stay resident ([PIPELOAD] Sec. III-A, step 1). Each blob lists its
tensors with their shapes, so the predictor counts its bytes and the executor writes and reads it
as one file. Norm gains and biases are included here (unlike the parameter count of the model IR),
because they are part of what a loader reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.workload import DTYPE_BYTES, Model


@dataclass(frozen=True)
class Blob:
    name: str                     # embedding, layer_00 ... layer_NN, other
    part: str                     # embedding, layer, other
    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    dtype: str

    @property
    def elements(self) -> int:
        total = 0
        for _, shape in self.tensors:
            n = 1
            for d in shape:
                n *= d
            total += n
        return total

    @property
    def bytes(self) -> int:
        return int(self.elements * DTYPE_BYTES[self.dtype])


def layer_tensors(model: Model) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """One encoder/decoder layer: pre-norm attention and FFN with biases; the FFN's own norm
    (ln2) unless the layer is parallel with one norm shared by both branches."""
    d, q, kv, f = model.hidden, model.heads * model.head_dim, model.kv_heads * model.head_dim, model.ffn
    out = [("ln1_g", (d,)), ("ln1_b", (d,)),
           ("wq", (d, q)), ("bq", (q,)), ("wk", (d, kv)), ("bk", (kv,)), ("wv", (d, kv)), ("bv", (kv,)),
           ("wo", (q, d)), ("bo", (d,))]
    if not model.parallel_attention or model.parallel_norms == 2:
        out += [("ln2_g", (d,)), ("ln2_b", (d,))]
    out += [("w1", (d, f)), ("b1", (f,))]
    if model.gated_ffn:
        out.append(("w3", (d, f)))
    out += [("w2", (f, d)), ("b2", (d,))]
    return tuple(out)


def partition(model: Model) -> tuple[Blob, ...]:
    """Embedding, the layers in model order, and the rest. A model without a vocabulary (ViT)
    takes its input as embedded vectors: its embedding blob holds the position table only."""
    d, dtype = model.hidden, model.dtype
    embedding = ([("tokens", (model.vocab, d))] if model.vocab else []) + [("positions", (model.max_seq_len, d))]
    other = [("lnf_g", (d,)), ("lnf_b", (d,))]
    if model.vocab and not model.tied_embeddings:
        other.append(("head", (d, model.vocab)))
    layers = tuple(Blob(f"layer_{i:02d}", "layer", layer_tensors(model), dtype) for i in range(model.layers))
    return (Blob("embedding", "embedding", tuple(embedding), dtype), *layers, Blob("other", "other", tuple(other), dtype))
