"""The NeuPIMs reproduction table stays what validation/neupims.json committed, and its claims hold.

Recomputes two grid points (7B, the smallest batch, seconds each, run the authors' simulator's way)
and fails when one drifts; the rows must follow from the committed grid, and the markdown must show
every row and explain every gap over 10%. The issue's targets are checked on the committed grid:
the order NeuPIMs > NPU+PIM > NPU-only at batch 256, the Fig. 12 means, Fig. 13's dual-row-buffer
gain, each met or, where validation/neupims.md traces a miss to a stated difference from the
authors' simulator, at least as close as committed. Regenerate with
`python validation/run_neupims.py` after a deliberate change and update the explanations.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.validation import neupims_serving as V

from .conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "neupims.json").read_text())
MD = (ROOT / "validation" / "neupims.md").read_text()
ROWS = {r["quantity"]: r for r in COMMITTED["rows"]}


@pytest.mark.parametrize("strategy", ["npu_pim", "neupims"])
def test_grid_point_has_not_drifted(strategy):
    point = ("7b", "alpaca", 64, strategy)
    k, ours = V._point(point)
    committed = COMMITTED["grid"][k]
    assert ours["tokens_per_s"] == pytest.approx(committed["tokens_per_s"], rel=1e-6)
    for resource, value in committed["utilization"].items():
        assert ours["utilization"][resource] == pytest.approx(value, rel=1e-6, abs=1e-12), resource


def test_the_grid_covers_the_papers_evaluation():
    assert set(COMMITTED["grid"]) == {V.key(*p) for p in V.points()}


def test_rows_follow_from_the_committed_grid():
    assert json.loads(json.dumps(V.all_rows(COMMITTED["grid"]))) == COMMITTED["rows"]


def test_the_markdown_shows_every_row_and_explains_the_gaps():
    for r in COMMITTED["rows"]:
        assert f"| {r['quantity']} |" in MD, f"row missing from neupims.md: {r['quantity']}"
    explained = MD.split("## Where we differ, and why", 1)[1]
    for r in COMMITTED["rows"]:
        if r["error"] is not None and abs(r["error"]) > 0.10:
            # each large gap is named in the explanations by its figure and quantity's subject
            assert r["figure"] in explained, r["quantity"]


# ---- the issue's targets on the committed grid (validation/neupims.md, "Where we differ") -------

# Batch 256: NeuPIMs is above NPU+PIM on ShareGPT for 7B-30B (B: two sub-batch weight streams at
# the read share the authors' controller leaves beside PIM, against short attention on Alpaca and
# at 175B); NPU+PIM is below NPU-only everywhere and NeuPIMs below NPU-only on Alpaca and at 175B,
# each traced in neupims.md (C: NPU-only attention as a bandwidth roofline, against the
# channel-blocked NPU+PIM the authors' simulator runs). A new miss, or a documented one left
# undocumented, fails.
NEUPIMS_OVER_PIM_MISSES = {(m, "alpaca") for m in V.MODELS} | {("175b", "sharegpt")}
PIM_OVER_NPU_MISSES = {(m, d) for m in V.MODELS for d in V.DATASETS}
NEUPIMS_OVER_NPU_MISSES = {(m, "alpaca") for m in V.MODELS} | {("175b", "sharegpt")}


def _tps(model: str, dataset: str, strategy: str, batch: int = 256) -> float:
    return COMMITTED["grid"][V.key(model, dataset, batch, strategy)]["tokens_per_s"]


def test_order_at_batch_256():
    every = {(m, d) for m in V.MODELS for d in V.DATASETS}
    assert {(m, d) for m, d in every if _tps(m, d, "neupims") <= _tps(m, d, "npu_pim")} == NEUPIMS_OVER_PIM_MISSES
    for m, d in NEUPIMS_OVER_PIM_MISSES:
        assert f"{m} {d} b256: neupims / npu_pim" in MD
    assert {(m, d) for m, d in every if _tps(m, d, "npu_pim") <= _tps(m, d, "npu_only")} == PIM_OVER_NPU_MISSES
    assert {(m, d) for m, d in every if _tps(m, d, "neupims") <= _tps(m, d, "npu_only")} == NEUPIMS_OVER_NPU_MISSES
    for m, d in PIM_OVER_NPU_MISSES:
        assert f"{m} {d} b256: npu_pim / npu_only" in MD


def test_the_authors_way_is_closer_than_the_physical_pipeline_for_the_pipelined_models():
    # the cause of the old 30B/175B inversion (micro-batches) is gone, and stays gone
    for m in ("30b", "175b"):
        ours = ROWS[f"{m} sharegpt b256: neupims / npu_pim"]["ours"]
        physical = ROWS[f"{m} sharegpt b256: neupims / npu_pim, physical pipeline (micro-batches, ring "
                        "all-reduce, overlapped GEMMs, serial PIM blocking)"]["ours"]
        assert ours > physical
    assert ROWS["30b sharegpt b256: neupims / npu_pim, micro-batches instead"]["ours"] < \
        ROWS["30b sharegpt b256: neupims / npu_pim"]["ours"]


@pytest.mark.parametrize("quantity, paper, worst", [
    # met (within 25%), or missed (neupims.md A-C) and no further off than committed
    ("neupims / npu_pim throughput, mean over models, datasets, batches", 1.6, 0.45),
    ("neupims / npu_only throughput, mean over models, datasets, batches", 2.4, 0.68),
    ("7b sharegpt: dual row buffers, mean gain over npu_pim (channel-blocked)", 69.7, 0.26),
])
def test_fig12_means_and_fig13_gain_do_not_regress(quantity, paper, worst):
    r = ROWS[quantity]
    assert r["paper"] == paper
    assert abs(r["error"]) <= worst
    if abs(r["error"]) > 0.25:                 # a miss must be explained
        assert r["figure"] in MD.split("## Where we differ, and why", 1)[1]


def test_per_step_gemv_issue_is_what_slows_the_blocked_baseline():
    # set back to fused GEMVs, the channel-blocked NPU+PIM is issue-free again and NeuPIMs' lead
    # shrinks to what the mode switch alone costs (neupims.md A): 1.23x -> 0.89x at 30B
    ours = ROWS["30b sharegpt b256: neupims / npu_pim"]["ours"]
    fused = ROWS["30b sharegpt b256: neupims / npu_pim, fused blocked GEMVs instead"]["ours"]
    assert fused < 0.75 * ours


def test_channel_blocking_widens_the_dual_row_buffer_gain():
    # the per-channel mode switch is what the authors' NPU+PIM runs; it costs more than serial
    channel = ROWS["7b sharegpt: dual row buffers, mean gain over npu_pim (channel-blocked)"]["ours"]
    serial = ROWS["7b sharegpt: dual row buffers, mean gain over npu_pim with serial PIM blocking"]["ours"]
    assert channel > serial > 0


def test_the_papers_npu_only_lies_between_the_roofline_and_the_authors_branch():
    # neupims.md C: over the eight batch-256 points the roofline NPU-only (the grid) leaves NeuPIMs /
    # NPU-only and NPU+PIM / NPU-only below the paper's 2.4x and 1.5x; the authors' npu-only rule
    # (serial per-head GEMVs, a variant row) puts both above them
    every = [(m, d) for m in V.MODELS for d in V.DATASETS]
    for num, paper in (("neupims", 2.4), ("npu_pim", 1.5)):
        roofline = [_tps(m, d, num) / _tps(m, d, "npu_only") for m, d in every]
        serial = [ROWS[f"{m} {d} b256: {num} / npu_only, the authors' NPU-only attention (serial per-head GEMVs)"]
                  ["ours"] for m, d in every]
        assert sum(roofline) / len(every) < paper < sum(serial) / len(every)
        assert all(s > r for s, r in zip(serial, roofline))


def test_as_the_artifact_runs_the_fig13_claims_hold():
    # with the two mechanisms found by running the authors' simulator (lock-step stages, whole-batch
    # PIM dispatch: neupims_artifact.md section 3) the dual-row-buffer gain passes the paper's, and
    # sub-batch interleaving gains from batch 256 on (it loses at 64 and 128)
    drb = ROWS["7b sharegpt: dual row buffers, mean gain over npu_pim, as the artifact runs (lock-step stages, "
               "whole-batch PIM dispatch)"]["ours"]
    assert drb > 69.7 > ROWS["7b sharegpt: dual row buffers, mean gain over npu_pim (channel-blocked)"]["ours"]
    gains = {b: ROWS[f"7b sharegpt b{b}: gain of sub-batch interleaving, as the artifact runs"]["ours"] for b in V.BATCHES}
    assert all(gains[b] > 0 for b in V.BATCHES if b >= 256) and all(gains[b] < 0 for b in (64, 128))
    # and NeuPIMs / NPU+PIM falls with the model size at batch 256 on ShareGPT
    ratios = [ROWS[f"{m} sharegpt b256: neupims / npu_pim, as the artifact runs (lock-step stages, whole-batch PIM "
                   "dispatch)"]["ours"] for m in V.MODELS]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] > 1
