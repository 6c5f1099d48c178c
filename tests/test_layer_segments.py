"""NeuPIMs serving prices (loops/iteration_serving/layer_segments.py) and the list scheduling of sub-batch chains (loops/iteration_serving/).

GPT3-7B on specs/systems/neupims_gpt3_7b.pim: TP 4, PP 1 (the paper's Table 3), so a device runs
8 of the 32 heads, 4096 of the 16384 FFN columns and a quarter of the weights (section 7.2). The
PIM channel is the paper's Table 2 HBM: 32 banks, 1 KB page = 512 FP16.
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.frontend.pipeline import load_spec
import dataclasses

from pimdsl.graph.build import SOFTMAX_FLOPS, build_graph, totals
from pimdsl.interpreter.host.models import kernel_time
from pimdsl.lowering.records import Kernel
from pimdsl.ir.errors import CompileError
from pimdsl.serving import greedy_min_load, mha_latency, mha_tile_counts, round_robin
from pimdsl.loops.iteration_serving.layer_segments import SERVING_STRATEGIES, DeviceCosts, Segment
from pimdsl.loops.iteration_serving import schedule_chains, simulate

from .conftest import ROOT

SYSTEMS = ROOT / "specs" / "systems"
REFERENCE_SCORE_PERIOD = 197      # [REFDATA] pim README Sec. 2, without refresh
SEQS = np.array([100, 300, 50])
CHANS = np.array([0, 1, 0])


def _system(name: str, overrides=()):
    """The bundled system with these overrides, elaborated once per process (a System is frozen)."""
    return _loaded(name, tuple(overrides))


@cache
def _loaded(name: str, overrides: tuple):
    spec, diags = load_spec(str(SYSTEMS / f"{name}.pim"), list(overrides))
    assert spec is not None, diags.render_all()
    return spec.systems[name]


@pytest.fixture(scope="module")
def gpt3_7b():
    return _system("neupims_gpt3_7b")


@pytest.fixture(scope="module")
def costs(gpt3_7b):
    """costs(strategy name) -> DeviceCosts of GPT3-7B, one per strategy (the tiles are timed once)."""
    made = {}

    def get(name: str) -> DeviceCosts:
        if name not in made:
            made[name] = DeviceCosts(gpt3_7b, SERVING_STRATEGIES[name])
        return made[name]
    return get


# ---- tensor and pipeline parallelism (section 7) -------------------------------------------

def test_tensor_parallel_share_of_one_device(gpt3_7b, costs):
    c = costs("neupims")
    model = gpt3_7b.model
    assert (model.heads, model.kv_heads, model.ffn, model.layers) == (32, 32, 16384, 32)
    assert (c.tp, c.pp) == (4, 1)
    assert (c.heads, c.kv_heads, c.head_dim, c.ffn, c.hidden, c.layers) == (8, 8, 128, 4096, 4096, 32)
    assert c.weight_bytes_per_device() == model.weight_bytes / 4
    # one token's K and V over the device's 32 layers and 8 heads of 128 FP16
    assert c.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2


def test_tensor_and_pipeline_parallel_share_of_175b():
    system = _system("neupims_gpt3_175b")
    c = DeviceCosts(system, SERVING_STRATEGIES["npu_only"])
    assert (c.tp, c.pp) == (8, 4)                              # Table 3
    assert (c.heads, c.ffn, c.layers) == (96 // 8, 49152 // 8, 96 // 4)
    assert c.weight_bytes_per_device() == system.model.weight_bytes / 32


def test_a_tp_that_does_not_divide_the_heads_is_an_error():
    system = _system("neupims_gpt3_7b", ["mapping.params.tp=3"])
    with pytest.raises(CompileError) as info:
        DeviceCosts(system, SERVING_STRATEGIES["neupims"])
    assert info.value.message == "tp = 3 does not divide the model's heads (32)"
    assert "divides heads" in info.value.hint
    assert info.value.span is not None


def test_tp_must_be_a_whole_number():
    system = _system("neupims_gpt3_7b", ["mapping.params.tp=2.5"])
    with pytest.raises(CompileError, match="'tp' must be a whole number >= 1, got 2.5"):
        DeviceCosts(system, SERVING_STRATEGIES["neupims"])


def test_ring_all_reduce_by_hand(costs, gpt3_7b):
    link = gpt3_7b.links[0]
    assert link.bandwidth_bytes_per_s == 32e9
    segments = {s.name: s for s in costs("npu_pim_drb").layer(SEQS, CHANS)}
    # 3 rows of 4096 FP16 = 24,576 B; a ring of 4 moves a quarter of it in each of 2 x 3 steps
    chunk = 3 * 4096 * 2 / 4
    expected = 2 * (4 - 1) * (link.latency_s + chunk / 32e9)
    assert expected == pytest.approx(1.152e-6)
    for name in ("ar1", "ar2"):
        assert segments[name].resource == "link"
        assert segments[name].seconds == pytest.approx(expected, rel=1e-12)


def test_ring_all_reduce_of_175b_by_hand():
    c = DeviceCosts(_system("neupims_gpt3_175b"), SERVING_STRATEGIES["npu_only"])
    ar = c.layer(np.array([10, 20, 30, 40, 50]), np.zeros(5, dtype=np.int64))[3]
    # 5 rows of 12288 FP16, 8 devices: 14 steps of 15,360 B at 32 GB/s
    assert ar.seconds == pytest.approx(14 * 15360 / 32e9, rel=1e-12)
    assert c.pipeline_send(5) == pytest.approx(5 * 12288 * 2 / 32e9, rel=1e-12)


def test_no_all_reduce_without_tensor_parallelism():
    c = DeviceCosts(_system("neupims_gpt3_7b", ["mapping.params.tp=1"]), SERVING_STRATEGIES["npu_only"])
    assert c.heads == 32
    segments = c.layer(SEQS, CHANS)
    assert [(s.name, s.seconds) for s in segments if s.resource == "link"] == [("ar1", 0.0), ("ar2", 0.0)]
    assert c.pipeline_send(3) == 0.0


def test_no_all_reduce_when_the_mapping_says_none():
    # all_reduce = none: tp only shards (the authors' simulator models no link); no link needed
    c = DeviceCosts(_system("neupims_gpt3_7b", ["mapping.params.all_reduce=none"]), SERVING_STRATEGIES["npu_only"])
    assert c.tp == 4
    assert [(s.name, s.seconds) for s in c.layer(SEQS, CHANS) if s.resource == "link"] == [("ar1", 0.0), ("ar2", 0.0)]


@pytest.mark.parametrize("override, message", [
    ("mapping.params.pipeline=fullbatch", "mapping parameter 'pipeline' must be one of micro_batches, full_batch"),
    ("mapping.params.all_reduce=tree", "mapping parameter 'all_reduce' must be one of ring, none"),
])
def test_pipeline_and_all_reduce_are_checked(override, message):
    with pytest.raises(CompileError, match=message) as info:
        DeviceCosts(_system("neupims_gpt3_30b", [override]), SERVING_STRATEGIES["neupims"])
    assert info.value.span is not None


# ---- the per-channel blocked controller (pim_blocking = channel) ---------------------------

def test_channel_blocking_adds_the_scores_write_back(gpt3_7b):
    blocked = _system("neupims_gpt3_7b", ["neupims_hbm.controller.pim_blocking=channel"])
    serial = DeviceCosts(gpt3_7b, SERVING_STRATEGIES["npu_pim"])
    channel = DeviceCosts(blocked, SERVING_STRATEGIES["npu_pim"])
    assert not serial.channel_blocked and channel.channel_blocked
    # only a single-row-buffer unit is blocked: with dual row buffers the writes run beside PIM
    assert not DeviceCosts(blocked, SERVING_STRATEGIES["npu_pim_drb"]).channel_blocked
    # a 1 KB row written back costs at least its 16 bursts of 2 cycles at 1 GHz, plus the switch
    row = channel.writeback_seconds
    assert 32e-9 < row < 1e-6
    # per request: one row per head and 512-token chunk of its context (8 heads on a tp-4 device)
    seq = np.array([100, 600])
    extra = channel.mha_seconds(seq) - serial.mha_seconds(seq)
    assert extra == pytest.approx(np.array([8, 16]) * row, rel=1e-12)


# ---- the processor's PIM instruction issue (pim_issue_rate, blocked_gemv_issue) ------------

PER_STEP = ["neupims_hbm.controller.pim_blocking=channel", "neupims_hbm.controller.blocked_gemv_issue=per_step"]


def test_host_instructions_per_tile_by_hand(gpt3_7b):
    fused = DeviceCosts(gpt3_7b, SERVING_STRATEGIES["npu_pim"]).tile_instructions
    stepped = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim"]).tile_instructions
    # K.q tile: PIM_HEADER + one GEMV per head of the row (4 x 128 FP16 in 1 KB); per step each
    # GEMV is k = 128 / 16 = 8 COMP steps + its result read. s.V tile: PIM_HEADER + one GEMV of
    # k = 512 / 16 = 32 steps. A GWRITE is one instruction; grouped activations and precharges
    # are the controller's.
    assert fused == {"score": 1 + 4, "attend": 1 + 1, "gwrite": 1}
    assert stepped == {"score": 1 + 4 * (8 + 1), "attend": 1 + 32 + 1, "gwrite": 1}
    # per-step issue is the blocked controller's: with dual row buffers the GEMV stays one instruction
    drb = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim_drb"])
    assert drb.tile_instructions == fused


def test_blocked_attention_is_bound_by_instruction_issue(gpt3_7b):
    # 256 requests of 512 tokens, 8 per channel, at one PIM instruction per 1 GHz cycle
    seqs, chans = np.full(256, 512), np.arange(256) % 32
    blocked = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim"])
    # per request 2 K.q GWRITEs + 2 x 16 tiles x 37, 8 s.V GWRITEs + 8 x 4 tiles x 34
    per_request = 2 + 32 * 37 + 8 + 32 * 34
    assert blocked.mha_issue_seconds(seqs) == pytest.approx(256 * per_request / 1e9, rel=1e-12)
    channel = 8 * float(blocked.mha_seconds(np.array([512]))[0])
    assert blocked.mha_issue_seconds(seqs) > 4 * channel          # issue-bound, by far
    softmax = blocked.layer(seqs, chans)[1].seconds - blocked.mha_issue_seconds(seqs)
    assert 0 < softmax < 0.2 * channel                               # then softmax, blocked
    # fused GEMVs (dual row buffers) leave the channels the bound: 256 x (10 + 64 + 32 x 2) < channel time
    drb = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim_drb"])
    assert drb.mha_issue_seconds(seqs) == pytest.approx(256 * (10 + 32 * 5 + 32 * 2) / 1e9, rel=1e-12)
    assert drb.layer(seqs, chans)[1].seconds == pytest.approx(8 * float(drb.mha_seconds(np.array([512]))[0]))


def test_a_short_last_chunk_issues_fewer_steps(gpt3_7b):
    # 700 tokens: K.q as before (2 GWRITEs, 2 x 22 tiles of 37); s.V per head a full chunk of 512
    # (4 tiles of 1 + 32 + 1) and a last chunk of 188 tokens, k = ceil(188 / 16) = 12 (4 tiles of
    # 1 + 12 + 1), 16 GWRITEs: [NEUPIMS_SIM] NeuPIMSAttend.cc issues num_comps of the last chunk
    blocked = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim"])
    per_request = 2 + 44 * 37 + 16 + 8 * (4 * 34 + 4 * 14)
    seqs = np.array([700, 700, 512])
    assert blocked.mha_issue_seconds(seqs) == pytest.approx((2 * per_request + 2 + 32 * 37 + 8 + 32 * 34) / 1e9,
                                                            rel=1e-12)
    # fused GEMVs issue one instruction whatever k is
    drb = DeviceCosts(_system("neupims_gpt3_7b", PER_STEP), SERVING_STRATEGIES["npu_pim_drb"])
    assert drb.mha_issue_seconds(np.array([700])) == pytest.approx((2 + 44 * 5 + 16 + 64 * 2) / 1e9, rel=1e-12)


def test_no_issue_limit_without_a_rate(gpt3_7b):
    free = DeviceCosts(_system("neupims_gpt3_7b", [*PER_STEP, "neupims_npu.pim_issue_rate=0"]),
                       SERVING_STRATEGIES["npu_pim"])
    assert free.mha_issue_seconds(np.full(256, 512)) == 0.0


def test_issue_options_are_checked():
    spec, diags = load_spec(str(SYSTEMS / "neupims_gpt3_7b.pim"), ["neupims_hbm.controller.blocked_gemv_issue=both"])
    assert spec is None and "blocked_gemv_issue" in diags.render_all()
    spec, diags = load_spec(str(SYSTEMS / "neupims_gpt3_7b.pim"), ["neupims_npu.pim_issue_rate=-1"])
    assert spec is None and "pim_issue_rate" in diags.render_all()


# ---- PIM tiles and Algorithm 1 (section 6.3) -------------------------------------------------

@pytest.mark.parametrize("strategy", ["npu_pim", "npu_pim_drb"])
def test_score_tile_period_near_the_reference(costs, strategy):
    c = costs(strategy)
    clock = c.memory.part.clock_hz
    t = c.tile_seconds
    # with blocking refresh the steady-state K.q tile takes at least the reference's 197 cycles
    # (measured without refresh), and refresh every tREFI = 3900 costs less than 10 %
    assert REFERENCE_SCORE_PERIOD <= t["score"] * clock <= 1.10 * REFERENCE_SCORE_PERIOD
    assert t["attend"] > 0 and t["gwrite"] > 0
    # an s.V tile has one PIM_GEMV, a K.q tile four: it is the shorter one
    assert t["attend"] < t["score"]


def test_measured_tiles_kept_on_disk_equal_a_fresh_measure(gpt3_7b, tmp_path, monkeypatch):
    """The tile periods, the NPU's read share and the write-back kept by content (timing_cache) are
    the measurement itself, bit for bit, and another memory gets entries of its own."""
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    blocked = _system("neupims_gpt3_7b", ["neupims_hbm.controller.pim_blocking=channel"])
    for system, strategy, what in ((gpt3_7b, "npu_pim_drb", "tile_seconds"), (gpt3_7b, "npu_pim_drb", "read_share"),
                                   (blocked, "npu_pim", "writeback_seconds")):
        first = getattr(DeviceCosts(system, SERVING_STRATEGIES[strategy]), what)      # measured (empty cache), stored
        again = DeviceCosts(system, SERVING_STRATEGIES[strategy])
        setattr(again, f"_measure_{what}", lambda: pytest.fail("measured again"))
        assert getattr(again, what) == first                # read back, bit for bit
    assert len(list(tmp_path.glob("*.json"))) == 3
    # the same heads on a memory whose controller differs: measured again, not read back
    DeviceCosts(blocked, SERVING_STRATEGIES["npu_pim_drb"]).tile_seconds
    assert len(list(tmp_path.glob("*.json"))) == 4


# (seq_len, score GWRITEs, score tiles, attend GWRITEs, attend tiles) for 8 heads of 128 on 32
# banks with 512-element pages: score GWRITEs ceil(1024/512); tiles ceil(seq/32) per GWRITE;
# attend GWRITEs ceil(seq/512) per head; attend tiles ceil(128/32) = 4 per attend GWRITE
HAND_COUNTS = [(1, 2, 2, 8, 32), (80, 2, 6, 8, 32), (513, 2, 34, 16, 64)]


@pytest.mark.parametrize("seq,sg,st_,ag,at", HAND_COUNTS, ids=[str(r[0]) for r in HAND_COUNTS])
def test_mha_seconds_is_algorithm_1_by_hand(costs, seq, sg, st_, ag, at):
    c = costs("npu_pim_drb")
    assert c.mha_tile_counts(seq) == dict(score_gwrites=sg, score_tiles=st_, attend_gwrites=ag, attend_tiles=at)
    assert mha_tile_counts(seq, heads=8, head_dim=128, page_elems=512, banks=32) == c.mha_tile_counts(seq)
    t = c.tile_seconds
    by_hand = (sg + ag) * t["gwrite"] + st_ * t["score"] + at * t["attend"]
    got = c.mha_seconds(np.array([seq]))
    assert got.shape == (1,)
    assert got[0] == pytest.approx(by_hand, rel=1e-12)
    # and Algorithm 1 as serving/channel_assignment.py states it, with the measured tiles
    assert got[0] == pytest.approx(mha_latency(seq, heads=8, head_dim=128, page_elems=512, banks=32,
                                               tile_latency=lambda kind, _: t[kind],
                                               gwrite_latency=t["gwrite"]), rel=1e-12)


def test_mha_seconds_is_vectorised(costs):
    c = costs("npu_pim_drb")
    seqs = np.array([1, 80, 513, 2000])
    assert np.allclose(c.mha_seconds(seqs), [c.mha_seconds(np.array([s]))[0] for s in seqs], rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(a=st.integers(1, 8192), b=st.integers(1, 8192))
def test_mha_seconds_does_not_fall_with_the_sequence(costs, a, b):
    c = costs("npu_pim_drb")
    short, long_ = c.mha_seconds(np.array([min(a, b), max(a, b)]))
    assert 0 < short <= long_


# ---- one decoder layer ----------------------------------------------------------------------

@pytest.mark.parametrize("strategy", list(SERVING_STRATEGIES))
def test_layer_is_six_segments_in_order(costs, strategy):
    segments = costs(strategy).layer(SEQS, CHANS)
    assert [s.name for s in segments] == ["qkv", "mha", "proj", "ar1", "ffn", "ar2"]
    attention = "pim" if SERVING_STRATEGIES[strategy].pim else "npu"
    assert [s.resource for s in segments] == ["npu", attention, "npu", "link", "npu", "link"]
    assert all(s.seconds > 0 for s in segments)


def _softmax_seconds(c: DeviceCosts, seqs) -> float:
    """Softmax over every score of the batch (8 heads a request) on the NPU's vector units."""
    scores = float(np.sum(seqs)) * c.heads
    k = Kernel("softmax", "elementwise", c.processor.name, "fp16", SOFTMAX_FLOPS * scores, 2 * scores * 2)
    t = kernel_time(c.processor, k)
    return max(t.compute_s, t.memory_s)


def _channel_loads(c: DeviceCosts, seqs, chans) -> np.ndarray:
    loads = np.zeros(c.channels)
    for s, ch in zip(seqs, chans):
        loads[ch] += c.mha_seconds(np.array([s]))[0]
    return loads


def test_blocked_pim_runs_softmax_after_the_gemvs(costs):
    c = costs("npu_pim")
    loads = _channel_loads(c, SEQS, CHANS)
    assert loads[0] == pytest.approx(float(np.sum(c.mha_seconds(np.array([100, 50])))))
    softmax = _softmax_seconds(c, SEQS)
    assert softmax > 0
    mha = c.layer(SEQS, CHANS)[1]
    assert mha.seconds == pytest.approx(loads.max() + softmax, rel=1e-12)
    assert mha.pim_busy_s == pytest.approx(float(np.sum(c.mha_seconds(SEQS))), rel=1e-12)


def test_dual_buffers_overlap_softmax_with_the_gemvs(costs):
    c = costs("npu_pim_drb")
    loads = _channel_loads(c, SEQS, CHANS)
    softmax = _softmax_seconds(c, SEQS)
    mha = c.layer(SEQS, CHANS)[1]
    assert mha.seconds == pytest.approx(max(loads.max(), softmax), rel=1e-12)
    assert mha.seconds < loads.max() + softmax
    assert mha.pim_busy_s == pytest.approx(float(np.sum(c.mha_seconds(SEQS))), rel=1e-12)
    assert mha.flops == 0 and mha.dram_bytes == 0               # PIM's traffic stays in the banks


def test_gemm_flops_by_hand(costs):
    for strategy in ("npu_pim_drb", "gpu_only"):
        qkv, _, proj, _, ffn, _ = costs(strategy).layer(SEQS, CHANS)
        m, d = 3, 4096
        assert qkv.flops == 2 * m * d * (8 + 2 * 8) * 128          # QKV: 3 x 4096 by 4096 x 3072
        assert proj.flops == 2 * m * (8 * 128) * d                  # output projection: 1024 -> 4096
        assert ffn.flops == 2 * m * d * 4096 + 2 * m * 4096 * d     # FFN up and down, 16384 / 4 columns
    # without PIM, K.q and s.V are GEMVs over every head's tokens on the processor
    mha = costs("npu_only").layer(SEQS, CHANS)[1]
    assert mha.flops == 2 * (2 * 8 * 450 * 128)


# ---- the layer's work is the op graph's: every model feature counts ---------------------------

def _graph_bytes(c: DeviceCosts) -> float:
    """Weights, reads and writes of one decode layer of the device's shard for SEQS, by the graph."""
    t = totals(build_graph(dataclasses.replace(c.shard, layers=1), "decode", len(SEQS), context=list(SEQS - 1)))
    return t["weight_bytes"] + t["read_bytes"] + t["write_bytes"], t["flops"]


@pytest.mark.parametrize("strategy", ["neupims", "npu_only"])
def test_a_gated_ffn_costs_the_gate_the_graph_adds(gpt3_7b, strategy):
    plain = DeviceCosts(gpt3_7b, SERVING_STRATEGIES[strategy])
    gated = DeviceCosts(_system("neupims_gpt3_7b", ["gpt3_7b.gated_ffn=true"]), SERVING_STRATEGIES[strategy])
    before, after = plain.layer(SEQS, CHANS), gated.layer(SEQS, CHANS)
    (bytes_p, flops_p), (bytes_g, flops_g) = _graph_bytes(plain), _graph_bytes(gated)
    m, d, f = 3, 4096, 4096                                     # 16384 FFN columns over tp = 4
    assert flops_g - flops_p == 2 * m * d * f + m * f           # the gate GEMM and the gate product
    ffn_p, ffn_g = before[4], after[4]
    assert ffn_g.flops - ffn_p.flops == 2 * m * d * f           # systolic FLOPs: the gate GEMM
    # the graph's extra bytes, less the input the fused gate-and-up GEMM reads once
    assert ffn_g.dram_bytes - ffn_p.dram_bytes == pytest.approx(bytes_g - bytes_p - m * d * 2, rel=1e-12)
    assert ffn_g.seconds > ffn_p.seconds
    for a, b in zip(before[:4], after[:4]):                     # nothing else changes
        assert a == b


def test_grouped_query_attention_costs_less_by_the_graph(gpt3_7b, costs):
    gqa = DeviceCosts(_system("neupims_gpt3_7b", ["gpt3_7b.kv_heads=8"]), SERVING_STRATEGIES["npu_only"])
    assert (gqa.heads, gqa.kv_heads) == (8, 2)
    mha, qkv = costs("npu_only").layer(SEQS, CHANS)[1::-1]
    mha_g, qkv_g = gqa.layer(SEQS, CHANS)[1::-1]
    assert qkv.flops - qkv_g.flops == 2 * 3 * 4096 * (2 * 6 * 128)    # 6 fewer K and 6 fewer V heads
    # K.q and s.V read 2 of 8 KV heads of each of the 450 cached tokens
    assert mha.dram_bytes - mha_g.dram_bytes == pytest.approx(2 * 450 * 6 * 128 * 2, rel=1e-12)
    assert mha_g.seconds <= mha.seconds and qkv_g.seconds < qkv.seconds
    assert (_graph_bytes(costs("npu_only"))[0] - _graph_bytes(gqa)[0]
            == pytest.approx(qkv.dram_bytes + mha.dram_bytes - qkv_g.dram_bytes - mha_g.dram_bytes, rel=1e-12))


def test_grouped_query_attention_on_pim_shares_the_rows_not_the_gemvs(gpt3_7b, costs):
    # 8 query heads over 2 KV heads per device: the cache holds a quarter of the K and V rows, but
    # each query head still needs its own GEMV over its group's rows, and the global buffer holds
    # one row of query vectors (4 heads) or one 512-token chunk of one head's scores: the GWRITEs,
    # headers and GEMVs of K.q and s.V are those of 8 query heads.
    gqa = DeviceCosts(_system("neupims_gpt3_7b", ["gpt3_7b.kv_heads=8"]), SERVING_STRATEGIES["npu_pim_drb"])
    mha = costs("npu_pim_drb")
    assert gqa.kv_bytes_per_token() == mha.kv_bytes_per_token() / 4
    seq = np.array([100, 600, 2048])
    assert gqa.mha_seconds(seq) == pytest.approx(mha.mha_seconds(seq), rel=1e-12)
    assert gqa.mha_issue_seconds(seq) == mha.mha_issue_seconds(seq)


def test_the_serving_loop_serves_a_gated_model_slower():
    small = ["workload.batch=8", "workload.requests=16", "workload.dataset=alpaca"]
    plain = simulate(_system("neupims_gpt3_7b", small)).report
    gated = simulate(_system("neupims_gpt3_7b", [*small, "gpt3_7b.gated_ffn=true"])).report
    assert gated["requests"] == plain["requests"] == 16
    assert gated["tokens_per_s"] < plain["tokens_per_s"]
    assert gated["ttft_s"] > plain["ttft_s"]                     # the prefill's graph has the gate too


def test_greedy_min_load_beats_round_robin_on_skewed_lengths(costs):
    c = costs("npu_pim_drb_gmlbp")
    # 64 requests on 32 channels: every 32nd is long, so round robin stacks the long ones on channel 0
    new = [(i, 1800 if i % 32 == 0 else 40) for i in range(64)]
    estimate = lambda seq: float(c.mha_seconds(np.array([seq]))[0])
    seqs = np.array([s for _, s in new])

    def channel_of(assignment):
        where = {key: ch for ch, items in enumerate(assignment.channels) for key, _ in items}
        return np.array([where[i] for i, _ in new])

    rr = c.layer(seqs, channel_of(round_robin(new, c.channels, estimate)))[1]
    greedy = c.layer(seqs, channel_of(greedy_min_load(new, c.channels, estimate)))[1]
    assert greedy.seconds <= rr.seconds
    assert greedy.seconds < 0.6 * rr.seconds                    # the two long requests on two channels
    assert greedy.pim_busy_s == pytest.approx(rr.pim_busy_s)     # the same work, placed better


# ---- list scheduling of the sub-batches' chains (section 6.2, Figure 11) --------------------

CHAIN = [Segment("a", "npu", 2.0), Segment("b", "pim", 3.0), Segment("c", "npu", 1.0)]


def _recorded(chains, layers, blocked=False):
    seen = []
    makespan = schedule_chains(chains, layers, blocked=blocked, record=lambda *args: seen.append(args))
    return makespan, seen


def test_one_chain_runs_serially():
    assert schedule_chains([CHAIN], 2) == 12.0                  # 2 x (2 + 3 + 1)
    assert schedule_chains([CHAIN], 2, blocked=True) == 12.0


def test_two_chains_interleave_by_hand():
    # earliest start first, ties to chain 0 (A); B's NPU work fills A's PIM time:
    #   A: npu 0-2, pim 2-5, npu 5-6 | npu 6-8,  pim 8-11,  npu 11-12
    #   B: npu 2-4, pim 5-8, npu 8-9 | npu 9-11, pim 11-14, npu 14-15
    makespan, seen = _recorded([CHAIN, CHAIN], 2)
    assert makespan == 15.0 < 2 * 12.0
    assert [(chain, layer, seg.name, start, end) for chain, layer, seg, start, end in seen] == [
        (0, 0, "a", 0, 2), (0, 0, "b", 2, 5), (1, 0, "a", 2, 4), (0, 0, "c", 5, 6), (1, 0, "b", 5, 8),
        (0, 1, "a", 6, 8), (0, 1, "b", 8, 11), (1, 0, "c", 8, 9), (1, 1, "a", 9, 11), (0, 1, "c", 11, 12),
        (1, 1, "b", 11, 14), (1, 1, "c", 14, 15)]
    assert schedule_chains([CHAIN, CHAIN], 2) == 15.0           # the same without a recorder


def test_blocked_pim_takes_the_npu():
    # a single row buffer: PIM segments hold the NPU too, so nothing overlaps; A runs whole (every
    # tie goes to chain 0), then B
    makespan, seen = _recorded([CHAIN, CHAIN], 2, blocked=True)
    assert makespan == 24.0
    assert [(chain, start, end) for chain, _, _, start, end in seen] == [
        (0, 0, 2), (0, 2, 5), (0, 5, 6), (0, 6, 8), (0, 8, 11), (0, 11, 12),
        (1, 12, 14), (1, 14, 17), (1, 17, 18), (1, 18, 20), (1, 20, 23), (1, 23, 24)]


@pytest.mark.parametrize("blocked", [False, True])
def test_record_sees_every_segment_once_and_resources_never_overlap(costs, blocked):
    c = costs("neupims")
    chains = [c.layer(np.array([100, 300]), np.array([0, 1])), c.layer(np.array([50, 700, 20]), np.array([0, 2, 1]))]
    layers = 3
    makespan, seen = _recorded(chains, layers, blocked)
    assert sorted((chain, layer, seg.name) for chain, layer, seg, _, _ in seen) == sorted(
        (i, layer, seg.name) for i, chain in enumerate(chains) for layer in range(layers) for seg in chain)
    by_resource = {}
    for chain, layer, seg, start, end in seen:
        assert end - start == pytest.approx(seg.seconds)
        res = "npu" if blocked and seg.resource == "pim" else seg.resource
        if end > start:
            by_resource.setdefault(res, []).append((start, end))
    for res, intervals in by_resource.items():
        intervals.sort()
        for (s0, e0), (s1, e1) in zip(intervals, intervals[1:]):
            assert s1 >= e0 - 1e-15, f"{res}: [{s0}, {e0}] overlaps [{s1}, {e1}]"
    # each chain keeps its order: a segment starts when the one before it ends, or later
    for i in range(len(chains)):
        mine = [(start, end) for chain, _, _, start, end in seen if chain == i]
        assert all(s1 >= e0 - 1e-15 for (_, e0), (s1, _) in zip(mine, mine[1:]))
    assert makespan == pytest.approx(max(end for *_, end in seen))
    serial = layers * sum(s.seconds for chain in chains for s in chain)
    assert makespan <= serial + 1e-15


def test_many_layers_agree_with_the_segment_by_segment_schedule(costs):
    c = costs("neupims")
    chains = [c.layer(np.array([100, 300]), np.array([0, 1])), c.layer(np.array([50, 700]), np.array([0, 2]))]
    exact, _ = _recorded(chains, 32)
    assert schedule_chains(chains, 32) == pytest.approx(exact, rel=1e-9)
    assert math.isfinite(exact) and exact > 0


@pytest.mark.parametrize("norms", [1, 2])
def test_a_parallel_block_cuts_its_ffn_branch_and_serves(norms):
    """The FFN branch is its own segment (not under proj), every op of the layer is in one segment,
    one all-reduce per layer; the serving loop runs such a model."""
    from pimdsl.loops.model_layers.layer_work import layer_segments
    par = ["gpt3_7b.parallel_attention=true", f"gpt3_7b.parallel_norms={norms}"]
    seq_sys, par_sys = _system("neupims_gpt3_7b"), _system("neupims_gpt3_7b", par)
    work = layer_segments(par_sys.model, "decode", [10, 20])
    names = {s: [op.name for op in ops] for s, ops in work.items()}
    assert names["proj"] == ["L0.o_proj"]
    assert names["ffn"][-1] == "L0.residual" and ("L0.norm_ffn" in names["ffn"]) == (norms == 2)
    assert names["qkv"][0] == "L0.norm_attn" and "L0.norm_attn" not in names["ffn"]
    g = build_graph(dataclasses.replace(par_sys.model, layers=1), "decode", batch=2, context=[10, 20])
    layer_ops = [n for n in g if n.startswith("L0.")]
    fused = {n for ops in names.values() for op in ops for n in op.split("+")}
    assert fused == set(layer_ops)
    assert sum(op.flops for ops in work.values() for op in ops) == sum(g.nodes[n]["op"].flops for n in layer_ops)
    a, b = (DeviceCosts(s, SERVING_STRATEGIES["npu_pim_drb_gmlbp"]) for s in (seq_sys, par_sys))
    sa, sb = a.layer(SEQS, CHANS), b.layer(SEQS, CHANS)
    assert sa[3].seconds > 0 and sb[3].seconds == 0 and sb[5].seconds == sa[5].seconds   # ar1 folds into ar2
    small = ["workload.batch=8", "workload.requests=16", "workload.dataset=alpaca"]
    report = simulate(_system("neupims_gpt3_7b", [*small, *par])).report
    assert report["requests"] == 16 and report["tokens_per_s"] > 0


@settings(max_examples=15, deadline=None)
@given(contexts=st.lists(st.integers(0, 5000), min_size=1, max_size=6), again=st.lists(st.integers(0, 5000),
       min_size=1, max_size=6), gqa=st.booleans(), parallel=st.booleans(), tokens=st.integers(1, 40))
def test_a_layer_cut_reused_for_other_contexts_equals_a_fresh_cut(contexts, again, gqa, parallel, tokens):
    """layer_segments builds one (model, phase, batch) cut and swaps in the attention ops of later
    contexts: every op equals the one a fresh graph of those contexts gives."""
    from pimdsl.loops.model_layers import layer_work
    sets = (["gpt3_7b.kv_heads=8"] if gqa else []) + (["gpt3_7b.parallel_attention=true"] if parallel else [])
    model = _system("neupims_gpt3_7b", sets).model
    again = (again * len(contexts))[:len(contexts)]           # the same batch: the cut is reused
    for phase, t in (("decode", 1), ("prefill", tokens)):
        layer_work.layer_segments(model, phase, contexts, t)
        reused = layer_work.layer_segments(model, phase, again, t)
        assert reused == layer_work._cut(model, phase, again, t)


# ---- the processor's grouped PIM dispatch (pim_dispatch = grouped) --------------------------

def _phases(c, seqs):
    t = c.tile_seconds
    sg, st_, ag, at_ = c._mha_counts(seqs)
    return sg * t["gwrite"] + st_ * t["score"], ag * t["gwrite"] + at_ * t["attend"]


@pytest.mark.parametrize("scratchpad, expect", [("1 GiB", "one group"), ("1 KiB", "one request a group")])
def test_grouped_dispatch_by_hand(scratchpad, expect):
    # no issue limit, so a group takes its busiest channel; K.q's groups, then s.V's
    system = _system("neupims_gpt3_7b", ["neupims_npu.pim_dispatch=grouped", "neupims_npu.pim_issue_rate=0",
                                         f"neupims_npu.scratchpad={scratchpad}"])
    c = DeviceCosts(system, SERVING_STRATEGIES["npu_pim_drb"])
    seqs, chans = np.array([100, 600, 300, 50]), np.array([1, 0, 1, 2])
    kq, sv = _phases(c, seqs)
    if expect == "one group":                 # every channel at once: the busiest one, per phase
        want = max(kq[0] + kq[2], kq[1], kq[3]) + max(sv[0] + sv[2], sv[1], sv[3])
    else:                                     # one request in flight at a time
        want = kq.sum() + sv.sum()
    assert c.grouped_pim_seconds(seqs, chans) == pytest.approx(want, rel=1e-12)
    segments = {s.name: s for s in c.layer(seqs, chans)}
    assert segments["mha"].seconds >= c.grouped_pim_seconds(seqs, chans)


def test_grouped_dispatch_needs_a_scratchpad():
    spec, diags = load_spec(str(SYSTEMS / "neupims_gpt3_7b.pim"),
                            ["neupims_npu.pim_dispatch=grouped", "neupims_npu.scratchpad=0 B"])
    assert spec is None and "give `scratchpad = ...;`" in diags.render_all()
