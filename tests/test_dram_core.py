"""The compiled DRAM core against the pure-Python engine it stands in for: identical command logs.

Each case replays a prefix of a reference trace (random mixes, bank conflicts, streams; one and
eight channels) under one set of controller options, once through `interpreter/dram/controller.py` (the
reference) and once through `interpreter/dram/core.py`, and compares every issued command, every request's
acceptance and completion cycle, the command counts and the rank-cycles with a row open; and random
request streams under random controller options (hypothesis).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from pimdsl.frontend.pipeline import load_spec                       # noqa: E402
from pimdsl.frontend.resources import specs_dir                      # noqa: E402
from pimdsl.interpreter.dram.controller import request_tables            # noqa: E402
from pimdsl.interpreter.dram.memory_system import replay                  # noqa: E402
from pimdsl.interpreter.dram.traces import Trace, read_trace              # noqa: E402
from pimdsl.validation import dram_reference as V                   # noqa: E402

from .conftest import bundled_spec                                   # noqa: E402

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
    assert compiled.read_latencies.tolist() == python.read_latencies.tolist()
    assert (compiled.cycles, compiled.row_hits, compiled.commands) == (python.cycles, python.row_hits,
                                                                       python.commands)
    # the standby energy's open-row time, tracked by each engine from its own issues
    assert compiled.active_rank_cycles == python.active_rank_cycles > 0
    assert compiled.energy_pj == python.energy_pj


OPTIONS = {"queue_structure": ["transaction", "per_bank"], "scheduler": ["fcfs", "frfcfs", "frfcfs_rowhit"],
           "page_policy": ["open", "closed"], "precharge_for": ["oldest", "any"], "row_hit_cap": ["0", "4"],
           "bank_arbitration": ["oldest", "round_robin"]}


DEFAULTS = {"queue_structure": "transaction", "scheduler": "frfcfs", "page_policy": "open", "precharge_for": "oldest",
            "row_hit_cap": "0", "bank_arbitration": "oldest"}


@settings(max_examples=40, deadline=None, derandomize=True)
# a row hit arriving while an older miss waits out tRAS for its PRE: it goes first
@example(config="ddr4_3200", options=DEFAULTS, reqs=[(0, False, 0, 0, 0), (0, False, 0, 0, 1), (30, False, 0, 0, 0)],
         depth=32, batch=False)
# a refresh closes a bank while requests wait there
@example(config="ddr4_3200", options=DEFAULTS, reqs=[(6200, False, 0, 0, i % 4) for i in range(8)], depth=32,
         batch=False)
@given(config=st.sampled_from(["ddr4_3200", "hbm2", "lpddr5_6400"]),
       options=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in OPTIONS.items()}),
       reqs=st.lists(st.tuples(st.one_of(st.integers(0, 400), st.integers(0, 20000)), st.booleans(),
                               st.integers(0, 7), st.sampled_from([0, 1, 5, -1]), st.integers(0, 3)),
                     min_size=1, max_size=150),
       depth=st.sampled_from([4, 32]), batch=st.booleans())
def test_compiled_core_equals_the_reference_on_random_streams(config, options, reqs, depth, batch):
    """Random arrivals (bursts, and sparse ones that refreshes fall between), channels, banks (a few, in
    one bank group, across groups and ranks) and rows (few per bank: hits, misses and conflicts) under
    random controller options and queue depths: the same command log from both engines."""
    overrides = [f"{config}.controller.{k}={v}" for k, v in options.items()]
    overrides += [f"{config}.controller.read_queue_depth={depth}", f"{config}.controller.write_queue_depth={depth}"]
    if batch and options["queue_structure"] == "per_bank":          # (a batch drain needs command queues)
        overrides.append(f"{config}.controller.write_drain=batch")
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"), overrides)
    assert spec is not None, diags.render_all()
    memory = spec.memories[config]
    n_ch = memory.organization.channels
    banks = request_tables(memory).banks
    reqs = sorted(reqs)
    trace = Trace([r[0] for r in reqs], [r[1] for r in reqs], [r[2] % n_ch for r in reqs],
                  [r[3] % banks for r in reqs], [r[4] for r in reqs], [0] * len(reqs))
    python = replay(memory, trace, record_commands=True, engine="python")
    compiled = replay(memory, trace, record_commands=True, engine="compiled")
    assert compiled.command_log == python.command_log
    assert ((compiled.cycles, compiled.read_latencies.tolist(), compiled.commands)
            == (python.cycles, python.read_latencies.tolist(), python.commands))


def _stored_or_replayed(case) -> bool:
    """Is the trace in the repository, or regenerated for CASES anyway? (the others take about 12 s of
    CPU to regenerate, so they are replayed under `-m slow`)"""
    ref = V.reference_dir()
    m = next(m for m in V.manifest(ref) if (m["config"], m["trace"]) == case)
    return (ref / m["part"] / "traces" / m["file"]).exists() or case in {(c, t) for c, t, _, _ in CASES}


@pytest.mark.parametrize("config,trace", [pytest.param(*c, marks=() if _stored_or_replayed(c) else pytest.mark.slow)
                                          for c in V.all_cases(V.reference_dir())])
def test_compiled_core_equals_the_reference_on_every_shared_trace(dram_traces, config, trace):
    """Every trace of the reference dataset (main and extra), its first 1,000 requests under the
    memory's own controller: the same command log from both engines."""
    path = V.ensure_traces(V.reference_dir(), dram_traces, [(config, trace)])[(config, trace)]
    memory = bundled_spec(specs_dir() / "reference" / "dram.pim").memories[config]
    full = read_trace(str(path), memory, "dramsim3")
    n = 1000
    prefix = Trace(full.arrival[:n], full.is_write[:n], full.channel[:n], full.bank[:n], full.row[:n],
                   full.column[:n])
    python = replay(memory, prefix, record_commands=True, engine="python")
    compiled = replay(memory, prefix, record_commands=True, engine="compiled")
    assert len(python.command_log) >= len(prefix)
    assert compiled.command_log == python.command_log
    assert ((compiled.cycles, compiled.read_latencies.tolist(), compiled.commands)
            == (python.cycles, python.read_latencies.tolist(), python.commands))


@pytest.mark.parametrize("options", [[], ["scheduler=frfcfs_rowhit", "bank_arbitration=round_robin"],
                                     ["queue_structure=per_bank"]])
def test_compiled_core_equals_the_reference_past_64_banks_a_channel(options):
    """A channel of 128 banks (DDR4 with 8 ranks): the scheduler's bitmasks of bank queues span two words,
    which no bundled memory needs; random reads and writes over every bank, a few rows each."""
    overrides = ["ddr4_3200.part.ranks=8", "ddr4_3200.controller.read_queue_depth=64",
                 "ddr4_3200.controller.write_queue_depth=64"] + [f"ddr4_3200.controller.{o}" for o in options]
    spec, diags = load_spec(str(specs_dir() / "reference" / "dram.pim"), overrides)
    assert spec is not None, diags.render_all()
    memory = spec.memories["ddr4_3200"]
    banks = request_tables(memory).banks
    assert banks == 128
    rng = np.random.default_rng(7)
    n = 1500
    trace = Trace(np.sort(rng.integers(0, 8000, n)).tolist(), (rng.random(n) < 0.3).tolist(), [0] * n,
                  rng.integers(0, banks, n).tolist(), rng.integers(0, 3, n).tolist(), [0] * n)
    python = replay(memory, trace, record_commands=True, engine="python")
    compiled = replay(memory, trace, record_commands=True, engine="compiled")
    assert compiled.command_log == python.command_log
    assert ((compiled.cycles, compiled.read_latencies.tolist(), compiled.commands)
            == (python.cycles, python.read_latencies.tolist(), python.commands))
