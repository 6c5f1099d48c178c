"""Channel assignment for PIM attention: MHA latency estimation, channel assignment, sub-batch partitioning.

NeuPIMs paper ([NEUPIMS]), section 6: Algorithm 1 (section 6.3) estimates one
request's multi-head-attention latency on a PIM channel; Algorithm 2 (section 6.4) packs requests
onto channels by that estimate; Algorithm 3 (section 6.5) splits the channels' requests into the
two sub-batches of sub-batch interleaving (section 6.2). The NPU+PIM baseline assigns channels
round-robin (section 8.1 "Baseline").

No timing engine here: the per-tile and GWRITE latencies are arguments (numbers, or functions
that the interpreter provides), in place of the paper's hand constants. Results are plain lists.

Requests are `(key, seq_len)` pairs: any hashable key (a request id) and the sequence length the
estimate is taken at (the paper uses the request's length when it is placed: its input length).
"""
from __future__ import annotations

import math
from typing import Callable, Hashable, NamedTuple, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)
Item = tuple[Hashable, int]   # (key, seq_len)

# A latency in any one unit (cycles or seconds), or a function of (kind, seq_len) giving it:
# kind is "score" (Key^T x Query, Algorithm 1 lines 2-4) or "attend" (Logits x Value, lines
# 5-7). A function lets a timed tile differ between the two GEMVs (their PIM_GEMVs run different
# numbers of dot-product steps: programs attn_score and attn_context of specs/pim/neupims_pim.pim) and with the length.
Latency = float | Callable[[str, int], float]


def _latency(value: Latency, kind: str, seq_len: int) -> float:
    return value(kind, seq_len) if callable(value) else value


def mha_tile_counts(seq_len: int, *, heads: int, head_dim: int, page_elems: int, banks: int) -> dict[str, int]:
    """Algorithm 1's counts for one request on one channel: GWRITEs and PIM tiles of each GEMV.

    `heads` and `head_dim` are the heads this channel computes (after tensor parallelism),
    E = heads x head_dim; `page_elems` is P_DRAM, a DRAM page (row) in elements; `banks` is
    B_chnl. The paper writes plain divisions; a tile or a page is whole, so each quotient is
    rounded up, as the NeuPIMs simulator does (github casys-kaist/NeuPIMs,
    src/scheduler/Scheduler.cc, estimate_mha_latency)."""
    if min(seq_len, heads, head_dim, page_elems, banks) < 1:
        raise ValueError("seq_len, heads, head_dim, page_elems and banks must all be >= 1")
    e = heads * head_dim
    ceil = lambda a, b: -(-a // b)
    # Key^T x Query. Line 2: N_tiles = (seq_len / B_chnl) * (E / P_DRAM): keys of one head set share
    # a row, one token per bank (section 6.3). Line 3: one GWRITE of the query per page of E.
    score_gwrites = ceil(e, page_elems)
    score_tiles = ceil(seq_len, banks) * score_gwrites
    # Logits x Value. Line 6: one GWRITE of the logits per page of tokens and head. Line 5:
    # N_tiles = ((E / N_head) / B_chnl) * ((seq_len / P_DRAM) * N_head): a head's embedding is
    # interleaved over the banks (section 6.3), one tile per B_chnl dimensions.
    attend_gwrites = ceil(seq_len, page_elems) * heads
    attend_tiles = ceil(head_dim, banks) * attend_gwrites
    return {"score_gwrites": score_gwrites, "score_tiles": score_tiles,
            "attend_gwrites": attend_gwrites, "attend_tiles": attend_tiles}


def mha_latency(seq_len: int, *, heads: int, head_dim: int, page_elems: int, banks: int,
                tile_latency: Latency, gwrite_latency: Latency) -> float:
    """Algorithm 1 (MHA Latency Estimation): L_MHA of one request on its channel, in the unit of
    the latencies given. `tile_latency` is L_tile (one PIM tile's GEMV), `gwrite_latency` is
    L_GWRITE (filling the global buffer); see `mha_tile_counts` for the geometry."""
    n = mha_tile_counts(seq_len, heads=heads, head_dim=head_dim, page_elems=page_elems, banks=banks)
    latency = 0.0                                                              # line 1
    latency += _latency(gwrite_latency, "score", seq_len) * n["score_gwrites"]    # line 3
    latency += _latency(tile_latency, "score", seq_len) * n["score_tiles"]        # line 4
    latency += _latency(gwrite_latency, "attend", seq_len) * n["attend_gwrites"]  # line 6
    latency += _latency(tile_latency, "attend", seq_len) * n["attend_tiles"]      # line 7
    return latency                                                             # line 8


class ChannelAssignment(NamedTuple):
    channels: list[list[Item]]    # per channel, its requests in the order they were placed
    loads: list[float]            # per channel, the sum of its requests' estimated MHA latency


def channel_loads(channels: Sequence[Sequence[Item]], estimate: Callable[[int], float]) -> list[float]:
    """Algorithm 2 lines 1-8: each channel's load, the estimated latencies of its requests summed."""
    return [sum((estimate(seq_len) for _, seq_len in chnl), 0.0) for chnl in channels]


def _start(channels: int | Sequence[Sequence[Item]]) -> list[list[Item]]:
    if isinstance(channels, int):
        if channels < 1:
            raise ValueError(f"need at least one channel, got {channels}")
        return [[] for _ in range(channels)]
    if not channels:
        raise ValueError("need at least one channel")
    return [list(chnl) for chnl in channels]


def greedy_min_load(new: Sequence[Item], channels: int | Sequence[Sequence[Item]],
                    estimate: Callable[[int], float]) -> ChannelAssignment:
    """Algorithm 2 (Greedy Min-Load Bin Packing): place each new request on the least-loaded channel.

    `channels` is a channel count (all empty) or the current allocation, L_chnl; `estimate` maps a
    sequence length to its MHA latency (Algorithm 1, e.g. functools.partial(mha_latency, ...)).
    The new requests are taken longest first (section 6.4: "it initially sorts the batch of
    requests in decreasing order of input token length"; equal lengths keep their given order),
    and a tie between channels goes to the lowest index."""
    allocation = _start(channels)
    loads = channel_loads(allocation, estimate)                               # lines 1-8
    for key, seq_len in sorted(new, key=lambda item: -item[1]):               # line 9
        least = min(range(len(loads)), key=lambda c: (loads[c], c))            # line 10
        allocation[least].append((key, seq_len))                              # line 11
        loads[least] += estimate(seq_len)                                     # lines 12-13
    return ChannelAssignment(allocation, loads)                               # line 15


def round_robin(new: Sequence[Item], channels: int | Sequence[Sequence[Item]],
                estimate: Callable[[int], float], start: int = 0) -> ChannelAssignment:
    """The NPU+PIM baseline (section 8.1: "We allocate the requests to PIM channels in a round-robin
    manner"): the i-th new request, in the given (arrival) order, goes to channel (start + i) mod
    the channel count. Loads are estimated as in Algorithm 2, for comparison."""
    allocation = _start(channels)
    for i, item in enumerate(new):
        allocation[(start + i) % len(allocation)].append(tuple(item))
    return ChannelAssignment(allocation, channel_loads(allocation, estimate))


def partition_sub_batches(channels: Sequence[Sequence[K]]) -> tuple[list[Sequence[K]], list[Sequence[K]]]:
    """Algorithm 3 (Sub-Batch Partitioning): split every channel's active requests into halves.

    Section 6.5 balances the sub-batches' sizes ("it is essential to maintain a balanced size
    between the two sub-batches", since the NPU's GEMMs depend on the batch size): each channel's
    first half goes to SB1 and the rest to SB2, so both sub-batches use every channel; a channel
    with an odd count gives its extra request to SB1 and SB2 in turn, so the totals differ by at
    most one. Returns (SB1, SB2), each a list per channel as the algorithm appends them (line
    10: SB_1.append(req_chnl[:bsize])), which keeps the channel of every request; a channel's
    part is a slice of its given sequence (a list of a list, an array of an array)."""
    sb1: list[list[K]] = []
    sb2: list[list[K]] = []                                                   # line 2
    turn = True                                                               # line 1
    for req_chnl in channels:                                                 # line 3
        bsize = len(req_chnl) / 2                                             # line 4
        if len(req_chnl) % 2 != 0:                                            # line 5
            bsize = math.ceil(bsize) if turn else math.floor(bsize)           # line 6
            turn = not turn                                                   # line 7
        bsize = int(bsize)                                                    # line 9
        sb1.append(req_chnl[:bsize])                                          # line 10
        sb2.append(req_chnl[bsize:])                                          # line 11
    return sb1, sb2                                                           # line 13
