"""Offline neuron placement as the integer program of [HERMES_NDP] Sec. IV-B, Eqs. 1-7.

    min  sum_l t_l                                                   (Eq. 1, t_l = max(T_GPU-l, T_DIMM-l))
    t_l >= T_l^GPU  * sum_{i in l} f_i x_i^GPU + 2 T_sync             (Eqs. 3, 4)
    t_l >= T_l^DIMM * sum_{i in l} f_i x_i^j          for every DIMM j (Eqs. 2, 5)
    sum_i M_i x_i^GPU <= S_GPU,   sum_i M_i x_i^j <= S_j              (Eqs. 6, 7)
    each neuron on exactly one device.

Neurons are grouped (`Group`: neurons of one block with about the same profiled frequency) and the
variables are integer counts per group and device, which is the binary program when every group
holds one neuron. With identical DIMMs (`aggregate_dimms=True`) the DIMMs share one count per group
and T_DIMM-l uses the even split sum / J: identical DIMMs make the full program's optimum that
split up to one neuron per group, and removing their J! symmetric solutions keeps big models
within the time limit. That form separates by block and is solved directly, within the MIP solver's
relative gap of a proven bound (`_solve_separable`); the full form, or one the direct method does
not fit, goes to HiGHS. The status, objective and relative gap are returned.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np


TIE = 1e-3
MIP_GAP = 1e-4                  # the relative gap at which a placement counts as optimal (HiGHS's mip_rel_gap)


@dataclass(frozen=True)
class Group:
    block: int                # index of its FC block (the paper's layer l)
    count: int                # neurons in the group
    frequency: float          # mean profiled activation frequency f_i
    bytes: float              # M_i, one neuron's weights


@dataclass(frozen=True)
class Problem:
    groups: tuple[Group, ...]
    gpu_s: tuple[float, ...]          # T_l^GPU per block: one active neuron on the GPU
    dimm_s: tuple[float, ...]         # T_l^DIMM per block: one active neuron on one DIMM
    sync_s: float                     # T_sync
    gpu_bytes: float                  # S_GPU
    dimm_bytes: float                 # S_j (each DIMM)
    dimms: int


@dataclass(frozen=True)
class Placement:
    on_gpu: np.ndarray                # neurons of each group on the GPU
    on_dimm: np.ndarray               # (groups, dimms) neurons of each group on each DIMM
    objective_s: float                # sum_l t_l
    status: str
    gap: float                        # relative MIP gap at the end (0: proven optimal)
    solve_s: float                    # the solver's wall time (0 when read back from the cache)


def solve(p: Problem, time_limit_s: float = 10.0, aggregate_dimms: bool = False) -> Placement:
    """The program's solution. The aggregate form (or one DIMM) is solved directly to within
    MIP_GAP of a proven bound (`_solve_separable`, milliseconds); the rest by HiGHS, whose optimal
    solution is kept on disk (timing_cache) for the same problem, options, HiGHS version and
    pimdsl code, since HiGHS with one thread and a fixed seed is deterministic once it proves
    optimality (a solution cut by the time limit is not kept: it depends on the machine's speed)."""
    if aggregate_dimms or p.dimms == 1:
        sol = _solve_separable(p)
        if sol is not None:
            return sol
    from importlib.metadata import version
    from ..interpreter import timing_cache
    name = timing_cache.content_key("neuron_placement", p, float(time_limit_s), aggregate_dimms, version("highspy"))
    stored = timing_cache.load(name)
    if stored is not None:
        try:
            on_gpu, on_dimm = np.array(stored["on_gpu"], dtype=int), np.array(stored["on_dimm"], dtype=int)
            if on_gpu.shape == (len(p.groups),) and on_dimm.shape == (len(p.groups), p.dimms):
                return Placement(on_gpu, on_dimm, float(stored["objective_s"]), str(stored["status"]),
                                 float(stored["gap"]), 0.0)
        except (KeyError, TypeError, ValueError):
            pass                                      # a damaged entry: solve again
    sol = _solve(p, time_limit_s, aggregate_dimms)
    if sol.status == "Optimal":
        timing_cache.store(name, {"on_gpu": sol.on_gpu.tolist(), "on_dimm": sol.on_dimm.tolist(),
                                  "objective_s": sol.objective_s, "status": sol.status, "gap": sol.gap})
    return sol


def _relaxation(p: Problem) -> tuple[list, list[float], float] | None:
    """The aggregate program's linear relaxation, solved exactly: per block (its groups hottest
    first, T_GPU, T_DIMM / J, 2 T_sync, the tie-break per GPU neuron, F_l), each group's relaxed
    GPU count, and the relaxation's value, a lower bound on every integer placement's. None when
    a block's neurons differ in bytes (hottest first is then not its optimum).

    With the DIMMs aggregated the program is separable by block, coupled only by the GPU's bytes:
    block l costs t_l = max(T_GPU F + 2 T_sync, T_DIMM / J (F_l - F)) plus TIE T_GPU per GPU neuron,
    with F the frequency its GPU neurons carry. Below the crossing F* of the two bounds each neuron
    moved to the GPU saves T_DIMM / J f - TIE T_GPU, past it every neuron costs: a block's neurons
    go hottest first up to F*, and across blocks by saving per byte while the bytes last (a
    fractional knapsack). The DIMMs' capacity is left out: a program with fewer constraints still
    bounds this one from below."""
    J = p.dimms
    by_block = [[] for _ in p.gpu_s]
    for gi, g in enumerate(p.groups):
        by_block[g.block].append(gi)
    if any(len({p.groups[gi].bytes for gi in m}) > 1 for m in by_block):
        return None
    freq, count = [g.frequency for g in p.groups], [g.count for g in p.groups]
    blocks, segments = [], []                 # segments: (saving per neuron, neurons, bytes, group)
    for l, members in enumerate(by_block):
        members = sorted(members, key=lambda gi: -freq[gi])            # stable: ties by index
        a, d, b, tie = p.gpu_s[l], p.dimm_s[l] / J, 2.0 * p.sync_s, TIE * p.gpu_s[l]
        total = math.fsum(freq[gi] * count[gi] for gi in members)
        blocks.append((members, a, d, b, tie, total))
        cross, hot = (d * total - b) / (a + d), 0.0                     # F*, and F so far
        for gi in members:
            if d * freq[gi] <= tie or hot >= cross:
                break
            x = min(float(count[gi]), (cross - hot) / freq[gi])
            segments.append((d * freq[gi] - tie, x, p.groups[gi].bytes, gi))
            hot += x * freq[gi]
    segments.sort(key=lambda s: -s[0] / s[2])                           # stable: a block's stay in order
    relaxed, left, saved = [0.0] * len(p.groups), p.gpu_bytes, 0.0
    for saving, x, nbytes, gi in segments:
        take = min(x, left / nbytes)
        if take <= 0.0:
            break
        relaxed[gi], left = take, left - take * nbytes
        saved += take * saving
    return blocks, relaxed, math.fsum(max(b, d * total) for _, a, d, b, tie, total in blocks) - saved


def _solve_separable(p: Problem, max_gap: float = MIP_GAP) -> Placement | None:
    """The aggregate program (identical DIMMs, or one DIMM) solved without a MIP solver to within
    `max_gap` of its linear relaxation (`_relaxation`); None where that does not hold or the DIMMs'
    capacity binds (then the MIP solver is used).

    The integer placement rounds the relaxation's counts down, then fills what each block lacks of
    its relaxed F with colder neurons, largest first, and adds one more of the coldest if crossing
    F* costs less than stopping short. The relative gap to the bound is reported like the MIP
    solver's; only plain float arithmetic in a fixed order is used, so the result is the same on
    every machine."""
    relaxation = _relaxation(p)
    if relaxation is None:
        return None
    blocks, relaxed, bound = relaxation
    G, J = len(p.groups), p.dimms
    freq, count = [g.frequency for g in p.groups], [g.count for g in p.groups]
    on_gpu = [math.floor(x) for x in relaxed]
    left = p.gpu_bytes - math.fsum(n * p.groups[gi].bytes for gi, n in enumerate(on_gpu))
    with_tie, objective = [], []
    for members, a, d, b, tie, total in blocks:
        nbytes = p.groups[members[0]].bytes if members else 0.0
        hot = math.fsum(freq[gi] * on_gpu[gi] for gi in members)
        short = math.fsum(freq[gi] * relaxed[gi] for gi in members) - hot
        for gi in members:                    # fill the shortfall with colder neurons, largest first
            if freq[gi] > 0:
                k = min(count[gi] - on_gpu[gi], math.floor(short / freq[gi]), math.floor(left / nbytes))
                if k > 0:
                    on_gpu[gi] += k
                    short, hot, left = short - k * freq[gi], hot + k * freq[gi], left - k * nbytes
        cost = lambda h, n: max(a * h + b, d * (total - h)) + tie * n
        n = sum(on_gpu[gi] for gi in members)
        spare = [gi for gi in members if on_gpu[gi] < count[gi] and freq[gi] > 0]
        if spare and left >= nbytes and cost(hot + freq[spare[-1]], n + 1) < cost(hot, n):
            on_gpu[spare[-1]] += 1            # crossing F* by the coldest neuron costs less
            hot, left, n = hot + freq[spare[-1]], left - nbytes, n + 1
        with_tie.append(cost(hot, n))
        objective.append(max(a * hot + b, d * (total - hot)))
    cold = np.array(count) - np.array(on_gpu, dtype=int)
    if left < 0 or math.fsum(c * g.bytes for c, g in zip(cold.tolist(), p.groups)) > J * p.dimm_bytes:
        return None
    value = math.fsum(with_tie)
    gap = max(0.0, (value - bound) / value) if value > 0 else 0.0
    if gap > max_gap:
        return None
    on_dimm = np.array([[c // J + (1 if j < c % J else 0) for j in range(J)] for c in cold], dtype=int)
    return Placement(np.array(on_gpu, dtype=int), on_dimm.reshape(G, J), math.fsum(objective), "Optimal", gap, 0.0)


def _solve(p: Problem, time_limit_s: float, aggregate_dimms: bool) -> Placement:
    import highspy
    G, J, B = len(p.groups), p.dimms, len(p.gpu_s)
    # HiGHS's tolerances are absolute (1e-7): state times in microseconds and bytes in units of the
    # largest neuron, so that no coefficient is near them
    us, unit = 1e6, max(g.bytes for g in p.groups)
    D = 1 if aggregate_dimms else J           # DIMM count columns per group
    per = 1 + D
    ncols = G * per + B                       # counts (gpu, dimm...) per group, then t_l
    cost = np.zeros(ncols)
    cost[G * per:] = 1.0
    # Eqs. 1-7 are indifferent to *which* neurons carry the GPU's share while its memory is not the
    # limit (both sides are linear in f: one hot neuron or several cold ones); among those optima take
    # the one with the fewest GPU neurons, i.e. the hottest there ("hot neurons on the GPU", Sec. IV-B):
    # each GPU neuron costs TIE of its time at f = 1, too little to trade any t_l for it
    for gi, g in enumerate(p.groups):
        cost[gi * per] = TIE * us * p.gpu_s[g.block]
    upper = np.concatenate([np.repeat([g.count for g in p.groups], per).astype(float), np.full(B, np.inf)])
    rows, lo, hi = [], [], []                 # rows as (cols, vals)
    for gi, g in enumerate(p.groups):         # each neuron on one device
        rows.append((list(range(gi * per, gi * per + per)), [1.0] * per))
        lo.append(g.count), hi.append(g.count)
    by_block = [[] for _ in range(B)]
    for gi, g in enumerate(p.groups):
        by_block[g.block].append(gi)
    for l, members in enumerate(by_block):
        t = G * per + l
        # T_GPU-l - t_l <= -2 T_sync
        rows.append(([gi * per for gi in members] + [t],
                     [us * p.gpu_s[l] * p.groups[gi].frequency for gi in members] + [-1.0]))
        lo.append(-np.inf), hi.append(-2.0 * us * p.sync_s)
        for j in range(D):
            share = 1.0 / J if aggregate_dimms else 1.0
            rows.append(([gi * per + 1 + j for gi in members] + [t],
                         [us * p.dimm_s[l] * p.groups[gi].frequency * share for gi in members] + [-1.0]))
            lo.append(-np.inf), hi.append(0.0)
    rows.append(([gi * per for gi in range(G)], [g.bytes / unit for g in p.groups]))
    lo.append(-np.inf), hi.append(p.gpu_bytes / unit)
    for j in range(D):
        rows.append(([gi * per + 1 + j for gi in range(G)], [g.bytes / unit for g in p.groups]))
        lo.append(-np.inf), hi.append(p.dimm_bytes * (J if aggregate_dimms else 1) / unit)

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = ncols, len(rows)
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, np.zeros(ncols), upper
    lp.row_lower_, lp.row_upper_ = np.array(lo, float), np.array(hi, float)
    r = np.concatenate([np.full(len(cs), i) for i, (cs, _) in enumerate(rows)])
    c = np.array([c for cs, _ in rows for c in cs])
    v = np.array([v for _, vs in rows for v in vs], dtype=float)
    by_col = np.lexsort((r, c))                  # HiGHS takes the matrix column-wise
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.searchsorted(c[by_col], np.arange(ncols + 1)).astype(np.int32)
    lp.a_matrix_.index_ = r[by_col].astype(np.int32)
    lp.a_matrix_.value_ = v[by_col]
    lp.integrality_ = [highspy.HighsVarType.kInteger] * (G * per) + [highspy.HighsVarType.kContinuous] * B
    h = _quiet_highs(highspy)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", MIP_GAP)
    h.passModel(lp)
    start = time.perf_counter()
    h.run()
    solve_s = time.perf_counter() - start
    status = h.modelStatusToString(h.getModelStatus())
    x = np.asarray(h.getSolution().col_value)
    info = h.getInfo()
    if len(x) != ncols or info.primal_solution_status != 2:     # 2: a feasible point was found
        raise ValueError(f"the neuron placement program has no solution ({status}): "
                         "the weights do not fit the GPU and DIMM capacities")
    counts = np.rint(x[:G * per]).astype(int).reshape(G, per)
    on_gpu = counts[:, 0]
    if aggregate_dimms:                       # the even split the aggregate form assumes
        cold = counts[:, 1]
        on_dimm = np.array([[c // J + (1 if j < c % J else 0) for j in range(J)] for c in cold], dtype=int)
    else:
        on_dimm = counts[:, 1:]
    gap = float(info.mip_gap) if np.isfinite(info.mip_gap) else float("inf")
    objective = float(np.dot(cost[G * per:], x[G * per:]))          # sum_l t_l, without the tie-break
    return Placement(on_gpu, on_dimm, objective / us, status, gap, solve_s)


def _quiet_highs(highspy):
    """A silent solver: HiGHS prints its banner on C stdout when built, which would corrupt
    `pimc run --json`, so fd 1 points at /dev/null while it is made."""
    import os
    import sys
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    finally:
        os.dup2(saved, 1)
        os.close(saved), os.close(null)
    return h


def descending(frequency: np.ndarray, by_rank: np.ndarray | None = None) -> np.ndarray:
    """The neurons from the most to the least frequent, ties by index: `np.argsort(-frequency,
    kind="stable")`. Given `by_rank`, an order along which the frequency does not increase (the
    generator's ranks), only its runs of equal frequency need sorting, by index (a fraction of the
    sort's time); otherwise, or if it does increase somewhere, the sort."""
    if by_rank is None:
        return np.argsort(-frequency, kind="stable")
    ranked = frequency[by_rank]
    if np.any(ranked[1:] > ranked[:-1]):
        return np.argsort(-frequency, kind="stable")
    order = by_rank.astype(np.intp)
    bounds = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1], [True]]))
    for run in np.flatnonzero(np.diff(bounds) > 1):
        order[bounds[run]:bounds[run + 1]].sort()
    return order


def groups_of(profile: np.ndarray, block: int, neuron_bytes: float, per_block: int,
              by_rank: np.ndarray | None = None) -> tuple[list[Group], np.ndarray]:
    """Equal-count frequency groups of one block (most frequent first) and each neuron's group order:
    `order` lists the block's neurons from the most to the least frequent (`descending`)."""
    order = descending(profile, by_rank)
    parts = np.array_split(order, min(per_block, len(order)))
    return [Group(block, len(p), float(profile[p].mean()), neuron_bytes) for p in parts], order


def assign(order: np.ndarray, on_gpu: np.ndarray, on_dimm: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Device of each neuron of a block (-1: GPU, j: DIMM j) from its groups' counts: within a group
    the most frequent neurons go to the GPU, the rest round robin over the DIMMs."""
    device = np.empty(len(order), dtype=np.int16)
    start = 0
    for size, g, dimm in zip(sizes, on_gpu, on_dimm):
        part = order[start:start + size]
        device[part[:g]] = -1
        labels = np.repeat(np.arange(len(dimm)), dimm)
        within = np.concatenate([np.arange(c) for c in dimm]) if len(labels) else labels
        device[part[g:]] = labels[np.argsort(within, kind="stable")]     # interleaved: 0, 1, ..., J-1, 0, ...
        start += size
    return device
