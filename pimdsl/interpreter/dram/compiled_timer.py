"""`CommandTimer` on the compiled stream core, once a process has issued enough commands to pay for it.

`CompiledCommandTimer` starts as the reference `CommandTimer` (Python, no numba
import); when the process has issued `COMPILED_MIN_COMMANDS` commands through
such timers it moves its state onto the arrays of `stream_core.py` and issues
every later run of commands in one compiled call (or at once, with
$PIMDSL_DRAM_ENGINE=compiled; never, with `python`). The move keeps every
value (next-allowed cycles, window histories, open rows, openers, refresh
dues), so the cycles are the reference's whichever way a stream goes.
`make_timer` is what the PIM paths build their timers with.
"""
from __future__ import annotations

import importlib.util
import os
from operator import attrgetter
from pathlib import Path

import numpy as np

from ...ir.commands import Command, StreamError
from ...aot import entry
from ...jit_cache import announce_compile, is_cached
from .command_stream import CommandTimer
from .tables import BANK

# Loading numba and the cached core costs about 0.7 s of CPU; the reference timer issues about
# 100-200k commands/s, the compiled one 600k-1M (benchmarks/results/stream_speed.json), so the load
# pays for itself after about 100k commands: a process moves onto the core once it has issued that
# many in Python (about when the Python time spent equals the load), and a small program (the
# phone's default run issues about 90k) never waits for the load.
COMPILED_MIN_COMMANDS = 100_000
# Compiling the core instead (an empty cache: a fresh install, or a new version of pimdsl) costs about
# 10-14 s of CPU, and the core saves about 5 us a command against Python (1.2-2x; the same file): the
# move pays for itself only after about 2M more commands, so a process without the core in its cache
# waits that long (the time Python lost by then is about the compile's), and a cold run whose streams
# are shorter finishes in Python, with the same cycles, instead of compiling.
COMPILED_MIN_COMMANDS_UNCACHED = 2_000_000
STREAM_CORE = Path(__file__).with_name("stream_core.py")

_PLACE = attrgetter("name", "channel", "pseudo_channel", "rank", "bank_group", "bank", "timing_arg")
_ROW = attrgetter("row")
_ESTIMATE = attrgetter("estimate")


_FLAT: dict[tuple, tuple] = {}


def _flat_tables(tables, build) -> tuple:
    """core.build_tables, once per distinct hierarchy, commands, rules and windows (it lists every
    (command, node), about 20 ms: a process times many ops on one memory)."""
    key = (tables.fanout, tables.commands, tables.rules, tables.windows, tuple(tables.variant_args))
    hit = _FLAT.get(key)
    if hit is None:
        if len(_FLAT) >= 64:
            _FLAT.clear()
        hit = _FLAT[key] = build(tables)
    return hit


def stream_engine() -> str:
    """`compiled`, `python` (forced by $PIMDSL_DRAM_ENGINE) or `auto` (the switch above)."""
    chosen = os.environ.get("PIMDSL_DRAM_ENGINE")
    if chosen in ("python", "compiled"):
        return chosen
    return "auto" if importlib.util.find_spec("numba") is not None else "python"


def core_is_cached() -> bool:
    """Is the compiled stream core built ahead of time (aot.py) or in the user's cache (a load, not a
    compile, away)?"""
    return entry(STREAM_CORE, "issue_run") is not None or is_cached(STREAM_CORE, "issue_run")


def make_timer(memory, extra_commands=(), extra_rules=(), extra_windows=(), refresh: str = "none",
               record_refreshes: bool = False, engine: str | None = None) -> CommandTimer:
    """The timer for an ordered stream: the reference `CommandTimer` (engine `python`), or one
    that runs on the compiled core (`compiled`: from the first command; `auto`: after the switch)."""
    engine = engine or stream_engine()
    cls = CommandTimer if engine == "python" else CompiledCommandTimer
    timer = cls(memory, extra_commands, extra_rules, extra_windows, refresh, record_refreshes)
    if engine == "compiled":
        timer.compile()
    return timer


class CompiledCommandTimer(CommandTimer):
    python_issued = 0            # commands issued by such timers in Python, this process
    switch_at: int | None = None     # the process's switch (above), once it has looked at the cache

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compiled = False

    # ---- the move onto the compiled state ----------------------------------------------
    def compile(self) -> None:
        """Move the state onto the compiled core's arrays; every later issue is compiled."""
        if self.compiled:
            return
        if entry(STREAM_CORE, "issue_run") is None:
            announce_compile(STREAM_CORE, "issue_run", "the PIM stream core", 14)
        from . import stream_core as K
        from .core import build_tables
        self.K, self._build = K, build_tables
        t = self.tables
        self.n_at, self.n_w = t.n_nodes * t.n_cmds, len(t.window_slots)
        self.slot_count = np.array([t.windows[w_i].count for (w_i, _) in t.window_slots], np.int64)
        self.maxc = max([1, *self.slot_count.tolist()])
        self.buffers = ["mem"] + sorted({self._buffer(d) for d in t.commands} - {"mem"})
        self.buffer_order = sorted(range(len(self.buffers)), key=self.buffers.__getitem__)
        self._command_tables()
        Q = np.full(K.N_Q, -1, np.int64)
        Q[K.Q_NAT], Q[K.Q_NW] = self.n_at, self.n_w
        if self.ref is not None:
            Q[K.Q_REF], Q[K.Q_PREA], Q[K.Q_TREFI] = self.ref, self.prea, self.tREFI
            Q[K.Q_REF_LEVEL], Q[K.Q_PREA_LEVEL] = self.ref_level, t.target_level(self.prea)
        self.Q = Q
        self.G = np.zeros(K.N_G, np.int64)
        self.G[K.G_REFRESHES], self.G[K.G_MAX_ESTIMATE] = self.refreshes, self.max_estimate
        self.log = np.zeros((64, 3), np.int64)
        self.slots: dict[int, int] = {}              # channel -> slot, in order of first use
        self.places: dict[tuple, int] = {}           # _PLACE of a command -> its row of place_rows
        self.place_rows = np.zeros((16, 4), np.int64)   # slot, command, node, flat bank
        self.arrays = None
        self._alloc(max(4, len(self.states)))
        for ch, state in self.states.items():        # the reference's state, value for value
            s = self._slot(ch)
            a = self.arrays
            a["next_at"][s * self.n_at:(s + 1) * self.n_at] = state.next_at
            for w, h in enumerate(state.window_history):
                a["hist"][s * self.n_w + w, :len(h)] = list(h)
                a["hist_len"][s * self.n_w + w] = len(h)
            a["issued"][s, :len(state.issued)] = state.issued
            for buf, rows in self.open_row[ch].items():
                a["rows"][s, self.buffers.index(buf)] = rows
            for b, node in self.opener[ch].items():
                a["opener"][s, b] = node
        self.states = {}
        self.compiled = True

    def _command_tables(self) -> None:
        """The flat rule tables and the per-command columns, for every command id so far (a
        variant, `ChannelTables.variant`, is its command's row)."""
        t, K = self.tables, self.K
        self.T = _flat_tables(t, self._build)
        C = np.zeros((max(t.n_ids, 1), K.N_C), np.int64)
        for i in range(t.n_ids):
            b = t.base[i]
            d, buf = t.commands[b], self._buffer(t.commands[b])
            C[i] = (t.target_level(b), self.twins.get(b, -1), self.buffers.index(buf), d.opens,
                    "row" in d.reads or "row" in d.writes, d.closes or d.refresh, self.announces[b],
                    d.opens and buf == "mem")
        self.C = C
        self.ids = t.n_ids

    def _alloc(self, n: int) -> None:
        """Room for n channel slots, keeping the state of the first ones."""
        t = self.tables
        units = t.count[self.ref_level] if self.ref is not None else 0
        old, self.arrays = self.arrays, dict(
            next_at=np.zeros(n * self.n_at, np.int64), hist=np.zeros((n * self.n_w, self.maxc), np.int64),
            hist_len=np.zeros(n * self.n_w, np.int64), hist_head=np.zeros(n * self.n_w, np.int64),
            issued=np.zeros((n, t.n_ids), np.int64),
            rows=np.full((n, len(self.buffers), t.banks), self.K.UNUSED, np.int64),
            opener=np.zeros((n, t.banks, 2), np.int64), last=np.zeros(n, np.int64),
            due=np.zeros((n, max(units, 1)), np.int64))
        if old is not None:
            for key, a in old.items():
                if key == "issued":
                    self.arrays[key][:len(a), :a.shape[1]] = a
                else:
                    self.arrays[key][:len(a)] = a
        self._args = tuple(self.arrays[k] for k in ("next_at", "hist", "hist_len", "hist_head", "issued", "rows",
                                                    "opener", "last", "due"))

    def _slot(self, channel: int) -> int:
        s = self.slots.get(channel)
        if s is None:
            s = self.slots[channel] = len(self.slots)
            if s >= len(self.arrays["last"]):
                self._alloc(2 * s)
            if self.ref is not None:
                self.arrays["due"][s] = self.dues(channel)
        return s

    def _place(self, key: tuple) -> int:
        """The row of `place_rows` for a command's name and place (-1: not a declared command)."""
        p = self.places.get(key)
        if p is not None:
            return p
        name, channel, pc, rank, bg, bank, value = key
        cmd = self.tables.index.get(name)
        if cmd is None:
            return -1
        uid = self.tables.variant(cmd, value)
        o = self.org
        flat = ((pc * o.ranks + rank) * o.bank_groups + bg) * o.banks_per_group + bank
        k = self.tables.ancestor(BANK, flat, self.tables.target_level(cmd))
        p = self.places[key] = len(self.places)
        if p >= len(self.place_rows):
            self.place_rows = np.concatenate([self.place_rows, np.zeros_like(self.place_rows)])
        self.place_rows[p] = (self._slot(channel), uid, k, flat)
        return p

    # ---- issuing ---------------------------------------------------------------------
    def issue_many(self, commands: list[Command], position: int = 0) -> tuple[list[int], StreamError | None]:
        if self._in_python(len(commands)):
            cycles, error = super().issue_many(commands, position)
            CompiledCommandTimer.python_issued += len(cycles)
            return cycles, error
        keys = list(map(_PLACE, commands))
        code = list(map(self.places.get, keys))      # None: a place not seen yet
        if None in code:
            for key in dict.fromkeys(key for key, p in zip(keys, code) if p is None):
                self._place(key)
            code = [self.places.get(key, -1) for key in keys]
            if self.tables.n_ids != self.ids:         # new variants: their rows of the tables
                self._command_tables()
                self._alloc(len(self.arrays["last"]))
        code = np.array(code, np.int64)
        K, a = self.K, self.arrays                   # (after new places: a new channel may grow them)
        for ch, s in self.slots.items():             # `last` may have been set from outside
            a["last"][s] = self.last.get(ch, 0)
        n = len(commands)
        cycles = np.zeros(n, np.int64)
        status, i, d1, d2, self.log = K.issue_run(
            self.T, self.Q, self.C, self.place_rows, code, np.fromiter(map(_ROW, commands), np.int64, n),
            np.fromiter(map(_ESTIMATE, commands), np.int64, n), self.G, *self._args, self.log, cycles)
        self._sync()
        if status == K.OK:
            return cycles.tolist(), None
        return cycles[:i].tolist(), self._error(status, commands[i], position + i, d1, d2)

    def _sync(self) -> None:
        """Python's view after a run: last cycles, refresh count, dues and log, longest estimate."""
        K, G, last, issued = self.K, self.G, self.arrays["last"], self.arrays["issued"]
        for ch, s in self.slots.items():
            if issued[s].any():                      # (a channel's slot is made before its first issue)
                self.last[ch] = int(last[s])
        self.refreshes, self.max_estimate = int(G[K.G_REFRESHES]), int(G[K.G_MAX_ESTIMATE])
        if G[K.G_NLOG]:
            channel = {s: ch for ch, s in self.slots.items()}
            for s, u, at in self.log[:G[K.G_NLOG]].tolist():
                if self.refresh_log is not None:
                    self.refresh_log.append((channel[s], u, at))
                self.refresh_due[channel[s]][u] += self.tREFI
            G[K.G_NLOG] = 0

    def _error(self, status, c: Command, position: int, bank: int, row: int) -> StreamError:
        K = self.K
        if status == K.UNDECLARED:
            return self.stream_error(self.undeclared(c, position))
        if status == K.STRAY_ESTIMATE:
            return self.stream_error(self.stray_estimate(c, position, self.tables.index[c.name]))
        return self.stream_error(self.opens_open_bank(c, position, bank, row) if status == K.OPEN_BANK
                                 else self.closed_bank(c, position, bank))

    def _in_python(self, n: int) -> bool:
        """Issue the next n commands in Python? If not, the state is on the compiled core."""
        if self.compiled:
            return False
        issued = CompiledCommandTimer.python_issued + n
        if issued < COMPILED_MIN_COMMANDS:
            return True
        if CompiledCommandTimer.switch_at is None:
            CompiledCommandTimer.switch_at = COMPILED_MIN_COMMANDS if core_is_cached() else COMPILED_MIN_COMMANDS_UNCACHED
        if issued < CompiledCommandTimer.switch_at:
            return True
        self.compile()
        return False

    def issue(self, c: Command, position: int = 0) -> int:
        if self._in_python(1):
            cycle = super().issue(c, position)
            CompiledCommandTimer.python_issued += 1
            return cycle
        cycles, error = self.issue_many([c], position)
        if error is not None:
            raise error
        return cycles[0]

    def run(self, commands) -> list[int]:
        commands = list(commands)
        if self._in_python(len(commands)):
            return super().run(commands)
        cycles, error = self.issue_many(commands)
        if error is not None:
            raise error
        return cycles

    def earliest(self, c: Command, after: int = 0) -> int:
        if not self.compiled:
            return super().earliest(c, after)
        s = self.slots.get(c.channel)
        if s is None:
            return after
        _, cmd, k, bank = self.place_rows[self._place(_PLACE(c))].tolist()
        from .core import T_CHECKS
        C, next_at, base, core_earliest = self.T[T_CHECKS], self.arrays["next_at"], s * self.n_at, self.K._earliest
        earliest = lambda cmd, k, now: int(core_earliest(C, next_at, base, cmd, k, now))      # (C: core.checks)
        declared = self.tables.base[cmd]
        return self._twin_earliest(earliest, declared, self.tables.target_level(declared), k, bank,
                                   earliest(cmd, k, after))

    # ---- steady state (stream_timer's fast mode) ----------------------------------------
    def channels(self) -> list[int]:
        return sorted(self.slots) if self.compiled else super().channels()

    def signature(self, channel: int, horizon: int) -> tuple:
        if not self.compiled:
            return super().signature(channel, horizon)
        # the reference's very tuple, so that a stream moved onto the core mid-loop finds the same
        # recurrences (and skips the same commands)
        s, a = self.slots[channel], self.arrays
        now = self.last.get(channel, 0)
        at = a["next_at"][s * self.n_at:(s + 1) * self.n_at]
        windows = []
        for w in range(s * self.n_w, (s + 1) * self.n_w):
            n, count, head = a["hist_len"][w], self.slot_count[w - s * self.n_w], a["hist_head"][w]
            h = np.maximum(a["hist"][w, (head + np.arange(n)) % count] - now, -horizon)
            windows.append(tuple(h.tolist()))
        rows = a["rows"][s]
        return (tuple(np.maximum(at - now, 0).tolist()), tuple(windows),
                tuple((self.buffers[i], tuple((rows[i] >= 0).tolist())) for i in self.buffer_order
                      if rows[i, 0] != self.K.UNUSED))

    def shift(self, channel: int, cycles: int) -> None:
        if not self.compiled:
            return super().shift(channel, cycles)
        s, a = self.slots[channel], self.arrays
        a["next_at"][s * self.n_at:(s + 1) * self.n_at] += cycles
        a["hist"][s * self.n_w:(s + 1) * self.n_w] += cycles
        self.last[channel] = self.last.get(channel, 0) + cycles
