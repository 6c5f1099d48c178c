"""The hot/cold neuron offload loop and its mechanisms ([HERMES_NDP]): the placement program on
hand-worked and brute-forced instances, the predictor FSM and Algorithm 1 on hand-worked traces, the
state-table size, the activation generator's statistics, the split GEMV and merge against numpy,
and `pimc run` on every strategy."""
from __future__ import annotations

import hashlib
import itertools
import json

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from pimdsl.cli.main import main
from pimdsl.loops.hot_cold_offload import decode_token, neuron_split as hot_cold_offload
from pimdsl.sparsity import activations, neuron_placement as npl
from pimdsl.sparsity.activation_predictor import Predictor, initial_state, state_table_bytes
from pimdsl.sparsity.window_remap import imbalance, loads, remap, remap_window

from .conftest import ROOT

SYSTEMS = ROOT / "specs" / "systems"


# ---- the placement program (Eqs. 1-7) ---------------------------------------------------------

def test_program_hand_worked_optimum():
    # one layer, neurons f = 0.9, 0.5, 0.1 of one byte; the GPU holds one neuron and takes 1 s per
    # active neuron, each of two DIMMs holds two and takes 10 s: 0.9 on the GPU (0.9 s), 0.5 and 0.1
    # on different DIMMs (5 s, 1 s); any other placement puts >= 0.5 * 10 s... on one device, or 0.5 + 0.1
    # on one DIMM (6 s): the optimum is 5 s
    groups = tuple(npl.Group(0, 1, f, 1.0) for f in (0.9, 0.5, 0.1))
    sol = npl.solve(npl.Problem(groups, (1.0,), (10.0,), 0.0, 1.0, 2.0, 2))
    assert sol.objective_s == pytest.approx(5.0)
    assert sol.status == "Optimal" and sol.gap == pytest.approx(0.0, abs=1e-6)
    assert list(sol.on_gpu) == [1, 0, 0]
    assert sorted(map(tuple, sol.on_dimm[1:])) == [(0, 1), (1, 0)]


def brute_force(freq, nbytes, layer, gpu_s, dimm_s, sync, gpu_cap, dimm_cap, dimms):
    best = np.inf
    for devs in itertools.product(range(dimms + 1), repeat=len(freq)):      # 0: the GPU
        used = np.zeros(dimms + 1)
        for d, b in zip(devs, nbytes):
            used[d] += b
        if used[0] > gpu_cap or (used[1:] > dimm_cap).any():
            continue
        total = 0.0
        for l in set(layer):
            g = gpu_s[l] * sum(f for f, d, ll in zip(freq, devs, layer) if d == 0 and ll == l) + 2 * sync
            m = max(dimm_s[l] * sum(f for f, d, ll in zip(freq, devs, layer) if d == j and ll == l)
                    for j in range(1, dimms + 1))
            total += max(g, m)
        best = min(best, total)
    return best


@settings(max_examples=15, deadline=None)
@given(freq=st.lists(st.floats(0.01, 1.0), min_size=4, max_size=6), seed=st.integers(0, 1000))
@example(freq=[1.0] * 6, seed=744)                    # 18 bytes for 3 + 2 x 6: infeasible
def test_program_equals_brute_force(freq, seed):
    rng = np.random.default_rng(seed)
    n = len(freq)
    layer = [i % 2 for i in range(n)]
    nbytes = rng.integers(1, 4, n).astype(float)
    args = dict(gpu_s=(1.0, 2.0), dimm_s=(5.0, 7.0), sync=0.25, gpu_cap=3.0, dimm_cap=6.0, dimms=2)
    want = brute_force(freq, nbytes, layer, **args)
    groups = tuple(npl.Group(l, 1, f, b) for f, b, l in zip(freq, nbytes, layer))
    problem = npl.Problem(groups, args["gpu_s"], args["dimm_s"], args["sync"], args["gpu_cap"],
                          args["dimm_cap"], args["dimms"])
    if want == np.inf:                          # no placement fits the capacities
        with pytest.raises(ValueError, match="do not fit"):
            npl.solve(problem)
        return
    # optimal up to the relative MIP gap the solver reports (HiGHS stops within mip_rel_gap = 1e-4,
    # so a random example may end 1e-4 above the optimum): never below it, never past the gap
    sol = npl.solve(problem)
    assert sol.objective_s >= want * (1 - 1e-9)
    assert sol.objective_s - want <= sol.gap * sol.objective_s + 1e-9 * want


def test_program_solution_is_kept_on_disk_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    groups = tuple(npl.Group(0, 3, f, 1.0) for f in (0.9, 0.5, 0.1)) + (npl.Group(1, 2, 0.4, 2.0),)
    problem = npl.Problem(groups, (1.0, 2.0), (10.0, 12.0), 0.1, 4.0, 6.0, 3)
    first = npl.solve(problem)                # the full form: HiGHS
    assert first.status == "Optimal" and len(list(tmp_path.glob("*.json"))) == 1
    monkeypatch.setattr(npl, "_solve", lambda *a: pytest.fail("solved again"))
    again = npl.solve(problem)                                    # read back: the same solution
    assert (again.objective_s, again.status, again.gap) == (first.objective_s, first.status, first.gap)
    assert np.array_equal(again.on_gpu, first.on_gpu) and np.array_equal(again.on_dimm, first.on_dimm)
    direct = npl.solve(problem, aggregate_dimms=True)             # solved directly (no HiGHS), not kept
    assert direct.status == "Optimal" and len(list(tmp_path.glob("*.json"))) == 1
    with pytest.raises(pytest.fail.Exception):                    # another problem is another entry
        npl.solve(npl.Problem(groups, (1.0, 2.0), (10.0, 12.0), 0.1, 5.0, 6.0, 3))
    entry = next(tmp_path.glob("*.json"))
    entry.write_text('{"on_gpu": [1], "on_dimm": [], "objective_s": 0, "status": "Optimal", "gap": 0}')
    with pytest.raises(pytest.fail.Exception):                    # a damaged entry is solved again
        npl.solve(problem)


def aggregate_cost(p, on_gpu):
    """The aggregate program's objective with its tie-break, of GPU counts per group (brute force's)."""
    total = 0.0
    for l in range(len(p.gpu_s)):
        members = [gi for gi, g in enumerate(p.groups) if g.block == l]
        hot = sum(p.groups[gi].frequency * on_gpu[gi] for gi in members)
        cold = sum(p.groups[gi].frequency * (p.groups[gi].count - on_gpu[gi]) for gi in members)
        total += max(p.gpu_s[l] * hot + 2 * p.sync_s, p.dimm_s[l] / p.dimms * cold)
        total += npl.TIE * p.gpu_s[l] * sum(on_gpu[gi] for gi in members)
    return total


def relaxation_by_lp(p):
    """The aggregate program's linear relaxation by an LP solver: GPU counts x_g, then t_l."""
    from scipy.optimize import linprog
    G, B = len(p.groups), len(p.gpu_s)
    cost = [npl.TIE * p.gpu_s[g.block] for g in p.groups] + [1.0] * B
    rows, rhs = [], []
    for l in range(B):
        gpu, dimm, t = np.zeros(G + B), np.zeros(G + B), G + l
        for gi, g in enumerate(p.groups):
            if g.block == l:
                gpu[gi], dimm[gi] = p.gpu_s[l] * g.frequency, -p.dimm_s[l] / p.dimms * g.frequency
        gpu[t] = dimm[t] = -1.0
        cold = sum(g.frequency * g.count for g in p.groups if g.block == l) * p.dimm_s[l] / p.dimms
        rows += [gpu, dimm]
        rhs += [-2 * p.sync_s, -cold]
    rows.append(np.array([g.bytes for g in p.groups] + [0.0] * B))
    rhs.append(p.gpu_bytes)
    bounds = [(0, g.count) for g in p.groups] + [(None, None)] * B
    return linprog(cost, A_ub=np.array(rows), b_ub=rhs, bounds=bounds, method="highs").fun


@settings(max_examples=25, deadline=None)
@given(freq=st.lists(st.floats(0.01, 1.0), min_size=2, max_size=6), seed=st.integers(0, 1000))
def test_direct_solve_is_bounded_by_brute_force(freq, seed):
    # the aggregate program's relaxation equals an LP solver's; the direct solution is a feasible
    # placement, and the bound (value x (1 - gap)) is never above the true optimum, found by trying
    # every count per group
    rng = np.random.default_rng(seed)
    layer = [i % 2 for i in range(len(freq))]
    counts = rng.integers(1, 5, len(freq))
    block_bytes = rng.integers(1, 3, 2).astype(float)
    groups = tuple(npl.Group(l, int(c), f, block_bytes[l]) for f, c, l in zip(freq, counts, layer))
    p = npl.Problem(groups, (1.0, 2.0), (5.0, 9.0), 0.1, float(rng.integers(0, 8)), 100.0, int(rng.integers(1, 4)))
    blocks, relaxed, bound = npl._relaxation(p)
    assert bound == pytest.approx(relaxation_by_lp(p), rel=1e-9, abs=1e-12)
    sol = npl._solve_separable(p, max_gap=np.inf)        # small programs: report any gap
    assert sol is not None and sol.status == "Optimal" and sol.gap >= 0
    assert all(0 <= n <= g.count for n, g in zip(sol.on_gpu, groups))
    assert sum(n * g.bytes for n, g in zip(sol.on_gpu, groups)) <= p.gpu_bytes
    assert (sol.on_gpu + sol.on_dimm.sum(axis=1) == counts).all()
    best = min(aggregate_cost(p, n) for n in itertools.product(*(range(g.count + 1) for g in groups))
               if sum(k * g.bytes for k, g in zip(n, groups)) <= p.gpu_bytes)
    value = aggregate_cost(p, sol.on_gpu)
    assert bound <= best + 1e-12 and best <= value + 1e-12
    assert value * (1 - sol.gap) == pytest.approx(max(bound, 0.0) if sol.gap else value, rel=1e-9, abs=1e-12)


# the same six programs every run: HiGHS itself fails on some random ones (seed 799's roomy program:
# "Solve error", which the direct method solves within its proven gap), and the suite must not flake
@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000))
def test_direct_solve_is_as_good_as_highs(seed):
    # on programs shaped like the bundled ones (blocks of 16 frequency groups of hundreds of neurons,
    # a GPU that holds the hot neurons), the direct solution proves a gap below the MIP gap and is
    # within it of HiGHS's; with a GPU too small for them, solve() stays within it too (by either way)
    rng = np.random.default_rng(seed)
    groups = []
    for l in range(4):
        f = np.sort(rng.beta(0.3, 2.0, 16))[::-1] + 0.005
        groups += [npl.Group(l, int(rng.integers(200, 900)), float(x), 2.0 + l % 2) for x in f]
    total = sum(g.count * g.bytes for g in groups)
    times = tuple(rng.uniform(1, 3, 4)), tuple(rng.uniform(10, 40, 4))
    roomy = npl.Problem(tuple(groups), *times, 0.2, total, total, 8)
    sol = npl._solve_separable(roomy)         # None: it could not prove the gap
    milp = npl._solve(roomy, 30.0, True)
    assert sol is not None and sol.status == milp.status == "Optimal" and sol.gap <= npl.MIP_GAP
    assert sol.objective_s <= milp.objective_s * (1 + npl.MIP_GAP)
    tight = npl.Problem(tuple(groups), *times, 0.2, float(rng.uniform(0.02, 0.3)) * total, total, 8)
    sol, milp = npl.solve(tight, aggregate_dimms=True), npl._solve(tight, 30.0, True)
    assert sol.gap <= npl.MIP_GAP and sol.objective_s <= milp.objective_s * (1 + npl.MIP_GAP)


def test_direct_solve_leaves_what_it_cannot_prove_to_highs():
    # the DIMMs cannot hold the cold neurons (the GPU must take some): HiGHS's program decides
    groups = (npl.Group(0, 4, 0.5, 1.0), npl.Group(0, 4, 0.1, 1.0))
    p = npl.Problem(groups, (1.0,), (1.0,), 0.0, 8.0, 2.0, 2)
    assert npl._solve_separable(p) is None
    sol = npl.solve(p, aggregate_dimms=True)
    assert sum(sol.on_gpu) >= 4 and sol.on_dimm.sum() <= 2 * 2
    mixed = (npl.Group(0, 4, 0.5, 1.0), npl.Group(0, 4, 0.1, 2.0))     # a block of unequal neurons
    assert npl._solve_separable(npl.Problem(mixed, (1.0,), (9.0,), 0.0, 8.0, 99.0, 2)) is None


class _Captured(Exception):
    pass


def test_program_places_a_bundled_system_as_it_always_did(monkeypatch):
    """OPT-66B's placement program, solved afresh (not read from any cache), gives the placement and
    objective it gave when this test was written, and is at least as good as HiGHS's within the
    MIP gap. The digest moved once, on purpose: the aggregate form used to go to HiGHS (8 s for
    Llama-2-13B), whose answer within its 0.01% gap is one of many (another seed moved a group); it
    is now solved directly to within 3e-6 of a proven bound, 1.1e-5 below HiGHS's objective, and
    the Hermes figures were regenerated. A change of the program must show here and regenerate
    them again."""
    from pimdsl.frontend.pipeline import load_spec
    from pimdsl.loops import hot_cold_offload as loop

    def capture(problem, *args, **kwargs):
        raise _Captured(problem, args, kwargs)
    monkeypatch.setattr(npl, "solve", capture)
    spec, diags = load_spec(str(SYSTEMS / "hermes_ndp_opt_66b.pim"))
    assert spec is not None, diags.render_all()
    with pytest.raises(_Captured) as got:
        loop.run(spec.systems["hermes_ndp_opt_66b"])
    problem, (time_limit_s,), options = got.value.args
    assert (len(problem.groups), problem.dimms, options) == (2048, 8, {"aggregate_dimms": True})
    monkeypatch.undo()
    sol = npl.solve(problem, time_limit_s, **options)
    digest = hashlib.sha256(json.dumps([sol.on_gpu.tolist(), sol.on_dimm.tolist()]).encode()).hexdigest()
    assert (sol.status, sol.objective_s, digest[:16]) == ("Optimal", 0.00800210920046118, "827b858846f054a3")
    assert 0.0 <= sol.gap <= 1e-5
    milp = npl._solve(problem, time_limit_s, **options)          # HiGHS on the same program
    assert milp.status == "Optimal" and sol.objective_s <= milp.objective_s * (1 + npl.MIP_GAP)


def test_program_reports_no_room():
    groups = (npl.Group(0, 4, 0.5, 10.0),)
    with pytest.raises(ValueError, match="do not fit"):
        npl.solve(npl.Problem(groups, (1.0,), (1.0,), 0.0, 10.0, 10.0, 2))


def test_assign_fills_the_gpu_with_the_most_frequent():
    profile = np.array([0.1, 0.9, 0.5, 0.7, 0.2, 0.3])
    groups, order = npl.groups_of(profile, 0, 1.0, 2)              # {0.9, 0.7, 0.5}, {0.3, 0.2, 0.1}
    dev = npl.assign(order, np.array([2, 0]), np.array([[1, 0], [2, 1]]), [g.count for g in groups])
    assert set(np.flatnonzero(dev == -1)) == {1, 3}
    assert dev[2] == 0 and sorted(dev[[5, 4, 0]]) == [0, 0, 1]


# ---- the predictor (Sec. IV-C-1, Fig. 7) ----------------------------------------------------

def test_state_table_of_llama_7b_is_232_kb():
    # 32 layers x (4K attention + 10.5K MLP neurons) x 4 bit ([HERMES_NDP] Sec. IV-C-1)
    assert state_table_bytes(32, 4096 + 10.5 * 1024, 4) == 232 * 1024


def test_initial_states_in_16_stages():
    # 0 below 2%, 15 above 90%, 14 equal stages between: 0.5 -> 1 + floor(0.48 / (0.88 / 14)) = 8
    f = np.array([0.95, 0.91, 0.90, 0.5, 0.021, 0.019, 0.0])
    assert list(initial_state(f)) == [15, 15, 14, 8, 1, 0, 0]


def test_fsm_and_rule_on_the_papers_trace():
    # Fig. 7a: neuron 6 fires and goes 7 -> 11; neuron 5 does not and goes 10 -> 9; states saturate
    pred = Predictor([np.zeros(4)], [None])
    pred.states[0] = np.array([7, 10, 15, 0], np.uint8)
    pred.update(0, np.array([True, False, True, False]))
    assert list(pred.states[0]) == [11, 9, 15, 0]
    # s1 + 6 * s2 > 15 with s2 = fired correlated neurons of the previous block
    parents = np.array([[0, 0, 1, 2], [1, 2, 2, 3]], np.uint16)       # the generator's dtype
    pred = Predictor([np.zeros(2), np.zeros(4)], [None, parents])
    pred.states[1] = np.array([4, 9, 10, 15], np.uint8)
    previous = np.array([True, True, False, False])
    # parents (0, 1), (0, 2), (1, 2), (2, 3): s2 = 2, 1, 1, 0 -> 16 > 15, 15 !> 15, 16 > 15, 15 !> 15
    assert list(pred.predict(1, previous)) == [True, False, True, False]
    assert list(pred.hot(1)) == [False, False, False, True]


def test_layer_only_mode_freezes_states():
    pred = Predictor([np.array([0.5])], [None], mode="layer")
    before = pred.states[0].copy()
    pred.update(0, np.array([True]))
    assert pred.states[0] == before


# ---- Algorithm 1 (Sec. IV-D) ---------------------------------------------------------------------

def test_window_remap_hand_worked():
    device = np.array([0, 0, 0, 0, 1, 2, 3, 3, -1], np.int16)         # the loop's dtypes: one compiled copy
    activity = np.array([5, 3, 2, 1, 1, 0, 2, 1, 9], np.int32)
    assert list(loads(device, activity, 4)) == [11, 1, 0, 3]        # the GPU neuron is not counted
    new, moves = remap(device, activity, 4)
    # pairs (DIMM 0, DIMM 2): gap 11, move the 5 -> 6 / 5; (DIMM 3, DIMM 1): gap 2, the 2 would
    # overshoot, move the 1 -> 2 / 2
    assert list(new) == [2, 0, 0, 0, 1, 2, 3, 1, -1]
    assert moves == [(1, 0, 2), (1, 3, 1)]
    assert list(loads(new, activity, 4)) == [6, 2, 5, 2]
    assert imbalance(loads(new, activity, 4)) < imbalance(loads(device, activity, 4))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), dimms=st.sampled_from([2, 4, 8]))
def test_window_remap_never_widens_a_pair(seed, dimms):
    rng = np.random.default_rng(seed)
    device = rng.integers(0, dimms, 200).astype(np.int16)
    activity = rng.integers(0, 6, 200).astype(np.int32)
    before = loads(device, activity, dimms)
    new, _ = remap(device, activity, dimms)
    after = loads(new, activity, dimms)
    assert after.sum() == before.sum() and after.max() <= before.max()


# ---- the activation generator (Sec. III) ----------------------------------------------------------

@pytest.fixture(scope="module")
def trace():
    gen = activations.Generator([("a", 4096), ("b", 8192), ("c", 4096)], activations.Statistics(seed=3))
    return gen, [gen.step() for _ in range(30)]


def test_power_law_20_80():
    f = activations.power_law(10_000, 0.1, 0.2, 0.8)
    top = np.sort(f)[::-1][:2000]
    assert f.mean() == pytest.approx(0.1, rel=1e-3) and top.sum() / f.sum() == pytest.approx(0.8, abs=0.01)


def reference_power_law(n, density, hot_fraction, hot_share):
    """The power law's fit as the nested bisections give the frequencies themselves."""
    ranks = np.arange(1, n + 1, dtype=float)
    top = max(1, int(round(hot_fraction * n)))

    def scaled(alpha):
        lo, hi = 0.0, 1.0 / density * n
        law = ranks ** -alpha
        for _ in range(45):
            c = 0.5 * (lo + hi)
            lo, hi = (c, hi) if np.minimum(1.0, c * law).mean() < density else (lo, c)
        return np.minimum(1.0, 0.5 * (lo + hi) * law)

    lo, hi = 0.0, 4.0
    for _ in range(30):
        f = scaled(0.5 * (lo + hi))
        lo, hi = (0.5 * (lo + hi), hi) if f[:top].sum() / f.sum() < hot_share else (lo, 0.5 * (lo + hi))
    return scaled(0.5 * (lo + hi))


@pytest.mark.parametrize("n, density, hot_fraction, hot_share", [(5000, 0.1, 0.2, 0.8), (9216, 1 - 0.9, 0.2, 0.8),
                                                                 (777, 0.3, 0.1, 0.5)])
def test_power_law_is_the_fit_s_law_and_kept_on_disk_by_content(tmp_path, monkeypatch, n, density, hot_fraction,
                                                                 hot_share):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    activations.power_law.cache_clear()
    want = reference_power_law(n, density, hot_fraction, hot_share)
    assert np.array_equal(activations.power_law(n, density, hot_fraction, hot_share), want)      # bit for bit
    assert len(list(tmp_path.glob("*.json"))) == 1
    activations.power_law.cache_clear()                     # a new run: read back, not fitted
    monkeypatch.setattr(activations, "_power_law_fit", lambda *a: pytest.fail("fitted again"))
    assert np.array_equal(activations.power_law(n, density, hot_fraction, hot_share), want)
    activations.power_law.cache_clear()


def test_token_similarity_and_layer_correlation(trace):
    gen, tokens = trace
    sim = lambda d: np.mean([activations.similarity(tokens[i][1], tokens[i + d][1]) for i in range(30 - d)])
    assert sim(1) > 0.88 and 0.6 < sim(10) < 0.8               # Fig. 4a: > 90%, ~70% at distance 10
    parents = gen.blocks[2].parents
    both = [t[2][t[1][parents[0]] & t[1][parents[1]]].mean() for t in tokens]
    alone = [t[2].mean() for t in tokens]
    assert np.mean(both) > 0.8 > 3 * np.mean(alone)             # Fig. 4b: correlated neurons fire together


def test_generator_is_deterministic():
    a = activations.Generator([("a", 512), ("b", 1024)], activations.Statistics(seed=7), batch=4)
    b = activations.Generator([("a", 512), ("b", 1024)], activations.Statistics(seed=7), batch=4)
    for _ in range(3):
        assert all(np.array_equal(x, y) for x, y in zip(a.step(), b.step()))


# ---- the compiled hot paths against their numpy statements (same numbers, bit for bit) -------------

def numpy_step(gen):
    """One token of the generator as numpy array expressions (the reference of the compiled step)."""
    s, rng = gen.stats, gen.rng
    noise = np.sqrt(1.0 - s.rho ** 2)
    own, mix = np.sqrt(1.0 - s.coupling ** 2), s.coupling / np.sqrt(2.0)
    gen._latent *= s.rho
    start = int(rng.integers(0, len(gen._pool) - len(gen._latent)))
    gen._latent += float(noise) * gen._pool[start:start + len(gen._latent)]
    out, z_prev = [], None
    for k, (b, x) in enumerate(zip(gen.blocks, np.split(gen._latent, gen._cuts))):
        if z_prev is None:
            z = x
        else:
            z = z_prev[b.parents[0]]
            z += z_prev[b.parents[1]]
            z *= float(mix)
            z += float(own) * x
        out.append(z < gen._thresholds[k])
        z_prev = z
    return out


@pytest.mark.parametrize("batch", [1, 4])
def test_compiled_generator_step_equals_numpy(batch):
    sizes = [("a", 1024), ("b", 2752), ("c", 1024), ("d", 2752)]
    fast = activations.Generator(sizes, activations.Statistics(seed=5), batch)
    slow = activations.Generator(sizes, activations.Statistics(seed=5), batch)
    for _ in range(20):
        assert all(np.array_equal(x, y) for x, y in zip(fast.step(), numpy_step(slow)))
    assert np.array_equal(fast._latent, slow._latent)


@pytest.mark.parametrize("mode", ["combined", "token", "layer"])
@pytest.mark.parametrize("lam, threshold, step", [(6, 15, 4), (2, 7, 1), (6.0, 15.0, 3)])
def test_compiled_predictor_equals_numpy(mode, lam, threshold, step):
    rng = np.random.default_rng(1)
    parents = [None, rng.integers(0, 300, (2, 900)).astype(np.uint16)]
    pred = Predictor([rng.random(300), rng.random(900)], parents, lam, threshold, 10, step, 4, mode)
    states = [s.copy() for s in pred.states]
    for _ in range(20):
        previous = rng.random(300) < 0.3
        for k in (0, 1):
            actual = rng.random(len(states[k])) < 0.2
            s1 = states[k].astype(np.int16)
            s2 = previous.view(np.uint8)[parents[1][0]] + previous.view(np.uint8)[parents[1][1]] if k else 0
            want = s1 > 10 if mode == "token" else s1 + lam * s2 > threshold
            assert np.array_equal(pred.predict_then_update(k, previous if k else None, actual), want)
            if mode != "layer":
                states[k] = np.clip(np.where(actual, s1 + step, s1 - 1), 0, 15).astype(np.uint8)
            assert np.array_equal(pred.states[k], states[k])


def numpy_remap(device, activity, dimms):
    """Algorithm 1 as read in window_remap's docstring, neuron by neuron."""
    activity = activity.astype(np.int64)
    cold = device >= 0
    z = np.bincount(device[cold], weights=activity[cold], minlength=dimms)
    device = device.copy()
    order = np.argsort(-z, kind="stable")
    moves = []
    for pair in range(dimms // 2):
        hi, lo = int(order[pair]), int(order[dimms - 1 - pair])
        gap = z[hi] - z[lo]
        on_hi = np.flatnonzero((device == hi) & (activity > 0))
        moved = []
        for n in on_hi[np.argsort(-activity[on_hi], kind="stable")]:
            if gap < 2:
                break
            if 2 * activity[n] <= gap:
                moved.append(n)
                gap -= 2 * activity[n]
        if moved:
            device[moved] = lo
            z[hi] -= activity[moved].sum()
            z[lo] += activity[moved].sum()
            moves.append((len(moved), hi, lo))
    return z, device, moves


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), dimms=st.integers(1, 9), top=st.integers(1, 256), byte=st.booleans())
def test_compiled_remap_equals_the_walk(seed, dimms, top, byte):
    rng = np.random.default_rng(seed)
    device = rng.integers(-1, dimms, 300).astype(np.int16)
    activity = rng.integers(0, top, 300).astype(np.uint8 if byte else np.int32)   # the loop's window counts
    activity[rng.random(300) < 0.5] = 0
    z, want, want_moves = numpy_remap(device, activity, dimms)
    got, moves = remap(device, activity, dimms)
    assert np.array_equal(got, want) and moves == want_moves
    after = loads(device, activity, dimms)                  # given the loads, remap leaves those after the moves
    got, moves = remap(device, activity, dimms, after)
    assert np.array_equal(got, want) and moves == want_moves and np.array_equal(after, z)
    assert np.array_equal(after, loads(got, activity, dimms))
    assert np.array_equal(loads(device, activity, dimms), np.bincount(device[device >= 0], weights=activity[device >= 0],
                                                                      minlength=dimms))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), dimms=st.integers(1, 9), top=st.integers(1, 256), moving=st.booleans(),
       byte=st.booleans(), share=st.floats(0.0, 1.0))
def test_remap_window_equals_the_block_statements(seed, dimms, top, moving, byte, share):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 400, rng.integers(1, 7))
    offsets = np.cumsum(np.concatenate([[0], sizes]))
    on_gpu = rng.random(offsets[-1]) < share
    home = rng.integers(0, dimms, offsets[-1]).astype(np.int16)
    activity = rng.integers(0, top, offsets[-1]).astype(np.uint8 if byte else np.int32)   # the loop's window counts
    activity[rng.random(offsets[-1]) < rng.random()] = 0
    want_home, want = home.copy(), []
    for k in range(len(sizes)):                       # each block as the walk of Algorithm 1 moves it
        block = slice(offsets[k], offsets[k + 1])
        cold = np.where(on_gpu[block], -1, want_home[block])
        z = np.bincount(cold[cold >= 0], weights=activity[block][cold >= 0], minlength=dimms)
        before = after = np.nan
        moved = (0, 0)
        if z.sum() > 0:
            before = imbalance(z)
            if moving:
                z, device, moves = numpy_remap(cold, activity[block], dimms)
                after = imbalance(z)
                if moves:
                    np.copyto(want_home[block], device, where=device >= 0)
                    moved = (sum(c for c, _, _ in moves), max(c for c, _, _ in moves))
        want.append((before, after, moved))
    before, after, moved = remap_window(on_gpu, home, activity, offsets, dimms, moving)
    assert np.array_equal(home, want_home) and not activity.any()
    assert np.array_equal(before, [w[0] for w in want], equal_nan=True)               # bit for bit
    assert np.array_equal(after, [w[1] for w in want], equal_nan=True)
    assert moved.tolist() == [list(w[2]) for w in want]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), hot_threshold=st.integers(-1, 15), share=st.floats(0.0, 1.0),
       n=st.integers(1, 403))
def test_compiled_adjust_equals_numpy(seed, hot_threshold, share, n):
    rng = np.random.default_rng(seed)
    state = rng.integers(0, 16, n).astype(np.uint8)
    on_gpu = rng.random(n) < share
    want = on_gpu.copy()
    swaps = decode_token.adjust_compiled(state, float(hot_threshold), on_gpu)
    if swaps < 0:                                 # left to numpy's partition, untouched
        assert np.array_equal(on_gpu, want)
        swaps = decode_token.adjust_numpy(state, hot_threshold, on_gpu)
    assert swaps == decode_token.adjust_numpy(state, hot_threshold, want)
    assert np.array_equal(on_gpu, want)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 403), share=st.floats(0.0, 0.5), top=st.sampled_from([16, 200]))
@example(seed=0, n=4003, share=0.05, top=16)
def test_level_by_level_moves_equal_numpy(seed, n, share, top):
    # the compiled adjustment's case (swaps, at least as many hot candidates as GPU neurons): the moves by
    # levels are numpy's, or (states past 127, levels taken whole that interleave) not made at all
    rng = np.random.default_rng(seed)
    state = rng.integers(0, top, n).astype(np.uint8)
    on_gpu = rng.random(n) < share
    counted = decode_token._state_histograms(state, on_gpu.view(np.uint8))
    hot = np.where(np.arange(256) > 10, counted[0], 0)
    if hot.sum() < counted[1].sum():
        return
    want, before = on_gpu.copy(), on_gpu.copy()
    swaps = decode_token.adjust_numpy(state, 10, want)
    if swaps <= 0:
        return
    join = decode_token._first_of_levels(hot, (256 - np.arange(256)) % 256, swaps)
    leave = decode_token._first_of_levels(counted[1], np.arange(256), swaps)
    if decode_token._move_by_levels(state, on_gpu.view(np.uint8), counted, join, leave):
        assert np.array_equal(on_gpu, want)
    else:
        assert np.array_equal(on_gpu, before)
    if top == 16 and n == 4003:                       # the usual case: made by levels
        assert np.array_equal(on_gpu, want)


@pytest.mark.parametrize("seed", range(5))
def test_compiled_adjust_swaps_as_numpy(seed):
    # the usual case (more hot candidates than GPU neurons) is the compiled one, with swaps
    rng = np.random.default_rng(seed)
    state = rng.integers(0, 16, 4003).astype(np.uint8)
    on_gpu = rng.random(4003) < 0.05
    want = on_gpu.copy()
    swaps = decode_token.adjust_compiled(state, 10.0, on_gpu)
    assert swaps > 0 and swaps == decode_token.adjust_numpy(state, 10, want)
    assert np.array_equal(on_gpu, want)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(1, 8), n=st.integers(1, 500))
def test_tally_equals_numpy_counts(seed, devices, n):
    rng = np.random.default_rng(seed)
    guess, actual, on_gpu = (rng.random((3, n + 3)) < rng.random((3, 1)))[:, 3:]     # a block not on a word
    home = rng.integers(0, devices, n).astype(np.int16)
    activity = rng.integers(0, 3, n).astype(np.uint8)
    before, per_dev = activity.copy(), np.zeros(devices, np.int64)
    n_gpu, correct, predicted, fired, hit = decode_token.tally(guess, actual, on_gpu, home, activity, per_dev)
    assert n_gpu == np.count_nonzero(guess & on_gpu)
    assert np.array_equal(per_dev, np.bincount(home[guess & ~on_gpu], minlength=devices))
    assert (correct, predicted, fired, hit) == (np.count_nonzero(guess == actual), np.count_nonzero(guess),
                                                np.count_nonzero(actual), np.count_nonzero(guess & actual))
    assert np.array_equal(activity, before + actual)


def numpy_token(gen, pred, on_gpu, home, activity, devices, adjusting):
    """One token of the sparse loop as its numpy statements, block by block in the loop's order: the
    QKV block, the adjustment of both blocks of the layer, the MLP block."""
    fired = numpy_step(gen)
    counts, per_dev = np.zeros((len(fired), 6), np.int64), np.zeros((len(fired), devices), np.int64)

    def block(k):
        guess = pred.predict(k, fired[k - 1] if k else None)
        pred.update(k, fired[k])
        a = fired[k]
        counts[k, :5] = [np.count_nonzero(guess & on_gpu[k]), np.count_nonzero(guess == a), np.count_nonzero(guess),
                         np.count_nonzero(a), np.count_nonzero(guess & a)]
        per_dev[k] = np.bincount(home[k][guess & ~on_gpu[k]], minlength=devices)
        if activity is not None:
            activity[k] += a
    for layer in range(len(fired) // 2):
        block(2 * layer)
        for k in (2 * layer, 2 * layer + 1) if adjusting else ():
            counts[k, 5] = decode_token.adjust_numpy(pred.states[k], pred.hot_threshold, on_gpu[k])
        block(2 * layer + 1)
    return counts, per_dev


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(1, 5), share=st.floats(0.0, 0.6),
       adjusting=st.booleans(), counted=st.booleans(), mode=st.sampled_from(["combined", "token", "layer"]))
def test_compiled_token_equals_the_numpy_statements(seed, devices, share, adjusting, counted, mode):
    sizes = [("a", 300), ("b", 1001), ("c", 300), ("d", 1001)]
    state = []
    for _ in range(2):                       # the compiled token and its statements, from the same start
        gen = activations.Generator(sizes, activations.Statistics(seed=seed), 1)
        pred = Predictor(gen.prefill_frequency(64), [b.parents for b in gen.blocks], mode=mode)
        rng = np.random.default_rng(seed)
        on_gpu = [rng.random(n) < share for _, n in sizes]
        home = [rng.integers(0, devices, n).astype(np.int16) for _, n in sizes]
        activity = [np.zeros(n, np.uint8) for _, n in sizes] if counted else None
        state.append((gen, pred, on_gpu, home, activity))
    (gen, pred, on_gpu, home, activity), want = state
    token = decode_token.DecodeToken(gen, pred, on_gpu, home, activity, devices, adjusting)
    for _ in range(6):
        counts, per_dev = token.run()
        want_counts, want_per_dev = numpy_token(*want, devices, adjusting)
        assert np.array_equal(counts, want_counts) and np.array_equal(per_dev, want_per_dev)
        assert np.array_equal(pred.table, np.concatenate(want[1].states))
        assert all(map(np.array_equal, on_gpu, want[2]))
        assert counted is False or all(map(np.array_equal, activity, want[4]))
    assert np.array_equal(gen._latent, want[0]._latent)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), levels=st.integers(1, 40), shuffle=st.booleans(),
       batch=st.sampled_from([1, 2, 16]))
def test_descending_order_equals_stable_argsort(seed, n, levels, shuffle, batch):
    rng = np.random.default_rng(seed)
    law = np.sort(rng.integers(0, levels, n) / levels)[::-1]          # non-increasing, with ties
    if shuffle:
        law = rng.permutation(law)                                     # not along the ranks: the sort
    rank = rng.permutation(n)
    by_rank = np.empty_like(rank)
    by_rank[rank] = np.arange(n)
    f = 1.0 - (1.0 - law[rank]) ** batch
    assert np.array_equal(npl.descending(f, by_rank), np.argsort(-f, kind="stable"))


def test_generator_blocks_list_neurons_by_rank():
    gen = activations.Generator([("a", 500), ("b", 1300)], activations.Statistics(seed=3))
    for b in gen.blocks:
        assert sorted(b.by_rank) == list(range(b.neurons))
        assert np.all(np.diff(b.profile[b.by_rank]) <= 0)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=50),
       single=st.booleans())
@example(values=[-8.0, 8.0, 0.0, -7.998046875, 8.5, -9.0, float("nan")], single=False)
def test_normal_cdf_equals_numpy_interp(values, single):
    with np.errstate(over="ignore"):                          # a huge float64 becomes an infinite float32
        x = np.array(values, dtype=np.float32 if single else np.float64)
    x = np.concatenate([x, activations._GRID[::97], np.nextafter(activations._GRID[::97], 9)]).astype(x.dtype)
    got, want = activations.normal_cdf(x), np.interp(x, activations._GRID, activations._CDF)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))            # bit for bit, NaN included
    assert activations.normal_cdf(0.3) == np.interp(0.3, activations._GRID, activations._CDF)


def loop_statements(t, counts, per_devs, neuron_gpu, neuron_cold, floor, sync, att, proj_t, pcie_rate, nbytes,
                    pending_link, adjusting, acc, cold_busy, host):
    """A token's time as the loop's statements, block by block (lists of Python floats), with its spans."""
    from pimdsl.ir.intervals import Interval
    intervals = []
    for layer, which in itertools.product(range(len(counts) // 2), (0, 1)):
        k = 2 * layer + which
        n_gpu, correct, predicted, n_fired, hit, swaps = counts[k].tolist()
        t_gpu = n_gpu * neuron_gpu[k] + (floor if n_gpu else 0.0) + 2 * sync
        t_cold = per_devs[k] * neuron_cold[k]
        cold_busy += t_cold
        block = max(t_gpu, float(t_cold.max()))
        name = f"L{layer}.{'qkv' if which == 0 else 'mlp'}"
        intervals.append(Interval("gpu", f"{name} hot", t, t + t_gpu, "decode"))
        intervals += [Interval(host or f"dimm_{j}", f"{name} cold", t, t + float(t_cold[j]), "decode")
                      for j in range(len(t_cold)) if t_cold[j] > 0]
        t += block
        for key, value in [("fc", block), ("mlp" if which else "qkv", block), ("fc_gpu", t_gpu),
                           ("fc_cold", float(t_cold.max())), ("gpu_busy", t_gpu)]:
            acc[key] += value
        for key, value in zip(decode_token.COUNTS, counts[k].tolist()):
            acc[key] += value
        if which == 0:
            intervals.append(Interval(host or "dimms", f"L{layer}.attention", t, t + att, "decode"))
            t += att
            acc["attention"] += att
            copies = 0.0
            if adjusting:
                for kk in (k, k + 1):
                    copies += int(counts[kk, 5]) * nbytes[kk]
            copy_t = copies / pcie_rate
            link_t = float(pending_link[layer])
            pending_link[layer] = 0.0
            exposed = max(0.0, max(copy_t, link_t) - proj_t)
            intervals.append(Interval("gpu", f"L{layer}.projection", t, t + proj_t, "decode"))
            if copy_t:
                intervals.append(Interval("pcie", f"L{layer} hot copies", t, t + copy_t, "decode"))
            if link_t:
                intervals.append(Interval("dimm_link", f"L{layer} remap", t, t + link_t, "decode"))
            t += proj_t + exposed
            for key, value in [("projection", proj_t), ("gpu_busy", proj_t), ("exposed_copies", exposed),
                               ("pcie_bytes", copies)]:
                acc[key] += value
    return t, intervals


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), devices=st.integers(1, 9), layers=st.integers(1, 6), adjusting=st.booleans(),
       host=st.booleans())
def test_token_time_equals_the_loop_statements(seed, devices, layers, adjusting, host):
    rng = np.random.default_rng(seed)
    blocks = 2 * layers
    counts = rng.integers(0, 5000, (blocks, 6))
    counts[rng.random(blocks) < 0.3, 0] = 0                      # blocks with no GPU neuron: no kernel floor
    per_dev = rng.integers(0, 3000, (blocks, devices))
    per_dev[rng.random((blocks, devices)) < 0.2] = 0
    neuron_gpu, neuron_cold = (rng.random(blocks) * 1e-8).tolist(), (rng.random(blocks) * 1e-7).tolist()
    nbytes = rng.integers(1000, 60000, blocks).astype(float).tolist()
    floor, sync, att, proj_t, rate = (float(x) for x in rng.random(5) * [1e-5, 1e-5, 1e-4, 1e-3, 3e10])
    pending = rng.random(layers) * 2e-3 * (rng.random(layers) < 0.5)
    want_pending, want_busy, t0 = pending.copy(), rng.random(devices), float(rng.random())
    busy = want_busy.copy()
    times, totals = rng.random(len(decode_token.TIMES)), rng.integers(0, 100, len(decode_token.COUNTS))  # so far
    acc = {name: float(v) for name, v in zip(decode_token.TIMES, times)} | dict(zip(decode_token.COUNTS, totals.tolist()))
    want_t, want_intervals = loop_statements(t0, counts, per_dev, neuron_gpu, neuron_cold, floor, sync, att, proj_t,
                                             rate, nbytes, want_pending, adjusting, acc, want_busy,
                                             "host_cpu" if host else None)
    marks, layer_marks = np.zeros((blocks, 2)), np.zeros((layers, 3))
    t = decode_token.token_time(t0, counts, per_dev, np.array(neuron_gpu), np.array(neuron_cold), floor, sync, att,
                                proj_t, rate, np.array(nbytes), pending, adjusting, times, totals, busy, marks,
                                layer_marks)
    assert t == want_t and np.array_equal(busy, want_busy) and np.array_equal(pending, want_pending)  # bit for bit
    assert times.tolist() == [acc[name] for name in decode_token.TIMES]
    assert totals.tolist() == [acc[name] for name in decode_token.COUNTS]
    assert hot_cold_offload.token_intervals(marks.tolist(), layer_marks.tolist(), per_dev, neuron_cold, att, proj_t,
                                            "host_cpu" if host else None) == want_intervals


# ---- the split GEMV and the merge (Sec. IV-A-2, Fig. 6b), numpy level ------------------------------

def split_gemv(weights, x, active, device, dimms):
    """Each device multiplies only its active neurons' columns; the NDP side sums the partials."""
    partial = [weights[:, active & (device == d)].astype(np.float32) @ x[active & (device == d)].astype(np.float32)
               for d in range(-1, dimms)]
    return np.sum(partial, axis=0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), dimms=st.integers(1, 8))
def test_split_gemv_equals_numpy_on_the_active_rows(seed, dimms):
    # numpy level: the split over the GPU and the DIMMs and the merge (one DIMM's GEMV through the
    # NDP core's declared commands: tests/test_sparse_ndp_gemv.py)
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((64, 256)).astype(np.float16)
    x = np.maximum(rng.standard_normal(256), 0).astype(np.float16)      # ReLU output: zeros are skipped
    active = x != 0
    device = rng.integers(-1, dimms, 256)
    want = w[:, active].astype(np.float32) @ x[active].astype(np.float32)
    assert np.allclose(split_gemv(w, x, active, device, dimms), want, rtol=1e-5, atol=1e-4)
    assert np.allclose(want, w.astype(np.float32) @ x.astype(np.float32), rtol=1e-5, atol=1e-4)


# ---- pimc run ------------------------------------------------------------------------------------

def run_json(capsys, spec, *sets):
    args = [a for s in sets for a in ("--set", s)]
    status = main(["run", str(SYSTEMS / spec), *args, "--json"])
    out = capsys.readouterr()
    return status, (json.loads(out.out) if status == 0 else None), out.err


SMALL = ("model.opt_13b.layers=4", "workload.output_len=11")


@pytest.mark.parametrize("strategy", ["hermes", "hermes_base", "hermes_host", "accelerate", "flexgen", "deja_vu",
                                      "hermes_random", "hermes_partition", "hermes_adjustment",
                                      "hermes_token_adjustment", "hermes_layer_adjustment"])
def test_every_strategy_runs(capsys, strategy):
    status, report, err = run_json(capsys, "hermes_ndp_opt_13b.pim", f"mapping.strategy={strategy}", *SMALL)
    assert status == 0, err
    for key in ("system", "ttft_s", "tpot_s", "tokens_per_s", "memory_bytes", "utilization", "breakdown_s"):
        assert key in report
    assert report["strategy"] == strategy and report["tokens_per_s"] > 0
    assert report["end_to_end_s"] == pytest.approx(report["ttft_s"] + 10 * report["tpot_s"])
    if strategy.startswith("hermes") and strategy != "hermes_base":
        assert 0.5 < report["predictor"]["accuracy"] <= 1
        assert report["bytes_moved"]["pcie_prefill"] > 0


def test_hermes_reports_remapping_and_copies(capsys):
    status, r, err = run_json(capsys, "hermes_ndp_opt_13b.pim", *SMALL)
    assert status == 0, err
    assert r["dimm_imbalance"]["after_remap"] <= r["dimm_imbalance"]["before_remap"]
    assert r["bytes_moved"]["dimm_link"] > 0 and r["placement"]["status"] == "Optimal"
    assert r["predictor"]["state_table_bytes"] == 4 * (5120 + 20480) / 2
    assert r["predictor"]["overhead_fraction"] < 0.01


def test_deja_vu_is_for_relu_models_only(capsys):
    status, _, err = run_json(capsys, "hermes_ndp_llama2_13b.pim", "mapping.strategy=deja_vu")
    assert status == 1 and "needs a ReLU model" in err and "uses silu" in err and "hermes_ndp.pim:" in err
    assert "Traceback" not in err
    # the refusal is the model's activation, not its name: a ReLU-fied LLaMA2-13B is accepted
    status, _, err = run_json(capsys, "hermes_ndp_llama2_13b.pim", "mapping.strategy=deja_vu",
                              "model.llama2_13b.activation=relu", "workload.output_len=2")
    assert status == 0, err


def test_falcon_needs_four_dimms(capsys):
    # [HERMES_NDP] Sec. V-E-1: "deploying Falcon-40B on Hermes necessitates a minimum of four NDP-DIMMs"
    status, _, err = run_json(capsys, "hermes_ndp_falcon_40b.pim", "memory.hermes_ndp_dimm.count=2",
                              "workload.output_len=2")
    assert status == 1 and "do not fit 2 x 32 GiB NDP-DIMMs" in err and "at least 3 DIMMs" in err


def test_unknown_param_is_located(capsys):
    status, _, err = run_json(capsys, "hermes_ndp_opt_13b.pim", "mapping.params.windw_tokens=3")
    assert status == 1 and "no param 'windw_tokens'" in err and "window_tokens" in err


def test_hermes_base_decode_matches_the_bandwidth_arithmetic(capsys):
    # dense FC of the layers beyond the GPU's ~20 GB over 8 x 4 ranks x 25.6 GB/s, the rest at the GPU's
    # achieved 84.6% of 1,008 GB/s (the measured GPU kernel model): about 170 ms/token for LLaMA2-70B
    # ((138 - 20) GB / 819 GB/s + 20 GB / (0.846 x 1008 GB/s), plus the kernels' floors)
    status, r, err = run_json(capsys, "hermes_ndp_llama2_70b.pim", "mapping.strategy=hermes_base",
                              "workload.output_len=3")
    assert status == 0, err
    assert r["tpot_s"] == pytest.approx(0.17, rel=0.05)
    assert r["ndp_share_of_decode_fc"] > 0.8                    # B4: "over 80% of computation to NDP-DIMMs"


# ---- the GPU-only server of [HERMES_NDP] Sec. V-F (TensorRT-LLM on 5 x A100-40GB) -------------------

def test_tensor_parallel_decode_matches_the_bandwidth_arithmetic(capsys):
    # batch 1: each token reads LLaMA2-70B's 138 GB once over 5 x 1,555 GB/s at the measured A100's
    # achieved 84.6% = 21.0 ms; the all-reduces (2 per layer of 16 KB, each 8 ring steps of 3.22 us + 1/5 of
    # it at the NVSwitch's measured 153 GB/s bus bandwidth: 4.1 ms over 80 layers), the kernels' floors
    # and the KV cache add the rest
    status, r, err = run_json(capsys, "tensor_parallel_llama2_70b.pim", "workload.output_len=3")
    assert status == 0, err
    ar = r["breakdown_s"]["decode_all_reduce"] / 2 / 80           # one step's all-reduces of one layer
    assert ar == pytest.approx(2 * 8 * (3.22e-6 + 8192 * 2 / 5 / 153e9), rel=1e-6)
    assert r["tpot_s"] == pytest.approx(137.95e9 / (5 * 1555e9 * 0.846) + 160 * ar / 2, rel=0.03)
    assert r["gpus"] == 5 and r["ndp_dimms"] == 0


def test_tensor_parallel_needs_the_weights_to_fit(capsys):
    status, _, err = run_json(capsys, "tensor_parallel_llama2_70b.pim", "gpu.tp_a100_40gb.count=3")
    assert status == 1 and "do not fit 3 x 40 GB of 'tp_a100_40gb'" in err and "Traceback" not in err
    assert "a100x5_tensor_parallel.pim:" in err
