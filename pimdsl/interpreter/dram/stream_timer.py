"""Timing structured command streams, exactly or fast.

Exact mode issues every command of the unrolled stream through
`CommandTimer`. Fast mode does the same, but at each loop-iteration boundary
it takes a *signature* of the timing state of every channel, relative to the
channel's last issue cycle: every next-allowed cycle still in the future,
the window histories still inside their windows, and which banks have a row
open in which row buffer. The timer is a deterministic function of that
state and of the command shapes, and a loop's body repeats its shape with
its period (the `Loop` contract), so when a signature recurs after a
multiple of the period the loop is in a periodic steady state: each further
period adds the same cycles to each channel. Fast mode then shifts the state
by whole periods instead of issuing them, and counts their commands.

Refresh is the one absolute clock: a skip never crosses a refresh that falls
due, so the stream runs exactly through each refresh and skips again once
the state has settled; it also stays one longest announced estimate (a
PIM_HEADER's) away from a refresh, since such a command takes the refresh
early. Fast therefore equals exact, command for command, in
issue cycles of everything it does issue, in the end cycle and in the counts.
"""
from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Callable, Iterable

from ...lowering.stream import Item, Loop
from .command_stream import CommandTimer
from ...ir.commands import Command

MIN_LOOP_FOR_PROBING = 3          # shorter loops are simply issued
# A signature costs about as much as issuing a few commands (it reads every timing constraint of
# every channel), so a loop is probed once per this many commands of its body, at iterations that
# are multiples of a stride (itself a multiple of the period, so recurrences still line up): a
# loop of cheap iterations is probed rarely or, if short, never; a heavy body every iteration.
PROBE_EVERY_COMMANDS = 32
# Commands are issued in runs (one call of the timer, compiled or not): at most this many at once.
RUN_LENGTH = 4096
_NAME_KIND = attrgetter("name", "kind")


class StreamTimer:
    """Times one or more streams, in program order per channel, on one `CommandTimer`."""

    def __init__(self, timer: CommandTimer, fast: bool = True,
                 on_issue: Callable[[Command, int], None] | None = None):
        self.timer = timer
        self.fast = fast and on_issue is None      # a per-command callback needs every command
        self.on_issue = on_issue
        self.counts: Counter = Counter()           # (name, kind) -> commands issued or skipped
        self.skipped = 0                           # commands accounted for without issuing
        self.position = 0
        self.end = 0                               # one past the last issue cycle of any channel
        self.read_end = 0                          # one past the last column read's issue cycle
        self._readers = {c.name for c in timer.tables.commands if "row" in c.reads}
        self._pending: list[Command] = []          # commands not yet handed to the timer
        windows = timer.tables.windows
        self._window_horizon = max((w.cycles for w in windows), default=0) + 1

    # ---- issuing --------------------------------------------------------------
    def run(self, items: Iterable[Item]) -> int:
        """Issue a stream; returns one past the last issue cycle so far."""
        self._walk(items)
        self._flush()
        return self.end

    def _walk(self, items: Iterable[Item]) -> None:
        for item in items:
            if type(item) is Loop:
                self._loop(item)
            else:
                self._pending.append(item)
                self.position += 1
                if len(self._pending) >= RUN_LENGTH:
                    self._flush()

    def _flush(self) -> None:
        """Issue the pending commands (in one run of the timer)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        cycles, error = self.timer.issue_many(pending, self.position - len(pending))
        issued = pending[:len(cycles)]
        self.counts.update(map(_NAME_KIND, issued))
        if cycles:
            self.end = max(self.end, max(cycles) + 1)
            readers = self._readers
            last_read = max((cy for c, cy in zip(issued, cycles) if c.name in readers), default=-1)
            self.read_end = max(self.read_end, last_read + 1)
        if self.on_issue is not None:
            for c, cycle in zip(issued, cycles):
                self.on_issue(c, cycle)
        if error is not None:
            self.position -= len(pending) - len(cycles)
            raise error

    def _loop(self, loop: Loop) -> None:
        probing = self.fast and loop.count >= MIN_LOOP_FOR_PROBING + loop.period
        seen: dict[tuple, tuple[int, dict, Counter, int]] = {}
        stride = 1
        i = 0
        while i < loop.count:
            before = self.position
            self._walk(loop.body(i))
            i += 1
            if not probing or i >= loop.count:
                continue
            if i == 1:                     # commands per iteration, skipped ones included
                per_iteration = max(1, self.position - before)
                periods = -(-PROBE_EVERY_COMMANDS // (per_iteration * loop.period))
                stride = periods * loop.period
                if loop.count < MIN_LOOP_FOR_PROBING * stride + stride:
                    probing = False        # too short for probes this far apart to pay off
                    continue
            if i % stride:
                continue
            self._flush()
            sig = self._signature()
            hit = seen.get(sig)
            if hit is not None and hit[3] != self.timer.refreshes:
                hit = None                 # a refresh in between: the cycles between are not a period
            if hit is not None and (i - hit[0]) % loop.period == 0:
                skip_to = self._skip(hit, i, loop.count)
                if skip_to > i:
                    i = skip_to
                    seen.clear()
                    continue
            seen[sig] = (i, dict(self.timer.last), self.counts.copy(), self.timer.refreshes)

    # ---- steady state ------------------------------------------------------------
    def _signature(self) -> tuple:
        t = self.timer
        horizon = self._window_horizon
        return tuple((ch, t.signature(ch, horizon)) for ch in t.channels())

    def _skip(self, hit, i: int, count: int) -> int:
        """Shift the state by whole steady-state periods; returns the iteration reached."""
        t = self.timer
        j, lasts, counts, _ = hit
        span = i - j
        deltas = {ch: t.last.get(ch, 0) - lasts.get(ch, 0) for ch in t.channels()}
        periods = (count - i) // span
        for ch, delta in deltas.items():           # never skip across a refresh that falls due
            if t.ref is not None and delta > 0:
                first_due = min(t.dues(ch))
                # ... nor near enough that an announced estimate would pull it in (PIM_HEADER)
                horizon = first_due - 1 - t.max_estimate - t.last.get(ch, 0)
                periods = min(periods, max(0, horizon // delta))
        if periods <= 0:
            return i
        for ch, delta in deltas.items():
            t.shift(ch, periods * delta)
            self.end = max(self.end, t.last[ch] + 1)
        per_period = self.counts - counts
        if any(name in self._readers for name, _ in per_period):
            self.read_end += periods * max(deltas.values())
        added = sum(per_period.values())
        for key, n in per_period.items():
            self.counts[key] += periods * n
        self.skipped += periods * added
        self.position += periods * added
        return i + periods * span


def time_stream(timer: CommandTimer, items: Iterable[Item], fast: bool = True) -> StreamTimer:
    """Time `items` on `timer` and return the StreamTimer (end cycle, counts)."""
    st = StreamTimer(timer, fast=fast)
    st.run(items)
    return st
