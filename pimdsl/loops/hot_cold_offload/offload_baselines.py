"""The comparison points of the hot/cold offload loop that do not split neurons ([HERMES_NDP] Sec. V-A-2,
V-B-1): offloading systems that stream weights to the GPU (Accelerate, FlexGen, Deja Vu) and the
NDP-DIMM system without activation sparsity (Hermes-base).

  accelerate   the GPU holds the first layers that fit beside the KV cache; every other layer's weights
               cross PCIe for every token at `accelerate_bandwidth`, before the layer runs (II-C);
  flexgen      the same residency; layer i+1's weights load while layer i runs (II-C, zig-zag block
               schedule at batch <= 16 reduces to this), at `flexgen_bandwidth`;
  deja_vu      the same residency; for a streamed layer only the active neurons' weights (and the dense
               projection) cross PCIe after its MLP predictors ran, at `flexgen_bandwidth`; the
               predictors take `dejavu_predictor_share` of the compute time ([HERMES_NDP] Sec. V-D);
  hermes_base  the GPU holds the first layers that fit its memory less `gpu_reserved`, the other layers run densely
               on the NDP-DIMMs (weights spread over all DIMMs), attention always on the DIMMs (V-B-1);
  tensor_parallel  the server the paper compares with (V-F: TensorRT-LLM on 5 x A100-40GB): every weight and
               the KV cache in the memory of `count` GPUs, each layer's weights and heads sharded over all of
               them (the roofline of all the GPUs together, or the measured GPU kernel model for a GPU with a
               `calibration`), two all-reduces of the layer's output per layer (attention and MLP) over
               the NVLink's collective, as Megatron-style tensor parallelism does.
The effective rates of Accelerate and FlexGen are calibrations stated in the spec.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.host.collectives import all_reduce_time
from .neuron_split import (Setup, attention_ndp_s, blocks_of, check_capacity, cold_neuron_s, dimm_s,
                               generator, gpu_s, kv_bytes, layer_bytes, model_totals, prefill, prefill_s, report_common,
                               resident_layers, sync_s)


def run(s: Setup, timeline: bool) -> tuple[dict, list]:
    from ...ir.intervals import Interval
    return {"accelerate": streamed, "flexgen": streamed, "deja_vu": deja_vu, "hermes_base": hermes_base,
            "tensor_parallel": tensor_parallel}[s.strategy](s, Interval)


def _attention_gpu_s(s: Setup, seq: int) -> float:
    return gpu_s(s, kv_bytes(s, seq, s.system.workload.batch), 1)


def streamed(s: Setup, Interval) -> tuple[dict, list]:
    m, wl = s.system.model, s.system.workload
    rate = float(s.params["accelerate_bandwidth" if s.strategy == "accelerate" else "flexgen_bandwidth"])
    overlap = s.strategy == "flexgen"
    kv = model_totals(s)["kv_cache"]
    resident = resident_layers(s, kv)
    ttft = prefill_s(prefill(s, rate, resident, overlap), overlap)
    t, stream_total, compute_total = ttft, 0.0, 0.0
    head = gpu_s(s, m.vocab * m.hidden * s.dt, wl.batch)
    lb = layer_bytes(s)
    for step in range(max(0, wl.output_len - 1)):
        seq = wl.input_len + step + 1
        compute = gpu_s(s, lb, wl.batch) + _attention_gpu_s(s, seq)
        parts = [(lb / rate if layer >= resident else 0.0, compute) for layer in range(m.layers)]
        t += prefill_s(parts, overlap) + head
        stream_total += sum(a for a, _ in parts)
        compute_total += m.layers * compute + head
    out = report_common(s, ttft, t)
    out["breakdown_s"] = {"prefill": ttft, "decode": t - ttft, "decode_weight_streaming": stream_total,
                          "decode_compute": compute_total}
    out["utilization"] = {"gpu": compute_total / (t - ttft) if t > ttft else 0.0,
                          "pcie": stream_total / (t - ttft) if t > ttft else 0.0}
    out["resident_layers"] = resident
    out["bytes_moved"] = {"pcie_per_token": (m.layers - resident) * lb}
    return out, [Interval("gpu", "prefill", 0.0, ttft, "prefill"), Interval("gpu", "decode", ttft, t, "decode")]


def deja_vu(s: Setup, Interval) -> tuple[dict, list]:
    m, wl = s.system.model, s.system.workload
    rate, share = float(s.params["flexgen_bandwidth"]), float(s.params["dejavu_predictor_share"])
    resident = resident_layers(s, model_totals(s)["kv_cache"])
    ttft = prefill_s(prefill(s, rate, resident, True), True)
    gen = generator(s)
    _, nbytes = blocks_of(s)
    head = gpu_s(s, m.vocab * m.hidden * s.dt, wl.batch)
    t, comm, compute, active, total = ttft, 0.0, 0.0, 0, 0
    for step in range(max(0, wl.output_len - 1)):
        seq = wl.input_len + step + 1
        fired = gen.step()
        for layer in range(m.layers):
            counts = [int(np.count_nonzero(fired[2 * layer + w])) for w in (0, 1)]
            active += sum(counts)
            total += m.hidden + m.ffn
            moved = sum(c * nbytes[2 * layer + w] for w, c in enumerate(counts)) + s.oproj_bytes
            fc = gpu_s(s, moved, wl.batch) + _attention_gpu_s(s, seq)
            c_s = fc / (1.0 - share)                       # its MLP predictors' share of compute
            x_s = moved / rate if layer >= resident else 0.0
            t += x_s + c_s
            comm += x_s
            compute += c_s
        t += head
        compute += head
    out = report_common(s, ttft, t)
    out["breakdown_s"] = {"prefill": ttft, "decode": t - ttft, "decode_communication": comm, "decode_compute": compute}
    out["communication_fraction"] = comm / (t - ttft) if t > ttft else 0.0
    out["utilization"] = {"gpu": compute / (t - ttft) if t > ttft else 0.0, "pcie": out["communication_fraction"]}
    out["resident_layers"] = resident
    out["activation_density"] = active / total if total else 0.0
    return out, [Interval("gpu", "prefill", 0.0, ttft, "prefill"), Interval("gpu", "decode", ttft, t, "decode")]


def hermes_base(s: Setup, Interval) -> tuple[dict, list]:
    m, wl = s.system.model, s.system.workload
    check_capacity(s)
    resident = resident_layers(s, 0.0)
    ttft = prefill_s(prefill(s, s.pcie.bandwidth_bytes_per_s, 0, True), True)
    lb = layer_bytes(s)
    on_gpu = gpu_s(s, lb, wl.batch) + 2 * sync_s(s)          # to the DIMMs for attention and back
    # every neuron of the layer, spread evenly over the DIMMs (the projection by the analytic rate)
    on_dimms = (m.hidden * cold_neuron_s(s, s.qkv_elems * s.dt, wl.batch) + m.ffn * cold_neuron_s(
        s, s.mlp_elems * s.dt, wl.batch)) / s.dimms + float(dimm_s(s, s.oproj_bytes / s.dimms, wl.batch))
    head = gpu_s(s, m.vocab * m.hidden * s.dt, wl.batch)
    t, att_total = ttft, 0.0
    for step in range(max(0, wl.output_len - 1)):
        att = attention_ndp_s(s, wl.input_len + step + 1, wl.batch)
        t += resident * on_gpu + (m.layers - resident) * on_dimms + m.layers * att + head
        att_total += m.layers * att
    steps = max(0, wl.output_len - 1)
    out = report_common(s, ttft, t)
    out["breakdown_s"] = {"prefill": ttft, "decode": t - ttft, "decode_fc_gpu": steps * resident * on_gpu,
                          "decode_fc_ndp": steps * (m.layers - resident) * on_dimms, "decode_attention": att_total,
                          "decode_lm_head": steps * head}
    fc_ndp = (m.layers - resident) * on_dimms
    out["ndp_share_of_decode_fc"] = fc_ndp / (fc_ndp + resident * on_gpu) if fc_ndp + resident * on_gpu else 0.0
    out["utilization"] = {"gpu": steps * (resident * on_gpu + head) / (t - ttft) if t > ttft else 0.0,
                          "ndp_dimm_mean": steps * fc_ndp / (t - ttft) + att_total / (t - ttft) if t > ttft else 0.0}
    out["resident_layers"] = resident
    return out, [Interval("gpu", "prefill", 0.0, ttft, "prefill"), Interval("gpu", "decode", ttft, t, "decode")]


def all_reduce_s(s: Setup, nbytes: float) -> float:
    """An all-reduce of `nbytes` over the GPUs by the link's collective (interpreter/host/collectives.py:
    without a `collective` block, a ring of 2 (n - 1) steps of 1/n of it, each over one link)."""
    n = s.gpu.count
    if n < 2 or s.link is None:
        return 0.0
    return all_reduce_time(s.link, nbytes, n)


def tensor_parallel(s: Setup, Interval) -> tuple[dict, list]:
    m, wl = s.system.model, s.system.workload
    need = sum(model_totals(s).values())
    if need > s.budget:
        from ...ir.errors import CompileError
        raise CompileError(f"the weights and KV cache ({need / 1e9:.1f} GB) do not fit {s.gpu.count} x "
                           f"{s.gpu.memory_bytes / 1e9:.0f} GB of '{s.gpu.name}'", s.gpu.span,
                           "declare more GPUs, or fewer gpu_reserved")
    if s.gpu.count > 1 and s.link is None:
        from ...ir.errors import CompileError
        raise CompileError(f"tensor parallelism over {s.gpu.count} GPUs needs an nvlink among the system's links",
                           s.system.span)
    lb = layer_bytes(s)
    act = m.hidden * s.dt                                   # one token's layer output
    ttft = prefill_s(prefill(s, 1.0, m.layers, False), False) + m.layers * 2 * all_reduce_s(
        s, act * wl.input_len * wl.batch)
    head = gpu_s(s, m.vocab * m.hidden * s.dt, wl.batch)
    fc = gpu_s(s, lb, wl.batch)
    reduce = 2 * all_reduce_s(s, act * wl.batch)
    t, att_total, reduce_total = ttft, 0.0, 0.0
    for step in range(max(0, wl.output_len - 1)):
        att = _attention_gpu_s(s, wl.input_len + step + 1)
        t += m.layers * (fc + att + reduce) + head
        att_total += m.layers * att
        reduce_total += m.layers * reduce
    steps = max(0, wl.output_len - 1)
    out = report_common(s, ttft, t)
    out["breakdown_s"] = {"prefill": ttft, "decode": t - ttft, "decode_fc": steps * m.layers * fc,
                          "decode_attention": att_total, "decode_all_reduce": reduce_total, "decode_lm_head": steps * head}
    out["utilization"] = {"gpu": (t - reduce_total) / t if t else 0.0, "nvlink": reduce_total / t if t else 0.0}
    out["gpus"] = s.gpu.count
    return out, [Interval("gpu", "prefill", 0.0, ttft, "prefill"), Interval("gpu", "decode", ttft, t, "decode")]
