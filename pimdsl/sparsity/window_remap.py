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


def loads(device: np.ndarray, activity: np.ndarray, dimms: int) -> np.ndarray:
    cold = device >= 0
    return np.bincount(device[cold], weights=activity[cold], minlength=dimms)


def remap(device: np.ndarray, activity: np.ndarray, dimms: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """New device per neuron (-1: GPU, untouched) and the moves (count, from, to) per pair."""
    device = device.copy()
    z = loads(device, activity, dimms)
    order = np.argsort(-z, kind="stable")
    moves = []
    for pair in range(dimms // 2):
        hi, lo = int(order[pair]), int(order[dimms - 1 - pair])
        gap = z[hi] - z[lo]
        on_hi = np.flatnonzero((device == hi) & (activity > 0))
        moved = []
        for n in on_hi[np.argsort(-activity[on_hi], kind="stable")]:
            if gap < 2:                              # activities are whole counts: nothing narrows it
                break
            a = activity[n]
            if 2 * a <= gap:
                moved.append(n)
                gap -= 2 * a
        if moved:
            device[moved] = lo
            shift = activity[moved].sum()
            z[hi] -= shift
            z[lo] += shift
            moves.append((len(moved), hi, lo))
    return device, moves


def imbalance(z: np.ndarray) -> float:
    """max / mean load of the DIMMs (1.0: balanced)."""
    mean = z.mean()
    return float(z.max() / mean) if mean > 0 else 1.0
