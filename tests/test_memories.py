"""Systems of several memories (issue 15 part 1): the mapping's `data` block puts host weights, KV
cache and activations in a memory of their own; data crossing between memories is an op on the link
that joins them, timed by the link model; `memory d[4]` spreads its data over four instances;
`pimc run --json` reports memory by memory."""
from __future__ import annotations

import json
import math

import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec

SPEC = """
import "hardware/galaxy_s24p.pim";
import "dram/ddr5.pim";
import "models/llama3_2_1b.pim";

dram SMALL_DDR5 : DDR5_4800 { organization { rows = ROWS; } }
memory host_ddr[COUNT] { part = SMALL_DDR5; address_map = [row, rank, bank, bank_group, channel, column]; }
link pcie { kind = pcie; bandwidth = BW; latency = LAT; endpoints = [host_ddr, s24_lpddr5x]; }
mapping split {
  strategies = [wd];
  strategy = wd;
  prefill { fc = s24_cpu; attention = s24_cpu; lm_head = s24_cpu; }
  decode { fc = pim; lm_head = s24_cpu; attention = s24_cpu; }
  DATA
}
workload w { batch = 1; input_len = 4; output_len = 2; }
system s { processors = [s24_cpu]; memories = [host_ddr, s24_lpddr5x]; LINKS model = llama3_2_1b;
           mapping = split; workload = w; }
"""
ONE_LAYER = ["--set", "llama3_2_1b.layers=1"]
HOST_DATA = "data { weights = host_ddr; kv_cache = host_ddr; activations = host_ddr; }"


def spec(tmp_path, rows=65536, count=1, bw="16 GB/s", lat="1 us", data=HOST_DATA, links="links = [pcie];"):
    path = tmp_path / "s.pim"
    path.write_text(SPEC.replace("ROWS", str(rows)).replace("COUNT", str(count)).replace("BW", bw)
                    .replace("LAT", lat).replace("DATA", data).replace("LINKS", links))
    return path


def run(path, capsys, *sets):
    status = main(["run", str(path), *ONE_LAYER, *sets, "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    return json.loads(out.out)


def test_host_weights_live_in_host_dram_and_pim_weights_on_the_device(tmp_path, capsys):
    report = run(spec(tmp_path), capsys)
    host, device = report["memories"]["host_ddr"], report["memories"]["s24_lpddr5x"]
    loaded, _ = load_spec(spec(tmp_path), ["llama3_2_1b.layers=1"])
    model = loaded.systems["s"].model
    # every host op reads its own host-friendly copy (wd), in host DRAM: the model's weights exactly
    assert host["weights"] == model.weight_bytes
    # the decode FC layers' PIM-aware copies, padded to whole rows, on the PIM device
    fc = sum(n * k for n, k in ((2048, 2048), (512, 2048), (512, 2048), (2048, 2048),
                                (8192, 2048), (8192, 2048), (2048, 8192))) * 2
    assert fc <= device["weights"] < 1.06 * fc
    assert host["kv_cache"] == 2 * 8 * 64 * (4 + 2) * 2 and device["kv_cache"] == 0
    assert host["activations"] > 0 and device["activations"] == 0
    assert report["memory_bytes"]["weights"] == host["weights"] + device["weights"]
    # without the data block, everything sits in the PIM memory, as before
    default = run(spec(tmp_path, data=""), capsys)
    assert default["memories"]["host_ddr"]["total"] == 0
    assert default["memories"]["s24_lpddr5x"]["weights"] == report["memory_bytes"]["weights"]


def test_data_crossing_memories_is_timed_on_the_link(tmp_path, capsys):
    report = run(spec(tmp_path), capsys)
    # one decode step of one Llama 3.2 1B layer, FC on PIM, the rest on the CPU: 11 crossings
    # (norm -> QKV, Q/K/V -> host, context -> O, O -> host, norm -> up/gate, up, gate -> host,
    # gated -> down, down -> host) of 6 x 4096 + 2 x 1024 + 3 x 16384 bytes (bf16)
    per_step = 11 * 1e-6 + (6 * 4096 + 2 * 1024 + 3 * 16384) / 16e9
    assert report["breakdown_s"]["decode"]["link:pcie"] == pytest.approx(2 * per_step, rel=1e-9)
    assert "link:pcie" not in report["breakdown_s"]["prefill"]          # prefill stays on the host
    slow = run(spec(tmp_path, bw="1 GB/s", lat="1 ms"), capsys)
    assert slow["tpot_s"] > report["tpot_s"] + 5e-3                      # the link is on the critical path


def test_data_crossing_memories_needs_a_link(tmp_path, capsys):
    status = main(["run", str(spec(tmp_path, links="")), *ONE_LAYER])
    err = capsys.readouterr().err
    assert status == 1 and "declares no link" in err and "s.pim:17:1: error:" in err


def test_a_memory_of_four_instances_spreads_its_data_over_them(tmp_path, capsys):
    small = 2048                                   # rows: 0.5 GiB an instance, less than the host weights
    status = main(["run", str(spec(tmp_path, rows=small)), *ONE_LAYER])
    err = capsys.readouterr().err
    assert status == 1 and "does not fit in memory 'host_ddr'" in err and "s.pim:7:1: error:" in err
    report = run(spec(tmp_path, rows=small, count=4), capsys)
    host = report["memories"]["host_ddr"]
    assert host["instances"] == 4 and host["capacity_bytes"] == 4 * 2**29
    assert host["per_instance_bytes"] == math.ceil(host["total"] / 4) < 2**29 < host["total"]
    assert host["fits"]


@pytest.mark.parametrize("data, where, message", [
    ("data { weights = host_dram; }", "14:20", "'host_dram' is not a valid weights"),
    ("data { weigths = host_ddr; }", "14:10", "unknown field 'weigths' in data"),
    ("data { kv_cache = spare; }", "14:10", "the mapping puts kv_cache in memory 'spare', which system 's' does not have"),
])
def test_a_wrong_data_block_is_a_located_diagnostic(tmp_path, capsys, data, where, message):
    path = spec(tmp_path, data=data)
    path.write_text(path.read_text() + "memory spare { part = DDR5_4800; address_map = [row, rank, bank, "
                    "bank_group, channel, column]; }\n")
    status = main(["run", str(path), *ONE_LAYER])
    err = capsys.readouterr().err
    assert status == 1 and f"s.pim:{where}: error: {message}" in err, err


def _lm_head(path):
    """The decode step's LM head (a host GEMV over the tied embedding) and its time on the CPU."""
    from pimdsl.interpreter.host.models import kernel_time
    from pimdsl.loops.step.step_run import compile_step
    loaded, diags = load_spec(str(path), ["llama3_2_1b.layers=1"])
    assert loaded is not None, diags.render_all()
    system = loaded.systems["s"]
    kernel = compile_step(system, "decode", 1, 1, 4).graph.nodes["lm_head"]["lowered"]
    return kernel, kernel_time(system.processors[0], kernel)


def test_host_kernels_read_weights_at_the_bandwidth_of_the_memory_that_holds_them(tmp_path):
    slow, t_slow = _lm_head(spec(tmp_path))                   # in host DDR5: 2 channels x 19.2 GB/s peak
    fast, t_fast = _lm_head(spec(tmp_path, data=""))          # in the LPDDR5X, as fast as the CPU reads
    wide, t_wide = _lm_head(spec(tmp_path, count=4))          # four DDR5 DIMMs: 153.6 GB/s
    assert slow.bytes == fast.bytes == wide.bytes > 128256 * 2048 * 2
    assert t_slow.memory_s == pytest.approx(slow.bytes / 38.4e9, rel=1e-12)
    assert t_fast.memory_s == pytest.approx(fast.bytes / 68.264e9, rel=1e-12)     # the CPU's bandwidth
    assert t_wide.memory_s == pytest.approx(wide.bytes / 68.264e9, rel=1e-12)     # the CPU's again
    assert fast.bandwidth is None and wide.bandwidth is None and slow.bandwidth == 38.4e9


PIM_SPEC = """
import "hardware/galaxy_s24p.pim";
import "models/llama3_2_1b.pim";
memory pim4[COUNT] : s24_lpddr5x {}
mapping m { decode { fc = pim; } }
workload w { batch = 1; input_len = 1; output_len = 1; }
system s { processors = [s24_cpu]; memories = [pim4]; model = llama3_2_1b; mapping = m; workload = w; }
"""


def test_a_pim_memory_of_four_instances_runs_each_op_on_all_four(tmp_path, capsys):
    reports = {}
    for count in (1, 4):
        path = tmp_path / f"pim{count}.pim"
        path.write_text(PIM_SPEC.replace("COUNT", str(count)))
        reports[count] = run(path, capsys)
    one, four = reports[1], reports[4]
    # the decode step's FC GEMVs (up to 8192 x 2048), a quarter of the rows on each instance at once
    assert 3.5 < one["pim"]["seconds"] / four["pim"]["seconds"] <= 4.0
    assert "instances" not in one["pim"] and "pim:pim4" in one["breakdown_s"]["decode"]
    tracks = [f"pim:pim4[{i}]" for i in range(4)]
    assert list(four["pim"]["instances"]) == tracks
    for track in tracks:
        mine = four["pim"]["instances"][track]
        assert mine["ops"] == four["pim"]["ops"] == one["pim"]["ops"]
        # every FC layer's rows divide by 4: each instance runs the same share, as long as the op
        assert mine["seconds"] == pytest.approx(four["pim"]["seconds"], rel=1e-12)
        assert four["breakdown_s"]["decode"][track] == pytest.approx(four["breakdown_s"]["decode"][tracks[0]])
        assert four["utilization"][track] > 0
    assert sum(four["pim"]["instances"][t]["commands"] for t in tracks) >= one["pim"]["commands"]
    assert four["tpot_s"] < one["tpot_s"]
