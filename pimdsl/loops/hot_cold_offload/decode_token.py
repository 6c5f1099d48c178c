"""One decode token of the sparse strategies over every block, compiled ([HERMES_NDP] Sec. IV-C).

A token runs, block by block along the chain (L0.qkv, L0.mlp, L1.qkv, ...): the activation chain's step
(activations.py), the predictor's guess and FSM update (activation_predictor.py) and the tally of what
each device computes; at each layer's projection, the online adjustment of both its blocks' hot sets
(`adjust`, Sec. IV-C-2), before the layer's MLP block is predicted. `token_pass` does all of it in one
call per token over flat arrays of every block (`DecodeToken` holds them; the loop's per-block arrays
are views of them), each block's pass over its neurons while they are in cache. It leaves per block
the counts the loop times (`counts[k]`, columns COUNTS) and the predicted cold neurons per device
(`per_dev[k]`). The kernels it is built of are the ones the loop's statements are tested against,
one block at a time.
"""
from __future__ import annotations

import numpy as np

from ...aot import bind
from ...jit_cache import njit
from ...sparsity.activation_predictor import Predictor, _predict_update
from ...sparsity.activations import Generator, _chain_block

# what `counts[k]` holds after a token: block k's predicted neurons on the GPU, right guesses,
# predicted, fired, predicted and fired; the hot/cold swaps of its online adjustment
COUNTS = ("on_gpu", "correct", "predicted", "fired", "hit", "swaps")
SWAPS = COUNTS.index("swaps")
# what `times` of `token_time` holds: the seconds of the FC blocks (all, the QKV ones, the MLP ones), the
# GPU's and the slowest cold device's in them, the attention, the projection, the exposed copies, the
# GPU's busy time; the bytes of hot-neuron copies over PCIe
TIMES = ("fc", "qkv", "mlp", "fc_gpu", "fc_cold", "attention", "projection", "exposed_copies", "gpu_busy",
         "pcie_bytes")
_FC, _QKV, _MLP, _FC_GPU, _FC_COLD, _ATTENTION, _PROJECTION, _EXPOSED, _GPU_BUSY, _PCIE_BYTES = range(len(TIMES))


class DecodeToken:
    """The state a token changes, flat over every block: the generator's chain and the predictor's
    states (theirs already), the placement's hot set and homes, the window's firings. `on_gpu`, `home`
    and `activity` (None: not counted) are lists of per-block arrays, which become views of the flat
    ones in place."""

    def __init__(self, gen: Generator, pred: Predictor, on_gpu: list, home: list, activity: list | None,
                 devices: int, adjusting: bool):
        self.gen, self.pred, self.adjusting, self.on_gpu = gen, pred, adjusting, on_gpu
        self.flat_on_gpu, self.flat_home = _flatten(on_gpu), _flatten(home)
        self.activity = np.zeros(0, np.uint8) if activity is None else _flatten(activity)
        self.counts = np.zeros((len(on_gpu), len(COUNTS)), np.int64)
        self.per_dev = np.zeros((len(on_gpu), devices), np.int64)
        # each block's states per (on the GPU, state) after its last pass, for its next adjustment (the
        # hot set and the states do not change in between); current: not changed since
        self.hist = np.zeros((len(on_gpu), 2, 256), np.int64)
        self.current = np.zeros(len(on_gpu), np.bool_)
        self.fired = None                  # two blocks' firings, as the chain's z (kept between calls)

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        """One token: `counts` and `per_dev` (rows by block; the arrays are reused by the next token)."""
        p, chain = self.pred, self.gen.step_arguments()
        if self.fired is None:
            self.fired = np.zeros(len(chain[-1]), np.bool_)
        args = (*chain, self.fired, p.table, p.rule, p.fired, p.idle, float(p.hot_threshold), self.flat_on_gpu,
                self.flat_home, self.activity, self.counts, self.per_dev, self.hist, self.current)
        phase = token_pass(0, self.adjusting, *args)
        while phase >= 0:                  # an adjustment numpy's partition decides (adjust_compiled: -1)
            k = 2 * (phase // 4) + phase % 4 - 1
            self.counts[k, SWAPS] = adjust_numpy(p.states[k], p.hot_threshold, self.on_gpu[k])
            phase = token_pass(phase + 1, self.adjusting, *args)
        return self.counts, self.per_dev


def _flatten(blocks: list) -> np.ndarray:
    """One array of every block's, the list's arrays replaced by views of it."""
    flat = np.concatenate(blocks)
    blocks[:] = np.split(flat, np.cumsum([len(b) for b in blocks])[:-1])
    return flat


@njit(cache=True)
def token_pass(phase, adjusting, latent, innovation, rho, noise, own, mix, parent0, parent1, offsets, thresholds, z,
               fired, states, rule, up, down, hot_threshold, on_gpu, home, activity, counts, per_dev, hist, current):
    """A token from `phase` on: layer l's phases are 4 l (its QKV block: the chain, the predictor, the
    tally), 4 l + 1 and 4 l + 2 (the adjustment of its two blocks, when `adjusting`), 4 l + 3 (its MLP
    block). The arguments are the generator's (`Generator.step_arguments`), two blocks' firings
    (`fired`, as `z`), the predictor's states and tables, the hot set, the homes, the window's firings
    (empty: not counted), the outputs and the blocks' state histograms (`DecodeToken.hist`). Returns
    -1 when the token is done, or the phase of an adjustment `adjust_compiled` leaves to numpy (the
    caller does it and goes on from the next phase)."""
    half = len(z) // 2
    guess = np.empty(half, np.bool_)
    parents_fired = np.empty(half, np.uint8)
    for p in range(phase, 2 * (len(offsets) - 1)):
        part = p % 4
        if part == 1 or part == 2:
            if adjusting:
                k = 2 * (p // 4) + part - 1
                lo, hi = offsets[k], offsets[k + 1]
                if not current[k]:
                    hist[k] = _state_histograms(states[lo:hi], on_gpu[lo:hi].view(np.uint8))
                current[k] = False               # the adjustment moves neurons
                swaps = _adjust_counted(states[lo:hi], hot_threshold, on_gpu[lo:hi], hist[k])
                if swaps < 0:
                    return p
                counts[k, SWAPS] = swaps
            continue
        k = 2 * (p // 4) + part // 3
        lo, hi = offsets[k], offsets[k + 1]
        n = hi - lo
        now, before = half * (k % 2), half * ((k + 1) % 2)
        actual = fired[now:now + n]
        _chain_block(latent[lo:hi], innovation[lo:hi], rho, noise, own, mix, parent0[lo:hi], parent1[lo:hi],
                     thresholds[lo:hi], z[before:before + half], z[now:now + n], actual, fired[before:before + half],
                     parents_fired, k == 0)
        _predict_update(states[lo:hi], parents_fired, actual, rule, up, down, guess, on_gpu[lo:hi], hist[k])
        current[k] = True
        per_dev[k, :] = 0
        n_gpu, correct, predicted, n_fired, hit = tally(guess[:n], actual, on_gpu[lo:hi], home[lo:hi],
                                                        activity[lo:hi] if len(activity) else activity, per_dev[k])
        counts[k, 0], counts[k, 1], counts[k, 2], counts[k, 3], counts[k, 4] = n_gpu, correct, predicted, n_fired, hit
    return -1


_ONES = np.uint64(0x0101010101010101)


@njit(cache=True)
def tally(guess, actual, on_gpu, home, activity, per_dev):
    """One block's token: adds its predicted cold neurons to `per_dev` by their device (`home`) and its
    firings to `activity` (when given: not empty); returns its predicted neurons on the GPU and the
    predictor's counts (correct, predicted, fired, predicted and fired). Eight neurons a word: bools are
    0/1 bytes, and the top byte of a word times 0x0101010101010101 is the sum of its bytes (of a word
    with only the bytes below a neuron's set, how many of them are)."""
    n = len(guess)
    words = n // 8
    g64, a64 = guess[:8 * words].view(np.uint64), actual[:8 * words].view(np.uint64)
    o64 = on_gpu[:8 * words].view(np.uint64)
    one, top = np.uint64(1), np.uint64(56)
    n_gpu = predicted = fired = hit = np.uint64(0)
    for w in range(words):
        g, a, o = g64[w], a64[w], o64[w]
        predicted += (g * _ONES) >> top
        fired += (a * _ONES) >> top
        hit += ((g & a) * _ONES) >> top
        n_gpu += ((g & o) * _ONES) >> top
        cold = g & ~o
        while cold:                                  # its set bytes, lowest first
            low = cold & (np.uint64(0) - cold)
            below = (((low - one) & _ONES) * _ONES) >> top     # the bytes below it
            per_dev[home[8 * w + np.int64(below)]] += 1
            cold ^= low
    counted = np.array([n_gpu, predicted, fired, hit], np.int64)
    g8, a8, o8 = guess.view(np.uint8), actual.view(np.uint8), on_gpu.view(np.uint8)
    for i in range(8 * words, n):
        g, a = np.int64(g8[i]), np.int64(a8[i])
        counted[0] += g & o8[i]
        counted[1] += g
        counted[2] += a
        counted[3] += g & a
        if g > o8[i]:
            per_dev[home[i]] += 1
    if len(activity):
        for i in range(n):
            activity[i] += a8[i]
    n_gpu, predicted, fired, hit = counted[0], counted[1], counted[2], counted[3]
    return n_gpu, n - (predicted + fired - 2 * hit), predicted, fired, hit


def adjust_numpy(state: np.ndarray, hot_threshold: float, on_gpu: np.ndarray) -> int:
    """Online adjustment ([HERMES_NDP] Sec. IV-C-2), in numpy: hot neurons (state > T_h) not on the GPU
    replace the GPU neurons of lowest state, while the newcomer's state is higher. Returns the swaps.
    The statement `adjust_compiled` is held to, and the adjustment where that leaves it to numpy."""
    cand, victims = np.flatnonzero((state > hot_threshold) & ~on_gpu), np.flatnonzero(on_gpu)
    n = min(len(cand), len(victims))
    if n == 0:
        return 0
    cand = cand[np.argsort(-state[cand], kind="stable")][:n]
    if n < len(victims):                      # only the n lowest states can be swapped out
        victims = victims[np.argpartition(state[victims], n - 1)[:n]]
    victims = victims[np.argsort(state[victims], kind="stable")]
    swaps = int(np.count_nonzero(state[cand] > state[victims]))
    on_gpu[cand[:swaps]] = True
    on_gpu[victims[:swaps]] = False
    return swaps


@njit(cache=True)
def _first_of_levels(hist, levels, count):
    """Of a list ordered by level (in the order `levels` gives), ties by index, with hist[level]
    members per level: how many of the first `count` each level holds."""
    take = np.zeros(len(hist), np.int64)
    for s in levels:
        t = min(count, hist[s])
        take[s] = t
        count -= t
    return take


@njit(cache=True)
def _state_histograms(state, o8):
    """[on GPU][state] counts, in four interleaved tables so that runs of one state do not wait on one
    counter (twice as fast as one table)."""
    h = np.zeros((4, 2, 256), np.int64)
    n4 = len(state) // 4 * 4
    for i in range(0, n4, 4):
        h[0, o8[i], state[i]] += 1
        h[1, o8[i + 1], state[i + 1]] += 1
        h[2, o8[i + 2], state[i + 2]] += 1
        h[3, o8[i + 3], state[i + 3]] += 1
    for i in range(n4, len(state)):
        h[0, o8[i], state[i]] += 1
    return h[0] + h[1] + h[2] + h[3]


@njit(cache=True)
def adjust_compiled(state, hot_threshold, on_gpu):
    """`adjust_numpy` when every GPU neuron is a possible victim (at least as many candidates, the usual case),
    compiled; -1 (nothing changed) otherwise, where that takes numpy's partition. The orders are
    numpy's stable argsorts of the uint8 keys `-state` (candidates) and `state` (victims): by state,
    ties by index. So one pass counts the states of the candidates and of the GPU neurons, the swaps
    follow from the two histograms, and a second pass, only when there are swaps, moves the first
    `swaps` of each order (within a state, the lowest indices), stopping once it has."""
    return _adjust_counted(state, hot_threshold, on_gpu, _state_histograms(state, on_gpu.view(np.uint8)))


@njit(cache=True)
def _adjust_counted(state, hot_threshold, on_gpu, counted):
    """`adjust_compiled` given the pass that counts (`counted`: [on GPU][state], left unchanged)."""
    o8 = on_gpu.view(np.uint8)
    hist = counted.copy()
    cand_levels = (256 - np.arange(256)) % 256       # -state as uint8: 0 first, then 255 down to 1
    for s in range(256):
        if not s > hot_threshold:
            hist[0, s] = 0                           # not hot: not a candidate
    n_cand, n = hist[0].sum(), hist[1].sum()
    if min(n_cand, n) == 0:
        return 0
    if n_cand < n:
        return -1
    cand_take = _first_of_levels(hist[0], cand_levels, n)
    victim_take = _first_of_levels(hist[1], np.arange(256), n)
    swaps = 0                                        # walk both orders level run by level run
    ci = vi = 0
    c_left, v_left = cand_take[cand_levels[0]], victim_take[0]
    j = 0
    while j < n:
        while c_left == 0:
            ci += 1
            c_left = cand_take[cand_levels[ci]]
        while v_left == 0:
            vi += 1
            v_left = victim_take[vi]
        run = min(c_left, v_left)
        if cand_levels[ci] > vi:
            swaps += run
        c_left -= run
        v_left -= run
        j += run
    if swaps == 0:
        return 0
    cand_take = _first_of_levels(hist[0], cand_levels, swaps)
    victim_take = _first_of_levels(hist[1], np.arange(256), swaps)
    if _move_by_levels(state, o8, counted, cand_take, victim_take):
        return swaps
    left = 2 * swaps                                 # the walk stops at the last neuron it moves
    for i in range(len(state)):
        s = state[i]
        if o8[i]:
            if victim_take[s] > 0:
                victim_take[s] -= 1
                on_gpu[i] = False
                left -= 1
        elif cand_take[s] > 0:
            cand_take[s] -= 1
            on_gpu[i] = True
            left -= 1
        if left == 0:
            break
    return swaps


@njit(cache=True)
def _move_by_levels(state, o8, counted, join, leave):
    """The walk's moves (`join[s]` of the neurons of state s off the GPU join it, `leave[s]` of those on
    it leave, the first ones by index) made level by level: every neuron of a level taken whole moves,
    eight neurons a word; then a walk for the one level each side takes in part, which stops once it
    has taken them. That needs the levels taken whole to be the states below v (leaving) and above c
    (joining) with v <= c, so that no neuron the first pass moves is of the other side's level taken in
    part (so they are whenever state 0 is not a candidate: a hot threshold >= 0), and states below 128
    (a byte's top bit free: s + 128 - v has it set when s >= v). Returns False, having changed
    nothing, when they are not."""
    if join[0] > 0 or counted[:, 128:].sum() > 0:
        return False
    v = 0                                            # leave: the states below v whole, v in part
    while v < 128 and leave[v] == counted[1, v]:
        v += 1
    c = 127                                          # join: the states above c whole, c in part
    while c > 0 and join[c] == counted[0, c]:
        c -= 1
    if c < v:
        return False
    n = len(state)
    words = n // 8
    s64, o64 = state[:8 * words].view(np.uint64), o8[:8 * words].view(np.uint64)
    stays, joins, seven = np.uint64(128 - v) * _ONES, np.uint64(127 - c) * _ONES, np.uint64(7)
    for w in range(words):
        s, o = s64[w], o64[w]
        moved = (o & ((s + stays) >> seven)) | ((o ^ _ONES) & ((s + joins) >> seven))
        if moved != o:
            o64[w] = moved
    for i in range(8 * words, n):
        o8[i] = state[i] >= v if o8[i] else state[i] > c
    left_v, left_c = leave[v] if v < 128 else 0, join[c]
    for i in range(n):
        if left_v == 0 and left_c == 0:
            break
        if state[i] == v and o8[i] and left_v > 0:
            o8[i] = 0
            left_v -= 1
        elif state[i] == c and not o8[i] and left_c > 0:
            o8[i] = 1
            left_c -= 1
    return True


@njit(cache=True)
def token_time(t, counts, per_dev, neuron_gpu, neuron_cold, floor, sync, attention, projection, pcie_rate, nbytes,
               pending_link, adjusting, times, totals, cold_busy, marks, layer_marks):
    """The time of a token's blocks from `t` on, from the `counts` and `per_dev` of its `token_pass`
    ([HERMES_NDP] Eqs. 2-3; neuron_split's docstring says what each time covers); returns the time
    after the last layer's projection. Per block: its GPU part (`neuron_gpu` per neuron, a kernel's
    `floor`, 2 syncs) and its slowest device (`neuron_cold` per neuron, each device's time added to
    `cold_busy`) overlap; after each QKV block, the attention, then the projection, under which the
    layer's hot-neuron copies (its blocks' swaps, when `adjusting`, at `pcie_rate`) and the layer's
    `pending_link` remap (zeroed) run, the excess exposed. Adds to `times` (columns TIMES) and
    `totals` (columns COUNTS). `marks[k]`: block k's start and GPU time; `layer_marks[l]`: layer l's
    attention start, copy time and remap time (for a timeline). The float operations are the loop's,
    in its order: a run's numbers do not depend on this being compiled."""
    for layer in range(len(counts) // 2):
        for which in range(2):
            k = 2 * layer + which
            n_gpu = counts[k, 0]
            t_gpu = n_gpu * neuron_gpu[k] + (floor if n_gpu else 0.0) + 2 * sync
            cold_max = 0.0
            for j in range(per_dev.shape[1]):
                t_dev = per_dev[k, j] * neuron_cold[k]
                cold_busy[j] += t_dev
                cold_max = max(cold_max, t_dev)
            block = max(t_gpu, cold_max)
            marks[k, 0], marks[k, 1] = t, t_gpu
            t += block
            times[_FC] += block
            times[_MLP if which else _QKV] += block
            times[_FC_GPU] += t_gpu
            times[_FC_COLD] += cold_max
            times[_GPU_BUSY] += t_gpu
            for col in range(counts.shape[1]):
                totals[col] += counts[k, col]
            if which == 0:                               # attention, then the projection
                layer_marks[layer, 0] = t
                t += attention
                times[_ATTENTION] += attention
                copies = 0.0
                if adjusting:                            # both blocks of the layer, under the projection
                    copies += counts[k, SWAPS] * nbytes[k]
                    copies += counts[k + 1, SWAPS] * nbytes[k + 1]
                copy_t = copies / pcie_rate
                link_t = pending_link[layer]
                pending_link[layer] = 0.0
                exposed = max(0.0, max(copy_t, link_t) - projection)
                layer_marks[layer, 1], layer_marks[layer, 2] = copy_t, link_t
                t += projection + exposed
                times[_PROJECTION] += projection
                times[_GPU_BUSY] += projection
                times[_EXPOSED] += exposed
                times[_PCIE_BYTES] += copies
    return t


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
