"""NeuPIMs section 6: Algorithm 1 (MHA latency estimate), 2 (greedy min-load channels), 3 (sub-batches)."""
from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.serving import (channel_loads, greedy_min_load, mha_latency, mha_tile_counts,
                            partition_sub_batches, round_robin)

# GPT3-7B with TP 4 (Table 3: 32 heads of 128, so 8 heads a device), the paper's HBM channel
# (Table 2: 32 banks, 1 KB page = 512 FP16), and the NeuPIMs simulator's constants
# (L_GWRITE 100, L_tile 184 cycles, src/scheduler/Scheduler.cc) to work the examples by hand.
GEOMETRY = dict(heads=8, head_dim=128, page_elems=512, banks=32)


def test_tile_counts_by_hand():
    # seq 100: K^T.q: ceil(1024/512) = 2 GWRITEs, ceil(100/32) x 2 = 8 tiles;
    #          s.V:   ceil(100/512) x 8 = 8 GWRITEs, ceil(128/32) x 8 = 32 tiles
    assert mha_tile_counts(100, **GEOMETRY) == {
        "score_gwrites": 2, "score_tiles": 8, "attend_gwrites": 8, "attend_tiles": 32}
    # seq 1000: 2, ceil(1000/32) x 2 = 64; ceil(1000/512) x 8 = 16, 4 x 16 = 64
    assert mha_tile_counts(1000, **GEOMETRY) == {
        "score_gwrites": 2, "score_tiles": 64, "attend_gwrites": 16, "attend_tiles": 64}


def test_mha_latency_by_hand():
    est = functools.partial(mha_latency, **GEOMETRY, tile_latency=184, gwrite_latency=100)
    assert est(100) == 2 * 100 + 8 * 184 + 8 * 100 + 32 * 184 == 8360
    assert est(1000) == 2 * 100 + 64 * 184 + 16 * 100 + 64 * 184 == 25352


def test_mha_latency_takes_timed_tiles():
    # an interpreter may time the two GEMVs' tiles differently
    tile = lambda kind, seq_len: {"score": 10.0, "attend": 20.0}[kind]
    assert mha_latency(100, **GEOMETRY, tile_latency=tile, gwrite_latency=1.0) == 2 + 8 * 10 + 8 + 32 * 20


def test_mha_latency_rejects_empty_geometry():
    with pytest.raises(ValueError, match="must all be >= 1"):
        mha_tile_counts(0, **GEOMETRY)


# Five requests, given in arrival order d, a, c, e, b, with lengths that are their latencies.
FIVE = [("d", 3), ("a", 7), ("c", 4), ("e", 3), ("b", 5)]


def test_greedy_min_load_by_hand():
    # longest first: a7 b5 c4 d3 e3 (d before e: equal lengths keep arrival order)
    # a -> ch0 (tie 0/0: lowest)   [7, 0]
    # b -> ch1                     [7, 5]
    # c -> ch1                     [7, 9]
    # d -> ch0                     [10, 9]
    # e -> ch1                     [10, 12]
    channels, loads = greedy_min_load(FIVE, 2, float)
    assert channels == [[("a", 7), ("d", 3)], [("b", 5), ("c", 4), ("e", 3)]]
    assert loads == [10.0, 12.0]


def test_greedy_min_load_adds_to_an_allocation():
    # Algorithm 2 lines 1-8: the loads of what the channels already hold: [9, 2, 4]
    held = [[("x", 9)], [("y", 2)], [("z", 4)]]
    channels, loads = greedy_min_load([("p", 3), ("q", 4)], held, float)
    # q (4) -> ch1 [9, 6, 4]; p (3) -> ch2 (4 < 6) [9, 6, 7]
    assert channels == [[("x", 9)], [("y", 2), ("q", 4)], [("z", 4), ("p", 3)]]
    assert loads == [9.0, 6.0, 7.0]
    assert held == [[("x", 9)], [("y", 2)], [("z", 4)]]          # the input is not changed


def test_round_robin_by_hand():
    # arrival order d a c e b onto 2 channels: d c b | a e
    channels, loads = round_robin(FIVE, 2, float)
    assert channels == [[("d", 3), ("c", 4), ("b", 5)], [("a", 7), ("e", 3)]]
    assert loads == [12.0, 10.0]
    channels, _ = round_robin(FIVE, 3, float, start=2)
    assert [[k for k, _ in c] for c in channels] == [["a", "b"], ["c"], ["d", "e"]]


def test_greedy_min_load_with_the_mha_estimate():
    est = functools.partial(mha_latency, **GEOMETRY, tile_latency=184, gwrite_latency=100)
    channels, loads = greedy_min_load([(0, 100), (1, 1000), (2, 100), (3, 100)], 2, est)
    assert channels == [[(1, 1000)], [(0, 100), (2, 100), (3, 100)]]
    assert loads == [25352.0, 3 * 8360.0]
    assert channel_loads(channels, est) == loads


def test_partition_by_hand():
    # sizes 3, 1, 2, 3: the odd channels give their extra request to SB1, SB2, SB1 in turn
    sb1, sb2 = partition_sub_batches([["a", "b", "c"], ["d"], ["e", "f"], ["g", "h", "i"]])
    assert sb1 == [["a", "b"], [], ["e"], ["g", "h"]]
    assert sb2 == [["c"], ["d"], ["f"], ["i"]]


items = st.lists(st.integers(1, 4000), max_size=60).map(lambda ls: [(i, n) for i, n in enumerate(ls)])


@settings(max_examples=200, deadline=None)
@given(new=items, n_channels=st.integers(1, 12))
def test_greedy_assigns_each_once_within_the_list_scheduling_bound(new, n_channels):
    est = functools.partial(mha_latency, **GEOMETRY, tile_latency=184, gwrite_latency=100)
    channels, loads = greedy_min_load(new, n_channels, est)
    assert sorted(item for c in channels for item in c) == sorted(new)
    assert loads == pytest.approx(channel_loads(channels, est))
    if new:
        # the last request placed on the fullest channel found it least loaded, so at most the average
        latencies = [est(n) for _, n in new]
        assert max(loads) <= sum(latencies) / n_channels + max(latencies) + 1e-6
    rr_channels, rr_loads = round_robin(new, n_channels, est)
    assert sorted(item for c in rr_channels for item in c) == sorted(new)
    assert sum(rr_loads) == pytest.approx(sum(loads))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 9), max_size=32))
def test_partition_is_a_balanced_split(sizes):
    channels, next_id = [], 0
    for size in sizes:
        channels.append(list(range(next_id, next_id + size)))
        next_id += size
    sb1, sb2 = partition_sub_batches(channels)
    for whole, a, b in zip(channels, sb1, sb2, strict=True):
        assert a + b == whole                          # disjoint, and together the channel
        assert abs(len(a) - len(b)) <= 1
    assert abs(sum(map(len, sb1)) - sum(map(len, sb2))) <= 1
