"""One channel's memory controller: request queues, FR-FCFS, page policy, refresh.

Event-driven rather than ticked: `decide(now)` finds the first cycle >= now
at which any command can issue and the command the scheduler picks there.
This equals a cycle-by-cycle controller because readiness only changes when a
command issues, a request arrives or a refresh falls due, and each of those
is an event here (a decision is recomputed after each).

Policies, all from the spec's `controller` block (defaults as DRAMsim3 and
Ramulator 2 ship them):
  * scheduler `fcfs` (only the oldest request), `frfcfs` (Ramulator 2
    FRFCFS: the first ready command wins, ties go to the oldest request; a
    ready PRE for an older request may close a row that younger requests hit),
    `frfcfs_rowhit` (as frfcfs, but no PRE while requests hit the open row,
    unless `row_hit_cap` hits were served since its ACT; DRAMsim3's rule,
    cap 4; cap 0 means never, as Ramulator's FRFCFS-RowHit).
  * read and write queues of bounded depth; writes drain once the write
    queue holds `write_drain_high` x depth or no read waits, and stop at
    `write_drain_low` x depth when reads wait (Ramulator 2: 0.8 / 0.2;
    DRAMsim3 drains a full buffer to empty: 1.0 / 0).
  * page policy `open`, or `closed` (RDA/WRA when no queued request hits
    the row).
  * queue structure `transaction` (Ramulator 2: requests are scheduled from
    the read and write queues, whose depth bounds what the controller sees) or
    `per_bank` (DRAMsim3: one request per cycle moves on from the read or write
    queue into its bank's command queue of `command_queue_depth`, freeing its
    queue entry; the scheduler sees the command queues, from the next cycle).
  * refresh `none`, `all_bank` (each rank or pseudo-channel every tREFI,
    staggered; its banks are closed, then REF; other ranks go on), or
    `per_bank` (each bank every tREFI, staggered by tREFI / banks).
"""
from __future__ import annotations

from .dram_state import DeviceState
from .dram_tables import BANK, ChannelTables, EngineError

NEVER = 1 << 62


class RequestLog:
    """Per-request facts of one replay, indexed by request number."""

    def __init__(self, bank, row, is_write):
        n = len(bank)
        self.bank, self.row, self.is_write = bank, row, is_write
        self.accepted = [0] * n
        self.done = [-1] * n            # read: data returned; write: WR issued
        self.eligible = [0] * n         # first cycle the scheduler may act on it
        self.first_cmd = [None] * n     # "hit", "miss" (bank closed) or "conflict"


class ChannelController:
    def __init__(self, tables: ChannelTables, log: RequestLog, record: list | None = None):
        self.t = tables
        self.record = record              # when a list: (cycle, command, node, request) of every issue
        self.log = log
        self.state = DeviceState(tables)
        cfg = tables.memory.controller
        self.cfg = cfg
        r = tables.roles
        self.ACT, self.PRE, self.RD, self.WR = r.act, r.pre, r.rd, r.wr
        closed = cfg.page_policy == "closed"
        self.RDA = r.rda if closed and r.rda is not None else None
        self.WRA = r.wra if closed and r.wra is not None else None
        if closed and (r.rda is None or r.wra is None):
            raise EngineError("closed-page policy needs RDA/WRA commands (reads/writes = [row], closes = true)")
        self.read_latency = tables.read_latency
        nb = tables.banks
        self.open_row = [-1] * nb
        self.hits_since_act = [0] * nb
        self.reads: dict[int, list[int]] = {}     # bank -> queued read requests, oldest first
        self.writes: dict[int, list[int]] = {}
        self.n_reads = self.n_writes = 0          # requests the scheduler sees
        self.write_mode = False
        self.per_bank = cfg.queue_structure == "per_bank"
        self.staged_reads: list[int] = []         # per_bank: waiting for a command-queue slot
        self.staged_writes: list[int] = []
        self.in_bank = [0] * nb                   # per_bank: command-queue occupancy
        self.eligible = log.eligible
        self.rowhit = cfg.scheduler == "frfcfs_rowhit"
        self.fcfs = cfg.scheduler == "fcfs"
        self.cap = cfg.row_hit_cap if self.rowhit else 0
        # per bank, the next_at entries that bound each command there
        getters = tables.bank_checks
        self.act_checks = getters(r.act)
        self.pre_checks = getters(r.pre)
        self.rd_checks = getters(self.RDA if self.RDA is not None else r.rd)
        self.wr_checks = getters(self.WRA if self.WRA is not None else r.wr)
        self.rd_open_checks = getters(r.rd)
        self.wr_open_checks = getters(r.wr)
        self._setup_refresh()
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
                              "command with refresh = true")
        interval = t.timing.get("tREFI")
        if not interval:
            raise EngineError("refresh needs tREFI in the part's timing")
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
        prea = self.t.roles.prea
        if prea is not None and level < BANK and self.t.target_level(prea) == level:
            return st.earliest(prea, k, now), prea, k
        best = None
        for b in open_banks:
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
            self.writes.setdefault(b, []).append(req)
            self.n_writes += 1
        else:
            self.reads.setdefault(b, []).append(req)
            self.n_reads += 1

    def busy(self) -> bool:
        return bool(self.n_reads or self.n_writes or self.staged_reads or self.staged_writes)

    def _movable(self):
        """per_bank: the first staged request (of the drained queue) whose bank queue has room."""
        if self.write_mode and self.staged_writes or not self.staged_reads:
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

    def step(self, t: int) -> bool:
        """Do what happens in cycle t: the scheduled command, then (per_bank) one queue move.
        True when a request left a queue (the harness may offer again)."""
        freed = False
        d = self.decide(t)
        while d is not None and d[0] == t and d[1] is None:      # refresh timer
            self.issue(d)
            d = self.decide(t)
        if d is not None and d[0] == t:
            freed = self.issue(d) and not self.per_bank
        if self.per_bank:
            found = self._movable()
            if found is not None:
                queue, i = found
                req = queue.pop(i)
                self.log.eligible[req] = t + 1
                self.in_bank[self.log.bank[req]] += 1
                self._enqueue(req)
                self.decision = None
                freed = True
        return freed

    # ---- scheduling ---------------------------------------------------------
    def decide(self, now: int):
        """(cycle, command, node, request or None) of the next issue, or None when idle.
        A command of None is a refresh timer: at that cycle a refresh falls due."""
        if self.decision is not None and self.decision[0] >= now:
            return self.decision
        if self.units and self.next_due <= now:
            self._refresh_falls_due(now)
        best = self._best(now)
        if self.units and self.next_due <= (best[0] if best else NEVER):
            # a refresh falls due before anything issues: wake then (it changes what may issue)
            best = (self.next_due, None, None, None)
        self.decision = best
        return best

    def _refresh_falls_due(self, now):
        for u in self.units:
            if u[3] <= now and not u[6]:
                u[6] = True
                for b in u[5]:
                    self.blocked[b] = True
        self.next_due = min((u[3] for u in self.units if not u[6]), default=NEVER)

    def _best(self, now):
        best = None
        for u in self.units:
            if u[6]:
                t, cmd, k = self._refresh_candidate(u, now)
                if best is None or t < best[0]:
                    best = (t, -1, cmd, k, None)
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
        reads = (self.reads, self.rd_checks, self.RDA if self.RDA is not None else self.RD)
        writes = (self.writes, self.wr_checks, self.WRA if self.WRA is not None else self.WR)
        if self.per_bank:            # the command queues hold both; the move order drained writes
            best = self._best_of(*reads, False, now, best)
            best = self._best_of(*writes, True, now, best)
        else:
            best = self._best_of(*(writes if self.write_mode else reads), self.write_mode, now, best)
        if best is None:
            return None
        return (best[0], best[2], best[3], best[4])

    def _best_of(self, queues, col_checks, col_cmd, writing, now, best):
        at = self.state.next_at
        row_of = self.log.row
        open_row, blocked, eligible = self.open_row, self.blocked, self.eligible
        if self.fcfs:
            oldest = min((q[0] for b, q in queues.items() if not blocked[b]), default=None)
            items = [(self.log.bank[oldest], [oldest])] if oldest is not None else []
        else:
            items = queues.items()
        for b, q in items:
            if blocked[b]:
                continue
            orow = open_row[b]
            first = q[0]
            if orow < 0:
                cands = ((self.ACT, first, self.act_checks[b]),)
            else:
                hit = None
                if row_of[first] == orow:
                    hit = first
                else:
                    for r in q:
                        if row_of[r] == orow:
                            hit = r
                            break
                if hit is None:
                    cands = ((self.PRE, first, self.pre_checks[b]),)
                else:
                    cmd, checks = col_cmd, col_checks[b]
                    if self.RDA is not None and self._more_hits(q, hit, orow, b):
                        cmd = self.WR if writing else self.RD
                        checks = (self.wr_open_checks if writing else self.rd_open_checks)[b]
                    if hit == first or (self.rowhit and (self.cap == 0 or self.hits_since_act[b] < self.cap)):
                        cands = ((cmd, hit, checks),)
                    else:       # an older request waits for another row: its PRE competes
                        cands = ((cmd, hit, checks), (self.PRE, first, self.pre_checks[b]))
            for cmd, req, checks in cands:
                t = now if now >= eligible[req] else eligible[req]
                for idx in checks:
                    if at[idx] > t:
                        t = at[idx]
                if best is None or t < best[0] or (t == best[0] and req < best[1]):
                    best = (t, req, cmd, b, req)
        return best

    def _more_hits(self, q, hit, orow, b):
        """Closed page: does another queued request (either queue) hit this row?"""
        row_of = self.log.row
        for queue in (self.reads.get(b, ()), self.writes.get(b, ())):
            for r in queue:
                if r != hit and row_of[r] == orow:
                    return True
        return False

    def issue(self, decision) -> bool:
        """Issue a decision; True when a request left the scheduler's queues."""
        t, cmd, k, req = decision
        self.decision = None
        if cmd is None:                                   # a refresh timer
            self._refresh_falls_due(t)
            return False
        self.state.issue(cmd, k, t)
        if self.record is not None:
            self.record.append((t, cmd, k, req))
        log = self.log
        if req is None:                                   # refresh sequence
            self._issued_refresh_step(cmd, k, t)
            return False
        b = k
        if cmd == self.ACT:
            self.open_row[b] = log.row[req]
            self.hits_since_act[b] = 0
            if log.first_cmd[req] is None:
                log.first_cmd[req] = "miss"
            return False
        if cmd == self.PRE:
            self.open_row[b] = -1
            if log.first_cmd[req] is None:
                log.first_cmd[req] = "conflict"
            return False
        # a column command: the request leaves the queue
        if log.first_cmd[req] is None:
            log.first_cmd[req] = "hit"
        self.hits_since_act[b] += 1
        if log.is_write[req]:
            q = self.writes[b]
            self.n_writes -= 1
            done = t
        else:
            q = self.reads[b]
            self.n_reads -= 1
            done = t + self.read_latency
        q.remove(req)
        if not q:
            del (self.writes if log.is_write[req] else self.reads)[b]
        log.done[req] = done
        if done > self.last_done:
            self.last_done = done
        if cmd == self.RDA or cmd == self.WRA:
            self.open_row[b] = -1
        if self.per_bank:
            self.in_bank[b] -= 1
        return True

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
