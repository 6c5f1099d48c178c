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
    on_gpu = device < 0
    home = np.where(on_gpu, 0, device).astype(device.dtype)
    counted = _histogram(on_gpu, home, activity, max(dimms, int(device.max(initial=-1)) + 1))
    after = _histogram_loads(counted)
    moves = _pair_moves(on_gpu, home, activity, counted, after)
    np.copyto(device, home, where=~on_gpu)
    if z is not None:
        z[:] = after
    return [(int(c), int(hi), int(lo)) for c, hi, lo in moves]


def remap_window(on_gpu: np.ndarray, home: np.ndarray, activity: np.ndarray, offsets: np.ndarray, dimms: int,
                 moving: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A window's end over every block (block k spans offsets[k]:offsets[k + 1] of the flat arrays; every
    home below `dimms`): per block, the imbalance of its cold neurons' loads before and, when `moving`,
    after Algorithm 1 moved them (`home` changed in place; NaN: the block had no load), and the neurons
    it moved and the most any one pair moved (0, 0: none); the window's firings (`activity`) are zeroed.
    Per block, what `imbalance(loads(...))` and `remap_in_place` give the block's cold neurons, in one
    compiled call."""
    blocks = len(offsets) - 1
    before, after = np.full(blocks, np.nan), np.full(blocks, np.nan)
    moved = np.zeros((blocks, 2), np.int64)
    _remap_window(on_gpu, home, activity, offsets, dimms, moving, before, after, moved)
    return before, after, moved


@njit(cache=True)
def _remap_window(on_gpu, home, activity, offsets, dimms, moving, before, after, moved):
    for k in range(len(offsets) - 1):
        lo, hi = offsets[k], offsets[k + 1]
        counted = _histogram(on_gpu[lo:hi], home[lo:hi], activity[lo:hi], dimms)
        z = _histogram_loads(counted)
        if z.sum() > 0:
            before[k] = _imbalance(z)
            if moving:
                moves = _pair_moves(on_gpu[lo:hi], home[lo:hi], activity[lo:hi], counted, z)
                after[k] = _imbalance(z)
                if len(moves):
                    moved[k, 0], moved[k, 1] = moves[:, 0].sum(), moves[:, 0].max()
        activity[lo:hi] = 0


@njit(cache=True)
def _histogram(on_gpu, home, activity, dimms):
    """[DIMM, A]: how many cold neurons (not `on_gpu`) of each DIMM (`home`) fired A > 0 times."""
    top = 0
    for i in range(len(activity)):
        top = max(top, activity[i])
    # every neuron counted without a branch: the GPU's in an extra row, those that did not fire in column 0
    counted = np.zeros((dimms + 1, top + 1), np.int64)
    for i in range(len(activity)):
        if home[i] >= dimms and not on_gpu[i]:
            raise ValueError("a neuron's home is not one of the DIMMs")
        counted[dimms if on_gpu[i] else home[i], activity[i]] += 1
    counted[:, 0] = 0
    return counted[:dimms].copy()


@njit(cache=True)
def _histogram_loads(counted):
    """Z per DIMM from its histogram: whole counts, the same floats as `loads` (any order of the sum is exact)."""
    z = np.zeros(len(counted))
    for d in range(len(counted)):
        load = 0
        for a in range(counted.shape[1]):
            load += a * counted[d, a]
        z[d] = load
    return z


@njit(cache=True)
def _pair_moves(on_gpu, home, activity, counted, z):
    """The pairs of Algorithm 1 in turn, compiled, given the cold neurons' histogram (`counted`) and
    loads (`z`, left the loads after); moves `home` in place. The walk over the loaded DIMM's neurons,
    most activated first (ties by index), taking a neuron while 2 A <= gap and stopping once gap < 2,
    is done by activity value: of the neurons with activity A it takes the first floor(gap / 2A).
    So the pairs are settled on the histogram, and one pass moves the first neurons of each
    (DIMM, A), stopping once it has moved them all."""
    dimms, top = counted.shape[0], counted.shape[1] - 1
    moves = np.zeros((dimms // 2, 3), np.int64)
    take = np.zeros_like(counted)
    to = np.zeros(dimms, np.int64)
    order = _descending(z)
    n_moves = left = 0
    for pair in range(dimms // 2):
        hi, lo = order[pair], order[dimms - 1 - pair]
        gap = z[hi] - z[lo]
        moved = shift = 0
        for a in range(top, 0, -1):
            if gap < 2:                              # activities are whole counts: nothing narrows it
                break
            t = min(counted[hi, a], int(gap // (2 * a)))
            take[hi, a] = t
            moved += t
            shift += a * t
            gap -= 2 * a * t
        if moved:
            z[hi] -= shift
            z[lo] += shift
            to[hi] = lo
            # element by element: a tuple stored into a row costs numba seconds of compile (its checks)
            moves[n_moves, 0], moves[n_moves, 1], moves[n_moves, 2] = moved, hi, lo
            n_moves += 1
            left += moved
    for i in range(len(activity)):
        if left == 0:
            break
        a = activity[i]
        if a > 0 and not on_gpu[i] and take[home[i], a] > 0:
            take[home[i], a] -= 1
            home[i] = to[home[i]]
            left -= 1
    return moves[:n_moves]


@njit(cache=True)
def _descending(z):
    """`np.argsort(-z, kind="stable")`: the DIMMs by load, most loaded first, ties by index (an
    insertion sort: a few DIMMs)."""
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
