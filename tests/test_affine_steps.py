"""Decode steps scheduled from one compiled structure (loops/step/affine_steps.py) give exactly what
compiling every step gives, and a structure whose numbers leave their lines is refused."""
from __future__ import annotations

import copy
import dataclasses
import math

import pytest

from pimdsl import load_spec
from pimdsl.loops.step import step_run as run_module
from pimdsl.loops.step.affine_steps import AffineSteps
from pimdsl.loops.step.step_run import compile_step, run_system
from pimdsl.interpreter.schedule import schedule

from .conftest import ROOT, flatten

GBMAC = ROOT / "tests" / "pim" / "gbmac_system.pim"
PHONE = ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim"


def system_of(path, sets=()):
    spec, diags = load_spec(str(path), list(sets))
    assert not diags.errors
    return next(iter(spec.systems.values()))


def assert_same_report(a: dict, b: dict):
    fa, fb = dict(flatten(a)), dict(flatten(b))
    assert fa.keys() == fb.keys()
    for key, value in fa.items():
        if isinstance(value, float):
            assert math.isclose(value, fb[key], rel_tol=1e-12), key
        else:
            assert value == fb[key], key


@pytest.mark.parametrize("path, sets", [
    (GBMAC, ["workload.output_len=11"]),
    (PHONE, ["workload.input_len=5", "workload.output_len=9"]),
])
def test_fitted_run_equals_compiling_every_step(path, sets, monkeypatch):
    system = system_of(path, sets)
    fitted = run_system(system, timeline=True)
    monkeypatch.setattr(run_module, "AFFINE_MIN_STEPS", 10 ** 9)
    compiled = run_system(system, timeline=True)
    assert_same_report(fitted.report, compiled.report)
    assert [(i.resource, i.name) for i in fitted.intervals] == [(i.resource, i.name) for i in compiled.intervals]
    for x, y in zip(fitted.intervals, compiled.intervals):
        assert math.isclose(x.end_s, y.end_s, rel_tol=1e-12)


def test_schedule_at_a_far_context_equals_the_compiled_step():
    system = system_of(GBMAC)
    first = [compile_step(system, "decode", 1, 1, c) for c in (32, 33, 34)]
    fitted = AffineSteps.fit(first)
    assert fitted is not None and fitted.lines        # the attention ops' KV counts move
    far = compile_step(system, "decode", 1, 1, 500)
    assert fitted.verify(far)
    seconds_of = lambda attrs: attrs["lowered"].flops + attrs["lowered"].bytes \
        if hasattr(attrs["lowered"], "flops") else 1e-6
    assert math.isclose(fitted.schedule(500, seconds_of).seconds, schedule(far, seconds_of).seconds, rel_tol=1e-12)


def test_numbers_off_their_line_are_refused():
    system = system_of(GBMAC)
    steps = [compile_step(system, "decode", 1, 1, c) for c in (32, 33, 34)]
    assert AffineSteps.fit([steps[0], steps[1], compile_step(system, "decode", 1, 1, 36)]) is None  # not consecutive
    name, attrs = next((n, a) for n, a in steps[2].ops() if a["op"].kind == "attn_score")
    bent = copy.deepcopy(attrs["op"].shape)
    bent["kv"] += 1                                   # a kink: the second difference is no longer zero
    steps[2].graph.nodes[name]["op"] = dataclasses.replace(attrs["op"], shape=bent)
    assert AffineSteps.fit(steps) is None
    good = AffineSteps.fit([compile_step(system, "decode", 1, 1, c) for c in (32, 33, 34)])
    far = compile_step(system, "decode", 1, 1, 200)
    far.graph.nodes[name]["op"] = dataclasses.replace(far.graph.nodes[name]["op"], flops=1.0)
    assert not good.verify(far)                       # a step further on off the line: no fit


@pytest.mark.parametrize("path, sets", [
    (GBMAC, ["workload.output_len=11"]),
    (PHONE, ["workload.input_len=5", "workload.output_len=9"]),
])
def test_steps_scheduled_together_are_bit_identical_to_one_at_a_time(path, sets):
    system = system_of(path, sets)
    together = run_system(system).report                # fitted steps through schedule_many
    one_by_one = run_system(system, timeline=True).report
    assert together == one_by_one                       # exact, not close
    fitted = AffineSteps.fit([compile_step(system, "decode", 1, 1, c) for c in (32, 33, 34)])
    seconds_of = lambda attrs: (attrs["lowered"].flops * 1e-12 + attrs["lowered"].bytes * 1e-9
                                if hasattr(attrs["lowered"], "flops") else 1e-6)
    contexts = [35, 40, 77, 500]
    many = fitted.schedule_many(contexts, seconds_of)
    for c in contexts:
        single = fitted.schedule(c, seconds_of)
        assert (many[c].seconds, many[c].busy_s) == (single.seconds, single.busy_s)
    assert len({many[c].seconds for c in contexts}) == len(contexts)   # the contexts really differ
