"""Timing an already-ordered command stream (what PIM lowering produces).

Each command issues as early as the spec's rules allow, but never before the
command ahead of it on the same channel (the stream's order is the program's
order; nothing is reordered). Commands on different buses of a channel (HBM
row and column buses) may share a cycle. The stream is also checked: a column
command to a closed bank or an ACT to an open one is a lowering bug and
raises `StreamError` with the command's position.

Refresh is a policy of the timer: `none`, or `blocking` (each refresh unit
of the part's REF scope falls due every tREFI, first at tREFI, or at
(k + 1) tREFI / n for unit k of n with the controller's `refresh_stagger`; when the next
command could only issue at or after that, the timer closes the open rows
with PREA, issues REF, reopens the rows the stream had open with the
commands that opened them, and goes on). PIM row buffers are not closed.

A command whose declaration lists an `estimate` argument announces work:
its `estimate` is the cycles from its issue to the last command of that
work. NeuPIMs' PIM_HEADER is one ([NEUPIMS] Sec. 5.2: it
carries the GEMV's dimensions so that the controller "is able to estimate
the end-to-end latency of GEMV operation and schedule its constituent
commands without conflicting with the DRAM refresh"). With blocking
refresh, every refresh of the units under such a command that would fall
due by its issue cycle + estimate is taken at once, pulled in before the
command rather than waited for, so the announced work runs between two
refreshes instead of being cut by one (work of tREFI or more cannot fit
and is timed like any command). An estimate should not exceed the cycles
the work really takes in the stream (one unit timed alone, as the NeuPIMs
lowering computes it, never does): stream_timer's fast mode skips up to
the last cycle before a refresh and relies on no skipped command pulling
one in.

Row buffers are the PIM unit's `row_buffers` (NeuPIMs section 5.1): with
`dual`, commands declared on the `pim` row buffer open and close rows of
their own buffer beside the MEM one, so an ordinary ACT/RD and PIM work can
hold rows of the same bank at once; with `single` (blocked PIM) both share
the one row buffer, so a PIM activation of a bank with an open MEM row is a
stream error until the stream precharges it, and refresh closes and reopens
PIM rows like any other.
"""
from __future__ import annotations

from typing import Iterable

from ...ir.commands import ESTIMATE_ARG, Command, StreamError
from ...ir.hardware import Memory
from .state import DeviceState
from .tables import BANK, ChannelTables


class CommandTimer:
    """Issues commands in order on each channel of `memory` and returns their cycles."""

    def __init__(self, memory: Memory, extra_commands=(), extra_rules=(), extra_windows=(),
                 refresh: str = "none", record_refreshes: bool = False):
        part = memory.part
        self.memory = memory
        self.tables = ChannelTables(memory, part.commands + tuple(extra_commands),
                                    part.rules + tuple(extra_rules), part.windows + tuple(extra_windows))
        self.org = memory.organization
        self.states: dict[int, DeviceState] = {}
        self.last: dict[int, int] = {}
        self.open_row: dict[int, dict[str, list[int]]] = {}     # channel -> row buffer -> bank -> row
        self.opener: dict[int, dict[int, tuple[int, int]]] = {}  # channel -> bank -> (command, node) of its MEM row
        self.refreshes = 0
        # (channel, refresh unit, REF cycle) of every refresh taken, when asked for
        self.refresh_log: list[tuple[int, int, int]] | None = [] if record_refreshes else None
        self.single_row_buffer = memory.pim is not None and memory.pim.row_buffers == "single"
        self.twins = self._twins() if self.single_row_buffer else {}
        # commands that announce the cycles of the work they head (declare an `estimate` arg)
        self.announces = [ESTIMATE_ARG in d.args for d in self.tables.commands]
        self.max_estimate = 0     # the longest announced work issued so far (a bound for skipping)
        self._setup_refresh(refresh)

    def _setup_refresh(self, policy: str) -> None:
        t = self.tables
        self.refresh_due: dict[int, list[int]] = {}
        if policy == "none":
            self.ref = None
            return
        if policy != "blocking":
            raise StreamError(f"unknown refresh policy '{policy}' (none or blocking)")
        self.ref, self.prea = t.roles.ref, t.roles.prea
        self.tREFI = t.timing.get("tREFI")
        if self.ref is None or self.prea is None or not self.tREFI:
            raise StreamError("blocking refresh needs REF and PREA commands and tREFI", t.memory.span)
        self.ref_level = t.target_level(self.ref)
        self.stagger = t.memory.controller.refresh_stagger

    def dues(self, channel: int) -> list[int]:
        """The cycle each refresh unit of `channel` next falls due."""
        due = self.refresh_due.get(channel)
        if due is None:
            n = self.tables.count[self.ref_level]
            # staggered (controller option): unit k of n first due at (k + 1) tREFI / n, as DRAMSim2
            # and the request-level controller stagger ranks; else every unit first at tREFI
            due = self.refresh_due[channel] = [(u + 1) * self.tREFI // n if self.stagger else self.tREFI
                                               for u in range(n)]
        return due

    def _refresh_units(self, level: int, k: int, bank: int) -> Iterable[int]:
        """The refresh units under or above a command's node (level, k); `bank` is one of its banks."""
        t, ref = self.tables, self.ref_level
        return t.descendants(level, k, ref) if level < ref else (t.ancestor(BANK, bank, ref),)

    def _refresh_before(self, channel: int, bank: int, k: int, cycle: int, span: int = 0) -> int:
        """Refresh unit `k` while it falls due by `cycle + span`; the cycle the stream resumes
        from. `bank` is the command's bank (where PREA closes rows) when it is in the unit."""
        t, state = self.tables, self.states[channel]
        due = self.dues(channel)
        rows = self.open_row[channel].setdefault("mem", [-1] * t.banks)
        while cycle + span >= due[k]:
            # announced work that would run into the refresh pulls it in (JESD235 allows REF early)
            # rather than idling until it is due
            at = self.last.get(channel, 0) if span else max(self.last.get(channel, 0), due[k])
            banks = t.descendants(self.ref_level, k, BANK)
            prea = t.ancestor(BANK, bank if bank in banks else banks[0], t.target_level(self.prea))
            openers = self.opener[channel]
            # the commands that opened the rows (a bank ACT, or one all-bank ACT for many banks)
            reopen = list(dict.fromkeys(openers[b] for b in banks if rows[b] >= 0))
            if reopen:
                at = state.earliest(self.prea, prea, at)
                state.issue(self.prea, prea, at)
            at = state.earliest(self.ref, k, at)
            state.issue(self.ref, k, at)
            self.refreshes += 1
            if self.refresh_log is not None:
                self.refresh_log.append((channel, k, at))
            for cmd, node in reopen:
                at = state.earliest(cmd, node, at)
                state.issue(cmd, node, at)
            self.last[channel] = at
            due[k] += self.tREFI
            cycle = state.earliest(self._pending_cmd, self._pending_k, at)
        return cycle

    def _twins(self) -> dict[int, int]:
        """Single row buffer: the bank's activate and precharge of the other buffer's commands.
        One buffer serves both, so a PIM activation waits for what an ACT of its banks would
        (tRP after their PRE, tRC, refresh) and an ACT for what a PIM activation would; the
        same for the two precharges (tRAS after either activation)."""
        t = self.tables
        pim = [i for i, d in enumerate(t.commands) if d.row_buffer == "pim"]
        pim_open = next((i for i in pim if t.commands[i].opens), None)
        pim_close = next((i for i in pim if t.commands[i].closes), None)
        twins = {}
        for mem_cmd, pim_cmd in ((t.roles.act, pim_open), (t.roles.pre, pim_close)):
            if pim_cmd is not None:
                twins[mem_cmd], twins[pim_cmd] = pim_cmd, mem_cmd
        return twins

    def _twin_earliest(self, earliest, cmd: int, level: int, k: int, bank: int, cycle: int) -> int:
        twin = self.twins.get(cmd)
        if twin is None:
            return cycle
        t = self.tables
        twin_level = t.target_level(twin)
        nodes = t.descendants(level, k, twin_level) if level < twin_level else (t.ancestor(BANK, bank, twin_level),)
        for node in nodes:
            cycle = earliest(twin, node, cycle)
        return cycle

    def _flat_bank(self, c: Command) -> int:
        o = self.org
        return ((c.pseudo_channel * o.ranks + c.rank) * o.bank_groups + c.bank_group) * o.banks_per_group + c.bank

    def earliest(self, c: Command, after: int = 0) -> int:
        """The first cycle >= `after` at which `c` could issue now, by the rules alone (a peek:
        no refresh is taken, nothing changes; a channel not used yet starts at `after`)."""
        state = self.states.get(c.channel)
        if state is None:
            return after
        t = self.tables
        cmd = t.index[c.name]
        bank, level = self._flat_bank(c), t.target_level(cmd)
        k = t.ancestor(BANK, bank, level)
        return self._twin_earliest(state.earliest, cmd, level, k, bank, state.earliest(cmd, k, after))

    def issue(self, c: Command, position: int = 0) -> int:
        t = self.tables
        cmd = t.index.get(c.name)
        if cmd is None:
            raise self.stream_error(self.undeclared(c, position))
        state = self.states.get(c.channel)
        if state is None:
            state = self.states[c.channel] = DeviceState(t)
            self.open_row[c.channel] = {}
            self.opener[c.channel] = {}
        bank = self._flat_bank(c)
        level = t.target_level(cmd)
        k = t.ancestor(BANK, bank, level)
        cycle = state.earliest(cmd, k, self.last.get(c.channel, 0))
        cycle = self._twin_earliest(state.earliest, cmd, level, k, bank, cycle)
        span = c.estimate
        if span and not self.announces[cmd]:
            raise self.stream_error(self.stray_estimate(c, position, cmd))
        if self.ref is not None:
            self._pending_cmd, self._pending_k = cmd, k
            if 0 < span < self.tREFI:       # longer work cannot fit between refreshes: timed as usual
                self.max_estimate = max(self.max_estimate, span)
                for unit in self._refresh_units(level, k, bank):
                    cycle = self._refresh_before(c.channel, bank, unit, cycle, span)
            else:
                cycle = self._refresh_before(c.channel, bank, t.ancestor(BANK, bank, self.ref_level), cycle)
        self._track_rows(t.commands[cmd], level, k, bank, c, position)
        if t.commands[cmd].opens and self._buffer(t.commands[cmd]) == "mem":
            opener = self.opener[c.channel]
            for b in ([bank] if level == BANK else t.descendants(level, k, BANK)):
                opener[b] = (cmd, k)
        # a command whose rules depend on an argument raises them as its variant for that value
        state.issue(t.variant(cmd, c.timing_arg) if t.arg_dependent[cmd] else cmd, k, cycle)
        self.last[c.channel] = cycle
        return cycle

    def _buffer(self, decl) -> str:
        """The row buffer a command works on: its declared one, but `mem` for a `pim` command of a
        single-row-buffer unit."""
        return "mem" if self.single_row_buffer and decl.row_buffer == "pim" else decl.row_buffer

    def _track_rows(self, decl, level, k, bank, c, position):
        """Open rows per row buffer (`mem`, and `pim` for dual-row-buffer PIM banks)."""
        buffers, buffer = self.open_row[c.channel], self._buffer(decl)
        rows = buffers.get(buffer)
        if rows is None:
            rows = buffers[buffer] = [-1] * self.tables.banks
        if not (decl.opens or decl.closes or decl.refresh or "row" in decl.reads or "row" in decl.writes):
            return
        banks = [bank] if level == BANK else self.tables.descendants(level, k, BANK)
        if decl.opens:
            for b in banks:
                if rows[b] >= 0:
                    raise self.stream_error(self.opens_open_bank(c, position, b, rows[b]))
                rows[b] = c.row
        elif "row" in decl.reads or "row" in decl.writes:
            for b in banks:
                if rows[b] < 0:
                    raise self.stream_error(self.closed_bank(c, position, b))
        if decl.closes or decl.refresh:
            for b in banks:
                rows[b] = -1

    # ---- stream errors (the compiled timer raises the same) ------------------------------
    def stream_error(self, message: str) -> StreamError:
        """A command of a stream the state cannot take: of a memory with a PIM unit, that unit's declared
        programs made the stream, so the error points at the unit (a mistake of the spec, located)."""
        pim = getattr(self.memory, "pim", None)
        if pim is None:
            return StreamError(message)
        return StreamError(f"a command stream of PIM unit '{pim.name}' cannot be issued: {message}", pim.span,
                           "check the order of the commands in the unit's programs (a bank's open row is "
                           "precharged before another row of it is activated)")

    def undeclared(self, c: Command, position: int) -> str:
        return f"command {position}: '{c.name}' is not declared for memory '{self.tables.memory.name}'"

    def stray_estimate(self, c: Command, position: int, cmd: int) -> str:
        return (f"command {position}: {c.name} carries an estimate, but its declaration "
                f"has no '{ESTIMATE_ARG}' argument (args = [{', '.join(self.tables.commands[cmd].args)}])")

    @staticmethod
    def opens_open_bank(c: Command, position: int, bank: int, row: int) -> str:
        return (f"command {position}: {c.name} opens row {c.row} of bank {bank}, "
                f"which still has row {row} open (precharge first)")

    @staticmethod
    def closed_bank(c: Command, position: int, bank: int) -> str:
        return f"command {position}: {c.name} to bank {bank}, which has no open row"

    def run(self, commands: Iterable[Command]) -> list[int]:
        return [self.issue(c, i) for i, c in enumerate(commands)]

    def issue_many(self, commands: list[Command], position: int = 0) -> tuple[list[int], StreamError | None]:
        """Issue a run of commands, the first at stream position `position`: the cycles of those
        that issued and, if one could not, its error (the commands after it are not issued)."""
        cycles = []
        issue = CommandTimer.issue            # this class's, also in a subclass (its Python path)
        try:
            for i, c in enumerate(commands):
                cycles.append(issue(self, c, position + i))
        except StreamError as exc:
            return cycles, exc
        return cycles, None

    # ---- steady state (stream_timer's fast mode) ------------------------------------
    def channels(self) -> list[int]:
        return sorted(self.states)

    def signature(self, channel: int, horizon: int) -> tuple:
        """A channel's timing state relative to its last issue cycle: every next-allowed cycle still
        ahead, the window histories (clipped at `horizon` back) and which banks have a row open."""
        now = self.last.get(channel, 0)
        state = self.states[channel]
        return (tuple(v - now if v > now else 0 for v in state.next_at),
                tuple(tuple(max(e - now, -horizon) for e in h) for h in state.window_history),
                tuple((buf, tuple(r >= 0 for r in rows)) for buf, rows in sorted(self.open_row[channel].items())))

    def shift(self, channel: int, cycles: int) -> None:
        """Move a channel's state `cycles` later (fast mode's skipped periods); refresh dues stay."""
        state = self.states[channel]
        state.next_at = [v + cycles for v in state.next_at]
        for h in state.window_history:
            for n in range(len(h)):
                h[n] += cycles
        self.last[channel] = self.last.get(channel, 0) + cycles


def time_commands(memory: Memory, commands: Iterable[Command], **options) -> list[int]:
    """Issue cycle of every command of an ordered stream."""
    return CommandTimer(memory, **options).run(commands)
