"""A seeded, deterministic generator of per-token neuron activations with stated statistics.

No activation traces ship with [HERMES_NDP], so they are generated. A *neuron* is one row/column of
a sparse FC block (the QKV input dimension after the extra ReLU, or one FFN neuron; [HERMES_NDP]
Sec. II-B, V-A-3). The blocks of a model form one chain (L0.qkv, L0.mlp, L1.qkv, ...).

Statistics, each from [HERMES_NDP]:
  * activation frequency f_i follows a power law over the neuron's rank, scaled so that the block's
    mean activity is 1 - sparsity and the top `hot_fraction` of neurons carry `hot_share` of the
    activations (about 20% / 80%, Sec. I, III-A);
  * token-wise similarity (Sec. III-B-1, Fig. 4a: above 90% for adjacent tokens, about 70% at
    distance 10): each neuron has a latent Gaussian AR(1) process with correlation `rho` per token,
    and fires when the latent is below its frequency's quantile (a Gaussian copula);
  * layer-wise correlation (Sec. III-B-2, Fig. 4b): a neuron's latent mixes, with weight `coupling`,
    the latents of its two parents in the previous block (the neurons of the same frequency rank),
    which the predictor's correlation table holds (Sec. IV-C-1);
  * input-specific drift (Sec. IV-C: "about 52% of the initialized hot neurons exhibit varied
    activity"): a run's frequencies shift from the profiled ones by a per-neuron Gaussian offset of
    the latent threshold with standard deviation `drift`.
A batch of b sequences fires the union of their neurons: frequency 1 - (1 - f)^b.

`rho`, `coupling` and `drift` are generator settings (not hardware constants): `rho` = 0.97 gives
about 0.9 adjacent and 0.7 distance-10 similarity on these frequencies (tests measure both).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from ..aot import bind
from ..jit_cache import njit

_GRID = np.linspace(-8.0, 8.0, 8193)
_CDF = np.array([0.5 * (1.0 + math.erf(x / math.sqrt(2.0))) for x in _GRID])


_SLOPES = (_CDF[1:] - _CDF[:-1]) / (_GRID[1:] - _GRID[:-1])


def normal_cdf(x):
    """`np.interp(x, _GRID, _CDF)`, bit for bit, compiled: on the uniform grid a point's interval is
    found by division instead of numpy's binary search (a tenth of the time over a 70B model's neurons)."""
    x = np.asarray(x)
    out = np.empty(x.shape)
    _interp_uniform(x.ravel(), _GRID, _CDF, _SLOPES, (len(_GRID) - 1) / (_GRID[-1] - _GRID[0]), out.reshape(-1))
    return out if out.ndim else out[()]


@njit(cache=True)
def _interp_uniform(x, xp, fp, slopes, inv_step, out):
    """numpy's `interp` (numpy/_core/src/multiarray/compiled_base.c: the same slopes, edge values and
    NaN fallbacks) on a grid of about equal steps; the guessed interval is corrected by comparison, so
    the grid's rounding does not matter."""
    n = len(xp)
    for i in range(len(x)):
        v = np.float64(x[i])
        if np.isnan(v):
            out[i] = v
            continue
        if v < xp[0]:
            out[i] = fp[0]
            continue
        if v >= xp[n - 1]:
            out[i] = fp[n - 1]
            continue
        j = min(max(int((v - xp[0]) * inv_step), 0), n - 2)
        while xp[j] > v:
            j -= 1
        while xp[j + 1] <= v:
            j += 1
        if xp[j] == v:
            out[i] = fp[j]
            continue
        r = slopes[j] * (v - xp[j]) + fp[j]
        if np.isnan(r):
            r = slopes[j] * (v - xp[j + 1]) + fp[j + 1]
            if np.isnan(r) and fp[j] == fp[j + 1]:
                r = fp[j]
        out[i] = r


def normal_quantile(p):
    return np.interp(np.clip(p, 0.0, 1.0), _CDF, _GRID)


@dataclass(frozen=True)
class Statistics:
    sparsity: float = 0.9           # mean fraction of a block's neurons that do not fire per token
    hot_fraction: float = 0.2       # the top neurons ...
    hot_share: float = 0.8          # ... carry this share of the activations
    rho: float = 0.97               # per-token correlation of a neuron's latent
    coupling: float = 0.6           # weight of the two parents' latents in the previous block
    drift: float = 0.5              # std of a run's per-neuron latent shift from the profile
    seed: int = 0


@functools.lru_cache(maxsize=16)
def power_law(n: int, density: float, hot_fraction: float, hot_share: float) -> np.ndarray:
    """Frequencies by rank (descending): c * r^-alpha clipped to 1, with mean `density` and the top
    `hot_fraction` carrying `hot_share` (as close as the clip to 1 allows). The fit (alpha, c), two
    nested bisections over the ranks, is kept on disk by content (timing_cache)."""
    from ..interpreter import timing_cache
    alpha, c = timing_cache.kept(timing_cache.content_key("power_law", n, density, hot_fraction, hot_share),
                                 lambda: _power_law_fit(n, density, hot_fraction, hot_share))
    out = np.minimum(1.0, c * np.arange(1, n + 1, dtype=float) ** -alpha)
    out.setflags(write=False)                    # shared by every caller (cached)
    return out


def _power_law_fit(n: int, density: float, hot_fraction: float, hot_share: float) -> tuple[float, float]:
    """`power_law`'s alpha and c: bisections on alpha for the share of the top, and within each on c
    for the mean."""
    ranks = np.arange(1, n + 1, dtype=float)
    top = max(1, int(round(hot_fraction * n)))

    def scale(law):
        lo, hi = 0.0, 1.0 / density * n
        for _ in range(45):                      # bisection on c for the mean
            c = 0.5 * (lo + hi)
            lo, hi = (c, hi) if np.minimum(1.0, c * law).mean() < density else (lo, c)
        return 0.5 * (lo + hi)

    lo, hi = 0.0, 4.0
    for _ in range(30):                          # bisection on alpha for the share of the top
        alpha = 0.5 * (lo + hi)
        law = ranks ** -alpha
        f = np.minimum(1.0, scale(law) * law)
        lo, hi = (alpha, hi) if f[:top].sum() / f.sum() < hot_share else (lo, alpha)
    alpha = 0.5 * (lo + hi)
    return alpha, scale(ranks ** -alpha)


@dataclass
class Block:
    """One sparse FC block: its profiled frequencies, its run frequencies and its parents."""
    name: str
    neurons: int
    profile: np.ndarray             # profiled f_i (the offline placement's input)
    parents: np.ndarray | None      # (2, neurons) indices into the previous block
    by_rank: np.ndarray             # the neurons by frequency rank: `profile[by_rank]` does not increase


class Generator:
    """Per-token activations of a chain of blocks; `step()` returns one token's boolean arrays."""

    def __init__(self, sizes: list[tuple[str, int]], stats: Statistics, batch: int = 1):
        self.stats, self.batch = stats, batch
        rng = np.random.default_rng(stats.seed)
        self.rng = rng
        self.blocks: list[Block] = []
        density = 1.0 - stats.sparsity
        laws: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        thresholds = []
        for name, n in sizes:
            if n not in laws:
                law = power_law(n, density, stats.hot_fraction, stats.hot_share)
                laws[n] = law, normal_quantile(law)
            rank = rng.permutation(n)                       # neuron i has frequency rank rank[i]
            law, quantile = laws[n]
            thresholds.append((quantile[rank] + rng.normal(0.0, stats.drift, n)).astype(np.float32))
            by_rank = np.empty_like(rank)                       # rank -> neuron
            by_rank[rank] = np.arange(n)
            parents = None
            if self.blocks:
                m = self.blocks[-1].neurons
                r = (rank * m) // n
                prev_by_rank = self.blocks[-1].by_rank
                parents = np.stack([prev_by_rank[r], prev_by_rank[np.minimum(r + 1, m - 1)]])
                parents = parents.astype(np.uint16 if m <= 1 << 16 else np.int32)   # half the traffic per token
            self.blocks.append(Block(name, n, law[rank], parents, by_rank))
        cuts = np.cumsum([b.neurons for b in self.blocks])[:-1]
        if batch > 1:                                       # the union of the batch's sequences
            union = 1.0 - (1.0 - normal_cdf(np.concatenate(thresholds))) ** batch
            thresholds = np.split(normal_quantile(union).astype(np.float32), cuts)
        self._thresholds = thresholds
        self._latent = rng.standard_normal(int(cuts[-1]) + self.blocks[-1].neurons if len(cuts) else
                                           self.blocks[0].neurons, dtype=np.float32)
        # the chain as flat arrays for the compiled step: block k spans offsets[k]:offsets[k + 1]
        self._cuts = cuts
        self._offsets = np.concatenate([[0], cuts, [len(self._latent)]]).astype(np.int64)
        self._all_thresholds = np.concatenate(thresholds)
        first = np.zeros((2, self.blocks[0].neurons), np.uint16)
        self._parents = np.concatenate([first] + [b.parents for b in self.blocks[1:]], axis=1)
        self._z = np.empty(2 * max(b.neurons for b in self.blocks), np.float32)
        # The per-token innovations are windows at random offsets into one pool of normals drawn once:
        # each neuron still gets a fresh N(0, 1) draw per token, at a fraction of the cost of drawing
        # millions of normals per token (the dominant cost of a 70B run otherwise).
        self._pool = rng.standard_normal(2 * len(self._latent), dtype=np.float32)

    def run_frequency(self, k: int) -> np.ndarray:
        """The batch-union firing frequency of block k's neurons in this run."""
        return normal_cdf(self._thresholds[k])

    def step(self) -> list[np.ndarray]:
        fired = np.empty(len(self._latent), np.bool_)
        _chain_step(*self.step_arguments(), fired)
        return np.split(fired, self._cuts)

    def step_arguments(self) -> tuple:
        """The arguments of one token of the compiled chain (`_chain_step` but its output), drawing the
        token's innovations: the latents, the innovations, rho, the noise, own and mix weights (float32),
        the parents, the blocks' offsets, the thresholds and the two blocks' scratch of z."""
        s, rng = self.stats, self.rng
        noise = math.sqrt(1.0 - s.rho ** 2)
        own, mix = math.sqrt(1.0 - s.coupling ** 2), s.coupling / math.sqrt(2.0)
        start = int(rng.integers(0, len(self._pool) - len(self._latent)))
        return (self._latent, self._pool[start:start + len(self._latent)], np.float32(s.rho), np.float32(noise),
                np.float32(own), np.float32(mix), self._parents[0], self._parents[1], self._offsets,
                self._all_thresholds, self._z)

    def prefill_frequency(self, tokens: int) -> list[np.ndarray]:
        """Each neuron's activated fraction over a prompt of `tokens`, drawn as a binomial over the
        AR(1) process's effective sample size n (1 - rho) / (1 + rho), without stepping the tokens."""
        n_eff = max(1, int(round(tokens * (1 - self.stats.rho) / (1 + self.stats.rho))))
        return [self.rng.binomial(n_eff, self.run_frequency(k)) / n_eff for k in range(len(self.blocks))]


@njit(cache=True)
def _chain_step(latent, innovation, rho, noise, own, mix, parent0, parent1, offsets, thresholds, z, fired):
    """One token of the chain in float32, each operation rounded as numpy's array expressions round it:
    latent = rho latent + noise e; z_0 = latent_0; z_k = mix (z_{k-1}[p0] + z_{k-1}[p1]) + own latent_k;
    a neuron fires when z < its threshold. `z` holds two blocks, the previous one's and this one's, so
    that both stay in cache."""
    half = len(z) // 2
    parents_fired = np.empty(half, np.uint8)
    for k in range(len(offsets) - 1):
        lo, hi = offsets[k], offsets[k + 1]
        before = offsets[k - 1] if k else lo
        _chain_block(latent[lo:hi], innovation[lo:hi], rho, noise, own, mix, parent0[lo:hi], parent1[lo:hi],
                     thresholds[lo:hi], z[half * ((k + 1) % 2):half * ((k + 1) % 2) + half], z[half * (k % 2):],
                     fired[lo:hi], fired[before:lo], parents_fired, k == 0)


@njit(cache=True)
def _chain_block(latent, innovation, rho, noise, own, mix, parent0, parent1, thresholds, previous, current, fired,
                 previous_fired, parents_fired, first):
    """One block of `_chain_step`, its arrays sliced to the block: its latents' step, its z in `current`
    from the previous block's in `previous` (the first block: its latents), `fired`; and in
    `parents_fired` how many of each neuron's two parents fired (`previous_fired`; the predictor's s2:
    the loads the chain does anyway)."""
    n = len(latent)
    for i in range(n):
        latent[i] = latent[i] * rho
        latent[i] = latent[i] + noise * innovation[i]
    if first:
        for i in range(n):
            current[i] = latent[i]
            fired[i] = latent[i] < thresholds[i]
            parents_fired[i] = 0
        return
    before = previous_fired.view(np.uint8)
    for i in range(n):
        a, b = parent0[i], parent1[i]
        v = previous[a] + previous[b]
        v = v * mix
        v = v + own * latent[i]
        current[i] = v
        fired[i] = v < thresholds[i]
        parents_fired[i] = before[a] + before[b]


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of the neurons active in `a` that are active in `b` (the reading of Fig. 4a)."""
    return float((a & b).sum() / max(1, a.sum()))


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
