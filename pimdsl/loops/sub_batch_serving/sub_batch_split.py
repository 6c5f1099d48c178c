"""The two decisions of the adaptive chunk-partitioned interleaving scheduler ([L3] Sec. 5.3).

`split`: decoding requests into two sub-batches whose token sums are as even as possible (step 2:
"2k, 3k, 4k, 5k -> (2k, 5k), (3k, 4k)"), by longest-first greedy assignment to the lighter side.
`chunk`: how many tokens of the last prefilling request a sub-batch takes so that its GPU time
reaches the other sub-batch's PIM time (step 4), a multiple of 16 tokens.
`split_by_class`: the same split inside each rankset class, so that each sub-batch also gets about
half of every rankset's load (our addition: the paper balances token sums only, which leaves the
busiest rankset of a sub-batch, and so its PIM time, up to 1.7x the mean at GPT-175B scale).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def split(tokens: Sequence[int]) -> tuple[list[int], list[int]]:
    """Indices of `tokens` in two sub-batches with near-equal sums (ties go to sub-batch 0)."""
    sides: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for i in sorted(range(len(tokens)), key=lambda i: (-tokens[i], i)):
        side = 0 if sums[0] <= sums[1] else 1
        sides[side].append(i)
        sums[side] += tokens[i]
    return sides


def chunk(remaining: int, budget_s: float, gpu_time: Callable[[np.ndarray], np.ndarray], multiple: int = 16) -> int:
    """The largest multiple of `multiple` tokens (at least `multiple`, at most `remaining`) whose
    GPU time `gpu_time(c)` stays within `budget_s`; `remaining` itself when it fits whole."""
    if remaining <= multiple or gpu_time(np.array([remaining]))[0] <= budget_s:
        return remaining
    sizes = np.arange(multiple, remaining, multiple)
    fits = sizes[gpu_time(sizes) <= budget_s]
    return int(fits[-1]) if fits.size else multiple


def split_by_class(tokens: Sequence[int], classes: Sequence[int]) -> tuple[list[int], list[int]]:
    """`split` inside each class; each class's heavier half goes to the sub-batch that is lighter so
    far, so the totals stay even too."""
    sides: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for cls in sorted(set(classes)):
        members = [i for i in range(len(tokens)) if classes[i] == cls]
        halves = split([tokens[i] for i in members])
        weights = [sum(tokens[members[k]] for k in h) for h in halves]
        heavy = 0 if weights[0] >= weights[1] else 1
        light_side = 0 if sums[0] <= sums[1] else 1
        for half, side in ((heavy, light_side), (1 - heavy, 1 - light_side)):
            sides[side].extend(members[k] for k in halves[half])
            sums[side] += weights[half]
    return sides
