"""Refresh across ops (issue 32 part 5): within a step the refresh phase of a PIM memory carries from
op to op (interpreter/op_timing.py, `RefreshPhase`), so ops shorter than tREFI pay their share: back
to back they refresh as one op of both streams does, and a decode step refreshes as a steady state."""
from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.op_timing import OpTimer, RefreshPhase, time_pim, time_pim_op
from pimdsl.loops.iteration_serving.pim_attention import attention_shape
from pimdsl.loops.step.step_run import compile_step
from pimdsl.lowering.pim_program import expand
from pimdsl.lowering.records import PimWork
from pimdsl.lowering.stream import unroll
from pimdsl.validation import neupims as N

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def neupims():
    return N.neupims_memory()


@pytest.mark.parametrize("op_class, seq, ops", [("attn_score", 512, 2), ("attn_score", 256, 3),
                                                ("attn_score", 256, 8), ("attn_context", 64, 2),
                                                ("attn_context", 64, 8)])
def test_back_to_back_ops_shorter_than_trefi_refresh_as_one_long_op(neupims, op_class, seq, ops):
    program = neupims.pim.program(op_class)
    stream = lambda: expand(neupims, program, attention_shape(seq, 4, 128))
    one = time_pim_op(neupims, stream, fast=False)
    tREFI = neupims.part.timing_cycles["tREFI"]
    assert one.cycles < tREFI and one.refreshes == 0           # alone, from an idle device: never refreshes
    phase = RefreshPhase.of(neupims)
    carried = [phase.run(one) for _ in range(ops)]
    long = time_pim(neupims, list(unroll(stream())) * ops, fast=False)     # the same commands as one op
    assert long.refreshes > 0
    assert sum(t.refreshes for t in carried) == long.refreshes
    assert sum(t.cycles for t in carried) == long.cycles


def test_a_steps_first_op_is_its_idle_timing_and_the_phase_moves_on(neupims):
    program = neupims.pim.program("attn_score")
    one = time_pim_op(neupims, lambda: expand(neupims, program, attention_shape(512, 4, 128)), fast=False)
    phase = RefreshPhase.of(neupims)
    assert phase.run(one) == one and phase.clock == one.cycles
    second = phase.run(one)
    assert second.refreshes == 1 and second.cycles == one.no_refresh_cycles + round(one.refresh_cost_cycles)
    assert phase.fresh().run(one) == one                       # a new step starts from the idle phase


def test_a_carried_op_keeps_every_field_but_its_time(neupims):
    """`RefreshPhase.run` builds its result field by field: every field of the op's timing but
    seconds, cycles, read_cycles and refreshes comes through unchanged (a field added to PimTime
    and left out there fails this)."""
    program = neupims.pim.program("attn_score")
    one = time_pim_op(neupims, lambda: expand(neupims, program, attention_shape(512, 4, 128)), fast=False)
    marked = replace(one, **{f.name: (f"mark {f.name}",) for f in fields(one)
                             if f.name not in ("seconds", "cycles", "read_cycles", "refreshes", "no_refresh_cycles",
                                               "refresh_cost_cycles", "refresh_units")})
    phase = RefreshPhase.of(neupims)
    phase.run(one)
    second = phase.run(marked)                                  # not the idle phase: the carried path
    assert second.refreshes == 1
    for f in fields(one):
        if f.name not in ("seconds", "cycles", "read_cycles", "refreshes"):
            assert getattr(second, f.name) == getattr(marked, f.name), f.name


def _decode_works(path: str, system_name: str, overrides=()):
    spec, diags = load_spec(str(ROOT / path), list(overrides))
    assert spec is not None, diags.render_all()
    system = spec.systems[system_name]
    program = compile_step(system, "decode", 1, 1, 128)
    return system, [a["lowered"] for _, a in program.ops() if isinstance(a["lowered"], PimWork)]


def test_a_decode_step_refreshes_as_a_steady_state_does():
    """A 7B decode step of HBM-PIM GEMVs: its ops reach one refresh unit of two (one pseudo-channel),
    and the step takes that unit's refreshes over its PIM time, within one, where the ops timed each
    from an idle device took fewer (each op's last part of a tREFI went unrefreshed)."""
    system, works = _decode_works("benchmarks/specs/hbm_pim_gpt3_7b.pim", "hbm_pim_gpt3_7b",
                                  ["gpt3_7b.layers=4"])
    timer = OpTimer(system)
    carried = timer.pim_step(works)
    alone = [timer.pim(w) for w in works]
    memory = system.memories[0] if system.memories[0].pim else system.memories[1]
    tREFI = memory.part.timing_cycles["tREFI"]
    assert {t.refresh_units for t in alone} == {(0,)}
    cycles, refreshes = sum(t.cycles for t in carried), sum(t.refreshes for t in carried)
    assert abs(refreshes - cycles / tREFI) <= 1
    assert sum(t.refreshes for t in alone) < refreshes - 5
    assert sum(t.cycles for t in carried) > sum(t.cycles for t in alone)


def test_fast_and_exact_carry_the_same_phase():
    system, works = _decode_works("specs/systems/pim_sherpa_llama3_2_1b.pim", "pim_sherpa_llama3_2_1b",
                                  ["llama3_2_1b.layers=1", "llama3_2_1b.vocab=1024"])
    fast, exact = OpTimer(system, fast=True).pim_step(works), OpTimer(system, fast=False).pim_step(works)
    assert [replace(t, issued=0) for t in fast] == [replace(t, issued=0) for t in exact]
    assert sum(t.refreshes for t in fast) > 0


def test_the_timing_cache_keeps_what_the_phase_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    system, works = _decode_works("specs/systems/pim_sherpa_llama3_2_1b.pim", "pim_sherpa_llama3_2_1b",
                                  ["llama3_2_1b.layers=1", "llama3_2_1b.vocab=1024"])
    computed = OpTimer(system).pim_step(works)
    assert list(tmp_path.glob("*.json"))
    loaded = OpTimer(system).pim_step(works)           # a new timer: every op read back from disk
    assert loaded == computed
    assert all(math.isfinite(t.refresh_cost_cycles) and t.refresh_units for t in loaded)
