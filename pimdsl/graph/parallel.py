"""One device's share of a model under tensor and pipeline parallelism.

Tensor parallelism (`tp`, Megatron-style) splits every layer's heads, KV heads and
FFN width over `tp` devices; each layer then ends its attention and its FFN with an all-reduce of
the activations over the devices' link. Pipeline parallelism (`pp`) gives each device
`layers / pp` consecutive layers; the busiest stage holds ceil(layers / pp). A mapping chooses them
with `params { tp = 4; pp = 2; }`; without them a device holds the whole model.
"""
from __future__ import annotations

import dataclasses
import math

from ..ir.workload import Model, System
from ..ir.errors import CompileError
from ..ir.params import WHOLE, Param

PARAMS = {"tp": Param(WHOLE, ">= 1", "tensor-parallel devices (Megatron-style)"),
          "pp": Param(WHOLE, ">= 1", "pipeline stages")}


def _param(system: System, name: str) -> int:
    value = system.mapping.params.get(name, 1) if system.mapping else 1
    if not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise CompileError(f"mapping parameter '{name}' must be a whole number >= 1, got {value!r}",
                           system.mapping.param_spans.get(name, system.mapping.span))
    return int(value)


def parallelism(system: System) -> tuple[int, int]:
    """(tp, pp) of the system's mapping, checked against its model."""
    tp, pp = _param(system, "tp"), _param(system, "pp")
    model, span = system.model, system.mapping.span if system.mapping else system.span
    if tp == pp == 1:
        return tp, pp
    if model.architecture == "graph":
        raise CompileError(f"model '{model.name}' is a declared graph: it has no heads or layers to "
                           f"spread over tp = {tp}, pp = {pp}", span, "remove tp and pp from the mapping's params")
    for what, count in (("heads", model.heads), ("kv_heads", model.kv_heads), ("ffn", model.ffn)):
        if count % tp:
            raise CompileError(f"tp = {tp} does not divide the model's {what} ({count})", span,
                               "pick a tensor-parallel degree that divides heads, kv_heads and ffn")
    if pp > model.layers:
        raise CompileError(f"pp = {pp} exceeds the model's {model.layers} layers", span)
    return tp, pp


def device_model(model: Model, tp: int, pp: int) -> Model:
    """The model one device of the busiest pipeline stage runs (the embedding and LM head kept
    whole, as the first and last stages hold them)."""
    if tp == pp == 1:
        return model
    return dataclasses.replace(model, layers=math.ceil(model.layers / pp), heads=model.heads // tp,
                               kv_heads=model.kv_heads // tp, ffn=model.ffn // tp,
                               parameters=model.parameters // (tp * pp), weight_bytes=model.weight_bytes // (tp * pp))
