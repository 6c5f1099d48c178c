"""The L3 system: the sub-batch split and chunking against hand-worked examples, ranksets, the DIMM-PIM
bank period against the DRAM engine, trace lengths, and the serving loop's bookkeeping."""
from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec
from pimdsl.loops.sub_batch_serving import dimm_pim_costs as dc
from pimdsl.loops.sub_batch_serving import STRATEGIES, decode_iteration_s, setup
from pimdsl.loops.sub_batch_serving.sub_batch_split import chunk, split, split_by_class
from pimdsl.serving.requests import gamma_lengths, requests_for

from .conftest import ROOT

SPEC = str(ROOT / "specs/systems/l3_gpt3_175b.pim")


@cache          # a System is frozen: each set of overrides is elaborated once per process
def system(*sets, spec=SPEC):
    loaded, diags = load_spec(spec, list(sets))
    assert loaded is not None, diags.render_all()
    return next(iter(loaded.systems.values()))


def sums(tokens, sides):
    return sorted(sorted(tokens[i] for i in side) for side in sides)


def test_split_pairs_the_papers_example():
    # [L3] Sec. 5.3 step 2: "2k, 3k, 4k, 5k" -> (2k, 5k) and (3k, 4k)
    tokens = [2000, 3000, 4000, 5000]
    assert sums(tokens, split(tokens)) == [[2000, 5000], [3000, 4000]]


@given(st.lists(st.integers(1, 20000), max_size=40))
@settings(max_examples=60, deadline=None)
def test_split_is_a_partition_within_the_largest_request(tokens):
    a, b = split(tokens)
    assert sorted(a + b) == list(range(len(tokens)))
    gap = abs(sum(tokens[i] for i in a) - sum(tokens[i] for i in b))
    assert gap <= (max(tokens) if tokens else 0)


def test_split_by_class_halves_each_rankset():
    # two rankset classes, each with the paper's example: each sub-batch gets 7k of each class
    tokens = [2000, 3000, 4000, 5000] * 2
    classes = [0] * 4 + [1] * 4
    sides = split_by_class(tokens, classes)
    for side in sides:
        for cls in (0, 1):
            assert sum(tokens[i] for i in side if classes[i] == cls) == 7000


def test_chunk_hand_worked():
    per_token = lambda c: np.asarray(c, float) * 1e-3       # 1 ms a token
    assert chunk(1000, 0.100, per_token) == 96     # 100 tokens fit: the largest multiple of 16 is 96
    assert chunk(90, 0.100, per_token) == 90       # fits whole: not chunked
    assert chunk(1000, 0.005, per_token) == 16     # never below one multiple
    assert chunk(10, 0.0, per_token) == 10         # a tail shorter than a multiple goes whole
    assert chunk(1000, 0.100, lambda c: 0.02 + np.asarray(c, float) * 1e-3, multiple=32) == 64


def test_a_rankset_transfer_blocks_only_its_rankset():
    s = system("workload.requests=1")
    _, costs, *_ = setup(s)
    loads = np.array([1000.0, 1000.0, 1000.0, 1000.0])
    quiet = costs.rankset_finish(loads, np.zeros(4), True)
    block = np.array([0.002, 0.0, 0.0, 0.0])
    busy = costs.rankset_finish(loads, block, True)
    assert busy[0] == pytest.approx(quiet[0] + 0.002)
    assert np.array_equal(busy[1:], quiet[1:])
    # without ranksets the same write stalls every rank
    flat = costs.rankset_finish(loads, block, False)
    assert np.allclose(flat - costs.rankset_finish(loads, np.zeros(4), False), 0.002)


def test_bank_period_is_the_closed_form_on_the_engine():
    """One bank streaming rows (ACT, every burst, PRE) on the spec's DDR4: period tRCD + (n - 1) tCCD_L
    + tRTP + tRP, the last PRE one tRP before the end ([JESD79-4] timing of [L3] Table 2)."""
    mem = system("workload.requests=1").memories[0]
    t, n = mem.part.timing_cycles, mem.organization.bursts_per_row
    period = t["tRCD"] + (n - 1) * t["tCCD_L"] + t["tRTP"] + t["tRP"]
    assert dc.bank_row_cycles(mem, rows=8, refresh="none") * 8 == 7 * period + period - t["tRP"]
    # with refresh the period grows by about the refresh share
    with_ref = dc.bank_row_cycles(mem)
    assert period < with_ref < period / (1 - dc.refresh_share(mem)) * 1.02


def test_bank_level_bandwidth_is_table_2s():
    _, costs, *_ = setup(system("workload.requests=1"))
    hw = costs.hw
    # [L3] Table 2: 13.0 TB/s DIMM-PIM peak; ours pays row switches and refresh (about 8% less)
    assert hw.rankset_bw * hw.ranksets == pytest.approx(12.0e12, rel=0.01)
    # [L3] T8: "about 8x" the bandwidth of rank-level PIM; the bank PUs also pay their row switches (-4%)
    ratio = hw.rankset_bw * hw.ranksets / hw.rank_pu_bw
    assert 0.95 * 8 < ratio < 8


def test_gamma_lengths_keep_mean_and_std_and_stay_positive():
    rng = np.random.default_rng(1)
    x = gamma_lengths(rng, 12684.1, 8464.6, 40000)      # [L3] Table 4 OpenR1 output
    assert x.min() >= 1
    assert x.mean() == pytest.approx(12684.1, rel=0.02) and x.std() == pytest.approx(8464.6, rel=0.03)


def test_trace_requests_are_seeded():
    wl = system("workload.requests=50").workload
    a, b = requests_for(wl), requests_for(wl)
    assert a == b and len(a) == 50 and min(r.input_len for r in a) >= 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_serves_every_request(strategy, capsys):
    assert main(["run", SPEC, "--set", "workload.requests=12", "--set", "workload.mean_output_len=300",
                 "--set", f"mapping.strategy={strategy}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["served"] + out["oom_requests"] == 12 and out["tokens_per_s"] > 0
    assert out["end_to_end_s"] >= out["ttft_s"] > 0
    assert all(0 <= u <= 1 + 1e-9 for u in out["utilization"].values())
    # per-request statistics (every request arrives at 0 s): no request ends after the run
    for name in ("ttft", "tpot", "end_to_end"):
        assert 0 < out[f"{name}_p50_s"] <= out[f"{name}_p99_s"], name
    assert out["end_to_end_s"] <= out["end_to_end_p99_s"] <= out["makespan_s"]
    assert out["tokens_per_s"] == pytest.approx(out["output_tokens"] / out["makespan_s"])


def test_decode_time_grows_with_context_and_falls_with_ranksets():
    s4 = system("workload.requests=1")
    s16 = system("workload.requests=1", "L3_DDR4_PIM.organization.ranks=16", "l3_host_mem.capacity=8TiB")
    t4 = [decode_iteration_s(s4, [ctx] * 32) for ctx in (2000, 8000)]
    assert t4[0] < t4[1]
    assert decode_iteration_s(s16, [8000] * 32) < t4[1]


@pytest.mark.parametrize("sets, message", [
    (["mapping.strategy=l4"], "is not a valid strategy"),
    (["mapping.params.sub_batch_split=random"], "sub_batch_split 'random'"),
    (["mapping.params.tp=16"], "needs 16 GPUs"),
    (["workload.kv_admission=on_demand"], "kv_admission = on_demand is not modelled"),
    (["mapping.params.ranksets=4"], "has no param 'ranksets'"),
])
def test_bad_mapping_is_a_located_error(sets, message, capsys):
    args = [a for s in sets for a in ("--set", s)]
    assert main(["run", SPEC, "--set", "workload.requests=2", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "error:" in err and "Traceback" not in err


def test_learned_predictors_schedule_close_to_the_cost_model(capsys):
    sets = ["--set", "workload.requests=40", "--set", "workload.mean_input_len=2000", "--set", "workload.std_input_len=1000",
            "--set", "workload.mean_output_len=200", "--set", "workload.std_output_len=100"]
    out = {}
    for predictor in ("oracle", "learned"):
        assert main(["run", SPEC, *sets, "--set", f"mapping.params.predictor={predictor}", "--json"]) == 0
        out[predictor] = json.loads(capsys.readouterr().out)
    assert out["learned"]["tokens_per_s"] == pytest.approx(out["oracle"]["tokens_per_s"], rel=0.1)
    errors = out["learned"]["predictor_errors"]
    assert errors["fc"]["samples"] > 10 and errors["fc"]["mean_relative_error"] < 0.1


def test_decode_vectors_cross_pcie_on_the_critical_path():
    """[L3] Sec. 5.1: decode Q/K/V go to the host and the attention outputs come back every layer, so a
    slower PCIe lengthens every decode iteration of L3, and not R-PIM's (communication free, Sec. 6.1)."""
    slow = "l3_pcie.bandwidth=1GB/s"
    # long contexts: the PIM side (MHA + vectors, [L3] Eq. 2) is the longer of each phase, so every byte counts
    fast, slow_l3 = (decode_iteration_s(system("workload.requests=1", *s), [60000] * 16) for s in ([], [slow]))
    # 16 requests x (Q, K, V up + output down, 4 x 12288 fp16) per layer over 8 links, on each of 96 layers
    per_second_of_link = 96 * 16 * 4 * 12288 * 2 / 8
    assert slow_l3 - fast == pytest.approx(per_second_of_link * (1 / 1e9 - 1 / 31.5e9), rel=0.05)
    r_pim = [decode_iteration_s(system("workload.requests=1", "mapping.strategy=r_pim", *s), [4000] * 16)
             for s in ([], [slow])]
    assert r_pim[0] == r_pim[1]


@pytest.mark.parametrize("strategy,prefilled", [("l3", 0), ("l3", 1), ("r_pim", 0)])
def test_the_kv_the_bank_pus_read_and_the_gpus_write_is_every_requests_by_hand(strategy, prefilled, capsys):
    # decode step j of a request with a prompt of n tokens reads the K and V of its n + 1 + j cached
    # tokens in every layer (j = 0 .. out - 2) and writes its own; its prefill wrote the prompt's n
    # (none when the prompt's KV is there already): whatever the schedule, the sums are the requests'
    sets = ["workload.requests=12", "workload.mean_output_len=300", f"mapping.strategy={strategy}",
            f"mapping.params.prefilled={prefilled}"]
    assert main(["run", SPEC, *sum((["--set", x] for x in sets), []), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = system(*sets)
    requests = requests_for(s.workload)
    assert out["served"] == len(requests) == 12
    kv = dc.Shape.of(s.model).kv_token_bytes * s.model.layers
    read = sum((r.output_len - 1) * (r.input_len + 1) + (r.output_len - 1) * (r.output_len - 2) // 2
               for r in requests)
    written = sum(r.output_len - 1 + (0 if prefilled else r.input_len) for r in requests)
    assert out["pim_traffic_bytes"] == {"l3_host_mem": pytest.approx(read * kv)}
    assert out["dram_traffic_bytes"] == {"l3_host_mem": {"read": 0.0, "write": pytest.approx(written * kv)}}
    assert out["utilization_of"] == {("dimm_bank" if strategy == "l3" else "rank_pu"): "l3_host_mem"}
    # the bank PUs' commands: the attention programs' sample, per K and V byte read; the rank PUs
    # read over the rank bus, a burst per access and an ACT per row
    from pimdsl.interpreter.dram.energy import command_energy_pj, traffic_energy_pj
    mem = next(m for m in s.memories if m.name == "l3_host_mem")
    if strategy == "l3":
        sample = out["pim_command_samples"]["l3_host_mem"]
        assert sample["command_counts"]["mac.RD"] > 0 and sample["bytes"] == 2 * 512 * 32 * 128 * 2
        e = command_energy_pj(mem, {**sample["command_counts"], "cmd.REF": sample["refreshes"]})
        # by hand: every K and V byte is read once by an all-bank command (16 banks x 64 B per command,
        # at 4 x a 2784 pJ burst) from rows an all-bank ACT opened (16 x 8 KB per ACT, 16 x 4200 pJ)
        assert (e["total"] - e["refresh"]) / sample["bytes"] == pytest.approx(4 * 2784 / 1024 + 4200 / 8192)
        pim = e["total"] / sample["bytes"] * read * kv
    else:
        pim = traffic_energy_pj(mem, read * kv)
    assert out["energy_j"]["by_component"]["pim_commands"] == pytest.approx(pim * 1e-12)


def test_the_hbm_pim_baseline_counts_its_programs_commands_while_busy(capsys):
    # the attention programs' commands on one channel (a sample of whole periods, blocking refresh):
    # their energy per second, times 64 channels and the 8 stacks, over the hbm_pim busy time
    from pimdsl.interpreter.dram.energy import command_energy_pj
    sets = ["workload.requests=12", "workload.mean_output_len=300", "mapping.strategy=hbm_pim"]
    assert main(["run", SPEC, *sum((["--set", x] for x in sets), []), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    hbm = next(m for m in system(*sets).memories if m.name == "l3_hbm_pim")
    sample = out["pim_command_samples"]["l3_hbm_pim"]
    assert sample["command_counts"]["dot.PIM_GEMV"] > 0 and out["utilization_of"] == {"hbm_pim": "l3_hbm_pim"}
    one = command_energy_pj(hbm, {**sample["command_counts"], "cmd.REF": sample["refreshes"]})["total"]
    busy = out["utilization"]["hbm_pim"] * out["makespan_s"]
    assert out["energy_j"]["by_component"]["pim_commands"] == pytest.approx(one * 1e-12 * 64 / sample["seconds"] * busy * 8)
    assert out["dram_traffic_bytes"] == {"l3_host_mem": {"read": 0.0, "write": 0.0}}     # the KV stays in HBM
