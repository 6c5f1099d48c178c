"""The bundled model library (specs/models/): every spec loads, and its parameter count is right.

`Model.parameters` counts the weights of the linear layers and the token embedding (once when
tied) and nothing else: no norms, no biases, no learned position tables, no patch embedding,
no pooler or classifier.  So each model is checked twice:

1. against a hand derivation from its published shape (EXPECTED below, written out), exactly;
2. against its published size:
   - where the exact published count is known (the HuggingFace checkpoint), the parts pimdsl
     leaves out are added back, written out term by term, and the sum must equal it exactly
     (PUBLISHED_EXACT);
   - where only the size in the model's name is published ("13B", "66B"), the count must lie
     within the rounding of that name (NOMINAL, tolerance given and argued per model).
"""
from __future__ import annotations

import json

import pytest

from pimdsl.frontend.hf_config import ConfigError, load_hf_config, model_fields
from pimdsl.frontend.pipeline import load_spec

from .conftest import ROOT

MODELS_DIR = ROOT / "specs" / "models"
SHIPPED = sorted(p.stem for p in MODELS_DIR.glob("*.pim"))
HF_MODELS = sorted(p.parent.name for p in (MODELS_DIR / "hf").glob("*/config.json"))


def dense(layers, hidden, ffn, vocab, tied=True, heads=None, kv_heads=None, head_dim=None, gated=False):
    """Linear layers + token embedding of a transformer: Q,O (hidden x heads*head_dim each),
    K,V (hidden x kv_heads*head_dim each), 2 (or 3 when gated) MLP matrices, embedding (+ LM head)."""
    heads = heads or 1
    head_dim = head_dim or hidden // heads
    kv_heads = kv_heads or heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = (3 if gated else 2) * hidden * ffn
    return layers * (attention + mlp) + vocab * hidden * (1 if tied else 2)


# name -> hand-computed parameter count (linear layers + embeddings), from the shapes cited in
# each spec file (HuggingFace config.json, or the paper table for the GPT-3 family).
EXPECTED = {
    # Llama 3.2 1B: 16 layers, 2048 hidden, 32 heads / 8 KV heads x 64, SwiGLU 8192, vocab 128256, tied
    "llama3_2_1b": 16 * (2 * 2048 * 32 * 64 + 2 * 2048 * 8 * 64 + 3 * 2048 * 8192) + 128256 * 2048,
    # Llama 3.2 3B: 28 layers, 3072 hidden, 24 heads / 8 KV heads x 128 (explicit head_dim), SwiGLU 8192, tied
    "llama3_2_3b": 28 * (2 * 3072 * 24 * 128 + 2 * 3072 * 8 * 128 + 3 * 3072 * 8192) + 128256 * 3072,
    # Llama 2 13B: 40 layers, 5120 hidden, MHA, SwiGLU 13824, vocab 32000, untied
    "llama2_13b": 40 * (4 * 5120 ** 2 + 3 * 5120 * 13824) + 2 * 32000 * 5120,
    "llama2_7b": 32 * (4 * 4096 ** 2 + 3 * 4096 * 11008) + 2 * 32000 * 4096,
    # Llama 2 70B: 80 layers, 8192 hidden, 64 heads / 8 KV heads x 128, SwiGLU 28672, untied
    "llama2_70b": 80 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 128 + 3 * 8192 * 28672) + 2 * 32000 * 8192,
    # OPT: MHA, ReLU MLP (2 matrices), vocab 50272, tied
    "opt_13b": 40 * (4 * 5120 ** 2 + 2 * 5120 * 20480) + 50272 * 5120,
    "opt_30b": 48 * (4 * 7168 ** 2 + 2 * 7168 * 28672) + 50272 * 7168,
    "opt_66b": 64 * (4 * 9216 ** 2 + 2 * 9216 * 36864) + 50272 * 9216,
    # Falcon-40B: 60 layers, 8192 hidden, 128 query heads / 8 KV heads x 64, MLP 4 x 8192, vocab 65024, tied
    "falcon_40b": 60 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 64 + 2 * 8192 * 32768) + 65024 * 8192,
    # GPT-2 124M: 12 layers, 768 hidden, MLP 3072, vocab 50257, tied
    "gpt2": 12 * (4 * 768 ** 2 + 2 * 768 * 3072) + 50257 * 768,
    # GPT-2 medium ([PIPELOAD]'s "GPT-2-Base"): 24 layers, 1024 hidden, MLP 4096, vocab 50257, tied
    "gpt2_medium": 24 * (4 * 1024 ** 2 + 2 * 1024 * 4096) + 50257 * 1024,
    # GPT-J 6B: 28 layers, 4096 hidden, MLP 16384, vocab 50400, untied
    "gpt_j_6b": 28 * (4 * 4096 ** 2 + 2 * 4096 * 16384) + 2 * 50400 * 4096,
    # BERT-Large: 24 layers, 1024 hidden, 4096 intermediate, vocab 30522 (MLM head tied)
    "bert_large": 24 * (4 * 1024 ** 2 + 2 * 1024 * 4096) + 30522 * 1024,
    # ViT-L/16: 24 layers, 1024 hidden, 4096 intermediate, no vocabulary
    "vit_large": 24 * (4 * 1024 ** 2 + 2 * 1024 * 4096),
    # GPT-3 family: 12 * d^2 per layer (4 d^2 attention + 8 d^2 MLP), GPT-2 vocab 50257, tied
    "gpt3_7b": 32 * 12 * 4096 ** 2 + 50257 * 4096,
    "gpt3_13b": 40 * 12 * 5120 ** 2 + 50257 * 5120,
    "gpt3_30b": 48 * 12 * 7168 ** 2 + 50257 * 7168,
    "gpt3_175b": 96 * 12 * 12288 ** 2 + 50257 * 12288,
    "gpt_89b": 48 * 12 * 12288 ** 2 + 50257 * 12288,
}

# name -> (exact published total, what pimdsl leaves out, written out).  Sources: the parameter
# counts of the HuggingFace checkpoints (safetensors metadata / model.num_parameters()).
PUBLISHED_EXACT = {
    # 1,235,814,400 (meta-llama/Llama-3.2-1B): + RMSNorm weights, 2 per layer + final
    "llama3_2_1b": (1_235_814_400, 16 * 2 * 2048 + 2048),
    # 3,212,749,824 (meta-llama/Llama-3.2-3B)
    "llama3_2_3b": (3_212_749_824, 28 * 2 * 3072 + 3072),
    # 13,015,864,320 (meta-llama/Llama-2-13b-hf)
    "llama2_13b": (13_015_864_320, 40 * 2 * 5120 + 5120),
    "llama2_7b": (6_738_415_616, 32 * 2 * 4096 + 4096),             # [HF_LLAMA2_7B]: 6,738,415,616 with the norms
    # 68,976,648,192 (meta-llama/Llama-2-70b-hf)
    "llama2_70b": (68_976_648_192, 80 * 2 * 8192 + 8192),
    # 124,439,808 (openai-community/gpt2): + position table 1024 x 768 + per layer (ln_1, ln_2 weight+bias
    # 4*768; c_attn bias 3*768; attn c_proj bias 768; c_fc bias 3072; mlp c_proj bias 768) + ln_f 2*768
    "gpt2": (124_439_808, 1024 * 768 + 12 * (4 * 768 + 3 * 768 + 768 + 3072 + 768) + 2 * 768),
    "gpt2_medium": (354_823_168, 1024 * 1024 + 24 * (4 * 1024 + 3 * 1024 + 1024 + 4096 + 1024) + 2 * 1024),
    # 335,141,888 (google-bert/bert-large-uncased, BertModel): + position 512 x 1024 + token type 2 x 1024
    # + embedding LayerNorm 2*1024 + per layer (Q,K,V,O biases 4*1024; 2 LayerNorms 4*1024;
    # intermediate bias 4096; output bias 1024) + pooler 1024 x 1024 + 1024
    "bert_large": (335_141_888, 512 * 1024 + 2 * 1024 + 2 * 1024
                   + 24 * (4 * 1024 + 4 * 1024 + 4096 + 1024) + 1024 * 1024 + 1024),
    # 304,326,632 (google/vit-large-patch16-224, ViTForImageClassification): + patch conv 16*16*3 x 1024 + bias
    # + [CLS] 1024 + position 197 x 1024 + per layer (4*1024 QKVO biases; 2 LayerNorms 4*1024; 4096 + 1024
    # MLP biases) + final LayerNorm 2*1024 + classifier 1024 x 1000 + 1000
    "vit_large": (304_326_632, 16 * 16 * 3 * 1024 + 1024 + 1024 + 197 * 1024
                  + 24 * (4 * 1024 + 4 * 1024 + 4096 + 1024) + 2 * 1024 + 1024 * 1000 + 1000),
}

# name -> (size in the model's name or paper, relative tolerance).  A name such as "13B" rounds the
# true size, so the tolerance is the rounding gap the publishers themselves leave, plus the small
# share of parameters pimdsl does not count (biases, norms, position tables: < 0.2% at these sizes).
NOMINAL = {
    "opt_13b": (13e9, 0.015),     # the 13B checkpoint holds ~12.85e9 with biases/positions: 1.1% under its name
    "opt_30b": (30e9, 0.005),
    "opt_66b": (66e9, 0.006),     # 65.7e9 incl. positions/biases: 0.5% under "66B"
    "falcon_40b": (40e9, 0.035),  # its own shape gives 41.30e9 (+2e6 norms): the name "40B" rounds down by 3.3%
    "gpt_j_6b": (6_053_381_344, 0.001),  # EleutherAI model card n_parameters; biases/norms/LM-head bias ~0.06%
    "gpt3_7b": (6.7e9, 0.01),     # Brown et al. 2020 Table 2.1 "GPT-3 6.7B"
    "gpt3_13b": (13.0e9, 0.015),  # Table 2.1 "GPT-3 13B" (12.85e9 by its own shape: 1.2% gap)
    "gpt3_30b": (30e9, 0.005),    # NeuPIMs Table 3 name
    "gpt3_175b": (175.0e9, 0.005),  # Table 2.1 "GPT-3 175B"
    "gpt_89b": (89e9, 0.02),      # L3 Table 3 name; its own shape gives 87.6e9 (1.6% under), see gpt_89b.pim
}


def load(name):
    spec, diags = load_spec(MODELS_DIR / f"{name}.pim")
    assert not diags.errors, diags.render_all()
    assert not diags.warnings, diags.render_all()
    assert spec is not None
    return spec.models[name]


def test_the_library_ships_every_model():
    want = {"llama3_2_1b", "llama3_2_3b", "llama2_13b", "llama2_70b", "opt_13b", "opt_30b", "opt_66b",
            "falcon_40b", "gpt2", "gpt_j_6b", "bert_large", "vit_large",
            "gpt3_7b", "gpt3_13b", "gpt3_30b", "gpt3_175b", "gpt_89b"}
    assert want <= set(SHIPPED)
    assert set(SHIPPED) <= set(EXPECTED), "add the hand-computed count of every new model to EXPECTED"
    assert set(EXPECTED) == set(PUBLISHED_EXACT) | set(NOMINAL)
    # every HF-imported model has its config.json, and every config.json a spec
    hf_specs = {n for n in SHIPPED if "hf_config" in (MODELS_DIR / f"{n}.pim").read_text()}
    assert hf_specs == set(HF_MODELS)


@pytest.mark.parametrize("name", SHIPPED)
def test_model_loads_and_counts_its_parameters(name):
    model = load(name)
    assert model.name == name
    assert model.parameters == EXPECTED[name]
    if name in PUBLISHED_EXACT:
        total, left_out = PUBLISHED_EXACT[name]
        assert model.parameters + left_out == total
    else:
        size, tolerance = NOMINAL[name]
        assert abs(model.parameters - size) / size <= tolerance, f"{model.parameters:,} vs {size:,.0f}"
    assert model.weight_bytes == int(model.parameters * {"fp32": 4, "fp16": 2, "bf16": 2}[model.dtype])


@pytest.mark.parametrize("name", HF_MODELS)
def test_hf_config_is_valid_json_and_imports(name):
    path = MODELS_DIR / "hf" / name / "config.json"
    cfg = json.loads(path.read_text())
    assert isinstance(cfg, dict) and cfg.get("model_type")
    fields = load_hf_config(path)
    model = load(name)
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "activation", "gated_ffn", "norm",
                "tied_embeddings", "architecture"):
        assert getattr(model, key) == fields[key], key


def test_shapes_of_each_family():
    l1, l3 = load("llama3_2_1b"), load("llama3_2_3b")
    assert (l1.kv_heads, l1.head_dim, l1.tied_embeddings, l1.gated_ffn, l1.norm) == (8, 64, True, True, "rmsnorm")
    assert (l3.hidden, l3.heads, l3.head_dim, l3.kv_heads) == (3072, 24, 128, 8)
    assert l1.max_seq_len == l3.max_seq_len == 131072
    l70 = load("llama2_70b")
    assert (l70.kv_heads, l70.head_dim, l70.tied_embeddings, l70.max_seq_len) == (8, 128, False, 4096)
    assert load("llama2_13b").kv_heads == 40
    for name in ("opt_13b", "opt_30b", "opt_66b"):
        m = load(name)
        assert (m.activation, m.gated_ffn, m.norm, m.tied_embeddings, m.ffn) == ("relu", False, "layernorm", True,
                                                                              4 * m.hidden)
    f = load("falcon_40b")
    assert (f.heads, f.kv_heads, f.head_dim, f.ffn, f.activation) == (128, 8, 64, 32768, "gelu")
    g = load("gpt2")
    assert (g.layers, g.hidden, g.heads, g.ffn, g.max_seq_len, g.activation) == (12, 768, 12, 3072, 1024, "gelu")
    j = load("gpt_j_6b")
    assert (j.head_dim, j.ffn, j.tied_embeddings, j.vocab) == (256, 16384, False, 50400)
    b, v = load("bert_large"), load("vit_large")
    assert b.architecture == v.architecture == "encoder"
    assert (b.vocab, b.max_seq_len) == (30522, 512)
    assert (v.vocab, v.max_seq_len) == (0, (224 // 16) ** 2 + 1)
    # the GPT-3 family (NeuPIMs Table 3; L3 Table 3): d_head 128 throughout
    for name, shape in {"gpt3_7b": (32, 32, 4096), "gpt3_13b": (40, 40, 5120), "gpt3_30b": (48, 56, 7168),
                        "gpt3_175b": (96, 96, 12288), "gpt_89b": (48, 96, 12288)}.items():
        m = load(name)
        assert (m.layers, m.heads, m.hidden) == shape
        assert (m.head_dim, m.kv_heads, m.ffn, m.vocab, m.max_seq_len) == (128, m.heads, 4 * m.hidden, 50257, 2048)
    # OPT-66B and GPT-175B as L3 Table 3 gives them (64/72/9216 and 96/96/12288)
    o = load("opt_66b")
    assert (o.layers, o.heads, o.hidden) == (64, 72, 9216)


def test_llama3_2_weights_match_pim_sherpa_capacities():
    # PIM-SHERPA ([PIM_SHERPA] Sec. 6): host-friendly BF16 weights of Llama 3.2 1B "require 2.47 GB",
    # of Llama 3.2 3B "6.4 GB" (GB = 1e9 B; rounded to the digits printed).
    assert round(load("llama3_2_1b").weight_bytes / 1e9, 2) == 2.47
    assert round(load("llama3_2_3b").weight_bytes / 1e9, 1) == 6.4


# --- the importer's field-name variants ---------------------------------------------------------

def test_gpt2_field_names():
    out = model_fields({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
                        "n_positions": 1024, "activation_function": "gelu_new", "vocab_size": 50257})
    assert (out["hidden"], out["layers"], out["heads"], out["kv_heads"]) == (768, 12, 12, 12)
    assert out["ffn"] == 4 * 768                 # n_inner null -> 4 x n_embd
    assert out["max_seq_len"] == 1024            # n_positions
    assert out["activation"] == "gelu" and out["gated_ffn"] is False
    assert out["tied_embeddings"] is True and out["norm"] == "layernorm"
    assert out["architecture"] == "decoder" and "head_dim" not in out
    assert model_fields({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 100})["ffn"] == 100


def test_missing_num_key_value_heads_means_multi_head():
    # Llama-1 style configs have no num_key_value_heads
    out = model_fields({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
                        "num_hidden_layers": 32, "intermediate_size": 11008, "vocab_size": 32000,
                        "hidden_act": "silu", "rms_norm_eps": 1e-6})
    assert out["kv_heads"] == out["heads"] == 32
    assert out["gated_ffn"] is True and out["norm"] == "rmsnorm" and out["activation"] == "silu"
    assert out["tied_embeddings"] is False       # LlamaConfig default
    gqa = model_fields({"model_type": "llama", "hidden_size": 8192, "num_attention_heads": 64,
                        "num_hidden_layers": 80, "num_key_value_heads": 8})
    assert gqa["kv_heads"] == 8


def test_explicit_head_dim_is_kept(spec_file):
    # Llama-3.2-3B: head_dim 128 although 3072 / 24 = 128 happens to agree; a config where it does not
    cfg = {"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8,
           "num_hidden_layers": 28, "intermediate_size": 8192, "vocab_size": 128256, "head_dim": 128,
           "tie_word_embeddings": True}
    assert model_fields(cfg)["head_dim"] == 128
    odd = {**cfg, "hidden_size": 2560, "num_attention_heads": 32, "head_dim": 128}   # 2560 / 32 = 80
    assert model_fields(odd)["head_dim"] == 128
    # and through the model builder: head_dim wins over hidden / heads, and no divisibility error
    path = spec_file('model m { hf_config = "config.json"; }')
    (path.parent / "config.json").write_text(json.dumps({**odd, "hidden_size": 2500}))   # 2500 % 32 != 0
    spec, diags = load_spec(path)
    assert not diags.errors, diags.render_all()
    m = spec.models["m"]
    assert (m.head_dim, m.heads, m.kv_heads) == (128, 32, 8)
    assert m.parameters == dense(28, 2500, 8192, 128256, tied=True, heads=32, kv_heads=8, head_dim=128, gated=True)


def test_tie_word_embeddings():
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    assert model_fields(base)["tied_embeddings"] is False
    assert model_fields({**base, "tie_word_embeddings": True})["tied_embeddings"] is True
    gptj = {"model_type": "gptj", "n_embd": 64, "n_head": 4, "n_layer": 2, "tie_word_embeddings": False}
    assert model_fields(gptj)["tied_embeddings"] is False
    opt = {"model_type": "opt", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "ffn_dim": 256}
    assert model_fields(opt)["tied_embeddings"] is True        # OPTConfig default
    assert model_fields(opt)["ffn"] == 256


def test_falcon_multi_query_and_kv_head_names():
    # Falcon-7B: multi_query, old decoder -> one K/V head
    f7 = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
          "multi_query": True, "new_decoder_architecture": False, "vocab_size": 65024}
    assert model_fields(f7)["kv_heads"] == 1
    # Falcon-40B, legacy RefinedWeb names: n_head / n_head_kv / n_layer
    rw = {"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60,
          "parallel_attn": True, "vocab_size": 65024}
    out = model_fields(rw)
    assert (out["heads"], out["kv_heads"], out["layers"], out["ffn"]) == (128, 8, 60, 4 * 8192)
    assert out["activation"] == "gelu" and out["tied_embeddings"] is True
    # Falcon-40B, transformers names: num_kv_heads with the new decoder (multi_query ignored there)
    new = {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
           "num_kv_heads": 8, "new_decoder_architecture": True, "multi_query": True}
    assert model_fields(new)["kv_heads"] == 8
    # new decoder without num_kv_heads: FalconConfig defaults num_kv_heads to num_attention_heads
    assert model_fields({**new, "num_kv_heads": None})["kv_heads"] == 128


def test_encoders_and_dtypes():
    bert = model_fields({"model_type": "bert", "hidden_size": 1024, "num_attention_heads": 16,
                         "num_hidden_layers": 24, "intermediate_size": 4096, "vocab_size": 30522,
                         "max_position_embeddings": 512, "hidden_act": "gelu"})
    assert (bert["architecture"], bert["ffn"], bert["max_seq_len"]) == ("encoder", 4096, 512)
    vit = model_fields({"model_type": "vit", "hidden_size": 1024, "num_attention_heads": 16,
                        "num_hidden_layers": 24, "intermediate_size": 4096})
    assert (vit["architecture"], vit["vocab"]) == ("encoder", 0)
    assert model_fields({"model_type": "opt", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                         "torch_dtype": "float16"})["dtype"] == "fp16"
    assert model_fields({"model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "torch_dtype": "bfloat16"})["dtype"] == "bf16"


def test_spec_fields_override_the_config(spec_file):
    path = spec_file(f'model m {{ hf_config = "{MODELS_DIR / "hf" / "opt_13b" / "config.json"}"; '
                     'dtype = int8; layers = 2; activation = gelu; }')
    spec, diags = load_spec(path)
    assert not diags.errors, diags.render_all()
    m = spec.models["m"]
    assert (m.layers, m.dtype, m.activation, m.hidden) == (2, "int8", "gelu", 5120)
    assert m.weight_bytes == m.parameters == dense(2, 5120, 20480, 50272)


def test_config_without_shape_is_an_error():
    with pytest.raises(ConfigError):
        model_fields({"model_type": "llama", "hidden_size": 64})


def test_untied_by_default_families_and_vit_sequence_length():
    from pimdsl.frontend.hf_config import model_fields
    base = {"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 2}
    assert model_fields({**base, "model_type": "gptj"})["tied_embeddings"] is False
    assert model_fields({**base, "model_type": "mixtral"})["tied_embeddings"] is False
    assert model_fields({**base, "model_type": "opt"})["tied_embeddings"] is True
    vit = {**base, "model_type": "vit", "image_size": 224, "patch_size": 16}
    assert model_fields(vit)["max_seq_len"] == 197


def test_parallel_attention_is_imported():
    """GPT-J is always parallel (one ln_1); Falcon with parallel_attn or the new decoder (two norms
    there); GPT-NeoX with use_parallel_residual (two norms); Llama and OPT are sequential."""
    shape = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    block = lambda cfg: (model_fields({**shape, **cfg}).get("parallel_attention", False),
                         model_fields({**shape, **cfg}).get("parallel_norms", 1))
    assert block({"model_type": "gptj"}) == (True, 1)
    assert block({"model_type": "falcon", "parallel_attn": True}) == (True, 1)                 # Falcon-7B
    assert block({"model_type": "falcon", "parallel_attn": False}) == (False, 1)
    assert block({"model_type": "falcon", "parallel_attn": False, "new_decoder_architecture": True}) == (True, 2)
    assert block({"model_type": "falcon", "new_decoder_architecture": True, "num_ln_in_parallel_attn": 1}) == (True, 1)
    assert block({"model_type": "RefinedWeb", "parallel_attn": True}) == (True, 2)
    assert block({"model_type": "RefinedWebModel", "parallel_attn": True}) == (True, 1)
    assert block({"model_type": "gpt_neox"}) == (True, 2)
    assert block({"model_type": "gpt_neox", "use_parallel_residual": False}) == (False, 1)
    assert block({"model_type": "llama"}) == block({"model_type": "opt"}) == (False, 1)
    # the shipped configs: GPT-J 6B and Falcon-40B are the parallel ones
    shipped = {d.name: load_hf_config(d / "config.json") for d in (MODELS_DIR / "hf").iterdir()}
    assert {n for n, f in shipped.items() if f.get("parallel_attention")} == {"gpt_j_6b", "falcon_40b"}
    assert shipped["falcon_40b"]["parallel_norms"] == 2 and shipped["gpt_j_6b"]["parallel_norms"] == 1
