"""One channel's memory controller: request queues, FR-FCFS, page policy, refresh.

Event-driven rather than ticked: `decide(now)` finds the first cycle >= now
at which any command can issue and the command the scheduler picks there.
This equals a cycle-by-cycle controller because readiness only changes when a
command issues, a request arrives or a refresh falls due, and each of those
is an event here (a decision is recomputed after each).

Policies, all from the spec's `controller` block (defaults as DRAMsim3 and
Ramulator 2 ship them):
  * scheduler `fcfs` (only the oldest request), `frfcfs` (the first ready
    command wins, ties go to the oldest request; a ready PRE for a bank's
    oldest request may close a row that younger requests hit; Ramulator 2's
    FRFCFS also lets a younger request's PRE pre-empt an older hit, which is
    not modelled: see validation/dram.md, lpddr5_6400 bank_parallel_hit),
    `frfcfs_rowhit` (as frfcfs, but no PRE while a request hits the open row,
    unless `row_hit_cap` hits were served since its ACT; cap 0 means never).
    Which hits hold the row follows the queue structure: any queued one
    (DRAMsim3, cap 4), or one that arrived no later than the request the PRE
    is for (Ramulator 2 FRFCFS-RowHit).
  * read and write queues of bounded depth; writes drain once the write
    queue holds `write_drain_high` x depth or no read waits, and stop at
    `write_drain_low` x depth when reads wait (Ramulator 2: 0.8 / 0.2).
    `write_drain = batch` (per_bank; DRAMsim3 [DRAMSIM3] controller.cc
    ScheduleTransaction): a drain starts when the write queue holds
    `write_drain_high` x depth writes, or more than `write_drain_idle` while
    the command queues are empty, and moves exactly the writes queued at its
    start; outside a drain only reads move on, so up to `write_drain_idle`
    writes may never issue at the end of a trace (DRAMsim3's stranded
    writes, [REFDATA] dram README Sec. 2.1): the replay then ends.
  * `bank_arbitration`: of the commands ready in one cycle, the oldest
    request's (`oldest`), or the first in bank order after the bank served
    last (`round_robin`: DRAMsim3 command_queue GetCommandToIssue).
  * `refresh_precharge`: a refresh closes its rank with the part's
    precharge-all command (`all_bank`), or bank by bank, the first ready
    first (`per_bank`, DRAMsim3 channel_state GetReadyCommand).
  * page policy `open`, or `closed` (RDA/WRA when no queued request hits
    the row).
  * queue structure `transaction` (Ramulator 2 [RAMULATOR2] controller_base:
    requests are scheduled from the read or write queue of the current mode;
    at its ACT a request moves to an active buffer, freeing its queue slot and
    its count toward the drain watermarks; the active buffer is scheduled
    first in every mode, and no PRE, a refresh's included, may close a row
    an active request waits for; while a refresh waits nothing issues from the
    read/write queues) or `per_bank` (DRAMsim3 [DRAMSIM3] command_queue: one
    request per cycle moves on from the read or write queue into its bank's
    command queue of `command_queue_depth`, freeing its queue entry; a bank's
    queue holds reads and writes together in the order they entered, and a
    PRE is only for its oldest command; the scheduler sees the command
    queues from the next cycle).
  * refresh `none`, `all_bank` (each rank or pseudo-channel every tREFI,
    staggered; its banks are closed, then REF; other ranks go on), or
    `per_bank` (each bank every tREFI, staggered by tREFI / banks).
  * `precharge_for`: `oldest` (a PRE only for the bank's oldest queued
    request) or `any` (for its oldest request to another row: Ramulator 2's
    FRFCFS derives the next command of every queued request, so a younger
    request's ready PRE pre-empts an older row hit waiting out tCCD,
    [RAMULATOR2] scheduler/frfcfs; [REFDATA] dram README Sec. 8.3).
  * `split_activate`: a two-cycle ACT (LPDDR5 ACT-1, ACT-2 [JESD209-5])
    holds the command bus for its first cycle; its second issues in the
    first cycle nothing else is ready, at the latest tAAD after the first,
    and no other ACT issues before it (Ramulator 2 lpddr_controller_base).
    Its bank cannot be read or closed before it (tAAD < tRCD, tRAS).
  * `data_clock_sync`: a RD/WR issued once the data clock has stopped
    (tWCKPST after the end of the last burst) is preceded by a one-cycle sync
    command (LPDDR5 CAS with WCK2CK sync), the column command following in
    the next cycle; when that would pass a waiting ACT-2's deadline, the
    ACT-2 issues instead (Ramulator 2 wck_sync_mode need_sync).
"""
from __future__ import annotations

from dataclasses import replace

from .energy import RowActivity
from .state import DeviceState
from .tables import BANK, ChannelTables, EngineError, find_roles

NEVER = 1 << 62
# decisions that issue no declared command: an ACT's second cycle, a data-clock sync
SECOND_HALF, SYNC = -2, -3


def request_tables(memory) -> ChannelTables:
    """The tables the request controller runs on: with `split_activate`, ACT holds the command
    bus for its first cycle only (the controller issues the second)."""
    commands = memory.part.commands
    if memory.controller.split_activate:
        act = find_roles(commands).act
        commands = tuple(replace(c, bus_cycles=1) if i == act else c for i, c in enumerate(commands))
    return ChannelTables(memory, commands)


class RequestLog:
    """Per-request facts of one replay, indexed by request number."""

    def __init__(self, bank, row, is_write):
        n = len(bank)
        self.bank, self.row, self.is_write = bank, row, is_write
        self.accepted = [0] * n
        self.done = [-1] * n            # read: data returned; write: WR issued
        self.eligible = [0] * n         # first cycle the scheduler may act on it
        self.first_cmd = [None] * n     # "hit", "miss" (bank closed) or "conflict"
        self.order = list(range(n))     # age for the scheduler: trace order, or command-queue entry


class ChannelController:
    def __init__(self, tables: ChannelTables, log: RequestLog, record: list | None = None):
        self.t = tables
        self.record = record              # when a list: (cycle, command, node, request) of every issue
        self.log = log
        self.state = DeviceState(tables)
        self.rows = RowActivity(tables)    # which banks are open, for standby energy
        cfg = tables.memory.controller
        self.cfg = cfg
        r = tables.roles
        self.ACT, self.PRE, self.RD, self.WR = r.act, r.pre, r.rd, r.wr
        closed = cfg.page_policy == "closed"
        self.RDA = r.rda if closed and r.rda is not None else None
        self.WRA = r.wra if closed and r.wra is not None else None
        if closed and (r.rda is None or r.wra is None):
            raise EngineError("closed-page policy needs RDA/WRA commands (reads/writes = [row], closes = true)",
                              tables.memory.span)
        self.read_latency = tables.read_latency
        nb = tables.banks
        self.open_row = [-1] * nb
        self.hits_since_act = [0] * nb
        self.reads: dict[int, list[int]] = {}     # transaction: bank -> queued reads, oldest first
        self.writes: dict[int, list[int]] = {}
        self.active: dict[int, list[int]] = {}    # transaction: bank -> requests whose row was opened
        self.cmdq: dict[int, list[int]] = {}      # per_bank: bank -> reads and writes, in order of entry
        self.n_reads = self.n_writes = 0          # requests in reads/writes, or in the command queues
        self.order = log.order
        self.moved = 0                            # per_bank: requests moved into command queues so far
        self.write_mode = False
        self.batch = cfg.write_drain == "batch"
        self.draining = 0                         # batch: writes left to move in this drain
        self.round_robin = cfg.bank_arbitration == "round_robin"
        self.last_bank = -1                       # round_robin: the bank served last
        self.n_req = len(log.bank) + 1            # round_robin: bank distance weighs over any age
        self.per_bank = cfg.queue_structure == "per_bank"
        self.staged_reads: list[int] = []         # per_bank: waiting for a command-queue slot
        self.staged_writes: list[int] = []
        self.in_bank = [0] * nb                   # per_bank: command-queue occupancy
        self.eligible = log.eligible
        self.rowhit = cfg.scheduler == "frfcfs_rowhit"
        self.fcfs = cfg.scheduler == "fcfs"
        self.cap = cfg.row_hit_cap if self.rowhit else 0
        self.any_miss = cfg.precharge_for == "any"
        # per bank, the next_at entries that bound each command there
        getters = tables.bank_checks
        self.act_checks = getters(r.act)
        self.pre_checks = getters(r.pre)
        self.rd_checks = getters(self.RDA if self.RDA is not None else r.rd)
        self.wr_checks = getters(self.WRA if self.WRA is not None else r.wr)
        self.rd_open_checks = getters(r.rd)
        self.wr_open_checks = getters(r.wr)
        self._setup_refresh()
        self.aad = tables.timing["tAAD"] if cfg.split_activate else 0
        self.act2 = None                  # (bank, deadline) of an ACT whose second cycle has not issued
        self.sync = cfg.data_clock_sync
        self.postamble = tables.timing.get("tWCKPST", 0)
        self.write_latency = tables.memory.part.write_latency_cycles
        self.clock_until = -1             # data_clock_sync: the data clock runs until this cycle
        self.forced = None                # (command, bank, request) due the cycle after its sync
        self.decision = None              # cached (t, cmd, k, request)
        self.last_done = -1

    # ---- refresh ----------------------------------------------------------
    def _setup_refresh(self):
        t, r, policy = self.t, self.t.roles, self.cfg.refresh
        self.blocked = [False] * t.banks
        self.units = []                   # [cmd, level, k, due, interval, banks, pending]
        if policy == "none":
            return
        cmd = r.ref if policy == "all_bank" else r.refpb
        if cmd is None:
            raise EngineError(f"refresh = {policy} needs a {'rank' if policy == 'all_bank' else 'bank'}-level "
                              "command with refresh = true", t.memory.span)
        interval = t.timing.get("tREFI")
        if not interval:
            raise EngineError("refresh needs tREFI in the part's timing", t.memory.span,
                              "add tREFI to the part's timing, or set refresh = none in the controller")
        level = t.target_level(cmd)
        n = t.count[level]
        for k in range(n):
            banks = list(t.descendants(level, k, BANK)) if level < BANK else [k]
            # staggered: unit k first falls due at (k + 1) / n of tREFI (DRAMsim3
            # RANK_LEVEL_STAGGERED, Ramulator AllBank scatter)
            self.units.append([cmd, level, k, (k + 1) * interval // n, interval, banks, False])
        self.next_due = min(u[3] for u in self.units)

    def _refresh_candidate(self, unit, now):
        """The next command of a pending refresh: close its open banks, then refresh."""
        cmd, level, k, _, _, banks, _ = unit
        st, open_row = self.state, self.open_row
        open_banks = [b for b in banks if open_row[b] >= 0]
        if not open_banks:
            return st.earliest(cmd, k, now), cmd, k
        # Ramulator 2: refresh waits until no activated request needs a row it would close
        active = self.active
        prea = self.t.roles.prea
        if (prea is not None and level < BANK and self.t.target_level(prea) == level
                and self.cfg.refresh_precharge == "all_bank"):
            if active and any(b in active for b in open_banks):
                return None
            return st.earliest(prea, k, now), prea, k
        best = None
        for b in open_banks:
            if b in active:
                continue
            t = st.earliest(self.PRE, b, now)
            if best is None or t < best[0]:
                best = (t, self.PRE, b)
        return best

    # ---- queues -----------------------------------------------------------
    def has_room(self, is_write: bool) -> bool:
        if self.per_bank:
            queued = len(self.staged_writes) if is_write else len(self.staged_reads)
        else:
            queued = self.n_writes if is_write else self.n_reads
        return queued < (self.cfg.write_queue_depth if is_write else self.cfg.read_queue_depth)

    def accept(self, req: int, now: int) -> None:
        log = self.log
        log.accepted[req] = now
        log.eligible[req] = now
        if self.per_bank:
            (self.staged_writes if log.is_write[req] else self.staged_reads).append(req)
        else:
            self._enqueue(req)
        self.decision = None

    def _enqueue(self, req: int) -> None:
        b = self.log.bank[req]
        if self.log.is_write[req]:
            self.n_writes += 1
            queues = self.cmdq if self.per_bank else self.writes
        else:
            self.n_reads += 1
            queues = self.cmdq if self.per_bank else self.reads
        queues.setdefault(b, []).append(req)

    def busy(self) -> bool:
        return bool(self.n_reads or self.n_writes or self.active or self.staged_reads
                    or self.staged_writes and not self._stranded())

    def _stranded(self) -> bool:
        """batch: only staged writes are left, too few to start a drain (they never issue)."""
        return (self.batch and not (self.n_reads or self.n_writes or self.staged_reads or self.draining)
                and not self._drain_starts())

    def _drain_starts(self) -> bool:
        """batch: does a drain start now (full write queue, or enough writes and idle command queues)?"""
        w = len(self.staged_writes)
        return not self.draining and (w >= self.cfg.write_drain_high * self.cfg.write_queue_depth or
                                      w > self.cfg.write_drain_idle and not (self.n_reads or self.n_writes))

    def _movable(self):
        """per_bank: the first staged request (of the drained queue) whose bank queue has room."""
        if self.batch:
            queue = self.staged_writes if self.draining or self._drain_starts() else self.staged_reads
        elif self.write_mode and self.staged_writes or not self.staged_reads:
            queue = self.staged_writes
        else:
            queue = self.staged_reads
        depth, in_bank, bank = self.cfg.command_queue_depth, self.in_bank, self.log.bank
        for i, req in enumerate(queue):
            if in_bank[bank[req]] < depth:
                return queue, i
        return None

    def next_event(self, now: int):
        """Cycle of this controller's next event (command, refresh timer or queue move)."""
        d = self.decide(now)
        t = d[0] if d is not None else None
        if self.per_bank and (t is None or t > now) and self._movable() is not None:
            t = now
        return t

    def step(self, t: int) -> None:
        """Do what happens in cycle t: the scheduled command, then (per_bank) one queue move."""
        d = self.decide(t)
        while d is not None and d[0] == t and d[1] is None:      # refresh timer
            self.issue(d)
            d = self.decide(t)
        if d is not None and d[0] == t:
            self.issue(d)
        if self.per_bank:
            found = self._movable()
            if found is not None:
                queue, i = found
                if self.batch and queue is self.staged_writes:
                    if not self.draining:
                        self.draining = len(queue)
                    self.draining -= 1
                req = queue.pop(i)
                self.log.eligible[req] = t + 1
                self.order[req] = self.moved
                self.moved += 1
                self.in_bank[self.log.bank[req]] += 1
                self._enqueue(req)
                self.decision = None

    # ---- scheduling ---------------------------------------------------------
    def decide(self, now: int):
        """(cycle, command, node, request or None) of the next issue, or None when idle.
        A command of None is a refresh timer: at that cycle a refresh falls due."""
        if self.decision is not None and self.decision[0] >= now:
            return self.decision
        if self.units and self.next_due <= now:
            self._refresh_falls_due(now)
        best = self._next_command(now)
        if self.units and self.next_due <= (best[0] if best else NEVER):
            # a refresh falls due before anything issues: wake then (it changes what may issue)
            best = (self.next_due, None, None, None)
        self.decision = best
        return best

    def _next_command(self, now):
        act2 = self.act2
        if act2 is not None and now >= act2[1]:          # an ACT-2 at its deadline goes first
            return (now, SECOND_HALF, act2[0], None)
        if self.forced is not None:                      # the column command after its sync
            cmd, b, req = self.forced
            return (self.state.earliest(cmd, b, now), cmd, b, req)
        best = self._best(now)
        if act2 is not None and (best is None or best[0] > now):     # an idle command cycle
            return (now, SECOND_HALF, act2[0], None)
        if (self.sync and best is not None and best[3] is not None and best[0] >= self.clock_until
                and best[1] not in (self.ACT, self.PRE)):
            if act2 is not None and act2[1] <= best[0] + 1:
                return (best[0], SECOND_HALF, act2[0], None)
            return (best[0], SYNC, best[2], best[3], best[1])
        return best

    def _refresh_falls_due(self, now):
        for u in self.units:
            if u[3] <= now and not u[6]:
                u[6] = True
                for b in u[5]:
                    self.blocked[b] = True
        self.next_due = min((u[3] for u in self.units if not u[6]), default=NEVER)

    def _best(self, now):
        # candidates are (cycle, class, order, command, node, request); the least wins. Class 0 is the
        # active buffer, 1 refresh, 2 the queues: Ramulator 2 picks a ready active request before the
        # priority (refresh) buffer before the read/write buffers; DRAMsim3 a ready refresh command first.
        best = None
        refreshing = False
        for u in self.units:
            if u[6]:
                refreshing = True
                c = self._refresh_candidate(u, now)
                if c is not None and (best is None or c[0] < best[0]):
                    best = (c[0], 1, 0, c[1], c[2], None)
        # write-drain mode (Ramulator 2 watermarks)
        cfg = self.cfg
        # per_bank: the drain is over once the buffered writes have moved on (DRAMsim3)
        n_writes = len(self.staged_writes) if self.per_bank else self.n_writes
        n_reads = len(self.staged_reads) + self.n_reads if self.per_bank else self.n_reads
        if self.write_mode:
            if n_writes <= cfg.write_drain_low * cfg.write_queue_depth and n_reads:
                self.write_mode = False
        elif n_writes and (n_writes >= cfg.write_drain_high * cfg.write_queue_depth or not n_reads):
            self.write_mode = True
        if self.per_bank:            # the command queues hold both, in the order they moved in
            best = self._best_of(self.cmdq, 2, now, best)
        else:
            best = self._best_of(self.active, 0, now, best)
            # Ramulator 2 schedules nothing from the read/write buffers while a refresh waits
            if not refreshing:
                best = self._best_of(self.writes if self.write_mode else self.reads, 2, now, best)
        if best is None:
            return None
        return (best[0], best[3], best[4], best[5])

    def _best_of(self, queues, cls, now, best):
        at = self.state.next_at
        row_of, is_write, order, accepted = self.log.row, self.log.is_write, self.order, self.log.accepted
        open_row, blocked, eligible, active = self.open_row, self.blocked, self.eligible, self.active
        mixed, any_miss = self.per_bank, self.any_miss
        if self.fcfs:
            # (a refresh never holds back the active buffer: it waits for it)
            oldest = min((q[0] for b, q in queues.items() if not (blocked[b] and cls)), default=None,
                         key=order.__getitem__)
            items = [(self.log.bank[oldest], [oldest])] if oldest is not None else []
        else:
            items = queues.items()
        for b, q in items:
            if blocked[b] and cls:
                continue
            orow = open_row[b]
            first = q[0]
            if orow < 0:
                if self.act2 is not None:        # no ACT before the previous one's second cycle
                    continue
                cands = ((self.ACT, first, self.act_checks[b]),)
            else:
                # the first queued hit of each kind; a PRE is for the bank's oldest request, or with
                # `precharge_for = any` for its oldest request to another row
                rd_hit = wr_hit = None
                miss = first if row_of[first] != orow else None
                for r in q:
                    if row_of[r] == orow:
                        if is_write[r]:
                            if wr_hit is None:
                                wr_hit = r
                        elif rd_hit is None:
                            rd_hit = r
                        if ((not mixed or rd_hit is not None and wr_hit is not None)
                                and (miss is not None or not any_miss)):
                            break
                    elif any_miss and miss is None:
                        miss = r
                        if (rd_hit is not None and wr_hit is not None
                                or not mixed and (rd_hit is not None or wr_hit is not None)):
                            break
                cands = [self._column(q, hit, orow, b) for hit in (rd_hit, wr_hit) if hit is not None]
                # its PRE: never while an activated request waits for the row (Ramulator 2); with
                # frfcfs_rowhit not while a hit waits (DRAMsim3: any queued hit; Ramulator 2: a hit that
                # arrived no later than the oldest request), unless `row_hit_cap` hits were served since
                # the ACT
                if miss is not None and b not in active and (
                        not cands or not self.rowhit or (self.cap and self.hits_since_act[b] >= self.cap)
                        or not mixed and accepted[cands[0][1]] > accepted[miss]):
                    cands.append((self.PRE, miss, self.pre_checks[b]))
            # ties: the oldest request, or (round_robin) the first bank after the last served
            ahead = (b - self.last_bank - 1 + self.t.banks) % self.t.banks * self.n_req if self.round_robin else 0
            for cmd, req, checks in cands:
                t = now if now >= eligible[req] else eligible[req]
                for idx in checks:
                    if at[idx] > t:
                        t = at[idx]
                o = ahead + order[req]
                if best is None or t < best[0] or t == best[0] and (cls < best[1] or cls == best[1]
                                                                      and o < best[2]):
                    best = (t, cls, o, cmd, b, req)
        return best

    def _column(self, q, hit, orow, b):
        """(command, request, checks) of the column access for a queued hit."""
        writing = self.log.is_write[hit]
        if self.RDA is not None and not self._more_hits(hit, orow, b):
            return (self.WRA, hit, self.wr_checks[b]) if writing else (self.RDA, hit, self.rd_checks[b])
        return (self.WR, hit, self.wr_open_checks[b]) if writing else (self.RD, hit, self.rd_open_checks[b])

    def _more_hits(self, hit, orow, b):
        """Closed page: does another queued request (any queue) hit this row?"""
        row_of = self.log.row
        for queues in (self.reads, self.writes, self.active, self.cmdq):
            for r in queues.get(b, ()):
                if r != hit and row_of[r] == orow:
                    return True
        return False

    def issue(self, decision) -> None:
        t, cmd, k, req = decision[:4]
        self.decision = None
        if cmd is None:                                   # a refresh timer
            self._refresh_falls_due(t)
            return
        if cmd == SECOND_HALF:
            self.act2 = None
            return
        if cmd == SYNC:
            self.forced = (decision[4], k, req)
            return
        self.state.issue(cmd, k, t)
        self.rows.issue(cmd, k, t)
        if self.record is not None:
            self.record.append((t, cmd, k, req))
        log = self.log
        if req is None:                                   # refresh sequence
            self._issued_refresh_step(cmd, k, t)
            return
        b = k
        self.last_bank = b
        if cmd == self.ACT:
            if self.aad:
                self.act2 = (b, t + self.aad)
            self.open_row[b] = log.row[req]
            self.hits_since_act[b] = 0
            if log.first_cmd[req] is None:
                log.first_cmd[req] = "miss"
            if not self.per_bank:
                # Ramulator 2: the request moves to the active buffer, freeing its read/write slot
                self._dequeue(req, b)
                self.active.setdefault(b, []).append(req)
            return
        if cmd == self.PRE:
            self.open_row[b] = -1
            if log.first_cmd[req] is None:
                log.first_cmd[req] = "conflict"
            return
        # a column command: the request leaves the controller
        self.forced = None
        if self.sync:
            end = t + (self.write_latency if log.is_write[req] else self.read_latency) + self.postamble
            if end > self.clock_until:
                self.clock_until = end
        if log.first_cmd[req] is None:
            log.first_cmd[req] = "hit"
        self.hits_since_act[b] += 1
        act = self.active.get(b)
        if act is not None and req in act:
            act.remove(req)
            if not act:
                del self.active[b]
        else:
            self._dequeue(req, b)
        done = t if log.is_write[req] else t + self.read_latency
        log.done[req] = done
        if done > self.last_done:
            self.last_done = done
        if cmd == self.RDA or cmd == self.WRA:
            self.open_row[b] = -1
        if self.per_bank:
            self.in_bank[b] -= 1

    def _dequeue(self, req, b):
        writing = self.log.is_write[req]
        queues = self.cmdq if self.per_bank else self.writes if writing else self.reads
        q = queues[b]
        q.remove(req)
        if not q:
            del queues[b]
        if writing:
            self.n_writes -= 1
        else:
            self.n_reads -= 1

    def _issued_refresh_step(self, cmd, k, t):
        roles = self.t.roles
        level = self.t.target_level(cmd)
        if cmd == self.PRE:
            self.open_row[k] = -1
            return
        banks = list(self.t.descendants(level, k, BANK)) if level < BANK else [k]
        if cmd == roles.prea:
            for b in banks:
                self.open_row[b] = -1
            return
        for u in self.units:                              # the refresh itself
            if u[6] and u[0] == cmd and u[2] == k:
                u[6] = False
                u[3] += u[4]
                for b in u[5]:
                    self.blocked[b] = False
                self.next_due = min(self.next_due, u[3])
                break
