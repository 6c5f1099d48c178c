"""Every bundled DRAM standard runs through the request controller without breaking a rule.

For each standard in specs/dram/ (DDR4, DDR5, LPDDR4, LPDDR5, LPDDR5X, HBM2 and HBM3 with
pseudo-channels), each refresh mode it supports and both queue structures, a mixed random
and streaming trace is replayed; every pair of issued commands closer than the longest rule
is checked against the oracle of test_dram_rules, and every window is held.
"""
from __future__ import annotations

import random

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram import state as dram_state
from pimdsl.interpreter.dram.memory_system import replay
from pimdsl.interpreter.dram.traces import Trace

from .conftest import ROOT, bundled_spec
from .test_dram_engine import _address
from .test_dram_rules import assert_keeps_every_rule

STANDARDS = [("ddr4.pim", "DDR4_3200"), ("ddr5.pim", "DDR5_4800"), ("lpddr4.pim", "LPDDR4"),
             ("lpddr5.pim", "LPDDR5_6400"), ("lpddr5x.pim", "LPDDR5X_8533"), ("hbm2.pim", "HBM2_2000"),
             ("hbm3.pim", "HBM3_6400")]
FIELDS = ("row", "bank", "bank_group", "rank", "column", "pseudo_channel", "channel")


def _part(file, part):
    return bundled_spec(ROOT / "specs" / "dram" / file).drams[part]


def _memory(spec_file, file, part, refresh, structure):
    org = _part(file, part).organization
    sizes = {"channel": org.channels, "pseudo_channel": org.pseudo_channels, "rank": org.ranks,
             "bank_group": org.bank_groups, "bank": org.banks_per_group}
    fields = [f for f in FIELDS if sizes.get(f, 2) > 1]
    path = spec_file(f"""
        import "dram/{file}";
        memory m {{
          part = {part};
          address_map = [{", ".join(fields)}];
          controller {{ refresh = {refresh}; queue_structure = {structure}; }}
        }}
        """)
    spec, diags = load_spec(str(path))
    assert spec is not None, diags.render_all()
    return spec.memories["m"]


def _trace(memory, n=1500, seed=7):
    """Bursts of 50 requests every 600 cycles: some queueing, and refreshes fall due."""
    rng = random.Random(seed)
    org = memory.organization
    banks = org.pseudo_channels * org.ranks * org.bank_groups * org.banks_per_group
    rows = []
    for i in range(n):
        if i % 3:                                         # streaming through a few rows
            rows.append(((i // 50) * 600, False, 0, (i // 64) % banks, i // 512, i % org.bursts_per_row))
        else:                                             # random, reads and writes
            rows.append(((i // 50) * 600, rng.random() < 0.3, rng.randrange(org.channels), rng.randrange(banks),
                         rng.randrange(8), rng.randrange(org.bursts_per_row)))
    return Trace(*[list(col) for col in zip(*rows)])


def _cases():
    for file, part in STANDARDS:
        for refresh in ("all_bank", "per_bank"):
            for structure in ("transaction", "per_bank"):
                yield pytest.param(file, part, refresh, structure, id=f"{part}-{refresh}-{structure}")


@pytest.mark.parametrize("file,part,refresh,structure", list(_cases()))
def test_standard_replays_within_its_rules(spec_file, monkeypatch, file, part, refresh, structure):
    if refresh not in _part(file, part).refresh_modes:
        with pytest.raises(AssertionError, match=f"{part} has no {refresh} refresh"):
            _memory(spec_file, file, part, refresh, structure)
        return
    memory = _memory(spec_file, file, part, refresh, structure)
    log = []
    original = dram_state.DeviceState.issue

    def logged(self, cmd, k, t):
        log.append((t, cmd, k, self.tables, id(self)))
        return original(self, cmd, k, t)

    monkeypatch.setattr(dram_state.DeviceState, "issue", logged)
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", "0")
    trace = _trace(memory)
    # the oracle watches DeviceState (the Python engine; tests/test_dram_core.py holds the compiled one to it)
    result = replay(memory, trace, engine="python")
    columns = sum(v for name, v in result.commands.items() if name in ("RD", "WR", "RDA", "WRA"))
    assert columns == len(trace) and result.cycles > 0
    assert any(tables.commands[c].refresh for _, c, _, tables, _ in log), "no refresh was issued"
    tables = log[0][3]
    by_channel = {}
    for t, c, k, _, chan in log:
        by_channel.setdefault(chan, []).append((t, c, _address(tables, tables.target_level(c), k)))
    for events in by_channel.values():
        assert_keeps_every_rule(tables, events)
