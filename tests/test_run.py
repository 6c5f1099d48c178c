"""`pimc run` and `pimc compile` end to end: the JSON contract, numbers derived by hand, the HBM-PIM
reference through the CLI, fast == exact for whole runs, golden traces, errors and atomic output."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.loops.step.step_run import run_system

from .conftest import ROOT

PHONE = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim")
GEMV = str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim")
GOLDEN = ROOT / "tests" / "golden" / "compile"
ONE_LAYER = ["--set", "llama3_2_1b.layers=1", "--set", "llama3_2_1b.vocab=1024", "--set", "workload.input_len=4"]


def run_json(capsys, *argv):
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_phone_run_json_contract(capsys):
    out = run_json(capsys, PHONE, "--set", "workload.input_len=1", "--set", "workload.output_len=1",
                   "--set", "mapping.strategy=wd")
    for key in ("system", "ttft_s", "tpot_s", "tokens_per_s", "memory_bytes", "utilization", "breakdown_s"):
        assert key in out
    assert out["system"] == "pim_sherpa_llama3_2_1b"
    assert out["memory_bytes"]["total"] == sum(v for k, v in out["memory_bytes"].items()
                                               if k not in ("total", "weights_by_region"))
    # one prefill token on the CPU is memory bound: every weight once at 68.264 GB/s ([PIM_SHERPA] Table 3)
    spec, _ = load_spec(PHONE)
    model = spec.systems["pim_sherpa_llama3_2_1b"].model
    assert out["ttft_s"] == pytest.approx(model.weight_bytes / 68.264e9, rel=0.01)
    # the host-friendly copy is the model's weights exactly; the PIM-aware copy pads to whole rows
    regions = out["memory_bytes"]["weights_by_region"]
    assert regions["host_weights"] == model.weight_bytes
    assert model.weight_bytes < regions["pim_weights"] < 1.06 * model.weight_bytes
    # every decode FC layer and the LM head run on PIM: MAC reads = weight bursts / 16 banks per rank
    pim = out["pim"]
    assert pim["ops"] == 7 * model.layers + 1
    fc_bytes = model.weight_bytes - model.vocab * model.hidden * 2    # minus the embedding (tied: LM head)
    fc_bytes += model.vocab * model.hidden * 2 - model.layers * 2 * model.hidden * 2   # + LM head - norms
    assert pim["command_counts"]["mac.PIM_MAC_RD"] * 32 * 16 * 4 >= fc_bytes
    assert out["breakdown_s"]["decode"]["pim:s24_lpddr5x"] > 0.9 * out["tpot_s"]
    assert out["tokens_per_s"] == pytest.approx(1 / out["end_to_end_s"])


def test_hbm_pim_reference_through_pimc_run(capsys):
    """`pim_cycles` of the 64-pCH Aquabolt-XL system (fast timing, the readback included) equals the
    declared stream timed command by command, which runs past the validation table's count (that
    ends with the park-out reads' data, before the readback)."""
    from pimdsl.frontend.pipeline import load_spec
    from pimdsl.validation import hbm_pim as H
    memory = load_spec(GEMV)[0].memories["aquabolt_xl"]
    committed = json.loads((ROOT / "validation" / "pim_hbm.json").read_text())
    out = run_json(capsys, GEMV, "--set", "gemv.out=4096", "--set", "gemv.in=4096")
    assert out["pim_cycles"] == H.stream_cycles(memory, 64, 4096) > committed["system"]["pim"]
    for row in committed["kernels"][:3]:
        small = run_json(capsys, GEMV, "--set", f"gemv.out={row['out']}", "--set", f"gemv.in={row['in']}")
        assert small["pim_cycles"] == H.stream_cycles(memory, row["per_pch_out"], row["in"]) > row["ours"]


def test_fast_equals_exact_for_a_whole_run():
    spec, _ = load_spec(PHONE, ["llama3_2_1b.layers=2", "llama3_2_1b.vocab=4096", "workload.input_len=3",
                                "workload.output_len=2"])
    system = spec.systems["pim_sherpa_llama3_2_1b"]
    fast, exact = run_system(system, fast=True).report, run_system(system, fast=False).report
    assert fast["pim"]["commands_issued"] < exact["pim"]["commands_issued"]
    for report in (fast, exact):
        report["pim"].pop("commands_issued")
        report.pop("timing")
    assert fast == exact


def test_compile_writes_the_contract_files_and_golden_traces(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", PHONE, "-o", str(out), *ONE_LAYER]) == 0
    for phase in ("prefill", "decode"):
        for name in ("graph.json", "graph.dot", "kernels.txt", "kernels.json", "requests.trace"):
            assert (out / phase / name).is_file()
    assert (out / "decode" / "commands.txt").read_text() == (GOLDEN / "sherpa_1layer_decode_commands.txt").read_text()
    assert (out / "decode" / "kernels.txt").read_text() == (GOLDEN / "sherpa_1layer_decode_kernels.txt").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["decode"]["pim_ops"] == 8        # 7 FC layers + LM head
    assert summary["steps"]["prefill"]["pim_ops"] == 0
    first = (out / "prefill" / "requests.trace").read_text().splitlines()[0].split()
    assert first[1] == "READ" and first[0].startswith("0x")


def test_unrolled_trace_is_timed_and_matches_the_reference_end_point(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["compile", GEMV, "-o", str(out), "--set", "gemv.out=64", "--set", "gemv.in=128", "--unroll"]) == 0
    text = (out / "prefill" / "commands.txt").read_text()
    assert text == (GOLDEN / "hbm_pim_gemv_64x128_unrolled.txt").read_text()
    # the last park-out read's data returns (RL 20 + BL/2 2 cycles) at the validation's count, from cycle 1:
    # validation/pim_hbm.md, out 4096 x in 128 (the same per-pCH kernel) -> 714 cycles
    last_park = max(int(l.split()[0]) for l in text.splitlines() if not l.startswith("#") and " park_rd " in l)
    assert last_park + 22 + 1 == 714


def test_a_region_too_small_is_a_diagnostic_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "never"
    code = main(["compile", PHONE, "-o", str(out), "--set", "s24_lpddr5x.pim_weights.size=1 GiB"])
    err = capsys.readouterr().err
    assert code == 1
    assert "galaxy_s24p.pim:" in err and "does not fit in pim_weights" in err and "hint:" in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pimc")]


def test_print_after_and_time_passes(capsys):
    assert main(["run", PHONE, *ONE_LAYER, "--set", "workload.output_len=1", "--print-after", "allocation",
                 "--time-passes"]) == 0
    err = capsys.readouterr().err
    assert "// IR after allocation" in err
    assert "L0.q_proj = gemv(" in err and "alloc=Allocation(region='pim_weights'" in err
    for name in ("placement", "tiling", "layout", "allocation", "lowering"):
        assert f"pass {name}" in err


def test_timeline_is_a_chrome_trace(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["run", PHONE, *ONE_LAYER, "--set", "workload.output_len=2", "--timeline", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"pim", "cpu"} <= names
    assert any(e["ph"] == "X" and e["name"] == "L0.q_proj" for e in events)


def test_no_system_is_a_clear_error(capsys):
    assert main(["run", str(ROOT / "specs" / "dram" / "ddr4.pim")]) == 1
    assert "declares no system" in capsys.readouterr().err


def test_pimc_run_in_a_subprocess_prints_only_json():
    proc = subprocess.run([sys.executable, "-m", "pimdsl.cli.main", "run", GEMV, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["pim_cycles"] > 0


def test_the_step_loop_overlaps_a_parallel_blocks_ffn_with_attention():
    """Decode of one layer on the phone: with parallel attention the FFN (on PIM) starts before
    attention (on the CPU) ends; sequentially it waits for the residual. The run drops the FFN
    norm and one residual add's time."""
    from pimdsl.interpreter.schedule import schedule
    from pimdsl.loops.step.step_run import OpTimer, compile_step
    overrides = ["llama3_2_1b.layers=1", "llama3_2_1b.vocab=1024", "workload.input_len=4", "workload.output_len=2"]
    runs, starts = {}, {}
    for parallel in ("false", "true"):
        spec, diags = load_spec(PHONE, [*overrides, f"llama3_2_1b.parallel_attention={parallel}"])
        assert spec is not None, diags.render_all()
        system = spec.systems["pim_sherpa_llama3_2_1b"]
        timer = OpTimer(system, fast=True)
        step = schedule(compile_step(system, "decode", 1, 1, 4), lambda attrs: timer.seconds(attrs["lowered"]))
        at = {i.name: i for i in step.intervals}
        starts[parallel] = (at["L0.up_proj"].start_s, at["L0.attn_context"].end_s)
        runs[parallel] = run_system(system).report
    assert starts["true"][0] < starts["true"][1] and starts["false"][0] > starts["false"][1]
    assert runs["true"]["tpot_s"] < runs["false"]["tpot_s"]
    assert runs["true"]["pim"]["ops"] == runs["false"]["pim"]["ops"]        # the same linears on PIM


def test_a_graph_model_prints_its_op_time_and_an_encoder_the_tokens_it_reads(capsys):
    """A single GEMV has no first token or tokens per second: `op_s` is its time. An encoder generates
    nothing: its `tokens_per_s` is the batch's input tokens over the run."""
    gemv = run_json(capsys, GEMV, "--set", "gemv.out=1024", "--set", "gemv.in=256")
    assert gemv["op_s"] == gemv["end_to_end_s"] > 0
    assert not {"ttft_s", "tpot_s", "tokens_per_s"} & set(gemv)
    assert main(["run", GEMV, "--set", "gemv.out=1024", "--set", "gemv.in=256"]) == 0
    text = capsys.readouterr().out
    assert "op_s " in text and "tokens_per_s" not in text
    bert = run_json(capsys, str(ROOT / "specs" / "systems" / "pipeload_bert_large.pim"))
    assert bert["tokens_per_s"] == pytest.approx(bert["batch"] * bert["input_len"] / bert["end_to_end_s"])


CPU_ONLY = """
model m { layers = 2; hidden = 256; heads = 4; ffn = 4 * hidden; vocab = 1000; }
workload w { batch = 1; input_len = 8; output_len = 2; }
mapping p { strategy = default; }
cpu host { cores = 4; peak { fp16 = 100 GFLOPS; } memory_bandwidth = 25.6 GB/s; }
system s { processors = [host]; model = m; workload = w; mapping = p; }
"""


def test_a_system_without_a_memory_counts_its_weights_in_the_processor(tmp_path, capsys):
    """No memory declared: the weights sit in the processor's own memory, and are counted there."""
    path = tmp_path / "cpu_only.pim"
    path.write_text(CPU_ONLY)
    out = run_json(capsys, str(path))
    model = load_spec(str(path))[0].systems["s"].model
    assert out["memory_bytes"]["weights"] == model.weight_bytes > 0
    assert out["memory_bytes"]["weights_by_region"] == {"host": model.weight_bytes}
