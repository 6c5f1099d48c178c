"""The DRAM energy model against DRAMsim3's energy on the shared traces (validation/dram_energy.md).

The committed table must meet its target (every component and total within 5%); the small traces
stored in the dataset are replayed again here and must give the committed numbers; the large ones
(regenerated) are replayed under `-m slow`.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.validation import dram_energy as E
from pimdsl.validation.dram_reference import ensure_traces, reference_dir

from .conftest import ROOT

COMMITTED = {(e["config"], e["trace"]): e for e in json.loads((ROOT / "validation" / "dram_energy.json").read_text())}
SMALL = [case for case in sorted(COMMITTED) if case[1] in ("idle_random", "idle_seq", "same_bank_conflict")]
LARGE = [case for case in sorted(COMMITTED) if case not in SMALL]


def test_committed_table_covers_every_reference_trace_within_target():
    assert set(COMMITTED) == set(E.reference_rows(reference_dir()))
    assert {c for c, _ in COMMITTED} == {"ddr4_3200", "hbm2"}
    for case, entry in COMMITTED.items():
        for component, error in entry["energy_pj"]["error_pct"].items():
            assert error is None or abs(error) <= E.TARGET_PCT, (case, component, error)


def _check(case, dram_traces):
    ref = reference_dir()
    path = ensure_traces(ref, dram_traces, [case])[case]
    got = E.run_case(E.dramsim3_memory(case[0]), path, E.reference_rows(ref)[case])
    committed = COMMITTED[case]
    assert got["energy_pj"]["ours"] == pytest.approx(committed["energy_pj"]["ours"], rel=1e-9)
    for component, error in got["energy_pj"]["error_pct"].items():
        assert error is None or abs(error) <= E.TARGET_PCT, (case, component, error)


@pytest.mark.parametrize("case", SMALL, ids=lambda c: "-".join(c))
def test_small_traces_replay_to_the_committed_energy(case, dram_traces):
    _check(case, dram_traces)


@pytest.mark.slow
@pytest.mark.parametrize("case", LARGE, ids=lambda c: "-".join(c))
def test_large_traces_replay_to_the_committed_energy(case, dram_traces):
    _check(case, dram_traces)
