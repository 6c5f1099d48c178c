"""DRAM energy from declared currents: hand-computed traces, the power block's checks, `pimc dram --json`.

The reference DDR4-3200 memory: VDD 1.2 V, 8 x8 devices per rank, 2 ranks, tCK 0.625 ns, tRC 74,
tRAS 52, tRFC 560; IDD0 57, IDD2N 37, IDD3N 52, IDD4R 168, IDD5AB 250 mA. Per event (x 8 devices x
0.625 ns): ACT 1.2 x (57 x 74 - 52 x 52 - 37 x 22) uA.. = 4200 pJ; RD 1.2 x (168 - 52) x 4 -> 2784 pJ;
REF 1.2 x (250 - 52) x 560 -> 665,280 pJ; a rank-cycle of active standby 1.2 x 52 -> 312 pJ, of
precharge standby 1.2 x 37 -> 222 pJ.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.energy import event_energies_pj
from pimdsl.interpreter.dram.memory_system import replay
from pimdsl.interpreter.dram.traces import Trace

from .conftest import ROOT, pimc
from .test_dram_engine import memory, run


def test_event_energies_of_the_reference_ddr4():
    mem = memory()
    per = event_energies_pj(mem.part, mem.organization)
    assert per["ACT"] == pytest.approx(4200)
    assert per["RD"] == pytest.approx(2784)
    assert per["REF"] == pytest.approx(665_280)
    assert per["active_standby"] == pytest.approx(312)
    assert per["precharge_standby"] == pytest.approx(222)


def test_row_conflict_energy_by_hand():
    # ACT@0, RD@22, PRE@52, ACT@74, RD@96, data at 122: 123 cycles. Rank 0 has a row open in
    # [0, 52) and [74, 123): 101 cycles; rank 1 never: 2 x 123 - 101 = 145 precharged rank-cycles.
    r = run([(0, False, 0, 0), (0, False, 0, 1)])
    assert (r.cycles, r.active_rank_cycles, r.rank_cycles) == (123, 101, 246)
    e = r.energy_pj
    assert e["activation"] == pytest.approx(2 * 4200)
    assert e["read"] == pytest.approx(2 * 2784)
    assert (e["write"], e["refresh"]) == (0, 0)
    assert e["active_standby"] == pytest.approx(101 * 312)
    assert e["precharge_standby"] == pytest.approx(145 * 222)
    assert e["total"] == pytest.approx(77_670)
    assert r.to_json()["average_power_mw"] == pytest.approx(77_670 / (123 * 0.625), abs=1e-3)


def test_refresh_energy_by_hand():
    # REF@6240 (rank 0 due at tREFI / 2), ACT@6800, RD@6822, data at 6848: 6849 cycles, 49 of them
    # with rank 0's row open
    r = run([(6240, False, 0, 0)])
    assert r.commands == {"REF": 1, "ACT": 1, "RD": 1}
    e = r.energy_pj
    assert e["refresh"] == pytest.approx(665_280)
    assert e["active_standby"] == pytest.approx(49 * 312)
    assert e["precharge_standby"] == pytest.approx((2 * 6849 - 49) * 222)
    assert e["total"] == pytest.approx(4200 + 2784 + 665_280 + 49 * 312 + (2 * 6849 - 49) * 222)


def test_write_energy_uses_idd4w():
    r = run([(0, True, 0, 0)])
    # 1.2 x (150 - 52) mA x 4 cycles x 8 x 0.625 ns
    assert r.energy_pj["write"] == pytest.approx(1.2 * 98 * 4 * 8 * 0.625)


def test_precharge_all_closes_every_bank_of_its_rank():
    # two banks open in rank 0 until the refresh's PREA; then the rank is precharged
    r = run([(0, False, 0, 0), (0, False, 4, 0), (6240, False, 0, 0)])
    assert r.commands["PREA"] == 1
    log = replay(memory(), Trace([0, 0, 6240], [False] * 3, [0] * 3, [0, 4, 0], [0, 0, 0], [0] * 3),
                 record_commands=True).command_log
    prea = next(t for t, _, c, *_ in log if c == "PREA")
    last_act = max(t for t, _, c, *_ in log if c == "ACT")
    assert r.active_rank_cycles == prea + (r.cycles - last_act)


SPEC = """
dram D {
  family = ddr4; clock = 1000 MHz; data_rate = 2000 MT/s;
  organization { banks_per_group = 1; rows = 16; columns = 8; burst_length = 8; device_width = 8 bit; bus_width = 64 bit; }
  timing { tRCD = 2 cycles; tRP = 2 cycles; tRAS = 4 cycles; tRC = 6 cycles; tCL = 2 cycles; tBL = 4 cycles; }
  command ACT { scope = bank; opens = true; }
  command PRE { scope = bank; closes = true; }
  command RD { scope = bank; reads = [row]; data_cycles = 4; }
  command WR { scope = bank; writes = [row]; data_cycles = 4; }
  %s
  rules { rule bank: ACT -> RD, WR = tRCD; rule bank: ACT -> PRE = tRAS; rule bank: PRE -> ACT = tRP;
          rule bank: ACT -> ACT = tRC; rule channel: RD -> RD = tBL; }
}
memory m { part = D; address_map = [row, bank, column]; controller { refresh = none; } }
"""


@pytest.fixture
def load_text(tmp_path):
    def load(text):
        path = tmp_path / "energy.pim"
        path.write_text(text)
        return load_spec(str(path))
    return load


def test_a_part_without_currents_reports_no_energy(load_text):
    spec, diags = load_text(SPEC % "")
    assert spec is not None, diags.render_all()
    r = replay(spec.memories["m"], Trace([0], [False], [0], [0], [0], [0]))
    assert r.energy_pj is None
    assert r.to_json()["energy_pj"] is None and r.to_json()["average_power_mw"] is None


@pytest.mark.parametrize("block,message", [
    ("power { VDD = 1.2 V; IDD0 = 57 mA; }", "a power block needs IDD2N, IDD3N, IDD4R, IDD4W, IDD5AB"),
    ("power { VDD = 1.2 V; IDD0 = 57 mV; IDD2N = 1 mA; IDD3N = 1 mA; IDD4R = 1 mA; IDD4W = 1 mA; "
     "IDD5AB = 1 mA; }", "a current was expected for 'IDD0', this is a voltage"),
    ("power { VDD = 1.2 V; IDD0 = 57 mA; IDD2N = 1 mA; IDD3N = 1 mA; IDD4R = 1 mA; IDD4W = 1 mA; "
     "IDD5AB = 1 mA; IDD3NN = 1 mA; }", "unknown field 'IDD3NN'"),
    ("power { VDD = 1.2 V; VPP = 2.5 V; IDD0 = 57 mA; IDD2N = 1 mA; IDD3N = 1 mA; IDD4R = 1 mA; "
     "IDD4W = 1 mA; IDD5AB = 1 mA; IPP0 = 3 mA; }", "VPP counts only with"),
])
def test_power_block_errors_are_located(load_text, block, message):
    spec, diags = load_text(SPEC % block)
    assert spec is None
    text = diags.render_all()
    assert message in text
    assert ":10:" in text                      # the line of the power block


def test_vpp_domain_adds_its_ipp_currents(load_text):
    base = ("power { VDD = 1 V; IDD0 = 10 mA; IDD2N = 2 mA; IDD3N = 3 mA; IDD4R = 20 mA; IDD4W = 30 mA; "
            "IDD5AB = 40 mA; %s }")
    plain, _ = load_text(SPEC % (base % ""))
    vpp, _ = load_text(SPEC % (base % "VPP = 2 V; IPP0 = 4 mA; IPP2N = 1 mA; IPP3N = 1 mA;"))
    p = event_energies_pj(plain.memories["m"].part, plain.memories["m"].organization)
    q = event_energies_pj(vpp.memories["m"].part, vpp.memories["m"].organization)
    # 8 x8 devices, 1 ns: VDD ACT 1 x (10 x 6 - (3 x 4 + 2 x 2)) = 44 mA.cycles; VPP 2 x (4 x 6 - 6) = 36
    assert p["ACT"] == pytest.approx(44 * 8)
    assert q["ACT"] - p["ACT"] == pytest.approx(36 * 8)
    assert q["RD"] == p["RD"]                  # no IPP4R: the VPP domain's burst draws its standby current
    assert q["active_standby"] - p["active_standby"] == pytest.approx(2 * 1 * 8)


def test_pimc_dram_json_prints_energy(tmp_path):
    trace = tmp_path / "t.trace"
    trace.write_text("0x0 READ 0\n")
    out = pimc("dram", str(ROOT / "specs/reference/dram.pim"), "--memory", "ddr4_3200", "--trace", str(trace),
               "--trace-format", "dramsim3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data["energy_pj"]) == {"activation", "read", "write", "refresh", "active_standby",
                                      "precharge_standby", "total"}
    assert data["energy_pj"]["activation"] == 4200
    assert data["average_power_mw"] > 0


def test_per_bank_refresh_without_its_current_keeps_the_timing_and_says_why(load_text):
    block = ("power { VDD = 1.2 V; IDD0 = 57 mA; IDD2N = 37 mA; IDD3N = 52 mA; IDD4R = 168 mA; IDD4W = 150 mA; "
             "IDD5AB = 250 mA; }\n  command REFpb { scope = bank; refresh = true; }")
    text = (SPEC % block).replace("refresh = none;", "refresh = per_bank;").replace(
        "family = ddr4;", "family = ddr4; refresh_modes = [per_bank];").replace(
        "tBL = 4 cycles; }", "tBL = 4 cycles; tREFI = 100 cycles; tRFCpb = 10 cycles; }").replace(
        "rule channel: RD -> RD = tBL; }", "rule channel: RD -> RD = tBL; rule bank: REFpb -> ACT = tRFCpb; }")
    spec, diags = load_text(text)
    assert spec is not None, diags.render_all()
    r = replay(spec.memories["m"], Trace([500], [False], [0], [0], [0], [0]))
    assert r.commands["REFpb"] > 0 and r.energy_pj is None
    assert "declares no IDD5PB" in r.to_json()["energy_note"]


# ---- the currents of every bundled standard, by hand -----------------------------------------------

def _part(path, name):
    spec, diags = load_spec(str(ROOT / path))
    assert spec is not None, diags.render_all()
    return spec.drams[name]


def test_ddr5_currents_by_hand_with_the_vpp_domain():
    # [RAMULATOR2_POWER] presets: VDD 1.1 V, VPP 1.8 V; 4 x8 devices per 32-bit subchannel; tCK 1/2.4 ns;
    # tRC 111, tRAS 77, tRFC 708 cycles. pJ per mA.V.cycle: 4 x 0.41667 = 5/3.
    part = _part("specs/dram/ddr5.pim", "DDR5_4800")
    per = event_energies_pj(part, part.organization)
    k = 4 / 2.4
    assert per["ACT"] == pytest.approx(1.1 * (60 * 111 - (55 * 77 + 50 * 34)) * k)     # IPP0 = IPP3N = IPP2N: no VPP
    assert per["RD"] == pytest.approx(1.1 * (145 - 55) * 8 * k)
    assert per["REF"] == pytest.approx((1.1 * (362 - 55) + 1.8 * (48 - 3)) * 708 * k)   # 494,066 pJ
    assert per["active_standby"] == pytest.approx((1.1 * 55 + 1.8 * 3) * k)


def test_ddr5_one_read_replayed_by_hand(tmp_path):
    # ACT, RD on one subchannel, refresh off: activation + read as above, standby for every cycle
    path = tmp_path / "ddr5.pim"
    path.write_text(f'import "{ROOT / "specs/dram/ddr5.pim"}";\n'
                    "memory m { part = DDR5_4800; address_map = [row, rank, bank_group, bank, channel, column];"
                    " controller { refresh = none; } }\n")
    spec, diags = load_spec(str(path))
    assert spec is not None, diags.render_all()
    r = replay(spec.memories["m"], Trace([0], [False], [0], [0], [0], [0]))
    assert r.commands == {"ACT": 1, "RD": 1}
    k = 4 / 2.4
    e = r.energy_pj
    assert e["activation"] == pytest.approx(797.5 * k)
    assert e["read"] == pytest.approx(792 * k)
    assert e["active_standby"] == pytest.approx(r.active_rank_cycles * 65.9 * k)
    assert e["total"] == pytest.approx((797.5 + 792 + 65.9 * r.active_rank_cycles
                                        + 60.4 * (r.rank_cycles - r.active_rank_cycles)) * k)


@pytest.mark.parametrize("path,name,tck_ns,t_rc,t_ras,burst", [
    ("specs/dram/lpddr5.pim", "LPDDR5_6400", 1.25, 49, 34, 2),       # assumed LPDDR4 currents (stand-in)
    ("specs/dram/lpddr5x.pim", "LPDDR5X_8533", 8 / 8.533, 65, 45, 2),
])
def test_lpddr5_stand_in_currents_by_hand(path, name, tck_ns, t_rc, t_ras, burst):
    # one x16 device: VDD 1.2 V; IDD0 80, IDD2N 34, IDD3N 47, IDD4R 243 mA (lpddr5.pim, LPDDR4's)
    part = _part(path, name)
    per = event_energies_pj(part, part.organization)
    assert per["ACT"] == pytest.approx(1.2 * (80 * t_rc - (47 * t_ras + 34 * (t_rc - t_ras))) * tck_ns, rel=1e-4)
    assert per["RD"] == pytest.approx(1.2 * (243 - 47) * burst * tck_ns, rel=1e-4)


def test_hbm3_currents_by_hand():
    # one pseudo-channel, [AYNA]'s HBM3E rails: VDD 1.1 V; IDD0 106.1, IDD2N 70.5, IDD3N(1) 71.2,
    # IDD4R 560.7, IDD4W 389.5, IDD5B 164.7 mA; tCK 0.625 ns, tRC 74, tRAS 48, tBL 2, tRFC 560
    part = _part("specs/dram/hbm3.pim", "HBM3_6400")
    per = event_energies_pj(part, part.organization)
    assert per["ACT"] == pytest.approx(1.1 * (106.1 * 74 - (71.2 * 48 + 70.5 * 26)) * 0.625)
    assert per["RD"] == pytest.approx(1.1 * (560.7 - 71.2) * 2 * 0.625)       # 673.1 pJ: 2.63 pJ/bit of 32 B
    assert per["WR"] == pytest.approx(1.1 * (389.5 - 71.2) * 2 * 0.625)
    assert per["REF"] == pytest.approx(1.1 * (164.7 - 71.2) * 560 * 0.625)
    assert per["precharge_standby"] == pytest.approx(1.1 * 70.5 * 0.625)