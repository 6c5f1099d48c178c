"""The two decisions of the adaptive chunk-partitioned interleaving scheduler ([L3] Sec. 5.3).

`split`: decoding requests into two sub-batches whose token sums are as even as possible (step 2:
"2k, 3k, 4k, 5k -> (2k, 5k), (3k, 4k)"), by longest-first greedy assignment to the lighter side.
`chunk`: how many tokens of the last prefilling request a sub-batch takes so that its GPU time
reaches the other sub-batch's PIM time (step 4), a multiple of 16 tokens.
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
