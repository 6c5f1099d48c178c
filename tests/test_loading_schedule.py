"""The pipelined-loading schedule: golden timelines, the daemon's budget, the planner."""
from hypothesis import given, settings, strategies as st

from pimdsl.loops.pipelined_loading.loading_schedule import Job, Machine, Policy, plan, simulate

FAST = Machine(cores=8, storage_bandwidth=1e18)


def _layers(n, load=2.0, compute=1.0, size=100):
    return [Job(l, size, load, compute) for l in range(n)]


def test_golden_timelines():
    jobs = _layers(4)
    # one agent that holds one buffer until its layer is computed: no overlap at all
    assert simulate(jobs, Policy(1, True, None), FAST).end_s == 12.0
    # two agents: L0, L1 load 0-2; L2 loads 3-5 after L0's compute frees agent 0; L3 4-6
    two = simulate(jobs, Policy(2, True, None), FAST)
    assert two.end_s == 7.0 and two.peak_bytes == 200
    assert simulate(jobs, Policy(3, True, None), FAST).end_s == 6.0
    # PipeSwitch: one loader streams ahead, nothing is freed
    ps = simulate(jobs, Policy(1, False, None), FAST)
    assert ps.end_s == 9.0 and ps.peak_bytes == 400


def test_storage_bandwidth_is_shared():
    """100 B at 50 B/s alone, 25 B/s each when two load. L0, L1 load 0-4; compute L0 4-5, L1 5-6;
    L2 alone 5-6 (50 B), then shared with L3 6-8 (50 B each); L3 alone 8-9; computes 8-9, 9-10."""
    jobs = _layers(4)
    sched = simulate(jobs, Policy(2, True, None), Machine(8, 50.0))
    assert abs(sched.end_s - 10.0) < 1e-9
    assert [(round(s, 6), round(e, 6)) for _, _, s, e in sched.loads] == [(0, 4), (0, 4), (5, 8), (6, 9)]


def test_cores_are_shared_by_loaders_and_inference():
    # one core: two loaders alone run at half speed (load 0-4), then compute and a load share it
    jobs = _layers(2)
    assert simulate(jobs, Policy(2, True, None), Machine(1, 1e18)).end_s == 4.0 + 1.0 + 1.0


def test_reloading_replaces_the_kept_copy_without_freeing():
    jobs = [Job(l, 100, 1.0, 1.0) for _ in range(3) for l in range(4)]   # three passes of four layers
    assert simulate(jobs, Policy(1, False, None), FAST).peak_bytes == 400


def test_planner_picks_the_fewest_agents_that_keep_the_inference_fed():
    jobs = _layers(4)
    m, times = plan(jobs, FAST, None, range(1, 5))
    assert times == {1: 12.0, 2: 7.0, 3: 6.0, 4: 6.0} and m == 3
    # a budget of two layers leaves room for two agents only
    m, times = plan(jobs, FAST, 250, range(1, 5))
    assert m == 2 and set(times) == {1, 2}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0.01, 3.0), st.floats(0.01, 3.0)), min_size=1, max_size=12),
       st.integers(1, 8), st.integers(1, 3), st.floats(1.0, 4.0), st.integers(1, 4), st.floats(1.0, 500.0))
def test_the_daemon_never_exceeds_the_budget(layers, agents, passes, budget_scale, cores, bandwidth):
    jobs = [Job(l, size, load, comp) for _ in range(passes) for l, (size, load, comp) in enumerate(layers)]
    budget = max(j.bytes for j in jobs) * budget_scale
    sched = simulate(jobs, Policy(agents, True, budget), Machine(cores, bandwidth))
    assert sched.peak_bytes <= budget
    # every layer runs once, in model order, after its load and after the layer before it
    assert [g for g, _, _ in sched.computes] == list(range(len(jobs)))
    load_end = {g: e for _, g, _, e in sched.loads}
    previous = 0.0
    for g, start, end in sched.computes:
        assert start >= load_end[g] - 1e-9 and start >= previous - 1e-9
        previous = end
    # resident bytes over time, rebuilt from the timeline, stay within the budget too
    events = sorted([(s, j.bytes) for (_, g, s, _), j in ((l, jobs[l[1]]) for l in sched.loads)]
                    + [(e, -jobs[g].bytes) for g, _, e in sched.computes], key=lambda x: (x[0], x[1]))
    level = 0
    for _, delta in events:
        level += delta
        assert level <= budget + 1e-9


def test_load_contention_slows_concurrent_loads():
    # alpha = 0.5: two loads at once each take 2 x 1.5 = 3 s; then the same timeline as above, shifted
    jobs = _layers(2)
    sched = simulate(jobs, Policy(2, True, None), Machine(8, 1e18, contention=0.5))
    assert [(s, e) for _, _, s, e in sched.loads] == [(0.0, 3.0), (0.0, 3.0)] and sched.end_s == 5.0
