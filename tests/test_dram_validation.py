"""The DRAM engine against DRAMsim3 and Ramulator 2: regressions of the committed table.

Replays every reference trace that has reference results (about a minute in
all; the large traces are regenerated with the dataset's own generator and
checked by sha256) and fails when a cycle error grows more than one point
past the value committed in validation/dram.json, or when an idle-latency
target that held no longer does. Regenerate the table with
`python validation/run_dram.py` after a deliberate change.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.validation import dram_reference as V

from .conftest import ROOT

COMMITTED = {(c["config"], c["trace"]): c for c in json.loads((ROOT / "validation" / "dram.json").read_text())}
CASES = sorted(k for k, c in COMMITTED.items() if c["references"])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    results = V.run_all(tmp_path_factory.mktemp("traces"), cases=CASES)
    return {(r.config, r.trace): r for r in results}


def test_committed_table_meets_the_targets():
    assert len(CASES) == 28
    for key in CASES:
        c = COMMITTED[key]
        assert abs(c["cycle_error_pct"]) <= V.CYCLE_TARGET_PCT, key
        if key[1] in V.IDLE_TRACES:
            assert c["idle_ok"], key


@pytest.mark.parametrize("config,trace", CASES)
def test_no_regression_against_the_references(replayed, config, trace):
    committed = COMMITTED[(config, trace)]
    now = replayed[(config, trace)]
    assert now.nearer is not None
    assert abs(now.cycle_error_pct) <= abs(committed["cycle_error_pct"]) + 1.0, (
        f"{config}/{trace}: cycle error {now.cycle_error_pct:+.2f}% vs committed {committed['cycle_error_pct']:+.2f}%")
    if trace in V.IDLE_TRACES:
        assert now.idle_ok, f"{config}/{trace}: idle latency {now.ours['min_read_latency_cycles']}/" \
                            f"{now.ours['p50_read_latency_cycles']} misses the reference by more than a cycle"


def test_markdown_table_lists_every_case():
    text = (ROOT / "validation" / "dram.md").read_text()
    for config, trace in CASES:
        assert f"| {config} | {trace} |" in text
