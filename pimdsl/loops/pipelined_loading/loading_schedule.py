"""The pipelined-loading schedule: m loading agents, one in-order inference agent, a daemon with a
memory budget ([PIPELOAD] Sec. III-A, III-B).

Input is a list of jobs in model order (one per layer per pass; GPT-style generation reloads every
layer for every token, [PIPELOAD] Sec. V-B-2). Agent k loads the jobs of layers k, k+m, k+2m, ...
(round robin, Sec. III-B). The inference agent computes job g once it is loaded and job g-1 is
done. The daemon admits a load only when the bytes it would add fit the budget, and admits loads in
model order: the paper's "stop all loaders, resume when room returns" can deadlock when later layers
hold the room the next needed layer waits for; in-order admission cannot, as long as the budget holds
the largest layer (the next needed layer is always the oldest admitted one).

Time is a fluid model: a load's solo time is its profiled load time; k concurrent loads share the
storage's bandwidth, and loaders and the inference agent share the CPU's cores (each gets
cores / busy agents when more are busy than cores), because loading a layer is CPU work
(copy, deserialisation) as well as disk reads. An optional contention factor alpha slows k
concurrent loads by 1 + alpha (k - 1) (shared caches, allocator, framework locks): the paper's
speedups grow sub-linearly with the agents even where neither the disk nor the cores are full.

A loading agent holds one layer buffer: with freeing, it starts its next load once the daemon has
destroyed its previous layer. So m agents keep at most m layers resident, "one additional layer
saved in memory" per agent ([PIPELOAD] Sec. V-B-1, Table III); without freeing (PipeSwitch) the
one loader streams ahead and every layer stays; a reload of a layer waits until its kept copy from
the previous pass has been used, and then replaces it.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Job:
    layer: int
    bytes: int
    load_s: float                 # one agent loading this layer alone
    compute_s: float              # the inference agent computing it alone


@dataclass(frozen=True)
class Policy:
    agents: int                   # loading agents (m)
    free_after_use: bool          # the daemon frees a layer after its compute (PIPELOAD; not PipeSwitch)
    budget_bytes: float | None    # room for layers; None: no limit


@dataclass(frozen=True)
class Machine:
    cores: int
    storage_bandwidth: float      # bytes/s of the whole device, shared by concurrent loads
    contention: float = 0.0       # alpha: k concurrent loads each run 1 + alpha (k - 1) times slower


@dataclass
class Schedule:
    end_s: float = 0.0
    peak_bytes: int = 0                                  # layers resident (or being loaded) at once
    loads: list = field(default_factory=list)            # (agent, job, start, end)
    computes: list = field(default_factory=list)         # (job, start, end)

    @property
    def compute_s(self) -> float:
        return sum(e - s for _, s, e in self.computes)


def simulate(jobs: list[Job], policy: Policy, machine: Machine) -> Schedule:
    if policy.agents < 1:
        raise ValueError("at least one loading agent is needed")
    largest = max((j.bytes for j in jobs), default=0)
    if policy.budget_bytes is not None and largest > policy.budget_bytes:
        raise ValueError(f"a budget of {policy.budget_bytes:.0f} B cannot hold a {largest} B layer")
    n, m = len(jobs), policy.agents
    out = Schedule()
    t = 0.0
    next_admit = next_compute = 0
    agent_busy = [False] * m
    active: dict[int, float] = {}          # job -> remaining solo seconds of its load
    started: dict[int, float] = {}
    loaded: set[int] = set()
    resident: dict[int, int] = {}          # key (job, or layer when nothing is freed) -> bytes
    used = 0
    last_of_layer: dict[int, int] = {}     # a reload waits until the kept copy has been used
    computing, comp_left, comp_start = None, 0.0, 0.0
    while next_compute < n:
        while next_admit < n:              # the daemon: admit in model order while the budget holds
            g = next_admit
            agent = jobs[g].layer % m
            key = g if policy.free_after_use else jobs[g].layer    # a reload replaces the kept copy
            add = jobs[g].bytes - resident.get(key, 0)
            if agent_busy[agent] or (policy.budget_bytes is not None and used + add > policy.budget_bytes):
                break
            if not policy.free_after_use and last_of_layer.get(jobs[g].layer, -1) >= next_compute:
                break
            last_of_layer[jobs[g].layer] = g
            resident[key] = jobs[g].bytes
            used += add
            out.peak_bytes = max(out.peak_bytes, used)
            agent_busy[agent] = True
            active[g], started[g] = jobs[g].load_s, t
            next_admit += 1
        if computing is None and next_compute in loaded:
            computing, comp_left, comp_start = next_compute, jobs[next_compute].compute_s, t
        busy = len(active) + (computing is not None)
        share = min(1.0, machine.cores / busy) if busy else 1.0
        rates = {}
        slowdown = 1 + machine.contention * (len(active) - 1)
        for g in active:                   # solo seconds per second
            solo_bw = jobs[g].bytes / jobs[g].load_s if jobs[g].load_s > 0 else float("inf")
            rates[g] = min(share / slowdown, machine.storage_bandwidth / (len(active) * solo_bw))
        steps = [active[g] / rates[g] for g in active]
        if computing is not None:
            steps.append(comp_left / share)
        if not steps:
            raise RuntimeError("the loading schedule stalled (a bug: in-order admission cannot deadlock)")
        dt = min(steps)
        close = dt * (1 + 1e-9)            # whatever ends within rounding of the step ends now
        finished = [g for g in active if active[g] / rates[g] <= close]
        comp_done = computing is not None and comp_left / share <= close
        t += dt
        for g in list(active):
            active[g] -= rates[g] * dt
        for g in finished:
            del active[g]
            loaded.add(g)
            if not policy.free_after_use:
                agent_busy[jobs[g].layer % m] = False
            out.loads.append((jobs[g].layer % m, g, started.pop(g), t))
        if computing is not None:
            comp_left -= share * dt
            if comp_done:
                out.computes.append((computing, comp_start, t))
                if policy.free_after_use:  # S_k^dest: the daemon frees the layer (Sec. III-B)
                    used -= resident.pop(computing)
                    agent_busy[jobs[computing].layer % m] = False
                computing = None
                next_compute += 1
    out.end_s = t
    return out


def plan(jobs: list[Job], machine: Machine, budget_bytes: float | None, candidates) -> tuple[int, dict[int, float]]:
    """The Pipeline Planner ([PIPELOAD] Sec. IV-2): pre-run each candidate number of loading agents
    under the budget and keep the fastest; within 1% of it, the fewest agents (each agent holds about
    one more layer in memory, Sec. V-B-1). Returns (m, {m: latency_s})."""
    largest = max(j.bytes for j in jobs)
    times = {}
    for m in candidates:
        if budget_bytes is not None and m > 1 and budget_bytes < m * largest:
            continue                       # more agents than layers fit: they could only wait
        times[m] = simulate(jobs, Policy(m, True, budget_bytes), machine).end_s
    best = min(times.values())
    return min(m for m, s in times.items() if s <= best * 1.01), times
