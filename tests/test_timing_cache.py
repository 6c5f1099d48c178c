"""PIM op timings kept on disk (interpreter/timing_cache.py): read back by a later run, never across
a change of the memory, the mode or pimdsl itself."""
from __future__ import annotations

import dataclasses

import pytest

from pimdsl import load_spec
from pimdsl.interpreter import op_timing, timing_cache
from pimdsl.interpreter.op_timing import OpTimer
from pimdsl.loops.step.step_run import compile_step
from pimdsl.lowering.records import PimWork

from .conftest import ROOT


@pytest.fixture
def gbmac(tmp_path, monkeypatch):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path / "timing"))
    spec, diags = load_spec(str(ROOT / "tests" / "pim" / "gbmac_system.pim"))
    assert not diags.errors
    system = next(iter(spec.systems.values()))
    program = compile_step(system, "decode", 1, 1, 32)
    work = next(a["lowered"] for _, a in program.ops() if isinstance(a["lowered"], PimWork))
    return system, work


def test_a_later_run_reads_the_timing_back(gbmac, monkeypatch, tmp_path):
    system, work = gbmac
    first = OpTimer(system).pim(work)
    assert len(list((tmp_path / "timing").glob("*.json"))) == 1
    monkeypatch.setattr(op_timing, "time_pim", lambda *a, **k: pytest.fail("timed again"))
    assert OpTimer(system).pim(work) == first          # a new run (new OpTimer): from the disk


def test_a_changed_memory_mode_or_code_is_timed_again(gbmac, monkeypatch, tmp_path):
    system, work = gbmac
    memory = next(m for m in system.memories if m.pim is not None)
    key = timing_cache.entry_key(memory, work.key, "fast")
    assert key != timing_cache.entry_key(memory, work.key, "exact")
    slower = dataclasses.replace(memory, part=dataclasses.replace(memory.part, tck_s=memory.part.tck_s * 2))
    assert key != timing_cache.entry_key(slower, work.key, "fast")
    monkeypatch.setattr(timing_cache, "code_digest", lambda: "another pimdsl")
    assert key != timing_cache.entry_key(memory, work.key, "fast")


def test_a_corrupt_entry_is_recomputed(gbmac, tmp_path):
    system, work = gbmac
    first = OpTimer(system).pim(work)
    (entry,) = (tmp_path / "timing").glob("*.json")
    entry.write_text("{not json")
    assert OpTimer(system).pim(work) == first


def test_off_means_nothing_is_written(gbmac, monkeypatch, tmp_path):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", "0")
    system, work = gbmac
    OpTimer(system).pim(work)
    assert not (tmp_path / "timing").exists()
