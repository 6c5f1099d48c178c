"""`pimc run` through the pipelined-loading loop: the contract keys, weights, budget, strategies."""
import json

import pytest

from pimdsl.cli.main import main
from tests.conftest import ROOT

GPTJ = str(ROOT / "specs" / "systems" / "pipeload_gpt_j_6b.pim")


def run_json(capsys, *argv):
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpt_j_reports_weights_budget_and_per_strategy_latency(capsys):
    out = {s: run_json(capsys, GPTJ, "--set", f"mapping.strategy={s}") for s in ("baseline", "pipeswitch", "pipeload")}
    for r in out.values():
        for key in ("system", "ttft_s", "tpot_s", "tokens_per_s", "memory_bytes", "utilization", "breakdown_s"):
            assert key in r
        mem = r["memory_bytes"]
        assert mem["total"] == mem["weights"] + mem["activations"]
        assert r["tokens_per_s"] == pytest.approx(8 / r["end_to_end_s"])
    # fp16 layer elements: 4 attention and 2 FFN matrices; ln1, 4 attention biases and b2; b1
    # (no ln2: GPT-J's layer is parallel with one shared norm)
    layer = 4 * 4096 * 4096 + 2 * 4096 * 16384 + 2 * 4096 + 4 * 4096 + 4096 + 16384
    whole = out["baseline"]["storage_bytes"]["weights"]
    assert out["baseline"]["memory_bytes"]["weights"] == whole and whole > 12e9
    assert out["pipeswitch"]["memory_bytes"]["weights"] == whole       # PipeSwitch never frees
    pl = out["pipeload"]
    assert pl["memory_bytes"]["weights_by_part"]["layers_peak"] == 6 * 2 * layer   # one layer per agent
    assert pl["within_limit"] and pl["memory_bytes"]["total"] <= 7000e6
    assert not out["baseline"]["within_limit"]
    ends = [out[s]["end_to_end_s"] for s in ("baseline", "pipeswitch", "pipeload")]
    assert len(set(ends)) == 3
    # PipeSwitch reloads every layer for each of 8 tokens with one agent: about 8x the layer bytes at its rate
    rate = 8 * 11535e6 / 76.4946
    assert out["pipeswitch"]["end_to_end_s"] == pytest.approx(8 * 28 * 2 * layer / rate, rel=0.02)


def test_the_planner_keeps_within_a_tight_limit(capsys):
    out = run_json(capsys, GPTJ, "--set", "mapping.params.loading_agents=auto", "--set", "workload.memory_limit=2000MB")
    m = out["loading_agents"]
    # 2000 MB less 842.5 MB resident and 11.5 MB activations holds two 402.8 MB layers, not three
    assert out["memory_bytes"]["total"] <= 2000e6 and set(out["planner_latency_s"]) == {"1", "2"}
    assert m == 2 and out["planner_latency_s"]["2"] < out["planner_latency_s"]["1"]


def test_a_limit_below_one_layer_is_a_located_error(capsys):
    assert main(["run", GPTJ, "--set", "workload.memory_limit=1000MB"]) == 1
    err = capsys.readouterr().err
    assert "pipeload_gpt_j_6b.pim:" in err and "cannot hold" in err and "Traceback" not in err


def test_sweep_runs_the_same_loop_as_run(capsys, tmp_path):
    runs = {s: run_json(capsys, GPTJ, "--set", f"mapping.strategy={s}")["end_to_end_s"] for s in ("baseline", "pipeload")}
    out = tmp_path / "sweep.csv"
    assert main(["sweep", GPTJ, "--grid", "mapping.strategy=baseline,pipeload", "-o", str(out), "-j", "1"]) == 0
    import csv
    rows = {r["strategy"]: float(r["end_to_end_s"]) for r in csv.DictReader(out.open())}
    assert rows == pytest.approx(runs)
