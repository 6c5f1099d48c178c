"""The DRAM request controller and the command-stream timer: hand-worked cases and properties.

Hand-worked cases use the reference DDR4-3200 memory (tRCD = tRP = CL = 22,
tBL = 4, tCCD_L = 8, tRAS = 52, tRC = 74, tRTP = 12, tRFC = 560, tREFI =
12480 staggered over 2 ranks; read latency CL + tBL = 26).
"""
from __future__ import annotations

import json
from functools import cache

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.command_stream import time_commands
from pimdsl.ir.commands import Command, StreamError
from pimdsl.interpreter.dram.memory_system import replay
from pimdsl.interpreter.dram.traces import Trace, TraceError, read_trace

from .conftest import ROOT, issued_commands, pimc
from .test_dram_rules import assert_keeps_every_rule

REF_SPEC = str(ROOT / "specs" / "reference" / "dram.pim")


def memory(name="ddr4_3200", overrides=()):
    """The reference spec's memory `name` with these controller settings, elaborated once per
    process (a Memory is frozen; the hypothesis tests ask for the same few hundreds of times)."""
    return _memory(name, tuple(overrides))


@cache
def _memory(name, overrides):
    spec, diags = load_spec(REF_SPEC, [f"{name}.controller.{o}" for o in overrides])
    assert spec is not None, diags.render_all()
    return spec.memories[name]


def run(reqs, mem=None):
    """reqs: (arrival, is_write, bank, row) on channel 0."""
    mem = mem or memory()
    n = len(reqs)
    trace = Trace([r[0] for r in reqs], [r[1] for r in reqs], [0] * n, [r[2] for r in reqs],
                  [r[3] for r in reqs], [0] * n)
    return replay(mem, trace)


def test_two_row_hits():
    r = run([(0, False, 0, 0), (0, False, 0, 0)])
    # ACT@0, RD@22 (tRCD), RD@30 (tCCD_L): data at 48 and 56
    assert r.read_latencies.tolist() == [48, 56]
    assert r.cycles == 57
    assert r.commands == {"ACT": 1, "RD": 2}
    assert r.row_hit_rate == 0.5


def test_write_completes_when_issued():
    r = run([(0, True, 0, 0)])
    assert r.cycles == 23                      # ACT@0, WR@22
    assert r.commands == {"ACT": 1, "WR": 1}


def test_row_conflict():
    r = run([(0, False, 0, 0), (0, False, 0, 1)])
    # PRE waits max(tRAS 52, RD@22 + tRTP 12) = 52; ACT@74 (tRP, tRC); RD@96; data at 122
    assert r.read_latencies.tolist() == [48, 122]
    assert r.commands == {"ACT": 2, "PRE": 1, "RD": 2}


def test_refresh_blocks_its_rank_only():
    # rank 0's first refresh falls due at tREFI / 2 = 6240: REF@6240, ACT@6800, RD@6822, data@6848
    assert run([(6240, False, 0, 0)]).read_latencies.tolist() == [608]
    # bank 16 is in rank 1: only the command bus is busy for the REF cycle
    assert run([(6240, False, 16, 0)]).read_latencies.tolist() == [49]


def test_frfcfs_serves_a_younger_hit_first_and_fcfs_does_not():
    reqs = [(0, False, 0, 0), (0, False, 0, 1), (0, False, 0, 0)]
    fr = run(reqs)
    assert fr.read_latencies[2] < fr.read_latencies[1]
    fcfs = run(reqs, memory(overrides=["scheduler=fcfs"]))
    assert fcfs.read_latencies[2] > fcfs.read_latencies[1]


def test_closed_page_precharges_with_the_read():
    r = run([(0, False, 0, 0), (100, False, 0, 0)], memory(overrides=["page_policy=closed"]))
    assert r.commands == {"ACT": 2, "RDA": 2}
    assert r.read_latencies.tolist() == [48, 48]


def test_per_bank_queues_add_the_move_cycle():
    plain = run([(0, False, 0, 0)])
    moved = run([(0, False, 0, 0)], memory(overrides=["queue_structure=per_bank"]))
    assert moved.read_latencies[0] == plain.read_latencies[0] + 1


def test_queue_depth_bounds_what_is_accepted():
    reqs = [(0, False, b % 32, 0) for b in range(64)]
    deep = run(reqs)
    shallow = run(reqs, memory(overrides=["read_queue_depth=1"]))
    assert shallow.cycles > deep.cycles
    assert max(shallow.read_latencies) < max(deep.read_latencies)   # latency counts from acceptance


def test_writes_drain_at_the_watermark():
    mem = memory(overrides=["write_drain_high=0.25", "write_queue_depth=8"])
    reqs = [(0, True, 1, 0)] * 2 + [(0, False, 0, 0)] * 6 + [(0, True, 1, 0)] * 2
    r = run(reqs, mem)
    assert r.commands["WR"] == 4 and r.commands["RD"] == 6


# ---- property: whatever the scheduler does, no rule is ever broken ------------------------
def _address(tables, level, k):
    """(pseudo_channel, rank, bank_group, bank) of node (level, k), padded with zeros."""
    f = tables.fanout
    flat = k
    for lv in range(level, 4):
        flat *= f[lv + 1]
    bank = flat % f[4]
    flat //= f[4]
    bg = flat % f[3]
    flat //= f[3]
    return (flat // f[2], flat % f[2], bg, bank)


requests = st.lists(st.tuples(st.one_of(st.just(0), st.integers(0, 300)), st.booleans(), st.integers(0, 31),
                              st.integers(0, 3)),
                    min_size=1, max_size=40)


# 30 random mixes: every rule's delay and window are also checked one by one on every part
# (test_dram_rules.py) and every standard's replays against its rules (test_dram_standards.py)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(reqs=[(0, False, b, 0) for b in range(16)], structure="transaction", page="open", scheduler="frfcfs")
@given(reqs=requests, structure=st.sampled_from(["transaction", "per_bank"]),
       page=st.sampled_from(["open", "closed"]), scheduler=st.sampled_from(["fcfs", "frfcfs", "frfcfs_rowhit"]))
def test_controller_never_breaks_a_rule(monkeypatch, reqs, structure, page, scheduler):
    mem = memory(overrides=[f"queue_structure={structure}", f"page_policy={page}", f"scheduler={scheduler}",
                            "refresh=all_bank"])
    reqs = sorted(reqs)
    with issued_commands(monkeypatch) as log:
        result = run(reqs, mem)
    assert result.requests == len(reqs)
    assert sum(v for k, v in result.commands.items() if k in ("RD", "RDA", "WR", "WRA")) == len(reqs)
    if log:
        tables = log[0][3]                      # (one channel)
        assert_keeps_every_rule(tables, [(t, c, _address(tables, tables.target_level(c), k)) for t, c, k, _ in log])


# ---- command streams -----------------------------------------------------------------------
def test_command_stream_issues_in_order_as_early_as_allowed():
    mem = memory()
    cycles = time_commands(mem, [Command("ACT", row=3), Command("RD", row=3), Command("RD", row=3),
                                 Command("ACT", bank=1, row=5), Command("PRE", row=3)])
    # ACT@0; RD@22; RD@30; ACT to another bank of the group: tRRD_L 8 is long past, but not
    # before the RD@30 ahead of it, and one command per cycle on the DDR4 bus: 31;
    # PRE: tRAS from ACT@0 = 52
    assert cycles == [0, 22, 30, 31, 52]


def test_command_stream_rejects_a_read_of_a_closed_bank():
    with pytest.raises(StreamError, match="command 0: RD to bank 0, which has no open row"):
        time_commands(memory(), [Command("RD")])
    with pytest.raises(StreamError, match="precharge first"):
        time_commands(memory(), [Command("ACT", row=1), Command("ACT", row=2)])


def test_hbm_row_and_column_buses_dual_issue():
    mem = memory("hbm2")
    cycles = time_commands(mem, [Command("ACT", row=1), Command("RD", row=1),
                                 Command("ACT", bank=1, row=2), Command("RD", row=1)])
    # RD@14 (tRCDRD); the ACT to bank 1 may share the RD's cycle on the row bus... but not before
    # tRRD_L 6 from the first ACT, and never before the RD ahead of it in the stream
    assert cycles[:3] == [0, 14, 14]
    assert cycles[3] == 16                     # tCCD 2 after the first RD; the ACT is on the other bus


# ---- traces --------------------------------------------------------------------------------
def test_ramulator_and_dramsim3_traces_agree(tmp_path):
    mem = memory()
    lines = [(0x0, "READ"), (0x40, "READ"), (0x4000, "WRITE"), (0x12345640, "READ")]
    (tmp_path / "t.ds3").write_text("".join(f"0x{a:x} {op} 0\n" for a, op in lines))
    (tmp_path / "t.ldst").write_text("".join(f"{'ST' if op == 'WRITE' else 'LD'} 0x{a:x}\n" for a, op in lines))
    a = replay(mem, read_trace(str(tmp_path / "t.ds3"), mem, "dramsim3"))
    b = replay(mem, read_trace(str(tmp_path / "t.ldst"), mem, "ramulator"))
    assert a.to_json() == b.to_json()
    # robabgracoch: 0x40 is column 1 of bank 0; 0x4000 is bank group 1 (bits 14-15): flat bank 4
    t = read_trace(str(tmp_path / "t.ds3"), mem, "dramsim3")
    assert t.column[:2].tolist() == [0, 1] and t.bank[2] == 4 and t.is_write.tolist() == [False, False, True, False]


def test_ramulator_address_vectors(tmp_path):
    mem = memory()
    (tmp_path / "v.trace").write_text("R 0,1,2,3,100,5\nW 0,0,0,0,7,0\n")
    t = read_trace(str(tmp_path / "v.trace"), mem, "ramulator")
    assert t.bank.tolist() == [(1 * 4 + 2) * 4 + 3, 0] and t.row.tolist() == [100, 7] and t.is_write.tolist() == [False, True]


def test_bad_trace_lines_name_the_place(tmp_path):
    mem = memory()
    (tmp_path / "bad.trace").write_text("0x40 READ 0\n0xZZ READ 5\n")
    with pytest.raises(TraceError) as err:
        read_trace(str(tmp_path / "bad.trace"), mem, "dramsim3")
    assert err.value.render().splitlines() == [
        f"{tmp_path / 'bad.trace'}:2:1: error: '0xZZ' is not a hexadecimal address",
        "  0xZZ READ 5", "  ^", "  hint: write e.g. 0x1f40"]


# ---- the CLI contract --------------------------------------------------------------------------
def test_pimc_dram_json(tmp_path):
    trace = ROOT / "validation" / "reference" / "dram" / "traces" / "ddr4_3200__idle_seq.trace"
    local = tmp_path / "idle.trace"
    local.write_text(trace.read_text() if trace.exists() else "0x0 READ 0\n0x40 READ 1000\n")
    out = pimc("dram", REF_SPEC, "--memory", "ddr4_3200", "--trace", str(local), "--trace-format", "dramsim3",
               "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("cycles", "bandwidth_gbps", "avg_read_latency_cycles", "row_hit_rate"):
        assert key in data
    assert data["min_read_latency_cycles"] in (26, 48)


def test_pimc_dram_errors_exit_1(tmp_path):
    (tmp_path / "bad.trace").write_text("LD 0x40\n")
    out = pimc("dram", REF_SPEC, "--memory", "ddr4_3200", "--trace", str(tmp_path / "bad.trace"),
               "--trace-format", "dramsim3")
    assert out.returncode == 1
    assert ":1:1: error: expected `<hex address> <READ|WRITE> <cycle>`, found 2 field(s)" in out.stderr
    assert "use --trace-format ramulator" in out.stderr
    out = pimc("dram", REF_SPEC, "--memory", "ddr4", "--trace", str(tmp_path / "bad.trace"),
               "--trace-format", "ramulator")
    assert out.returncode == 1 and "did you mean 'ddr4_3200'?" in out.stderr
    assert "Traceback" not in out.stderr


def test_identical_channels_shortcut_equals_the_full_simulation():
    from pimdsl.interpreter.dram.memory_system import _replay, identical_channels
    mem = memory("hbm2")
    per_channel = [(k // 40, k % 3 == 2, (k * 5) % 16, k // 97, k % 32) for k in range(600)]
    rows = [r for r in per_channel for _ in range(8)]
    trace = Trace([r[0] for r in rows], [r[1] for r in rows], [i % 8 for i in range(len(rows))],
                  [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows])
    assert identical_channels(trace, 8)
    fast, full = replay(mem, trace), _replay(mem, trace, 8)
    assert fast.to_json() == full.to_json()
    assert sorted(fast.read_latencies) == sorted(full.read_latencies)
    trace.row[5] += 1                                     # one request differs: no shortcut
    assert not identical_channels(trace, 8)


def test_pimc_dram_command_trace(tmp_path):
    (tmp_path / "t.trace").write_text("0x0 READ 0\n0x2000 READ 0\n0x40 WRITE 0\n")
    out = pimc("dram", REF_SPEC, "--memory", "ddr4_3200", "--trace", str(tmp_path / "t.trace"),
               "--trace-format", "dramsim3", "--command-trace", str(tmp_path / "cmds.txt"))
    assert out.returncode == 0, out.stderr
    # 0x2000 is rank 1 (bit 13): ACT@1 on the shared bus; RD rank 0 @22, RD rank 1 @27 (tBL + tRTRS);
    # the write to rank 0's open row waits for the read-to-write turnaround (RL + BL/2 - WL + tRTRS = 11)
    assert (tmp_path / "cmds.txt").read_text().splitlines() == [
        "# pimdsl DRAM command trace: memory ddr4_3200, 5 commands, tCK 0.625 ns",
        "# cycle channel command pseudo_channel rank bank_group bank row column request",
        "0 0 ACT 0 0 0 0 0 - 0",
        "1 0 ACT 0 1 0 0 0 - 1",
        "22 0 RD 0 0 0 0 0 0 0",
        "27 0 RD 0 1 0 0 0 0 1",
        "38 0 WR 0 0 0 0 0 1 2",
    ]
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".pimc-*"))


# ---- DRAMsim3's batch write drain -------------------------------------------------------------------

BATCH = ["queue_structure=per_bank", "write_drain=batch", "write_drain_high=1.0", "write_drain_idle=8"]


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_batch_drain_strands_a_few_writes_and_drains_more(engine):
    """DRAMsim3 drains its write buffer when full or when it holds more than 8 writes while the command
    queues are empty; fewer are never issued, and the replay ends (its stranded writes)."""
    mem = memory(overrides=BATCH)

    def replayed(n_writes):
        reqs = [(0, False, 0, 0)] + [(0, True, 1 + i % 4, 7) for i in range(n_writes)]
        trace = Trace(*[list(col) for col in zip(*[(a, w, 0, b, r, 0) for a, w, b, r in reqs])])
        return replay(mem, trace, engine=engine)

    few, more = replayed(8), replayed(9)
    # the read moves into its command queue in cycle 0: ACT@1, RD@23, data at 49
    assert few.commands == {"ACT": 1, "RD": 1} and few.cycles == 50
    assert more.commands["WR"] == 9 and more.cycles > few.cycles
