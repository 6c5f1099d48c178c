"""The compiled DRAM core against the pure-Python engine it stands in for: identical command logs.

Each case replays a prefix of a reference trace (random mixes, bank conflicts, streams; one and
eight channels) under one set of controller options, once through `interpreter/dram/controller.py` (the
reference) and once through `interpreter/dram/core.py`, and compares every issued command, every request's
acceptance and completion cycle, the command counts and the rank-cycles with a row open.
"""
from __future__ import annotations

import pytest

pytest.importorskip("numba")

from pimdsl.frontend.pipeline import load_spec                       # noqa: E402
from pimdsl.frontend.resources import specs_dir                      # noqa: E402
from pimdsl.interpreter.dram.memory_system import replay                  # noqa: E402
from pimdsl.interpreter.dram.traces import Trace, read_trace              # noqa: E402
from pimdsl.validation import dram_reference as V                   # noqa: E402

PER_BANK = ["queue_structure=per_bank", "command_queue_depth=8", "row_hit_cap=4", "write_drain_high=1.0",
            "write_drain_low=0"]
DRAMSIM3 = PER_BANK + ["write_drain=batch", "bank_arbitration=round_robin", "refresh_precharge=per_bank"]
# (memory, trace, requests, controller overrides): every option value at least once, except per-bank
# refresh, which no reference part allows
CASES = [
    ("ddr4_3200", "rw_random_1r1w", 3000, []),
    ("ddr4_3200", "rw_random_1r1w", 3000, PER_BANK),
    ("ddr4_3200", "rw_bank_conflict", 3000, ["page_policy=closed"]),
    ("ddr4_3200", "rw_bank_conflict", 3000, PER_BANK + ["page_policy=closed"]),
    ("ddr4_3200", "rw_random_3r1w", 2000, ["scheduler=fcfs"]),
    ("ddr4_3200", "rw_random_3r1w", 2000, PER_BANK + ["scheduler=fcfs"]),
    ("ddr4_3200", "mixed_stream_2r1w", 3000, ["scheduler=frfcfs", "refresh=none"]),
    ("ddr4_3200", "bank_parallel_hit", 3000, ["write_queue_depth=8", "read_queue_depth=8"]),
    ("hbm2", "rw_random_burst_writes", 4000, []),
    ("hbm2", "rw_random_1r1w", 4000, ["page_policy=closed"]),
    ("hbm2", "mixed_stream_2r1w", 4000, PER_BANK + ["refresh=none"]),
    ("lpddr4_2400", "rw_random_1r1w", 3000, []),
    ("lpddr4_2400", "rw_bank_conflict", 3000, ["queue_structure=transaction", "row_hit_cap=0", "write_drain=watermark"]),
    ("lpddr5_6400", "rw_bank_conflict", 3000, []),
    ("lpddr5_6400", "rw_random_1r1w_paced", 3000, ["scheduler=frfcfs_rowhit"]),
    # precharge_for = any, split_activate and data_clock_sync (all three on in lpddr5_6400), apart and
    # under the other structure
    ("lpddr5_6400", "bank_parallel_hit", 4000, []),
    ("lpddr5_6400", "rw_random_3r1w", 3000, PER_BANK),
    ("lpddr5_6400", "mixed_stream_2r1w", 3000, ["split_activate=false", "precharge_for=oldest"]),
    ("lpddr5_6400", "rw_random_1r1w", 3000, ["data_clock_sync=false", "scheduler=fcfs"]),
    ("ddr4_3200", "bank_parallel_hit", 3000, ["scheduler=frfcfs", "precharge_for=any"]),
    ("lpddr4_2400", "mixed_stream_2r1w", 3000, ["scheduler=frfcfs", "precharge_for=any"]),
    # DRAMsim3's batch drain, round-robin bank scan and bank-by-bank refresh precharge (lpddr4_2400's),
    # apart and with the other structure's options; a paced mix strands writes at its end
    ("lpddr4_2400", "mixed_stream_2r1w", 6000, []),
    ("lpddr4_2400", "rw_random_1r1w_paced", 3000, []),
    ("hbm2", "rw_random_1r1w", 4000, DRAMSIM3),
    ("ddr4_3200", "rw_random_3r1w", 3000, PER_BANK + ["write_drain=batch", "write_drain_idle=2"]),
    ("ddr4_3200", "mixed_stream_2r1w", 3000, ["bank_arbitration=round_robin", "refresh_precharge=per_bank"]),
]


@pytest.fixture(scope="module")
def paths(dram_traces):
    return V.ensure_traces(V.reference_dir(), dram_traces,
                           sorted({(c, t) for c, t, _, _ in CASES}))


@pytest.mark.parametrize("config,trace,n,overrides", CASES)
def test_compiled_core_issues_the_reference_engines_commands(paths, config, trace, n, overrides):
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"),
                            [f"{config}.controller.{kv}" for kv in overrides])
    assert spec is not None, diags.render_all()
    memory = spec.memories[config]
    full = read_trace(str(paths[(config, trace)]), memory, "dramsim3")
    trace_ = Trace(full.arrival[:n], full.is_write[:n], full.channel[:n], full.bank[:n], full.row[:n],
                   full.column[:n])
    python = replay(memory, trace_, record_commands=True, engine="python")
    compiled = replay(memory, trace_, record_commands=True, engine="compiled")
    assert len(python.command_log) > n
    assert compiled.command_log == python.command_log
    assert compiled.read_latencies == python.read_latencies
    assert (compiled.cycles, compiled.row_hits, compiled.commands) == (python.cycles, python.row_hits,
                                                                       python.commands)
    # the standby energy's open-row time, tracked by each engine from its own issues
    assert compiled.active_rank_cycles == python.active_rank_cycles > 0
    assert compiled.energy_pj == python.energy_pj
