"""The NDP core's GEMV over the activated cold neurons of a block, timed through its declared commands.

The hot/cold offload loop costs a cold neuron analytically (`hot_cold_offload.dimm_s`: the larger of
its bytes over the DIMM's rank-parallel read rate and its MACs over the core's MAC rate). The NDP
unit also declares the work as a PIM program (`program gemv` of the unit: row activations, per-rank
burst reads, GEMV-unit passes), which the DRAM engine times command by command on the DIMM's part
and timing rules. This module runs that program so that the two can be held together:
`neuron_seconds` is the marginal time of one more activated neuron of `k` weights for `m` tokens,
the cost the loop charges per neuron.
"""
from __future__ import annotations

import weakref

from ...interpreter.dram.compiled_timer import core_is_cached, make_timer, stream_engine
from ...interpreter.dram.stream_timer import StreamTimer
from ...ir.hardware import Memory
from ...lowering.pim_program import expand
from ...interpreter import timing_cache

# neurons of the two runs whose difference is the marginal cost: a few row sets of every rank and
# bank group, so that the first activations and the last passes (not per neuron) cancel
PROBE = 16

_CACHE: dict[tuple, tuple[weakref.ref, float]] = {}


def program_seconds(memory: Memory, n: int, k: int, m: int) -> float:
    """Seconds of the unit's `gemv` program for n activated neurons of k weights and m tokens, on one
    DIMM, timed by the DRAM engine (refresh not modelled, as in the analytic cost)."""
    pim = memory.pim
    # the compiled core from the first command (the same cycles) when it is cached: the loop that asks
    # has loaded numba already, so the switch's reason to start in Python (not to pay that load) does
    # not hold here; compiling it is another matter (compiled_timer.py: the switch decides)
    engine = "compiled" if stream_engine() == "auto" and core_is_cached() else None
    timer = StreamTimer(make_timer(memory, pim.commands, pim.rules, pim.windows, engine=engine), fast=True)
    return timer.run(expand(memory, pim.program("gemv"), {"n": n, "k": k, "m": m})) * memory.part.tck_s


def command_sample(memory: Memory, k: int, m: int) -> dict:
    """The commands of the `gemv` program for PROBE neurons of k weights and m tokens on one DIMM and
    their seconds: the work whose command energy a run counts per busy second (interpreter/run_energy.py).
    Kept on disk by content, like `neuron_seconds`."""
    def measure() -> dict:
        pim = memory.pim
        timer = StreamTimer(make_timer(memory, pim.commands, pim.rules, pim.windows), fast=True)
        end = timer.run(expand(memory, pim.program("gemv"), {"n": PROBE, "k": k, "m": m}))
        counts = {f"{kind or 'cmd'}.{name}": n for (name, kind), n in sorted(timer.counts.items(), key=str)}
        return {"command_counts": counts, "seconds": end * memory.part.tck_s}
    return timing_cache.kept(timing_cache.entry_key(memory, ("sparse_ndp_gemv", "command_sample", PROBE, k, m), "fast"),
                             measure)


def neuron_seconds(memory: Memory, k: int, m: int) -> float:
    """Marginal seconds of one activated neuron: (T(2 PROBE) - T(PROBE)) / PROBE; cached per shape, in
    the process and on disk (timing_cache: keyed by the memory, the shape and pimdsl's code)."""
    key = (id(memory), k, m)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is memory:
        return hit[1]
    def measure() -> float:
        return (program_seconds(memory, 2 * PROBE, k, m) - program_seconds(memory, PROBE, k, m)) / PROBE
    value = timing_cache.kept(timing_cache.entry_key(memory, ("sparse_ndp_gemv", "gemv", PROBE, k, m), "fast"), measure)
    _CACHE[key] = (weakref.ref(memory), value)
    return value
