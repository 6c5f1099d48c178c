"""Replaying a request trace through a memory's channel controllers.

The replay follows the reference harness ([REFDATA] dram README
Sec. 2.1), so that our numbers are comparable with DRAMsim3's and
Ramulator 2's: requests are offered in trace order once their arrival cycle
has come, as many per cycle as the controllers accept, stopping at the first
request whose channel queue is full (head-of-line blocking; it is retried
the next cycle). A read completes when its data returns (RD issue + read
latency), a write when its WR issues. `cycles` is the cycle after the last
completion; read latency counts from acceptance to data return.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...ir.hardware import Memory
from .controller import ChannelController, RequestLog, request_tables
from .energy import EnergyUnavailable, average_power_mw, dram_energy_pj
from .tables import ChannelTables
from .traces import Trace


@dataclass
class ReplayResult:
    memory: str
    requests: int
    reads: int
    writes: int
    cycles: int
    tck_s: float
    access_bytes: int
    # in request order (int64: the compiled core's arrays as they come, no list of a million ints)
    read_latencies: np.ndarray = field(repr=False)
    row_hits: int
    commands: dict[str, int]
    # (cycle, channel, command, {level: index}, row, column, request), when recorded
    command_log: list[tuple] | None = field(default=None, repr=False)
    # rank-cycles with a row open, of `rank_cycles` (cycles x ranks of every channel): standby energy
    active_rank_cycles: int = 0
    rank_cycles: int = 0
    energy_pj: dict[str, float] | None = None      # by component and `total`; None: see energy_note
    energy_note: str | None = None                 # why there is no energy

    @property
    def bandwidth_gbps(self) -> float:
        """Reads plus writes, in GB/s (10^9 bytes) over the whole run."""
        return self.requests * self.access_bytes / (self.cycles * self.tck_s) / 1e9 if self.cycles else 0.0

    @property
    def avg_read_latency_cycles(self) -> float:
        lat = self.read_latencies
        return int(lat.sum()) / len(lat) if len(lat) else 0.0

    @property
    def row_hit_rate(self) -> float:
        return self.row_hits / self.requests if self.requests else 0.0

    def percentile(self, p: float) -> int:
        lat = np.sort(self.read_latencies)
        if not len(lat):
            return 0
        return int(lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))])

    def to_json(self) -> dict:
        lat = self.read_latencies
        mid = int(np.partition(lat, (len(lat) - 1) // 2)[(len(lat) - 1) // 2]) if len(lat) else 0   # (no full sort)
        return {
            "memory": self.memory, "requests": self.requests, "reads": self.reads, "writes": self.writes,
            "cycles": self.cycles,
            "bandwidth_gbps": round(self.bandwidth_gbps, 4),
            "avg_read_latency_cycles": round(self.avg_read_latency_cycles, 4),
            "row_hit_rate": round(self.row_hit_rate, 4),
            "min_read_latency_cycles": int(lat.min()) if len(lat) else 0,
            "p50_read_latency_cycles": mid,
            "max_read_latency_cycles": int(lat.max()) if len(lat) else 0,
            "commands": self.commands,
            "tck_s": self.tck_s,
            "energy_pj": {k: round(v, 1) for k, v in self.energy_pj.items()} if self.energy_pj else None,
            "average_power_mw": (round(average_power_mw(self.energy_pj, self.cycles, self.tck_s), 3)
                                 if self.energy_pj else None),
            **({"energy_note": self.energy_note} if self.energy_note else {}),
        }


# Loading the cached compiled core costs about 1.4 s (compiling it on a cold cache, about 20 s of
# CPU); the Python engine replays about 38k requests/s. Below this many requests the Python engine
# finishes first, so a small replay never waits for the compiled core. Built ahead of time (aot.py),
# the core loads in milliseconds and replays every trace.
COMPILED_MIN_REQUESTS = 50_000
CORE = Path(__file__).resolve().parent / "core.py"


def default_engine(requests: int | None = None) -> str:
    """`compiled` (dram/core.py) when built ahead of time, or when numba is installed and the trace is
    long enough to pay for loading it, else `python` (dram/controller.py, the reference); both give identical results.
    $PIMDSL_DRAM_ENGINE=python|compiled chooses."""
    chosen = os.environ.get("PIMDSL_DRAM_ENGINE")
    if chosen in ("python", "compiled"):
        return chosen
    if _core_built_ahead():
        return "compiled"                   # loads in milliseconds, without numba
    if requests is not None and requests < COMPILED_MIN_REQUESTS:
        return "python"
    return "compiled" if importlib.util.find_spec("numba") is not None else "python"


def _core_built_ahead() -> bool:
    from ...aot import entry
    return entry(CORE, "replay_core") is not None


def compiled_core_is_cached() -> bool:
    """Is the compiled replay loop built ahead of time (aot.py) or in numba's cache (jit_cache.py)?
    If not, the first compiled replay compiles it, which takes about 20 s."""
    from ...jit_cache import is_cached
    return _core_built_ahead() or is_cached(CORE, "replay_core")


def replay(memory: Memory, trace: Trace, record_commands: bool = False, engine: str | None = None) -> ReplayResult:
    """Replay `trace`; with record_commands, `command_log` holds every command issued. `engine` is
    `python` or `compiled` (identical results; default: `default_engine(len(trace))`)."""
    n_ch = memory.organization.channels
    engine = engine or default_engine(len(trace))
    if n_ch > 1 and not record_commands and identical_channels(trace, n_ch):
        # Every channel sees the same requests in lockstep, so every channel's controller goes
        # through the same states in the same cycles: simulate one and count it n_ch times.
        one = _replay(memory, _channel_zero(trace, n_ch), 1, engine=engine)
        result = ReplayResult(
            memory=one.memory, requests=one.requests * n_ch, reads=one.reads * n_ch, writes=one.writes * n_ch,
            cycles=one.cycles, tck_s=one.tck_s, access_bytes=one.access_bytes,
            read_latencies=np.tile(one.read_latencies, n_ch), row_hits=one.row_hits * n_ch,
            commands={k: v * n_ch for k, v in one.commands.items()},
            active_rank_cycles=one.active_rank_cycles * n_ch)
        return _with_energy(memory, result, n_ch)
    return _replay(memory, trace, n_ch, record_commands, engine)


def _with_energy(memory: Memory, result: ReplayResult, n_ch: int) -> ReplayResult:
    """`result` with its energy (energy.dram_energy_pj), or the reason it has none."""
    org = memory.organization
    result.rank_cycles = result.cycles * n_ch * org.pseudo_channels * org.ranks
    try:
        result.energy_pj = dram_energy_pj(memory.part, memory.organization, result.commands,
                                          result.active_rank_cycles, result.rank_cycles)
        if result.energy_pj is None:
            result.energy_note = f"{memory.part.name} declares no currents (a power block)"
    except EnergyUnavailable as exc:
        result.energy_note = exc.message
    return result


def identical_channels(trace: Trace, n_ch: int) -> bool:
    """Is the trace a round-robin interleaving of identical per-channel request streams?"""
    n = len(trace)
    if n % n_ch:
        return False
    cols = [np.asarray(c) for c in (trace.arrival, trace.is_write, trace.bank, trace.row, trace.column)]
    ch = np.asarray(trace.channel).reshape(-1, n_ch)
    if not (ch == np.arange(n_ch)).all():
        return False
    return all((c.reshape(-1, n_ch) == c.reshape(-1, n_ch)[:, :1]).all() for c in cols)


def _channel_zero(trace: Trace, n_ch: int) -> Trace:
    pick = slice(0, None, n_ch)
    return Trace(trace.arrival[pick], trace.is_write[pick], [0] * (len(trace) // n_ch), trace.bank[pick],
                 trace.row[pick], trace.column[pick])


def _replay(memory: Memory, trace: Trace, n_ch: int, record_commands: bool = False,
            engine: str = "python") -> ReplayResult:
    replay_with = _replay_compiled if engine == "compiled" else _replay_python
    return _with_energy(memory, replay_with(memory, trace, n_ch, record_commands), n_ch)


def _replay_python(memory: Memory, trace: Trace, n_ch: int, record_commands: bool) -> ReplayResult:
    tables = request_tables(memory)
    # the reference loop indexes Python lists (a numpy element is a slower, different kind of int)
    arrival, channel, is_write, bank, row = (_as_list(c) for c in (trace.arrival, trace.channel, trace.is_write,
                                                                    trace.bank, trace.row))
    log = RequestLog(bank, row, is_write)
    records = [[] if record_commands else None for _ in range(n_ch)]
    ctrls = [ChannelController(tables, log, records[ch]) for ch in range(n_ch)]
    n = len(trace)
    head = 0
    now = 0
    times = [None] * n_ch
    while True:
        # 1. offer eligible requests in trace order
        while head < n and arrival[head] <= now:
            c = ctrls[channel[head]]
            if not c.has_room(is_write[head]):
                break
            c.accept(head, now)
            head += 1
        if head >= n and not any(c.busy() for c in ctrls):
            break
        # 2. the next event: a channel's command, refresh or queue move, or an arrival
        t_next = None
        for i, c in enumerate(ctrls):
            t = times[i] = c.next_event(now)
            if t is not None and (t_next is None or t < t_next):
                t_next = t
        if head < n and arrival[head] > now and ctrls[channel[head]].has_room(is_write[head]):
            if t_next is None or arrival[head] <= t_next:
                now = arrival[head]
                continue
        if t_next is None:
            raise RuntimeError("the DRAM engine stalled with requests outstanding")
        # 3. every channel with an event in this cycle acts; offers resume the next cycle
        for i, c in enumerate(ctrls):
            if times[i] == t_next:
                c.step(t_next)
        now = t_next + 1
    last = max((c.last_done for c in ctrls), default=-1)
    names = [cmd.name for cmd in tables.commands]
    counts = {name: sum(c.state.issued[i] for c in ctrls) for i, name in enumerate(names)}
    latencies = [log.done[i] - log.accepted[i] for i in range(n) if not is_write[i]]
    active = sum(c.rows.active_cycles(last + 1) for c in ctrls)
    return ReplayResult(
        memory=memory.name, requests=n, reads=len(latencies), writes=n - len(latencies),
        cycles=last + 1, tck_s=memory.part.tck_s, access_bytes=memory.organization.access_bytes,
        read_latencies=np.array(latencies, np.int64), row_hits=sum(1 for x in log.first_cmd if x == "hit"),
        commands={k: v for k, v in counts.items() if v},
        command_log=_command_log(tables, records, trace) if record_commands else None,
        active_rank_cycles=active)


def _as_list(column) -> list:
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def _replay_compiled(memory: Memory, trace: Trace, n_ch: int, record_commands: bool) -> ReplayResult:
    """The same replay through the compiled core (dram_core)."""
    from . import core as dram_core
    tables = request_tables(memory)
    accepted, done, first_cmd, issued, last_done, recs, rows = dram_core.run(
        tables, trace.arrival, trace.channel, trace.is_write, trace.bank, trace.row, n_ch, record_commands)
    end = int(last_done.max(initial=-1)) + 1
    # rows still open at the end count until then (energy.RowActivity.active_cycles)
    active = int(rows[:, :, 2].sum() + ((end - rows[:, :, 1]) * (rows[:, :, 0] > 0)).sum())
    is_write = np.asarray(trace.is_write, bool)
    latencies = done[~is_write] - accepted[~is_write]
    counts = issued.sum(axis=0)
    records = None
    if record_commands:
        records = [[] for _ in range(n_ch)]
        for t, ch, cmd, k, req in recs.tolist():
            records[ch].append((t, cmd, k, None if req < 0 else req))
    return ReplayResult(
        memory=memory.name, requests=len(trace), reads=len(latencies), writes=len(trace) - len(latencies),
        cycles=int(last_done.max(initial=-1)) + 1, tck_s=memory.part.tck_s,
        access_bytes=memory.organization.access_bytes, read_latencies=latencies,
        row_hits=int((first_cmd == dram_core.HIT).sum()),
        commands={cmd.name: int(counts[i]) for i, cmd in enumerate(tables.commands) if counts[i]},
        command_log=_command_log(tables, records, trace) if record_commands else None,
        active_rank_cycles=active)


def _command_log(tables: ChannelTables, records, trace: Trace) -> list[tuple]:
    """(cycle, channel, command, {level: index}, row, column, request), in issue order; row and
    column are None where the command has none (refresh, precharge; no column for ACT)."""
    levels = ("pseudo_channel", "rank", "bank_group", "bank")
    out = []
    for ch, rec in enumerate(records):
        for t, cmd, k, req in rec:
            level = tables.target_level(cmd)
            where = {}
            for lv in range(1, level + 1):
                where[levels[lv - 1]] = tables.ancestor(level, k, lv) % tables.fanout[lv]
            decl = tables.commands[cmd]
            column_cmd = bool(decl.reads or decl.writes)
            row = int(trace.row[req]) if req is not None and (decl.opens or column_cmd) else None
            column = int(trace.column[req]) if req is not None and column_cmd else None
            out.append((t, ch, decl.name, where, row, column, req))
    out.sort(key=lambda e: (e[0], e[1]))
    return out
