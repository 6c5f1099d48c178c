"""HuggingFace `config.json` -> model fields.

Covers the field-name variants of the families pimdsl ships: Llama/Mistral
(`num_key_value_heads`, optional `head_dim`), GPT-2 (`n_embd`, `n_layer`,
`n_head`, `n_inner`), GPT-J (`n_positions`, `rotary_dim`), OPT
(`ffn_dim`, `word_embed_proj_dim`), Falcon (`n_head_kv`, `multi_query`),
BERT and ViT (`intermediate_size`, encoder-only). Parallel attention blocks: GPT-J
(always), Falcon (`parallel_attn`; two norms with `new_decoder_architecture` unless
`num_ln_in_parallel_attn` says otherwise), GPT-NeoX (`use_parallel_residual`, two norms).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..ir.errors import PimdslError
from ..ir.files import SPEC_LIMIT_BYTES, InputFileError, read_input

# Families whose HuggingFace config class defaults tie_word_embeddings to False.
UNTIED_BY_DEFAULT = {"llama", "mistral", "mixtral", "gptj", "qwen2"}
ENCODER_TYPES = {"bert", "roberta", "vit", "deberta", "electra", "distilbert"}
DTYPE_NAMES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int8": "int8"}
ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "quick_gelu": "gelu"}


class ConfigError(PimdslError):
    pass


def _first(cfg: dict, *names, default=None):
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def load_hf_config(path: Path) -> dict:
    if path.suffix != ".json":
        raise ConfigError(f"'{path.name}' is not a .json file")
    try:
        cfg = json.loads(read_input(path, "config.json", SPEC_LIMIT_BYTES).decode("utf-8"))
    except InputFileError as exc:
        raise ConfigError(f"'{path.name}': {exc.message}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"'{path.name}' is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"'{path.name}' does not hold a JSON object")
    if isinstance(cfg.get("text_config"), dict):       # multimodal wrappers
        cfg = {**cfg, **cfg["text_config"]}
    return model_fields(cfg)


def model_fields(cfg: dict) -> dict:
    """Model fields (pimdsl names) from a config dict; only those the config fixes."""
    model_type = str(cfg.get("model_type", "")).lower()
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if hidden is None or heads is None or layers is None:
        raise ConfigError("config.json lacks hidden_size/n_embd, num_attention_heads/n_head "
                          "or num_hidden_layers/n_layer")
    kv_heads = _first(cfg, "num_key_value_heads", "n_head_kv", "num_kv_heads")
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") and not cfg.get("new_decoder_architecture") else heads
    ffn = _first(cfg, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    if ffn is None:
        ffn = 4 * hidden        # GPT-2, GPT-J and Falcon leave it implicit
    activation = str(_first(cfg, "hidden_act", "activation_function", "hidden_activation", default="gelu"))
    activation = ACTIVATIONS.get(activation, activation)
    gated = model_type in {"llama", "mistral", "mixtral", "qwen2", "gemma", "gemma2", "phi3"} or \
        activation in ("silu", "swiglu")
    out = {
        "architecture": "encoder" if model_type in ENCODER_TYPES else "decoder",
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
        "ffn": ffn, "vocab": _first(cfg, "vocab_size", default=0),
        "max_seq_len": _first(cfg, "max_position_embeddings", "n_positions", "n_ctx", default=2048),
        "activation": activation if activation in ("gelu", "relu", "silu") else "gelu",
        "gated_ffn": gated,
        "norm": "rmsnorm" if "rms_norm_eps" in cfg else "layernorm",
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)),
    }
    if "image_size" in cfg and "patch_size" in cfg and "max_position_embeddings" not in cfg:
        # ViT: one position per patch plus the class token.
        out["max_seq_len"] = (int(cfg["image_size"]) // int(cfg["patch_size"])) ** 2 + 1
    if cfg.get("head_dim") is not None:
        out["head_dim"] = cfg["head_dim"]
    out.update(_parallel_block(cfg, model_type))
    dtype = DTYPE_NAMES.get(str(cfg.get("torch_dtype", cfg.get("dtype", ""))))
    if dtype:
        out["dtype"] = dtype
    return out


def _parallel_block(cfg: dict, model_type: str) -> dict:
    """Whether attention and the MLP read the same input (HF GPTJBlock, FalconDecoderLayer with
    `parallel_attn`, GPTNeoXLayer with `use_parallel_residual`), and how many norms that input has."""
    if model_type == "gptj":
        return {"parallel_attention": True, "parallel_norms": 1}         # one ln_1 feeds both
    # Falcon's new block (legacy name: RefinedWeb, the 40B) is parallel whatever parallel_attn says
    two = bool(cfg.get("new_decoder_architecture")) or model_type == "refinedweb"
    if model_type in ("falcon", "refinedweb", "refinedwebmodel") and (two or cfg.get("parallel_attn", True)):
        norms = cfg.get("num_ln_in_parallel_attn") or (2 if two else 1)   # ln_attn and ln_mlp
        return {"parallel_attention": True, "parallel_norms": int(norms)}
    if model_type == "gpt_neox" and cfg.get("use_parallel_residual", True):
        return {"parallel_attention": True, "parallel_norms": 2}         # input_ and post_attention_layernorm
    return {}
