"""NeuPIMs serving end to end: vLLM-style admission with preemption, the periodic schedule
shortcut, every strategy through `pimc run`, the timeline, and diagnostics."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
from pimdsl.frontend.resources import specs_dir
from pimdsl.serving import IterationScheduler, PagedKVCache, Request
from pimdsl.loops.iteration_serving.layer_segments import SERVING_STRATEGIES, DeviceCosts, Segment
from pimdsl.loops.iteration_serving import _iteration, schedule_chains, simulate
from pimdsl.serving.scheduler import BatchEntry

from .conftest import pimc

SYSTEMS = specs_dir() / "systems"




def serve(model: str, *overrides: str, allow_outside: bool = False) -> dict:
    name = f"neupims_gpt3_{model}"
    spec, diags = load_spec(str(SYSTEMS / f"{name}.pim"), list(overrides), allow_outside=allow_outside)
    assert spec is not None, diags.render_all()
    return simulate(spec.systems[name]).report


# ---- on_demand admission (vLLM) ----------------------------------------------------------------

def run_all(sched: IterationScheduler) -> list:
    return list(sched.run_to_completion())


def test_on_demand_preempts_the_youngest_and_recomputes_it():
    # 4 pages of 2 tokens. A (3 in, 4 out) and B (1 in, 4 out) both fit on demand (2 + 1 pages,
    # watermark ceil(0.04) = 1 page), though their lifetimes (4 + 3 pages) would not (reserve).
    kv = PagedKVCache(capacity_bytes=4 * 2 * 10, page_tokens=2, bytes_per_token=10)
    reqs = [Request(0, 3, 4, 0.0), Request(1, 1, 4, 0.0)]
    its = run_all(IterationScheduler(reqs, max_batch=4, kv_cache=kv, admission="on_demand"))
    # it0: A prefills (2 pages); B needs 1 + A's growth 0 + watermark 1 <= 2 free: admitted too
    assert its[0].admitted == (0, 1) and its[0].preempted == ()
    # it1: A 3->4 tokens (no page), B 1->2 (no page); it2: A 4->5 needs a page, B 2->3 needs one:
    # 2 needed, 1 free -> B (the youngest) is preempted before it2
    assert [e.request_id for e in its[1].entries] == [0, 1]
    assert its[2].preempted == (1,)
    assert [(e.request_id, e.phase) for e in its[2].entries] == [(0, "decode")]
    # B comes back when A's growth and its own recompute fit: prefill of 1 + 1 generated token
    back = next(i for i in its if 1 in i.admitted and i.index > 0)
    entry = next(e for e in back.entries if e.request_id == 1)
    assert (entry.phase, entry.new_tokens, entry.decode_step) == ("prefill", 2, 1)
    # every request decodes exactly output_len tokens, numbered 1..output_len once each
    for r in reqs:
        steps = [e.decode_step for i in its for e in i.entries if e.request_id == r.id and e.phase == "decode"]
        assert steps == list(range(1, r.output_len + 1))


def test_reserve_admits_by_lifetime_so_the_batch_stays_smaller():
    kv = lambda: PagedKVCache(capacity_bytes=10 * 4 * 1, page_tokens=4, bytes_per_token=1)
    reqs = [Request(i, 4, 8, 0.0) for i in range(6)]      # 3 pages over a life, 1 page at admission
    reserve = run_all(IterationScheduler(reqs, 6, kv(), "reserve"))
    demand = run_all(IterationScheduler(reqs, 6, kv(), "on_demand"))
    assert len(reserve[0].admitted) == 3                  # 3 x 3 lifetime pages <= 10
    assert len(demand[0].admitted) == 6                   # 6 prompt pages + watermark 1 <= 10
    # it1: every cache is a full page, so each next token needs one: 6 wanted, 4 free -> the
    # youngest goes back and frees its page (5 wanted, 5 free); 5 decode against reserve's 3
    assert demand[1].preempted == (5,)
    decoding = lambda it: sum(e.phase == "decode" for e in it.entries)
    assert (decoding(demand[1]), decoding(reserve[1])) == (5, 3)


def test_unknown_admission_is_refused():
    with pytest.raises(ValueError, match="reserve or on_demand"):
        IterationScheduler([], 1, PagedKVCache(10, 1, 1), "vllm")


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=12),
       pages=st.integers(7, 20), batch=st.integers(1, 6))
def test_on_demand_serves_everyone_within_the_cache(lengths, pages, batch):
    # page_tokens 4: the largest request (24 tokens) needs 6 pages; 7 always holds one
    reqs = [Request(i, a, b, 0.0) for i, (a, b) in enumerate(lengths)]
    kv = PagedKVCache(pages * 4, 4, 1)
    its = run_all(IterationScheduler(reqs, batch, kv, "on_demand"))
    for it in its:
        assert it.kv_used_pages <= pages
        assert len(it.entries) <= batch
    for r in reqs:
        steps = [e.decode_step for i in its for e in i.entries if e.request_id == r.id and e.phase == "decode"]
        assert steps == list(range(1, r.output_len + 1))
    assert kv.used_pages == 0


# ---- the periodic shortcut of the layer schedule --------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), chains=st.integers(1, 3), layers=st.integers(1, 40),
       blocked=st.booleans(), same=st.booleans())
def test_schedule_shortcut_equals_every_segment(seed, chains, layers, blocked, same):
    rng = random.Random(seed)
    kinds = ["npu", "pim", "npu", "link", "npu", "link"]
    make = lambda: [Segment("s", k, rng.choice([0.0, rng.random() * 1e-4])) for k in kinds]
    segs = [make()] * chains if same else [make() for _ in range(chains)]
    fast = schedule_chains(segs, layers, blocked)
    exact = schedule_chains(segs, layers, blocked, exact=True)
    assert fast == pytest.approx(exact, rel=1e-12, abs=1e-18)


def test_two_sub_batches_hide_pim_under_the_npu():
    # Figure 11(b): with NPU 3 + PIM 3 per layer, two chains overlap one's PIM with the other's NPU
    chain = [Segment("npu", "npu", 3.0), Segment("pim", "pim", 3.0)]
    assert schedule_chains([chain], 4) == 24.0
    assert schedule_chains([chain, chain], 4) == 27.0      # 8 NPU slots of 3 back to back, + last PIM
    assert schedule_chains([chain, chain], 4, blocked=True) == 48.0


# ---- every strategy through the serving loop ------------------------------------------------------

@pytest.fixture(scope="module")
def small_7b():
    """7B at batch 64, every strategy. 128 requests (not the spec's 4 x batch) still keep the batch full
    while half of them wait, which is all the contract and the strategies' order need, at 2/3 the time."""
    return {s: serve("7b", f"mapping.strategy={s}", "workload.batch=64", "workload.requests=128")
            for s in SERVING_STRATEGIES}


CONTRACT = ("system", "ttft_s", "tpot_s", "tokens_per_s", "memory_bytes", "utilization", "breakdown_s")


def test_every_strategy_reports_the_contract(small_7b):
    for name, r in small_7b.items():
        assert all(k in r for k in CONTRACT), name
        assert r["strategy"] == name and r["tokens_per_s"] > 0 and r["ttft_s"] > 0
        assert set(r["utilization"]) == {"npu", "npu_busy", "pim", "bandwidth"}
        assert r["utilization"]["npu"] <= r["utilization"]["npu_busy"] <= 1
        assert 0 < r["utilization"]["npu"] <= 1 and 0 < r["utilization"]["bandwidth"] <= 1
        assert r["memory_bytes"]["total"] == r["memory_bytes"]["weights"] + r["memory_bytes"]["kv_cache"]
        assert r["mean_decode_batch"] == pytest.approx(64, abs=1)       # full batches measured
        assert (r["utilization"]["pim"] > 0) == SERVING_STRATEGIES[name].pim
        # per request: TTFT within its end-to-end latency, no request past the run's end; a request's
        # TPOT is at least one iteration of the full batch (it decodes one token per iteration)
        assert 0 < r["ttft_s"] < r["end_to_end_s"] <= r["end_to_end_p99_s"] <= r["makespan_s"]
        assert r["tpot_p50_s"] <= r["tpot_p99_s"] and r["tpot_s"] >= 0.9 * r["iteration_s"]
        assert r["makespan_s"] == r["breakdown_s"]["decode"]


def test_strategies_differ_as_their_mechanisms_say(small_7b):
    tps = {k: v["tokens_per_s"] for k, v in small_7b.items()}
    assert tps["npu_pim"] > tps["npu_only"]                     # MHA off the NPU (Sec. 8.2)
    assert tps["npu_pim_drb"] >= tps["npu_pim"]                 # softmax under the GEMVs (Fig. 10)
    assert tps["npu_pim_drb_gmlbp"] > tps["npu_pim_drb"]        # balanced channels (Fig. 13)
    assert small_7b["npu_pim"]["row_buffers"] == "single" and small_7b["neupims"]["sub_batches"] == 2


def test_alpaca_has_shorter_requests():
    r = serve("7b", "workload.dataset=alpaca", "workload.batch=64")
    assert r["dataset"] == "alpaca"
    assert r["mean_input_len"] == pytest.approx(12, rel=0.2) and r["mean_output_len"] == pytest.approx(56, rel=0.2)


def test_requests_from_a_csv(tmp_path):
    csv = tmp_path / "requests.csv"
    csv.write_text("input_len,output_len,arrival\n" + "".join(f"{8 + i % 50},{4 + i % 30},0\n" for i in range(40)))
    r = serve("7b", f'workload.requests_csv="{csv}"', "workload.batch=16", allow_outside=True)
    assert (r["dataset"], r["requests"]) == (str(csv), 40)
    assert r["mean_input_len"] == pytest.approx(sum(8 + i % 50 for i in range(40)) / 40)


@pytest.mark.parametrize("model,tp,pp", [("13b", 4, 1), ("30b", 4, 2), ("175b", 8, 4)])
def test_table3_parallelism(model, tp, pp):
    # one batch of requests, not the spec's four: the parallelism is the mapping's, whatever is served
    r = serve(model, "workload.batch=64", "workload.requests=64", "workload.dataset=alpaca")
    assert (r["tp"], r["pp"], r["devices"]) == (tp, pp, tp * pp)
    assert r["tokens_per_s"] > 0


# ---- the command line -------------------------------------------------------------------------------

def test_pimc_run_json_and_timeline(tmp_path):
    out = tmp_path / "timeline.json"
    proc = pimc("run", str(SYSTEMS / "neupims_gpt3_7b.pim"), "--set", "mapping.strategy=neupims",
                    "--set", "workload.batch=16", "--set", "workload.requests=32", "--json", "--timeline", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["strategy"] == "neupims" and report["batch"] == 16
    events = json.loads(out.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M"}
    assert {"device", "iterations", "npu", "pim", "link"} <= tracks
    spans = [e for e in events if e.get("ph") == "X"]
    assert {e["name"] for e in spans} >= {"iteration 1", "qkv sb1", "mha sb2", "ffn sb1"}


@pytest.mark.parametrize("override,message", [
    ("mapping.params.tp=3", "tp = 3 does not divide the model's heads (32)"),
    ("workload.kv_admission=vllm", "'vllm' is not a valid kv_admission"),
])
def test_bad_serving_input_is_a_diagnostic(override, message):
    proc = pimc("run", str(SYSTEMS / "neupims_gpt3_7b.pim"), "--set", override, "--json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_weights_that_do_not_fit_are_a_diagnostic():
    proc = pimc("run", str(SYSTEMS / "neupims_gpt3_175b.pim"), "--set", "mapping.params.tp=1")
    assert proc.returncode == 1
    assert "do not fit in the weights region" in proc.stderr and "neupims.pim:" in proc.stderr


def test_compile_writes_one_devices_shard(tmp_path):
    # 30B, Table 3: tp 4 x pp 2 -> 14 of 56 heads and 24 of 48 layers on a device
    out = tmp_path / "out"
    proc = pimc("compile", str(SYSTEMS / "neupims_gpt3_30b.pim"), "-o", str(out),
                    "--set", "workload.batch=2", "--set", "workload.input_len=8")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"]["decode"]["ops_by_device"]["pim:neupims_hbm"] == 2 * 24     # K.q and s.V per layer
    nodes = {n["name"]: n for n in json.loads((out / "decode" / "graph.json").read_text())["nodes"]}
    assert nodes["L0.q_proj"]["shape"] == {"m": 2, "k": 7168, "n": 14 * 128}
    assert "L23.attn_score" in nodes and "L24.attn_score" not in nodes
    commands = (out / "decode" / "commands.txt").read_text()
    assert "PIM_HEADER" in commands and "estimate=" in commands and "estimate=-" not in commands


def test_full_batch_pipeline_runs_one_stage_of_the_whole_batch():
    # pipeline = full_batch (every stage holds the batch): an iteration is one stage time of all
    # decoding requests, no micro-batches and no send; micro_batches sums pp stage times plus sends
    def costs(*overrides):
        spec, diags = load_spec(str(specs_dir() / "systems" / "neupims_gpt3_30b.pim"), list(overrides))
        assert spec is not None, diags.render_all()
        return DeviceCosts(spec.systems["neupims_gpt3_30b"], SERVING_STRATEGIES["npu_pim"])
    decode = [BatchEntry(i, "decode", 50 + 10 * i, 1, 1) for i in range(6)]
    channel_of = {i: i % 2 for i in range(6)}
    full, micro = costs("mapping.params.pipeline=full_batch"), costs()
    seqs, chans = [51 + 10 * i for i in range(6)], [i % 2 for i in range(6)]
    one_stage = schedule_chains([full.layer(np.array(seqs), np.array(chans))], full.layers)
    assert _iteration(full, decode, channel_of, 0, 0.0, None).seconds == pytest.approx(one_stage, rel=1e-12)
    halves = sum(schedule_chains([micro.layer(np.array(seqs[h]), np.array(chans[h]))], micro.layers)
                 + micro.pipeline_send(3) for h in (slice(0, 3), slice(3, 6)))
    assert _iteration(micro, decode, channel_of, 0, 0.0, None).seconds == pytest.approx(halves, rel=1e-12)
