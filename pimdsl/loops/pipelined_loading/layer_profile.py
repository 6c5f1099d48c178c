"""Per-layer profile: bytes, load time and compute time of each layer, and the resident part.

The Layer Profiler of [PIPELOAD] Sec. IV-1 measures these with a pre-run; the paper's own data show
that a load is not bytes / disk bandwidth (BERT and GPT-2 layers are the same size but load at very
different rates, Table II), so a profile measured on the machine is the input the schedule trusts.
Without a profile file the numbers are derived from the spec: a load is the storage's latency plus
the bytes at the slower of one agent's rate and the device's bandwidth; a compute is the roofline of
the layer's FLOPs and weight bytes on the processor.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ...ir.workload import System
from ..model_layers.layer_blobs import partition
from ...emit.atomic import atomic_file
from ...ir.files import SPEC_LIMIT_BYTES, InputFileError, read_input

FORMAT = "pimdsl-layer-profile/1"


@dataclass(frozen=True)
class LayerProfile:
    bytes: int
    load_s: float                 # one agent, alone
    prefill_s: float              # compute of the first pass (the whole prompt)
    decode_s: float               # compute of one generated token's pass


@dataclass(frozen=True)
class Profile:
    layers: tuple[LayerProfile, ...]
    resident_bytes: int           # embedding + the rest, loaded once and kept
    resident_load_s: float
    whole_load_s: float           # the non-pipelined baseline's load of the whole model
    head_prefill_s: float         # embedding + output head per pass (resident parts)
    head_decode_s: float
    source: str                   # "spec" or the profile file it came from


def write(path: str, profile: Profile, about: dict) -> None:
    data = {"format": FORMAT, **about, **{k: v for k, v in asdict(profile).items() if k != "source"}}
    with atomic_file(path) as out:
        json.dump(data, out, indent=1)


def read(path: str) -> Profile:
    """Raises ValueError with a readable message for a file that is not a profile."""
    try:
        data = json.loads(read_input(path, "layer profile", SPEC_LIMIT_BYTES))
    except InputFileError as exc:
        raise ValueError(f"cannot read the layer profile '{path}': {exc.message}") from None
    except ValueError as exc:                    # JSON or UTF-8: the message gives a position, not content
        raise ValueError(f"the layer profile '{path}' is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"'{path}' is not a layer profile (no \"format\": \"{FORMAT}\")")
    try:
        layers = tuple(LayerProfile(**l) for l in data["layers"])
        return Profile(layers, data["resident_bytes"], data["resident_load_s"], data["whole_load_s"],
                       data["head_prefill_s"], data["head_decode_s"], path)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the layer profile '{path}' is incomplete: {exc}") from None


def from_spec(system: System, agent_bandwidth: float | None) -> Profile:
    model, cpu, disk = system.model, system.processors[0], system.storage[0]
    wl = system.workload
    bw = min(agent_bandwidth or disk.read_bandwidth_bytes_per_s, disk.read_bandwidth_bytes_per_s)
    peak = (cpu.peak_flops.get(model.dtype) or cpu.peak_flops.get("fp32") or 1e12) * cpu.efficiency
    mem_bw = cpu.memory_bandwidth_bytes_per_s or float("inf")

    def compute(weight_elements: int, weight_bytes: int, tokens: int, context: int) -> float:
        attention = 4 * tokens * context * model.heads * model.head_dim
        return max((2 * tokens * weight_elements + attention) / peak, weight_bytes / mem_bw)

    blobs = partition(model)
    prompt = wl.input_len if wl else 1
    context = prompt + (wl.output_len if wl else 1) // 2
    layers = tuple(LayerProfile(b.bytes, disk.read_latency_s + b.bytes / bw,
                                compute(b.elements, b.bytes, prompt, prompt), compute(b.elements, b.bytes, 1, context))
                   for b in blobs if b.part == "layer")
    rest = [b for b in blobs if b.part != "layer"]
    resident = sum(b.bytes for b in rest)
    head = next(b for b in rest if b.part == "other")
    head_elements = head.elements if model.vocab and not model.tied_embeddings else model.vocab * model.hidden
    total = resident + sum(l.bytes for l in layers)
    head_tokens = prompt if model.architecture == "encoder" else 1    # a decoder needs the last token's logits

    return Profile(layers, resident, len(rest) * disk.read_latency_s + resident / bw,
                   disk.read_latency_s + total / bw,
                   compute(head_elements, head_elements * 4, head_tokens, 0), compute(head_elements, head_elements * 4, 1, 0),
                   "spec")
