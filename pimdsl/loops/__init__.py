"""Run loops, found by the name a spec's mapping gives (`loop = NAME;`), one package (room) each.

A loop package provides `run(system, timeline=False) -> ir.run_result.RunResult` (`.report`,
`.intervals`, `.pass_times_s`), declares what it reads of a spec (`STRATEGIES`, `PARAMS`,
`OP_CLASSES`, `LINKS`; `pimdsl/unread.py` warns about the rest), and may provide
`execute(system, options) -> int` to perform the run for real on this machine (`pimc execute`).
`step` (the default) is not in `LOOPS`: the driver calls `step/step_run.py` directly.

The map (imports run downward only, and no room imports another's; `tests/test_import_graph.py`):

  step/               the default: each step compiled through the passes and timed (`step_run`),
                      decode steps from one compiled step (`affine_steps`), `pimc explain` (`step_explain`)
  pipelined_loading/  layers streamed from storage under a memory limit: the schedule
                      (`loading_schedule`), the layer profile (`layer_profile`) and the real run
                      behind `pimc execute` (`pipelined_executor`)
  sub_batch_serving/  GPUs beside a DIMM-PIM holding the KV cache: per-layer prices
                      (`dimm_pim_costs`, `attention_programs`), sub-batches (`sub_batch_split`),
                      learned latency predictors (`latency_predictors`)
  hot_cold_offload/   a GPU beside NDP-DIMMs with activation sparsity: the neuron split
                      (`neuron_split`), the baselines (`offload_baselines`), a cold neuron's time
                      (`sparse_ndp_gemv`)
  iteration_serving/  an NPU beside PIM attention, requests in iterations: a layer's segments
                      priced under TP/PP (`layer_segments`), the attention streams (`pim_attention`)
  model_layers/       shared, no loop's code: a decoder layer's op graph cut into segments
                      (`layer_work`), layer weight blobs (`layer_blobs`) and their files
                      (`weight_files`), a numpy forward pass (`numpy_forward`)
"""
from __future__ import annotations

import importlib

LOOPS = {"pipelined_loading": "pimdsl.loops.pipelined_loading",
         "sub_batch_serving": "pimdsl.loops.sub_batch_serving",
         "hot_cold_offload": "pimdsl.loops.hot_cold_offload",
         "iteration_serving": "pimdsl.loops.iteration_serving"}


def names() -> tuple[str, ...]:
    return ("step", *LOOPS)


def for_system(system):
    """The loop a system's mapping selects (None: the step loop); a located error for an unknown name."""
    from ..ir.errors import CompileError
    from ..frontend.diagnostics import did_you_mean
    mapping = system.mapping
    name = mapping.loop if mapping is not None else "step"
    try:
        return get(name)
    except KeyError:
        raise CompileError(f"'{name}' is not a run loop", mapping.span,
                           did_you_mean(name, names(), "run loops") or "run loops: " + ", ".join(names())) from None


def get(name: str):
    """The loop module registered as `name`, or None for the built-in step loop."""
    if name == "step":
        return None
    if name not in LOOPS:
        raise KeyError(name)
    return importlib.import_module(LOOPS[name])
