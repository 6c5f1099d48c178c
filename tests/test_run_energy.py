"""Energy of a run (interpreter/run_energy.py): declared processor power and DRAM standby over busy times."""
from __future__ import annotations

import json

import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.run_energy import run_energy

from .conftest import ROOT, pimc


def system_of(path):
    spec, diags = load_spec(str(ROOT / path))
    assert spec is not None, diags.render_all()
    return next(iter(spec.systems.values()))


def test_processor_energy_is_declared_power_over_busy_time():
    system = system_of("specs/systems/tensor_parallel_llama2_70b.pim")
    # five A100s at 400 W busy half of a 2 s run, no idle power declared
    out = run_energy(system, {"end_to_end_s": 2.0, "tokens_per_s": 10.0,
                              "utilization": {"gpu": 0.5, "nvlink_fabric": 0.2}})
    e = out["energy_j"]
    assert e["by_resource"] == {"gpu:tp_a100_40gb": pytest.approx(400 * 1.0 * 5)}
    assert e["by_component"]["processor_active"] == pytest.approx(2000)
    assert e["total"] == pytest.approx(2000)
    assert out["average_power_w"] == pytest.approx(1000)
    assert out["energy_per_token_j"] == pytest.approx(100)
    assert "nvlink_fabric" in e["not_counted"].split(", ")          # a resource the energy model cannot attribute


def test_a_resource_without_declared_power_is_listed_not_counted():
    system = system_of("specs/systems/pim_sherpa_llama3_2_1b.pim")
    # the phone's CPU declares no power; its LPDDR5X (the assumed LPDDR4 currents, lpddr5.pim) is
    # counted at precharge standby, 4 channels x 2 ranks x 1.2 V x 34 mA, and refresh, an all-bank REF
    # per rank every tREFI 4167 cycles at 1.2 V x (280 - 47) mA for tRFC 299 cycles (IDD5AB - IDD3N);
    # no report of PIM commands
    out = run_energy(system, {"end_to_end_s": 1.0, "tokens_per_s": 5.0, "utilization": {"cpu:s24_cpu": 0.3}})
    e = out["energy_j"]
    memory_w = 4 * 2 * 1.2 * (0.034 + (0.280 - 0.047) * 299 / 4167)
    assert e["by_resource"] == {"memory:s24_lpddr5x": pytest.approx(memory_w)}
    assert e["by_component"]["dram_refresh"] == pytest.approx(4 * 2 * 1.2 * 0.233 * 299 / 4167)
    assert {"cpu:s24_cpu", "host accesses of s24_lpddr5x"} <= set(e["not_counted"].split(", "))
    # PIM work without the commands behind it (no `pim` in the report) is listed too; unused, it is not
    assert "PIM command energy of s24_lpddr5x" not in e["not_counted"]
    busy = run_energy(system, {"end_to_end_s": 1.0, "utilization": {"pim:s24_lpddr5x": 0.5}})
    assert "PIM command energy of s24_lpddr5x" in busy["energy_j"]["not_counted"].split(", ")
    assert out["energy_per_token_j"] == pytest.approx(memory_w / 5)


# HBM2 per pseudo-channel (hbm2.pim), 1 ns: pJ of one ACT 1.2 x (32.5 x 48 - (27.5 x 33 + 20 x 15)),
# of one RD burst 1.2 x (195 - 27.5) x 2, of a WR 1.2 x (250 - 27.5) x 2, of a REF 1.2 x (125 - 27.5) x 350
ACT, RD, WR, REF = 408.0, 402.0, 534.0, 40_950.0
# L3's DDR4 host memory: a rank (8 devices) refreshes every tREFI 12480 cycles for tRFC 560 cycles at
# 1.2 V x (250 - 52) mA per device (IDD5AB - IDD3N)
DDR4_REFRESH_W = 1.2 * 8 * 0.198 * 560 / 12480


def test_pimc_run_json_reports_dram_standby_and_pim_commands_of_a_pim_memory():
    out = pimc("run", str(ROOT / "specs/reference/hbm_pim_gemv.pim"), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["utilization"] == {"pim:aquabolt_xl": 1.0}
    # busy the whole run: every rank of the 64 pseudo-channels x 2 ranks at active standby,
    # 1.2 V x 27.5 mA (HBM2's per-pseudo-channel IDD3N)
    power = 64 * 2 * 1.2 * 0.0275
    e = report["energy_j"]
    assert e["by_component"]["dram_standby"] == pytest.approx(power * report["end_to_end_s"])
    # the op's commands on one channel, by hand: MAC reads and drain writes reach 8 banks each, so
    # each is 4 reads' bursts (the all-bank compute model); the other RD/WR one burst; ACT one bank
    c = report["pim"]["command_counts"]
    compute = (c["mac.RD"] + c["store.WR"]) * 4 * RD
    reads = (c["park_rd.RD"] + c["readback.RD"]) * RD
    writes = sum(n for k, n in c.items() if k.endswith(".WR") and k != "store.WR") * WR
    one_channel = compute + reads + writes + c["act.ACT"] * ACT + report["pim"]["refreshes"] * REF
    assert e["by_component"]["pim_commands"] == pytest.approx(64 * one_channel * 1e-12)
    assert e["total"] == pytest.approx(power * report["end_to_end_s"] + 64 * one_channel * 1e-12)
    assert "tokens_per_s" not in report and "energy_per_token_j" not in report    # one op: no tokens


def test_power_counter_steps_at_busy_edges():
    from pimdsl.emit.timeline import power_counter
    from pimdsl.ir.intervals import Interval
    ivs = [Interval("gpu:g", "a", 0.0, 2.0), Interval("gpu:g", "b", 1.0, 3.0), Interval("pim:m", "c", 2.0, 4.0)]
    extra = {"gpu:g": 100.0, "pim:m": 10.0}
    events = power_counter(ivs, 5.0, extra.__getitem__)
    assert events[0]["args"] == {"name": "power"}
    # overlapping intervals of one resource count once; each edge time gives one sample
    assert [(e["ts"], e["args"]["power_w"]) for e in events[1:]] == [
        (0.0, 105.0), (1e6, 105.0), (2e6, 115.0), (3e6, 15.0), (4e6, 5.0)]


def test_a_replicas_role_powers_its_share_of_the_resource_the_role_names():
    # L3's intervals are `replicaN.gpu` and `replicaN.dimm_bank`: with two data-parallel replicas one
    # replica's GPUs are half of the 8 A100s at 400 W, and its bank PUs (`dimm_bank`, the host
    # memory's through `utilization_of`) half of the host memory's 64 ranks going from precharge to
    # active standby (222 -> 312 pJ per 0.625 ns cycle); the HBM-PIM is inside the A100s' power
    from pimdsl.interpreter.run_energy import power_levels
    system = system_of("specs/systems/l3_gpt3_175b.pim")
    base, extra = power_levels(system, {"dp": 2, "utilization_of": {"dimm_bank": "l3_host_mem"}})
    assert base == pytest.approx(64 * (222 / 0.625 * 1e-3 + DDR4_REFRESH_W))
    assert extra("replica0.gpu") == pytest.approx(8 * 400 / 2)
    assert extra("replica1.dimm_bank") == pytest.approx(64 * (312 - 222) / 0.625 * 1e-3 / 2)
    assert extra("l3_hbm_pim") == 0.0


def test_pimc_run_timeline_has_a_power_track(tmp_path):
    path = tmp_path / "t.json"
    out = pimc("run", str(ROOT / "specs/reference/hbm_pim_gemv.pim"), "--timeline", str(path))
    assert out.returncode == 0, out.stderr
    counters = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "C"]
    # busy: active standby of every rank and the op's command power (the run's energy over its time);
    # after the op: precharge standby (1.2 V x 20 mA x 128 ranks)
    report = json.loads(pimc("run", str(ROOT / "specs/reference/hbm_pim_gemv.pim"), "--json").stdout)
    commands_w = report["energy_j"]["by_component"]["pim_commands"] / report["end_to_end_s"]
    assert counters[0]["args"]["power_w"] == pytest.approx(64 * 2 * 1.2 * 0.0275 + commands_w)
    # and a REF per pseudo-channel every tREFI of 3900 ns (while busy, the op's sample counts its own)
    assert counters[-1]["args"]["power_w"] == pytest.approx(64 * 2 * (1.2 * 0.020 + REF * 1e-12 / 3900e-9))


def test_a_link_counts_its_energy_per_bit_over_the_bytes_it_moves():
    # Hermes: `pcie` is the one PCIe link (64 GB/s, 1.93 pJ/bit, [PCIE4_PHY]), busy a quarter of a 2 s run;
    # the DIMM links declare 1.17 pJ/bit but no utilization names them: listed, not counted
    system = system_of("specs/systems/hermes_ndp_llama2_13b.pim")
    out = run_energy(system, {"end_to_end_s": 2.0, "tokens_per_s": 1.0, "utilization": {"pcie": 0.25}})
    e = out["energy_j"]
    assert e["by_resource"]["link:hermes_pcie"] == pytest.approx(0.25 * 2.0 * 64e9 * 8 * 1.93e-12)
    assert e["by_component"]["links"] == pytest.approx(0.25 * 2.0 * 64e9 * 8 * 1.93e-12)
    assert "link:hermes_dimm_link" in e["not_counted"].split(", ")
    assert "pcie" not in e["not_counted"].split(", ")


def test_a_link_counts_the_bytes_the_loop_moved_over_it():
    # Hermes' DIMM links (1.17 pJ/bit, [HERMES_NDP] Table II): the loop's remaps moved 1 GB over them
    # (`link_bytes`, all 8 links); counted by bytes, a utilization naming the link adds nothing more
    system = system_of("specs/systems/hermes_ndp_llama2_13b.pim")
    out = run_energy(system, {"end_to_end_s": 2.0, "tokens_per_s": 1.0,
                              "utilization": {"pcie": 0.25, "link:hermes_dimm_link": 1.0},
                              "link_bytes": {"hermes_dimm_link": 1e9}})
    e = out["energy_j"]
    assert e["by_resource"]["link:hermes_dimm_link"] == pytest.approx(1e9 * 8 * 1.17e-12)
    assert e["by_component"]["links"] == pytest.approx(1e9 * 8 * 1.17e-12 + 0.25 * 2.0 * 64e9 * 8 * 1.93e-12)
    assert "link:hermes_dimm_link" not in e["not_counted"].split(", ")


def test_the_hermes_loop_reports_its_remap_bytes_per_link(capsys):
    # four of the model's 40 layers: the same loop, remaps and links, without solving the whole model's
    # placement program (about 10 s of the solver, as the timing cache of a test run starts empty)
    from pimdsl.cli.main import main
    assert main(["run", str(ROOT / "specs/systems/hermes_ndp_llama2_13b.pim"), "--set", "workload.output_len=16",
                 "--set", "model.llama2_13b.layers=4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    moved = report["bytes_moved"]["dimm_link"]
    assert moved > 0 and report["link_bytes"] == {"hermes_dimm_link": moved}
    assert report["energy_j"]["by_resource"]["link:hermes_dimm_link"] == pytest.approx(moved * 8 * 1.17e-12)
    assert not {"link:hermes_dimm_link", "ndp_dimm_mean"} & set(report["energy_j"]["not_counted"].split(", "))


def test_host_traffic_is_streamed_row_by_row():
    # the phone's LPDDR5X channel (lpddr5.pim's assumed currents, tCK 0.9375 ns, x16, BL16: 32 B per
    # access, 2 KB rows): a burst 1.2 V x (243 - 47) mA x 2 cycles, an ACT per 2 KB row
    from pimdsl.interpreter.dram.energy import traffic_energy_pj
    system = system_of("specs/systems/pim_sherpa_llama3_2_1b.pim")
    memory = next(m for m in system.memories if m.name == "s24_lpddr5x")
    tck = 8 / 8.533
    rd = 1.2 * (243 - 47) * 2 * tck
    act = 1.2 * (80 * 65 - (47 * 45 + 34 * 20)) * tck
    assert traffic_energy_pj(memory, 2048) == pytest.approx(64 * rd + act, rel=1e-4)
    out = run_energy(system, {"end_to_end_s": 1.0, "tokens_per_s": 1.0, "utilization": {},
                              "dram_traffic_bytes": {"s24_lpddr5x": 2048 * 1000}})
    assert out["energy_j"]["by_component"]["host_accesses"] == pytest.approx(1000 * (64 * rd + act) * 1e-12, rel=1e-4)


def test_rank_pu_reads_stream_as_pim_commands_of_the_memory_their_role_names():
    # L3's host memory (DDR4-3200 x8, 8 devices per rank, tCK 0.625 ns, 16 channels x 4 ranks): per rank
    # an ACT 4200 pJ, a 64 B RD burst 2784 pJ, a WR 2352 pJ, a rank-cycle at active / precharge standby
    # 312 / 222 pJ (the reference DDR4's currents). The rank PUs read 1000 rows of 8 KB with no command
    # sample: a burst per 64 B and an ACT per row; the GPUs write one row; `rank_pu` is busy half of a
    # 1 s run and is the host memory's (utilization_of), so its ranks are at active standby for that half.
    system = system_of("specs/systems/l3_gpt3_175b.pim")
    out = run_energy(system, {"makespan_s": 1.0, "tokens_per_s": 1.0,
                              "utilization": {"gpu": 0.0, "rank_pu": 0.5},
                              "utilization_of": {"rank_pu": "l3_host_mem"},
                              "pim_traffic_bytes": {"l3_host_mem": 8192 * 1000},
                              "dram_traffic_bytes": {"l3_host_mem": {"read": 0.0, "write": 8192}}})
    e = out["energy_j"]
    pim = 1000 * (128 * 2784 + 4200) * 1e-12
    host = (128 * 2352 + 4200) * 1e-12
    standby = 64 * (0.5 * 222 + 0.5 * 312) / 0.625                  # pJ per ns = W, over 1 s
    refresh = 64 * DDR4_REFRESH_W                                   # no command sample covers any of it
    assert e["by_component"]["pim_commands"] == pytest.approx(pim)
    assert e["by_component"]["host_accesses"] == pytest.approx(host)
    assert e["by_resource"]["memory:l3_host_mem"] == pytest.approx(standby * 1e-3 + refresh + pim + host)
    missing = e["not_counted"].split(", ")
    assert not {"rank_pu", "PIM command energy of l3_host_mem", "host accesses of l3_host_mem"} & set(missing)


def test_a_command_sample_with_its_bytes_counts_per_byte_the_pim_units_read():
    # a sample of 2 ACTs (4200 pJ each) and 10 RD bursts (2784 pJ) that read 640 B, on L3's host
    # memory; the bank PUs read 6400 B over the run: ten samples' energy, whatever the busy time
    system = system_of("specs/systems/l3_gpt3_175b.pim")
    sample = {"command_counts": {"cmd.ACT": 2, "cmd.RD": 10}, "seconds": 1e-6, "refreshes": 0, "bytes": 640}
    out = run_energy(system, {"makespan_s": 1.0, "tokens_per_s": 1.0,
                              "utilization": {"dimm_bank": 0.7}, "utilization_of": {"dimm_bank": "l3_host_mem"},
                              "pim_traffic_bytes": {"l3_host_mem": 6400}, "pim_command_samples": {"l3_host_mem": sample}})
    assert out["energy_j"]["by_component"]["pim_commands"] == pytest.approx(10 * (2 * 4200 + 10 * 2784) * 1e-12)


def test_a_pim_memorys_own_command_sample_counts_while_its_role_is_busy():
    # L3's HBM-PIM (8 instances of 64 HBM2 pseudo-channels, tCK 1 ns): a sample of 10 RD bursts
    # (1.2 V x (195 - 27.5) mA x 2 cycles = 402 pJ each) in 1 us on one channel is 4.02 mW per
    # channel; `hbm_pim` busy half of a 1 s run: 64 channels x 8 instances x 0.5 s
    system = system_of("specs/systems/l3_gpt3_175b.pim")
    out = run_energy(system, {"makespan_s": 1.0, "tokens_per_s": 1.0,
                              "utilization": {"hbm_pim": 0.5}, "utilization_of": {"hbm_pim": "l3_hbm_pim"},
                              "pim_command_samples": {"l3_hbm_pim": {"command_counts": {"cmd.RD": 10},
                                                                     "seconds": 1e-6, "refreshes": 0}}})
    e = out["energy_j"]
    assert e["by_component"]["pim_commands"] == pytest.approx(10 * 402e-12 / 1e-6 * 64 * 8 * 0.5)
    assert "PIM command energy of l3_hbm_pim" not in e["not_counted"]


def test_serving_loop_counts_pim_commands_and_npu_traffic():
    # 32 requests at batch 16 (the spec's: 4 x 256): the same loop and accounting, an eighth of the serving
    out = pimc("run", str(ROOT / "specs/systems/neupims_gpt3_7b.pim"), "--set", "workload.batch=16",
               "--set", "workload.requests=32", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    e = report["energy_j"]["by_component"]
    # the PIM unit's attention commands, timed on one channel: their energy per second of PIM work,
    # times the 32 channels, over the channels' busy time (utilization pim x run)
    from pimdsl.interpreter.dram.energy import command_energy_pj, traffic_energy_pj
    system = system_of("specs/systems/neupims_gpt3_7b.pim")
    memory = next(m for m in system.memories if m.pim is not None)
    pim = report["pim"]
    one = command_energy_pj(memory, {**pim["command_counts"], "cmd.REF": pim["refreshes"]})["total"]
    busy = report["utilization"]["pim"] * report["makespan_s"]
    assert e["pim_commands"] == pytest.approx(one * 1e-12 * 32 / pim["seconds"] * busy)
    assert pim["command_counts"]["dot.PIM_GEMV"] > 0
    assert e["host_accesses"] == pytest.approx(
        traffic_energy_pj(memory, report["dram_traffic_bytes"]["neupims_hbm"]) * 1e-12)


def test_energy_table_is_its_generators_output(tmp_path):
    # validation/energy.md is write_markdown of validation/energy.json (regenerate both with run_energy.py)
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_energy_md", ROOT / "validation/run_energy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = json.loads((ROOT / "validation/energy.json").read_text())
    module.write_markdown(rows, tmp_path / "energy.md")
    assert (tmp_path / "energy.md").read_text() == (ROOT / "validation/energy.md").read_text()
    # every bundled system has a row, and NeuPIMs' Table 5 stands beside ours
    systems = {p.stem for p in (ROOT / "specs/systems").glob("*.pim")}
    assert systems == {r["system"] for r in rows}
    assert "[NEUPIMS] Table 5 | 0.3641 | 0.6348" in (ROOT / "validation/energy.md").read_text()


def test_a_memory_inside_a_processors_declared_power_adds_only_its_pim_commands():
    # L3's A100s declare 400 W board power and `power_covers = [l3_hbm_pim]` (their HBM is on the
    # module): the HBM-PIM adds no standby and no host-access energy, only its PIM commands (the
    # sample of the test above); the host memory's standby still counts
    system = system_of("specs/systems/l3_gpt3_175b.pim")
    sample = {"command_counts": {"cmd.RD": 10}, "seconds": 1e-6, "refreshes": 0}
    out = run_energy(system, {"makespan_s": 1.0, "tokens_per_s": 1.0,
                              "utilization": {"hbm_pim": 0.5}, "utilization_of": {"hbm_pim": "l3_hbm_pim"},
                              "pim_command_samples": {"l3_hbm_pim": sample}})
    e = out["energy_j"]
    pim = 10 * 402e-12 / 1e-6 * 64 * 8 * 0.5
    assert e["by_resource"]["memory:l3_hbm_pim"] == pytest.approx(pim)
    assert e["by_component"]["dram_standby"] == pytest.approx(64 * 222 / 0.625 * 1e-3)   # the host memory's alone
    assert e["in_processor_power"] == "memory:l3_hbm_pim in gpu:l3_a100"
    assert "host accesses of l3_hbm_pim" not in e["not_counted"]


def test_power_covers_names_memories(errors):
    assert errors("cpu c { active_power = 10 W; power_covers = [c]; }") == [
        "spec.pim:1:46: error: a memory was expected here, this is cpu c\n"
        "    cpu c { active_power = 10 W; power_covers = [c]; }\n"
        "                                                 ^\n"
        "  hint: there are no memory names here"]
