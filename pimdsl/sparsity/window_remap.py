"""Window-based remapping of cold neurons across NDP-DIMMs ([HERMES_NDP] Sec. IV-D, Algorithm 1).

Per window of tokens: A_i = how often cold neuron i fired; Z_j = sum_i C_ji A_i per DIMM; sort Z
descending; pair the j-th most loaded DIMM with the j-th least loaded (J/2 pairs); within a pair
move the most activated neurons from the loaded DIMM to the light one until they balance.

Algorithm 1 as printed loops `while Z_id <= Z_{J-id}`, which after a descending sort never runs (and
indexes one past the end); we read it as: while a move narrows the pair's gap, move the most
activated neuron h of the loaded DIMM with 2 A_h <= Z_hi - Z_lo (the loaded DIMM stays the loaded
one, so the loop ends balanced without oscillating).
"""
from __future__ import annotations

import numpy as np
from ..aot import bind
from ..jit_cache import njit


def loads(device: np.ndarray, activity: np.ndarray, dimms: int) -> np.ndarray:
    return _loads(device, activity, max(dimms, int(device.max(initial=-1)) + 1))


@njit(cache=True)
def _loads(device, activity, dimms):
    z = np.zeros(dimms)
    for i in range(len(device)):
        if device[i] >= 0:
            z[device[i]] += activity[i]
    return z


def remap(device: np.ndarray, activity: np.ndarray, dimms: int,
          z: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """New device per neuron (-1: GPU, untouched) and the moves (count, from, to) per pair. `z`, when
    given, is `loads(device, activity, dimms)` and becomes the loads after the moves (whole counts, so
    the shifts are exact)."""
    device = device.copy()
    return device, remap_in_place(device, activity, dimms, z)


def remap_in_place(device: np.ndarray, activity: np.ndarray, dimms: int,
                   z: np.ndarray | None = None) -> list[tuple[int, int, int]]:
    """`remap` moving the neurons of `device` itself (no copy); returns the moves."""
    z = loads(device, activity, dimms) if z is None else z
    order = np.argsort(-z, kind="stable")
    moves = _pair_moves(device, activity, z, order)
    return [(int(c), int(hi), int(lo)) for c, hi, lo in moves]


@njit(cache=True)
def _pair_moves(device, activity, z, order):
    """The pairs of Algorithm 1 in turn, compiled; moves `device` in place. The walk over the loaded
    DIMM's neurons, most activated first (ties by index), taking a neuron while 2 A <= gap and stopping
    once gap < 2, is done by activity value: of the neurons with activity A it takes the first
    floor(gap / 2A). The neurons are bucketed by (DIMM, activity) in one stable counting sort."""
    dimms = len(order)
    moves = np.zeros((dimms // 2, 3), np.int64)
    if len(activity) == 0:
        return moves[:0]
    top = max(activity.max(), 0)
    width = top + 1                              # bucket (d, a) = d * width + top - a: most active first
    start = np.zeros(dimms * width + 1, np.int64)
    for i in range(len(device)):
        if device[i] >= 0 and activity[i] > 0:
            start[device[i] * width + top - activity[i] + 1] += 1
    for b in range(1, len(start)):
        start[b] += start[b - 1]
    fill = start[:-1].copy()
    bucketed = np.empty(start[-1], np.int64)
    for i in range(len(device)):
        if device[i] >= 0 and activity[i] > 0:
            b = device[i] * width + top - activity[i]
            bucketed[fill[b]] = i
            fill[b] += 1
    n_moves = 0
    for pair in range(dimms // 2):
        hi, lo = order[pair], order[dimms - 1 - pair]
        gap = z[hi] - z[lo]
        moved = shift = 0
        for a in range(top, 0, -1):
            if gap < 2:                              # activities are whole counts: nothing narrows it
                break
            b = hi * width + top - a
            take = min(start[b + 1] - start[b], int(gap // (2 * a)))
            for j in range(start[b], start[b] + take):
                device[bucketed[j]] = lo
            moved += take
            shift += a * take
            gap -= 2 * a * take
        if moved:
            z[hi] -= shift
            z[lo] += shift
            # element by element: a tuple stored into a row costs numba seconds of compile (its checks)
            moves[n_moves, 0], moves[n_moves, 1], moves[n_moves, 2] = moved, hi, lo
            n_moves += 1
    return moves[:n_moves]


def remap_window(on_gpu: np.ndarray, home: np.ndarray, activity: np.ndarray, offsets: np.ndarray, dimms: int,
                 moving: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A window's end over every block (block k spans offsets[k]:offsets[k + 1] of the flat arrays): per
    block, the imbalance of its cold neurons' loads before and, when `moving`, after Algorithm 1 moved
    them (`home` changed in place; NaN: the block had no load), and the neurons it moved and the most
    any one pair moved (0, 0: none); the window's firings (`activity`) are zeroed. Per block, the same
    as `cold = np.where(on_gpu, -1, home)`, `imbalance(loads(cold, ...))`, `remap_in_place(cold, ...)`
    and `np.copyto(home, cold, where=cold >= 0)`, in one compiled call."""
    blocks = len(offsets) - 1
    before, after = np.full(blocks, np.nan), np.full(blocks, np.nan)
    moved = np.zeros((blocks, 2), np.int64)
    _remap_window(on_gpu, home, activity, offsets, dimms, moving, before, after, moved)
    return before, after, moved


@njit(cache=True)
def _remap_window(on_gpu, home, activity, offsets, dimms, moving, before, after, moved):
    cold = np.empty(np.max(offsets[1:] - offsets[:-1]), home.dtype)
    for k in range(len(offsets) - 1):
        lo, hi = offsets[k], offsets[k + 1]
        n = hi - lo
        devices = dimms                          # as `loads`: at least every device a neuron names
        for i in range(n):
            cold[i] = -1 if on_gpu[lo + i] else home[lo + i]
            devices = max(devices, cold[i] + 1)
        z = _loads(cold[:n], activity[lo:hi], devices)
        if z.sum() > 0:
            before[k] = _imbalance(z)
            if moving:
                moves = _pair_moves(cold[:n], activity[lo:hi], z, _descending(z))
                after[k] = _imbalance(z)
                if len(moves):
                    moved[k, 0], moved[k, 1] = moves[:, 0].sum(), moves[:, 0].max()
                    for i in range(n):
                        if cold[i] >= 0:
                            home[lo + i] = cold[i]
        activity[lo:hi] = 0


@njit(cache=True)
def _descending(z):
    """`np.argsort(-z, kind="stable")`: the devices by load, most loaded first, ties by index (an
    insertion sort: a few devices)."""
    order = np.arange(len(z))
    for i in range(1, len(z)):
        d, j = order[i], i
        while j > 0 and z[order[j - 1]] < z[d]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = d
    return order


@njit(cache=True)
def _imbalance(z):
    """`imbalance(z)` of loads with a positive sum: whole counts, so any order of the sum is exact."""
    return z.max() / (z.sum() / len(z))


def imbalance(z: np.ndarray) -> float:
    """max / mean load of the DIMMs (1.0: balanced)."""
    mean = np.add.reduce(z) / len(z)                 # z.mean() without its dispatch (the same sum and division)
    return float(z.max() / mean) if mean > 0 else 1.0


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
