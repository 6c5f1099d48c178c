"""`pimc explain`: each step's bound and the spec lines its time comes from, cross-checked with `pimc run`."""
import json
from pathlib import Path

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT

PHONE = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim")
SMALL = ["--set", "llama3_2_1b.layers=1", "--set", "llama3_2_1b.vocab=1024", "--set", "workload.input_len=4",
         "--set", "workload.output_len=1"]


def _json(capsys, command, *argv):
    assert main([command, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _line(value):
    path, line = value["at"].rsplit(":", 1)
    return Path(path).read_text().splitlines()[int(line) - 1].strip()


def test_the_steps_are_the_runs_ttft_and_tpot(capsys):
    ran = _json(capsys, "run", PHONE, *SMALL)
    told = _json(capsys, "explain", PHONE, *SMALL)
    prefill, decode = told["steps"]
    assert (prefill["phase"], decode["phase"]) == ("prefill", "decode")
    assert prefill["seconds"] == pytest.approx(ran["ttft_s"], rel=1e-12)
    assert decode["seconds"] == pytest.approx(ran["tpot_s"], rel=1e-12)        # one decode step
    for step in told["steps"]:
        busiest = max(step["groups"], key=lambda g: g["seconds"])
        assert step["bound"] == busiest["resource"]
        assert sum(g["seconds"] for g in step["groups"] if g["resource"] == step["bound"]) == pytest.approx(
            step["bound_share"] * step["seconds"], rel=1e-9)


def test_the_phone_explained(capsys):
    """The README's main system: prefill bound by the CPU's GEMMs at its bf16 peak and efficiency; TPOT
    by the PIM GEMVs, whose stream the column-to-column rule of the PIM MAC reads binds most."""
    told = _json(capsys, "explain", PHONE)
    prefill, decode = told["steps"]
    assert prefill["bound"] == "cpu:s24_cpu" and decode["bound"] == "pim:s24_lpddr5x"
    gemm = prefill["groups"][0]
    assert (gemm["kind"], gemm["bound_by"]) == ("gemm", "roofline compute") and gemm["share"] > 0.9
    assert [v["value"] for v in gemm["values"]] == ["s24_cpu.peak.bf16", "s24_cpu.efficiency"]
    assert "bf16 = 321 GFLOPS" in _line(gemm["values"][0]) and _line(gemm["values"][1]).startswith("efficiency")
    pim = decode["groups"][0]
    assert (pim["resource"], pim["kind"], pim["bound_by"]) == ("pim:s24_lpddr5x", "gemv", "DRAM command stream")
    clock, top, *rest = pim["values"]
    assert clock["value"] == "S24_LPDDR5X.clock" and _line(clock).startswith("clock")
    assert "PIM_MAC_RD" in top["text"] and top["text"].endswith("= tCCD_L;") and top["text"] == _line(top)
    assert top["share"] > 0.1 and all(v["share"] <= top["share"] for v in rest)
    host = {g["kind"]: g for g in decode["groups"] if g["resource"] == "cpu:s24_cpu"}
    assert host["softmax"]["bound_by"] == "roofline memory"
    assert _line(host["softmax"]["values"][0]).startswith("memory_bandwidth = 68.264 GB/s")
    assert main(["explain", PHONE, *SMALL]) == 0
    text = capsys.readouterr().out
    assert "decode step: " in text and "bound by pim:s24_lpddr5x" in text and "galaxy_s24p.pim:" in text


def test_a_set_value_points_at_the_command_line_and_other_loops_say_they_are_not_explained(capsys):
    told = _json(capsys, "explain", PHONE, *SMALL, "--set", "s24_cpu.memory_bandwidth=50GB/s")
    softmax = next(g for g in told["steps"][1]["groups"] if g["kind"] == "softmax")
    assert softmax["values"][0]["at"].startswith("--set s24_cpu.memory_bandwidth=50GB/s")
    assert main(["explain", str(ROOT / "specs" / "systems" / "l3_gpt3_175b.pim")]) == 1
    assert "explain takes apart the step loop only" in capsys.readouterr().err


def test_a_graph_models_one_step_is_its_op_time(capsys):
    gemv = str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim")
    sets = ["--set", "gemv.out=1024", "--set", "gemv.in=256"]
    (step,) = _json(capsys, "explain", gemv, *sets)["steps"]
    assert step["headline"] == "op_s" and step["bound"] == "pim:aquabolt_xl"
    assert step["seconds"] == pytest.approx(_json(capsys, "run", gemv, *sets)["op_s"], rel=1e-12)
