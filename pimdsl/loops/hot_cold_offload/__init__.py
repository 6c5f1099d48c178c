"""The hot/cold neuron offload run loop (`loop = hot_cold_offload;`, [HERMES_NDP]): one GPU holds the hot
neurons, NDP-DIMMs hold every weight and compute the cold neurons.

  neuron_split       the setup, the costs every strategy shares, and the strategies that split neurons
                     between the GPU and the DIMMs (its docstring says what each time covers)
  offload_baselines  the comparison points that do not split neurons (Accelerate, FlexGen, Deja Vu,
                     Hermes-base, the tensor-parallel GPU server)
  decode_token       one decode token of a splitting strategy in one compiled call: the activation
                     chain, the predictor, the tally and the online adjustment over flat arrays
  sparse_ndp_gemv    a cold neuron's time: the NDP core's declared `gemv` program on the DRAM engine

This module is the loop's entry: what it reads of a spec (from `neuron_split`) and `run`, which hands a
strategy to one of the two; both import `neuron_split`, never each other.
"""
from __future__ import annotations

from ...ir.run_result import RunResult
from ...ir.workload import System
from . import offload_baselines
from .neuron_split import GPU_ONLY, OP_CLASSES, PARAMS, SPARSE, STRATEGIES, links_read, setup, sparse_run

__all__ = ["GPU_ONLY", "OP_CLASSES", "PARAMS", "STRATEGIES", "links_read", "run"]


def run(system: System, timeline: bool = False, **_) -> RunResult:
    s = setup(system)
    if s.strategy in SPARSE:
        report, intervals = sparse_run(s, SPARSE[s.strategy], timeline)
        if s.link is not None and s.link.kind == "dimm_link":     # the remaps' bytes, for the links' energy
            report["link_bytes"] = {s.link.name: report["bytes_moved"]["dimm_link"]}
        if "ndp_dimm_mean" in report["utilization"]:              # the cold neurons' busy time is the DIMMs'
            report["utilization_of"] = {"ndp_dimm_mean": s.dimm.name}
    else:
        report, intervals = offload_baselines.run(s, timeline)
    return RunResult(report, intervals if timeline else [])
