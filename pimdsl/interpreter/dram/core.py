"""The DRAM engine's replay loop, compiled: the same controller as `dram/controller.py` over flat arrays.

`controller.ChannelController` with `memory_system._replay` is the reference
(readable, one object per channel); this module runs the same algorithm, step
for step, on numpy arrays under numba, so that a replay gives the identical
command log (tests/test_dram_core.py replays traces under every controller option
both ways). The timing state is `DeviceState`'s: `next_at[node * n_cmds + cmd]`,
raised by per-(command, node) update lists and checked by per-(command, node)
check lists, both taken from `ChannelTables` and flattened here into CSR arrays.

Queues are doubly linked lists threaded through the requests (a request is in
at most one queue at a time): per bank its read, write, active and command
queue, per channel its staged reads and writes. Scalars of a channel live in
one row of `cs`; what the loop keeps per request, per bank and per queue are rows
of one array each (`R`, `BS`, the scheduler's cache), because a call copies every
field of every array argument onto the stack, and with one array per quantity the
copying cost more than the work of the calls made for each command.

The scheduler's choice is kept incrementally rather than rescanned (`_best_cached`):
each bank queue's candidate commands (its ACT, first hits, PRE) are cached and
recomputed only when something happens at the bank (a request enters or leaves,
a command issues there, a refresh closes it: `_touch`); a cached issue cycle is
a lower bound, since next_at only rises, and is recomputed only when the bound
could beat the best candidate so far. A bitmask per channel and queue kind names the non-empty bank
queues; of those a decision visits only the ones whose least bound (`Q_LEAST`) is at most the best so far,
picked by one branch-free pass over the bounds (`_at_most`) rather than by a test per queue, and skips
one whose least bound and oldest candidate cannot beat the best so far (`Q_ORD`). The loop jumps from event to event (a
command, a refresh falling due, an arrival), as the reference does; fcfs, which
looks at one request, scans (`_best_oldest`).
"""
from __future__ import annotations

import math

import numpy as np

from ...aot import bind
from ...jit_cache import njit

from .controller import SECOND_HALF, SYNC
from .energy import RANK, effects
from .tables import BANK, ChannelTables

NEVER = 1 << 62
# Starting values of variables later reassigned, typed int64 rather than literal: numba types a call
# once per argument type it meets while inferring the caller, and a literal (0, NEVER, False) is a
# type of its own, so each would compile another copy of the callee (and of everything it calls).
NEVER64, ZERO64, ONE64 = np.int64(NEVER), np.int64(0), np.int64(1)
# An index known not to be negative, as numba tests every signed index for a negative one (and wraps it):
# a few instructions an access, which add up in the scheduler's inner loops
UI = np.uint64
TIMER = -1                            # a decision's command: a refresh falls due
RQ, WQ, AQ, CQ = 0, 1, 2, 3           # per-bank queues: reads, writes, active, command queue
# fields of a channel's row in `cs`
(N_READS, N_WRITES, N_ACTIVE, WRITE_MODE, NEXT_DUE, MOVED, LAST_DONE,
 D_VALID, D_T, D_CMD, D_K, D_REQ, D_AUX, ACT2_BANK, ACT2_DUE, CLOCK_UNTIL, F_CMD, F_K, F_REQ, DRAINING, LAST_BANK,
 N_CS) = range(22)
# and after them the scheduler's scratch: a bank's (at most three) candidate commands, then their requests
# (in the channel's row rather than an array of their own: one array argument fewer for _decide)
CAND_CMD, CAND_REQ = N_CS, N_CS + 3
# fields of `P` (parameters)
(P_ACT, P_PRE, P_RD, P_WR, P_RDA, P_WRA, P_PREA, P_NB, P_NCMDS, P_PER_BANK, P_FCFS, P_ROWHIT, P_CAP,
 P_RQ_DEPTH, P_WQ_DEPTH, P_CQ_DEPTH, P_RL, P_NU, P_NA, P_NW, P_ANY, P_AAD, P_SYNC, P_WL, P_POST, P_BATCH, P_IDLE,
 P_RR, P_LOW, P_HIGH, N_P) = range(31)
# columns of a channel's refresh units (`RF[c, u]`): the unit's own (`units[u]`: command, level, node, first due
# cycle, interval, banks b0 .. b1 - 1, PREA usable), then when it falls due next and whether it is pending;
# one array, as a call copies every array argument onto the stack
UF_CMD, UF_LEVEL, UF_K, UF_FIRST, UF_EVERY, UF_B0, UF_B1, UF_PREA, UF_DUE, UF_PENDING, N_UF = range(11)
# first-command codes
HIT, MISS, CONFLICT = 1, 2, 3
# rows of the per-request array `R` and of the per-bank array `BS` (one array each, as a call copies every
# array argument onto the stack): a request's queue links, eligible cycle, age, acceptance, completion,
# queue kind and, copied from the trace for the callees, its row, whether it writes and its bank; a bank's open row, hits since its ACT and whether a refresh holds it
R_NXT, R_PRV, R_ELIG, R_ORD, R_ACC, R_DONE, R_WHERE, R_ROW, R_WRITE, R_BANK, N_R = range(11)
BS_OPEN, BS_HITS, BS_BLOCKED, N_BS = range(4)
# rows of the scheduler's cache (_best_cached), a column per queue: its bank's candidates' count, commands,
# requests and lower bounds of their issue cycles, whether they are stale, the least bound, the oldest age
Q_N, Q_CMD, Q_REQ, Q_LB, Q_STALE, Q_LEAST, Q_ORD, N_Q = 0, 1, 4, 7, 10, 11, 12, 13


# the tables `build_tables` returns, in this order: the check lists are one array (`CHECKS`), the update and
# window lists another (`UPDATES`), as a call copies each array argument onto the stack field by field.
# CHECKS: per command where its (command, node) slots start, per slot where its checks start, then the checks
# (next_at indexes); each an absolute index into CHECKS, so that a lookup costs no more than in separate arrays
T_CHECKS, T_UPDATES, T_LEVEL, T_SPAN, N_T = range(5)
# segments of T_UPDATES, after a header of their offsets: per command its first slot's index into the U_PTR
# segment, per (command, node) slot its updates' and windows' ranges, then per update its next_at index and
# latency, per window its slot, count and cycles and its members' range, then the members
U_SLOT, U_PTR, U_IDX, U_LAT, W_PTR, W_SLOT, W_COUNT, W_CYCLES, M_PTR, M_IDX, N_U = range(11)


def build_tables(tables: ChannelTables):
    """Flat check / update / window lists for every command at every node of its level (`T_*`)."""
    n_cmds = tables.n_ids                       # the declared commands and their variants made so far
    slot_base = np.zeros(n_cmds + 1, np.int64)
    for c in range(n_cmds):
        slot_base[c + 1] = slot_base[c] + tables.count[tables.target_level(c)]
    chk_ptr, chk_idx = [0], []
    upd_ptr, upd_idx, upd_lat = [0], [], []
    win_ptr, win_slot, win_count, win_cycles, mem_ptr, mem_idx = [0], [], [], [], [0], []
    for c in range(n_cmds):
        for k in range(tables.count[tables.target_level(c)]):
            chk_idx += tables.checks(c, k)
            chk_ptr.append(len(chk_idx))
            pairs, windows = tables.updates(c, k)
            for idx, lat in pairs:
                upd_idx.append(idx)
                upd_lat.append(lat)
            upd_ptr.append(len(upd_idx))
            for slot, count, cycles, members in windows:
                win_slot.append(slot)
                win_count.append(count)
                win_cycles.append(cycles)
                mem_idx += members
                mem_ptr.append(len(mem_idx))
            win_ptr.append(len(win_slot))
    level = np.array([tables.target_level(c) for c in range(n_cmds)], np.int64)
    span = np.ones(BANK + 1, np.int64)          # banks under one node of each level
    for lv in range(BANK - 1, -1, -1):
        span[lv] = span[lv + 1] * tables.fanout[lv + 1]
    u_ptr_at = N_U + n_cmds + 1                 # where the U_PTR segment starts
    segments = ([u_ptr_at + s for s in slot_base], upd_ptr, upd_idx, upd_lat, win_ptr, win_slot, win_count,
                win_cycles, mem_ptr, mem_idx)
    updates, at = [], N_U
    for seg in segments:
        updates.append(at)
        at += len(seg)
    for seg in segments:
        updates += seg
    ptr_at = n_cmds + 1                         # CHECKS: slots from, checks from
    idx_at = ptr_at + len(chk_ptr)
    checks = [ptr_at + s for s in slot_base] + [idx_at + i for i in chk_ptr] + chk_idx
    arr = lambda x: np.asarray(x, np.int64)
    return arr(checks), arr(updates), level, span


# ---- timing state ---------------------------------------------------------------------------------

@njit(cache=True, inline="always", _nrt=False)
def checks(T):
    """The table `_earliest` reads (its `C`)."""
    return T[T_CHECKS]


@njit(cache=True, inline="always", _nrt=False)
def updates(T):
    """The table `_state_issue` reads (its `U`)."""
    return T[T_UPDATES]


@njit(cache=True, inline="always", _nrt=False)
def _earliest(C, next_at, base, cmd, k, t):
    s = UI(C[UI(cmd)] + k)
    first, end = C[s], C[s + ONE_BIT]
    if end - first == BANK + 1:         # a bank's command: its node and each one above, a loop of known length
        for i in range(BANK + 1):       # (which stays scalar and unrolled; vectorized, a short loop costs more)
            v = next_at[UI(base + C[UI(first + i)])]
            if v > t:
                t = v
        return t
    for i in range(first, end):
        v = next_at[UI(base + C[UI(i)])]
        if v > t:
            t = v
    return t


@njit(cache=True, _nrt=False)
def _state_issue(U, next_at, base, hist, hist_len, hist_head, wbase, issued, ch, cmd, k, t):
    # (unsigned indexes: no test for a negative one; a raise by max rather than a branch, as whether an
    # update raises is unpredictable; the window deques wrap by a compare, not a division)
    F = U
    upd_ptr = UI(F[UI(F[U_SLOT] + cmd)] + k)        # the slot's entry in the U_PTR segment
    upd_idx, upd_lat = UI(F[U_IDX]), UI(F[U_LAT])
    for i in range(UI(F[upd_ptr]), UI(F[upd_ptr + ONE_BIT])):
        j = UI(base + F[upd_idx + i])
        next_at[j] = max(next_at[j], t + F[upd_lat + i])
    win_ptr = upd_ptr + UI(F[W_PTR] - F[U_PTR])     # (the slot's entry in the W_PTR segment)
    win_slot, win_count, win_cycles, mem_ptr, mem_idx = (UI(F[W_SLOT]), UI(F[W_COUNT]), UI(F[W_CYCLES]),
                                                         UI(F[M_PTR]), UI(F[M_IDX]))
    for w in range(UI(F[win_ptr]), UI(F[win_ptr + ONE_BIT])):
        ws = UI(wbase + F[win_slot + w])
        count = F[win_count + w]
        n, h = hist_len[ws], hist_head[ws]
        if n < count:                       # a deque of the last `count` issue cycles
            at = h + n
            hist[ws, UI(at - count if at >= count else at)] = t
            n += 1
            hist_len[ws] = n
        else:
            hist[ws, UI(h)] = t
            h = 0 if h + 1 == count else h + 1
            hist_head[ws] = h
        if n == count:                      # the next member waits for the oldest + window
            v = hist[ws, UI(h)] + F[win_cycles + w]
            for i in range(UI(F[mem_ptr + w]), UI(F[mem_ptr + w + ONE_BIT])):
                j = UI(base + F[mem_idx + i])
                next_at[j] = max(next_at[j], v)
    issued[ch, cmd] += 1


# ---- linked-list queues -----------------------------------------------------------------------------

@njit(cache=True, _nrt=False)
def _push(head, tail, length, nxt, prv, q, r):
    t = tail[q]
    nxt[r] = -1
    prv[r] = t
    if t < 0:
        head[q] = r
    else:
        nxt[t] = r
    tail[q] = r
    length[q] += 1


@njit(cache=True, _nrt=False)
def _unlink(head, tail, length, nxt, prv, q, r):
    p, n = prv[r], nxt[r]
    if p < 0:
        head[q] = n
    else:
        nxt[p] = n
    if n < 0:
        tail[q] = p
    else:
        prv[n] = p
    length[q] -= 1


# Each channel's bank queues of one kind have a bitmask of the non-empty ones (words of 64 banks), so that
# the scheduler visits only those; a bit's index from the lowest set bit by de Bruijn's multiply.
DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
BIT_AT = np.zeros(64, np.int64)
for _i in range(64):
    BIT_AT[((1 << _i) * 0x03F79D71B4CB0A89 & (1 << 64) - 1) >> 58] = _i
ONE_BIT = np.uint64(1)


@njit(cache=True, inline="always", _nrt=False)
def _lowest_bit(m):
    return BIT_AT[((m & (~m + ONE_BIT)) * DE_BRUIJN) >> np.uint64(58)]


@njit(cache=True, _nrt=False)
def _bank_push(P, qhead, qtail, qlen, qmask, nxt, prv, c, kind, b, r):
    nb = P[P_NB]
    _push(qhead, qtail, qlen, nxt, prv, (c * 4 + kind) * nb + b, r)
    qmask[(c * 4 + kind) * ((nb + 63) // 64) + b // 64] |= ONE_BIT << np.uint64(b % 64)


@njit(cache=True, _nrt=False)
def _bank_unlink(P, qhead, qtail, qlen, qmask, nxt, prv, c, kind, b, r):
    nb = P[P_NB]
    q = (c * 4 + kind) * nb + b
    _unlink(qhead, qtail, qlen, nxt, prv, q, r)
    if qlen[q] == 0:
        qmask[(c * 4 + kind) * ((nb + 63) // 64) + b // 64] &= ~(ONE_BIT << np.uint64(b % 64))


# ---- the replay -------------------------------------------------------------------------------------

@njit(cache=True)
def replay_core(T, P, units, arrival, channel, is_write, bank, row, n_ch, record_cap, E, rows):
    """Replay; returns (status, accepted, done, first_cmd, issued, last_done, records, n_records).
    status 0: done; 1: the engine stalled; 2: the record buffer is full (retry with more room).
    `E` is each command's effect on open rows (energy.effects); `rows[ch, rank]` receives the open
    banks, the cycle the rank's first opened and the cycles it spent with a row open (_track_rows)."""
    n = arrival.shape[0]
    nb, n_cmds = P[P_NB], P[P_NCMDS]
    ACT, PRE, RD, WR, RDA, WRA, PREA = P[P_ACT], P[P_PRE], P[P_RD], P[P_WR], P[P_RDA], P[P_WRA], P[P_PREA]
    per_bank, fcfs, rowhit, cap = P[P_PER_BANK] != 0, P[P_FCFS] != 0, P[P_ROWHIT] != 0, P[P_CAP]
    level, span = T[T_LEVEL], T[T_SPAN]
    # a call copies each array argument onto the stack field by field, which with all fourteen tables costs
    # more than the callee's work: each callee gets the tables it reads (checks: _earliest; updates: _state_issue)
    C, U = checks(T), updates(T)
    n_units = P[P_NU]
    # units: cmd, level, k, first due, interval, bank0, bank1, prea usable (each channel its copy in RF: UF_*)
    R = np.full((N_R, n), -1, np.int64)
    nxt, prv, eligible, order, accepted, done, where = (R[R_NXT], R[R_PRV], R[R_ELIG], R[R_ORD], R[R_ACC], R[R_DONE],
                                                        R[R_WHERE])
    eligible[:] = 0
    order[:] = np.arange(n)
    R[R_ROW], R[R_WRITE], R[R_BANK] = row, is_write, bank
    accepted[:] = 0
    first_cmd = np.zeros(n, np.int8)
    nq = n_ch * 4 * nb
    qhead = np.full(nq, -1, np.int64)
    qtail = np.full(nq, -1, np.int64)
    qlen = np.zeros(nq, np.int64)
    shead = np.full(n_ch * 2, -1, np.int64)
    stail = np.full(n_ch * 2, -1, np.int64)
    slen = np.zeros(n_ch * 2, np.int64)
    BS = np.zeros((N_BS, n_ch, nb), np.int64)
    open_row, hits, blocked = BS[BS_OPEN], BS[BS_HITS], BS[BS_BLOCKED]
    open_row[:] = -1
    in_bank = np.zeros((n_ch, nb), np.int64)
    RF = np.zeros((n_ch, max(n_units, 1), N_UF), np.int64)
    cs = np.zeros((n_ch, CAND_REQ + 3), np.int64)
    n_at = P[P_NA]
    next_at = np.zeros(n_ch * n_at, np.int64)
    n_w = P[P_NW]
    maxc = 1
    F = T[T_UPDATES]
    for w in range(F[W_COUNT], F[W_CYCLES]):
        if F[w] > maxc:
            maxc = F[w]
    hist = np.zeros((n_ch * max(n_w, 1), maxc), np.int64)
    hist_len = np.zeros(n_ch * max(n_w, 1), np.int64)
    hist_head = np.zeros(n_ch * max(n_w, 1), np.int64)
    issued = np.zeros((n_ch, n_cmds), np.int64)
    bank_open = np.zeros((n_ch, nb), np.bool_)
    records = np.zeros((record_cap, 5), np.int64)
    n_rec = 0
    for c in range(n_ch):
        cs[c, LAST_DONE] = -1
        cs[c, ACT2_BANK] = -1
        cs[c, CLOCK_UNTIL] = -1
        cs[c, F_CMD] = -1
        cs[c, LAST_BANK] = -1
        nd = NEVER
        for u in range(n_units):
            RF[c, u, :UF_DUE] = units[u]
            RF[c, u, UF_DUE] = units[u, UF_FIRST]
            if RF[c, u, UF_DUE] < nd:
                nd = RF[c, u, UF_DUE]
        cs[c, NEXT_DUE] = nd
    times = np.zeros(n_ch, np.int64)
    # per queue, its bank's cached candidates (_best_cached); one array, as it is passed on every call
    qc = np.zeros((N_Q, nq), np.int64)
    qc[Q_STALE] = 1
    qmask = np.zeros(n_ch * 4 * ((nb + 63) // 64), np.uint64)
    cache = (qc, qmask)
    head = now = np.int64(0)          # typed, not literal (see NEVER64)
    while True:
        # 1. offer eligible requests in trace order
        while head < n and arrival[head] <= now:
            c = channel[head]
            if not _has_room(P, cs, slen, c, is_write[head]):
                break
            accepted[head] = now
            eligible[head] = now
            if per_bank:
                _push(shead, stail, slen, nxt, prv, c * 2 + (1 if is_write[head] else 0), head)
                where[head] = 4
            else:
                _enqueue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, bank, is_write, c, head)
                _touch(qc, nb, c, bank[head], bank[head] + 1)
            cs[c, D_VALID] = 0
            head += 1
        if head >= n:
            idle = True
            for c in range(n_ch):
                if (cs[c, N_READS] or cs[c, N_WRITES] or cs[c, N_ACTIVE] or slen[2 * c]
                        or slen[2 * c + 1] and not _stranded(P, cs, slen, c)):
                    idle = False
                    break
            if idle:
                break
        # 2. the next event
        t_next = NEVER64
        for c in range(n_ch):
            if not (cs[c, D_VALID] and cs[c, D_T] >= now):       # (_decide's own test, without the call)
                _decide(C, P, RF, cs, c, now, next_at, BS, qhead, qlen, slen, R, cache)
            t = cs[c, D_T] if cs[c, D_VALID] else NEVER
            if per_bank and (t == NEVER or t > now) and _movable(P, cs, shead, slen, nxt, in_bank, bank, c) >= 0:
                t = now
            times[c] = t
            if t < t_next:
                t_next = t
        if head < n and arrival[head] > now and _has_room(P, cs, slen, channel[head], is_write[head]):
            if arrival[head] <= t_next:
                now = arrival[head]
                continue
        if t_next == NEVER:
            return 1, accepted, done, first_cmd, issued, cs[:, LAST_DONE].copy(), records, n_rec
        # 3. every channel with an event in this cycle acts
        for c in range(n_ch):
            if times[c] != t_next:
                continue
            t = t_next
            for _ in range(1 << 30):
                if not (cs[c, D_VALID] and cs[c, D_T] >= t):
                    _decide(C, P, RF, cs, c, t, next_at, BS, qhead, qlen, slen, R, cache)
                if not (cs[c, D_VALID] and cs[c, D_T] == t and cs[c, D_CMD] == TIMER):
                    break
                cs[c, D_VALID] = 0                    # a refresh timer
                _falls_due(P, RF, cs, c, t, blocked)
            if cs[c, D_VALID] and cs[c, D_T] == t and cs[c, D_CMD] == SECOND_HALF:
                cs[c, D_VALID] = 0
                cs[c, ACT2_BANK] = -1
            elif cs[c, D_VALID] and cs[c, D_T] == t and cs[c, D_CMD] == SYNC:
                cs[c, D_VALID] = 0
                cs[c, F_CMD], cs[c, F_K], cs[c, F_REQ] = cs[c, D_AUX], cs[c, D_K], cs[c, D_REQ]
            elif cs[c, D_VALID] and cs[c, D_T] == t:
                cmd, k, req = cs[c, D_CMD], cs[c, D_K], cs[c, D_REQ]
                cs[c, D_VALID] = 0
                _state_issue(U, next_at, c * n_at, hist, hist_len, hist_head, c * n_w, issued, c, cmd, k, t)
                if E[cmd]:
                    _track_rows(E[cmd], span[level[cmd]], span[RANK], bank_open, rows, c, k, t)
                if n_rec >= record_cap:
                    if record_cap > 0:
                        return 2, accepted, done, first_cmd, issued, cs[:, LAST_DONE].copy(), records, n_rec
                else:
                    records[n_rec, 0] = t
                    records[n_rec, 1] = c
                    records[n_rec, 2] = cmd
                    records[n_rec, 3] = k
                    records[n_rec, 4] = req
                    n_rec += 1
                if req < 0:
                    _refresh_step(P, RF, cs, c, cmd, k, open_row, blocked, level, span)
                    _touch(qc, nb, c, k * span[level[cmd]], (k + 1) * span[level[cmd]])
                else:
                    _issued_request(P, cs, c, cmd, k, req, t, BS, first_cmd, R, in_bank, qhead, qtail,
                                    qlen, qmask)
                    _touch(qc, nb, c, k, k + 1)
            if per_bank:
                r = _movable(P, cs, shead, slen, nxt, in_bank, bank, c)
                if r >= 0:
                    if P[P_BATCH] and is_write[r]:
                        if not cs[c, DRAINING]:
                            cs[c, DRAINING] = slen[2 * c + 1]
                        cs[c, DRAINING] -= 1
                    _unlink(shead, stail, slen, nxt, prv, c * 2 + (1 if is_write[r] else 0), r)
                    eligible[r] = t + 1
                    order[r] = cs[c, MOVED]
                    cs[c, MOVED] += 1
                    in_bank[c, bank[r]] += 1
                    _enqueue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, bank, is_write, c, r)
                    _touch(qc, nb, c, bank[r], bank[r] + 1)
                    cs[c, D_VALID] = 0
        now = t_next + 1
    return 0, accepted, done, first_cmd, issued, cs[:, LAST_DONE].copy(), records, n_rec


@njit(cache=True, _nrt=False)
def _has_room(P, cs, slen, c, w):
    if P[P_PER_BANK]:
        queued = slen[2 * c + (1 if w else 0)]
    else:
        queued = cs[c, N_WRITES] if w else cs[c, N_READS]
    return queued < (P[P_WQ_DEPTH] if w else P[P_RQ_DEPTH])


@njit(cache=True, _nrt=False)
def _enqueue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, bank, is_write, c, r):
    nb = P[P_NB]
    if is_write[r]:
        cs[c, N_WRITES] += 1
        kind = CQ if P[P_PER_BANK] else WQ
    else:
        cs[c, N_READS] += 1
        kind = CQ if P[P_PER_BANK] else RQ
    _bank_push(P, qhead, qtail, qlen, qmask, nxt, prv, c, kind, bank[r], r)
    where[r] = kind


@njit(cache=True, _nrt=False)
def _dequeue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, is_write, c, b, r):
    kind = where[r]
    _bank_unlink(P, qhead, qtail, qlen, qmask, nxt, prv, c, kind, b, r)
    where[r] = -1
    if kind == AQ:
        cs[c, N_ACTIVE] -= 1
    elif is_write[r]:
        cs[c, N_WRITES] -= 1
    else:
        cs[c, N_READS] -= 1


@njit(cache=True, _nrt=False)
def _drain_starts(P, cs, slen, c):
    w = slen[2 * c + 1]
    return not cs[c, DRAINING] and (w >= P[P_HIGH] or w > P[P_IDLE] and not (cs[c, N_READS] or cs[c, N_WRITES]))


@njit(cache=True, _nrt=False)
def _stranded(P, cs, slen, c):
    """batch: only staged writes are left, too few to start a drain (they never issue)."""
    return (P[P_BATCH] and not (cs[c, N_READS] or cs[c, N_WRITES] or slen[2 * c] or cs[c, DRAINING])
            and not _drain_starts(P, cs, slen, c))


@njit(cache=True, _nrt=False)
def _movable(P, cs, shead, slen, nxt, in_bank, bank, c):
    """per_bank: the first staged request (of the drained queue) whose bank queue has room, or -1."""
    if P[P_BATCH]:
        r = shead[2 * c + 1] if cs[c, DRAINING] or _drain_starts(P, cs, slen, c) else shead[2 * c]
    elif cs[c, WRITE_MODE] and slen[2 * c + 1] or not slen[2 * c]:
        r = shead[2 * c + 1]
    else:
        r = shead[2 * c]
    depth = P[P_CQ_DEPTH]
    while r >= 0:
        if in_bank[c, bank[r]] < depth:
            return r
        r = nxt[r]
    return -1


@njit(cache=True, _nrt=False)
def _falls_due(P, RF, cs, c, now, blocked):
    nd = NEVER
    for u in range(P[P_NU]):
        unit = RF[c, u]
        if unit[UF_DUE] <= now and not unit[UF_PENDING]:
            unit[UF_PENDING] = 1
            for b in range(unit[UF_B0], unit[UF_B1]):
                blocked[c, b] = True
        if not unit[UF_PENDING] and unit[UF_DUE] < nd:
            nd = unit[UF_DUE]
    cs[c, NEXT_DUE] = nd


@njit(cache=True, _nrt=False)
def _decide(C, P, RF, cs, c, now, next_at, BS, qhead, qlen, slen, R, cache):
    """Leaves the channel's next issue in cs[c, D_*] (D_VALID 0 when idle; D_CMD -1 for a refresh timer)."""
    if cs[c, D_VALID] and cs[c, D_T] >= now:
        return
    open_row, hits, blocked = BS[BS_OPEN], BS[BS_HITS], BS[BS_BLOCKED]
    nxt, eligible, order, accepted = R[R_NXT], R[R_ELIG], R[R_ORD], R[R_ACC]
    row, is_write, bank = R[R_ROW], R[R_WRITE], R[R_BANK]
    n_units = P[P_NU]
    if n_units and cs[c, NEXT_DUE] <= now:
        _falls_due(P, RF, cs, c, now, blocked)
    base = c * P[P_NA]
    act2 = cs[c, ACT2_BANK]
    aux = -1
    if act2 >= 0 and now >= cs[c, ACT2_DUE]:          # an ACT-2 at its deadline goes first
        found, bt, bcmd, bk, breq = True, now, SECOND_HALF, act2, -1
    elif cs[c, F_CMD] >= 0:                            # the column command after its sync
        found, bcmd, bk, breq = True, cs[c, F_CMD], cs[c, F_K], cs[c, F_REQ]
        bt = _earliest(C, next_at, base, bcmd, bk, now)
    else:
        found, bt, bcmd, bk, breq = _best(C, P, RF, cs, c, now, next_at, open_row, hits, blocked, qhead, qlen,
                                          nxt, slen, eligible, order, accepted, row, is_write, bank, cache)
        if act2 >= 0 and (not found or bt > now):      # an idle command cycle
            found, bt, bcmd, bk, breq = True, now, SECOND_HALF, act2, -1
        elif (P[P_SYNC] and found and breq >= 0 and bt >= cs[c, CLOCK_UNTIL] and bcmd != P[P_ACT]
              and bcmd != P[P_PRE]):
            if act2 >= 0 and cs[c, ACT2_DUE] <= bt + 1:
                bcmd, bk, breq = SECOND_HALF, act2, -1
            else:
                aux, bcmd = bcmd, SYNC
    if n_units and cs[c, NEXT_DUE] <= (bt if found else NEVER):
        found = True
        bt, bcmd, bk, breq = cs[c, NEXT_DUE], TIMER, -1, -1
    if found:
        cs[c, D_VALID] = 1
        cs[c, D_T] = bt
        cs[c, D_CMD] = bcmd
        cs[c, D_K] = bk
        cs[c, D_REQ] = breq
        cs[c, D_AUX] = aux
    else:
        cs[c, D_VALID] = 0


@njit(cache=True, inline="always", _nrt=False)
def _best(C, P, RF, cs, c, now, next_at, open_row, hits, blocked, qhead, qlen, nxt, slen,
          eligible, order, accepted, row, is_write, bank, cache):
    """The queues' and refresh's next command: (found, t, cmd, k, req); updates the write-drain mode."""
    n_units = P[P_NU]
    base = c * P[P_NA]
    per_bank = P[P_PER_BANK] != 0
    no_act = cs[c, ACT2_BANK] >= 0
    # best candidate: (t, class, order, cmd, k, req)
    bt, bcls, bord, bcmd, bk, breq = NEVER64, ZERO64, ZERO64, -ONE64, -ONE64, -ONE64
    found = np.bool_(False)
    refreshing = False
    for u in range(n_units):
        if not RF[c, u, UF_PENDING]:
            continue
        refreshing = True
        ok, t, cmd, k = _refresh_candidate(C, P, RF, u, c, now, next_at, base, open_row, qlen)
        if ok and (not found or t < bt):
            found = True
            bt, bcls, bord, bcmd, bk, breq = t, 1, 0, cmd, k, -1
    # write-drain mode
    if per_bank:
        n_writes = slen[2 * c + 1]
        n_reads = slen[2 * c] + cs[c, N_READS]
    else:
        n_writes = cs[c, N_WRITES]
        n_reads = cs[c, N_READS]
    low, high = P[P_LOW], P[P_HIGH]
    if cs[c, WRITE_MODE]:
        if n_writes <= low and n_reads:
            cs[c, WRITE_MODE] = 0
    elif n_writes and (n_writes >= high or not n_reads):
        cs[c, WRITE_MODE] = 1
    kinds = (CQ, -1) if per_bank else (AQ, -1 if refreshing else (WQ if cs[c, WRITE_MODE] else RQ))
    if not P[P_FCFS]:
        found, bt, bcls, bord, bcmd, bk, breq = _best_cached(
            C, P, cs, c, kinds, now, next_at, base, open_row, hits, blocked, qhead, qlen, nxt, eligible, order,
            accepted, row, is_write, cache, no_act, found, bt, bcls, bord, bcmd, bk, breq)
        return found, bt, bcmd, bk, breq
    for kind in kinds:
        if kind < 0:
            continue
        cls = 0 if kind == AQ else 2
        found, bt, bcls, bord, bcmd, bk, breq = _best_oldest(
            C, P, cs, c, kind, cls, now, next_at, base, open_row, hits, blocked, qhead, qlen, nxt, eligible, order,
            accepted, row, is_write, bank, no_act, found, bt, bcls, bord, bcmd, bk, breq)
    return found, bt, bcmd, bk, breq


@njit(cache=True, _nrt=False)
def _refresh_candidate(C, P, RF, u, c, now, next_at, base, open_row, qlen):
    unit = RF[c, u]
    cmd, k, b0, b1, prea_ok = unit[UF_CMD], unit[UF_K], unit[UF_B0], unit[UF_B1], unit[UF_PREA]
    nb = P[P_NB]
    any_open = False
    any_active = False
    for b in range(b0, b1):
        if open_row[c, b] >= 0:
            any_open = True
            if qlen[(c * 4 + AQ) * nb + b] > 0:
                any_active = True
    if not any_open:
        return True, _earliest(C, next_at, base, cmd, k, now), cmd, k
    if prea_ok:
        if any_active:
            return False, 0, 0, 0
        return True, _earliest(C, next_at, base, P[P_PREA], k, now), P[P_PREA], k
    found = np.bool_(False)
    bt, bb = ZERO64, -ONE64
    for b in range(b0, b1):
        if open_row[c, b] < 0 or qlen[(c * 4 + AQ) * nb + b] > 0:
            continue
        t = _earliest(C, next_at, base, P[P_PRE], b, now)
        if not found or t < bt:
            found = True
            bt, bb = t, b
    return found, bt, P[P_PRE], bb


@njit(cache=True, _nrt=False)
def _best_oldest(C, P, cs, c, kind, cls, now, next_at, base, open_row, hits, blocked, qhead, qlen, nxt, eligible,
                 order, accepted, row, is_write, bank, no_act, found, bt, bcls, bord, bcmd, bk, breq):
    """fcfs: the candidates of the oldest queued request only."""
    nb = P[P_NB]
    only = -1
    for b in range(nb):
        q = (c * 4 + kind) * nb + b
        if qlen[q] and not (blocked[c, b] and cls):
            r = qhead[q]
            if only < 0 or order[r] < order[only]:
                only = r
    if only < 0:
        return found, bt, bcls, bord, bcmd, bk, breq
    b = bank[only]
    orow = open_row[c, b]
    if orow < 0 and no_act:             # no ACT before the previous one's second cycle
        return found, bt, bcls, bord, bcmd, bk, breq
    cand_cmd, cand_req = cs[c, CAND_CMD:CAND_CMD + 3], cs[c, CAND_REQ:CAND_REQ + 3]
    nc = _bank_cands(P, c, b, only, True, orow, qhead, qlen, nxt, hits, accepted, row, is_write, cand_cmd, cand_req)
    # ties: the oldest request, or (round_robin) the first bank after the last served
    ahead = (b - cs[c, LAST_BANK] - 1 + nb) % nb * P[P_RR] if P[P_RR] else 0
    for i in range(nc):
        req = cand_req[i]
        t = _earliest(C, next_at, base, cand_cmd[i], b, max(now, eligible[req]))
        o = ahead + order[req]
        if not found or t < bt or t == bt and (cls < bcls or cls == bcls and o < bord):
            found = True
            bt, bcls, bord, bcmd, bk, breq = t, cls, o, cand_cmd[i], b, req
    return found, bt, bcls, bord, bcmd, bk, breq


@njit(cache=True, inline="always", _nrt=False)
def _bank_cands(P, c, b, first, single, orow, qhead, qlen, nxt, hits, accepted, row, is_write, cand_cmd, cand_req):
    """A bank's candidate commands for its queue from `first` (only `first` when `single`) into
    cand_cmd / cand_req; returns how many: a closed bank's ACT, else the first queued hit of each
    kind and the PRE for its oldest miss (controller._best_of)."""
    nb = P[P_NB]
    mixed, any_miss = P[P_PER_BANK] != 0, P[P_ANY] != 0
    rowhit, cap = P[P_ROWHIT] != 0, P[P_CAP]
    if orow < 0:
        cand_cmd[0] = P[P_ACT]
        cand_req[0] = first
        return 1
    nc = 0
    rd_hit = wr_hit = -1
    miss = first if row[first] != orow else -1
    r = first
    while r >= 0:
        if row[r] == orow:
            if is_write[r]:
                if wr_hit < 0:
                    wr_hit = r
            elif rd_hit < 0:
                rd_hit = r
            if (not mixed or rd_hit >= 0 and wr_hit >= 0) and (miss >= 0 or not any_miss):
                break
        elif any_miss and miss < 0:
            miss = r
            if rd_hit >= 0 and wr_hit >= 0 or not mixed and (rd_hit >= 0 or wr_hit >= 0):
                break
        r = -1 if single else nxt[r]
    for hit in (rd_hit, wr_hit):
        if hit >= 0:
            cand_cmd[nc] = _column_cmd(P, c, hit, orow, b, qhead, nxt, row, is_write)
            cand_req[nc] = hit
            nc += 1
    if miss >= 0 and qlen[(c * 4 + AQ) * nb + b] == 0 and (
            nc == 0 or not rowhit or (cap and hits[c, b] >= cap)
            or not mixed and accepted[cand_req[0]] > accepted[miss]):
        cand_cmd[nc] = P[P_PRE]
        cand_req[nc] = miss
        nc += 1
    return nc


@njit(cache=True, inline="always", _nrt=False)
def _best_cached(C, P, cs, c, kinds, now, next_at, base, open_row, hits, blocked, qhead, qlen, nxt, eligible, order,
                 accepted, row, is_write, cache, no_act, found, bt, bcls, bord, bcmd, bk, breq):
    """`_best_of` over `kinds` from each bank's cached candidates, rather than rescanning queues and rules.
    `cache` holds per queue (a column of the Q_* rows) the candidates' count, commands, requests, a lower
    bound of each one's issue cycle, a stale flag, the least of the bounds and the oldest candidate's age,
    and per channel and kind the bitmask of non-empty queues. A bank's candidates change only when something happens at
    the bank (`_touch` marks it stale); their issue cycles only rise (next_at never falls), so a cached
    cycle is a lower bound, and a candidate's cycle is recomputed only when its bound would beat the best
    so far. The result does not depend on the order queues are visited in: every key (cycle, class,
    age) is distinct. Of ~21 non-empty queues (DDR4 random reads) only ~8 have a bound that low; visiting
    each of the others only to skip it cost a mispredicted branch apiece."""
    qc, qmask = cache
    nb = P[P_NB]
    act, rr, last = P[P_ACT], P[P_RR], cs[c, LAST_BANK]
    cand_cmd, cand_req = cs[c, CAND_CMD:CAND_CMD + 3], cs[c, CAND_REQ:CAND_REQ + 3]
    words = (nb + 63) // 64
    for kind in kinds:
        if kind < 0:
            continue
        cls = 0 if kind == AQ else 2
        if found and bt <= now and bcls < cls:  # every candidate issues at `now` or later: none of these can win
            continue
        q0 = (c * 4 + kind) * nb
        for w in range(words):
          live = qmask[(c * 4 + kind) * words + w]   # the non-empty queues not visited yet
          qw, nw = q0 + w * 64, min(64, nb - w * 64)
          thr = bt if found else now
          while live:
            # Visit only the queues whose least bound is at most the best so far (or `now` before anything is
            # found; a stale queue's bound is 0): any other cannot win, and as the best only improves, one
            # left out stays out. Before anything is found, the queues of the least bound go first.
            m = _at_most(qc, qw, nw, thr) & live
            if not m:
                if found:
                    break
                thr = _least(qc, qw, live)
                m = _at_most(qc, qw, nw, thr) & live
            live &= ~m
            while m:
              b = w * 64 + _lowest_bit(m)
              m &= m - ONE_BIT
              q = UI(q0 + b)
              if blocked[c, b] and cls:
                  continue
              # ties: the oldest request, or (round_robin) the first bank after the last served
              ahead = (b - last - 1 + nb) % nb * rr if rr else 0
              if qc[Q_STALE, q]:
                  n = _bank_cands(P, c, b, qhead[q], False, open_row[c, b], qhead, qlen, nxt, hits, accepted, row,
                                  is_write, cand_cmd, cand_req)
                  oldest = NEVER64
                  for i in range(n):
                      qc[Q_CMD + i, q], qc[Q_REQ + i, q], qc[Q_LB + i, q] = cand_cmd[i], cand_req[i], 0
                      oldest = min(oldest, order[cand_req[i]])
                  qc[Q_N, q] = n
                  qc[Q_ORD, q] = oldest
                  qc[Q_STALE, q] = 0
              elif found:                   # the least of its bounds and ages cannot win: no candidate can
                  t = max(now, qc[Q_LEAST, q])
                  if t > bt or t == bt and (cls > bcls or cls == bcls and ahead + qc[Q_ORD, q] > bord):
                      continue
              least = NEVER64
              for i in range(qc[Q_N, q]):
                  cmd = qc[UI(Q_CMD + i), q]
                  if no_act and cmd == act:     # no ACT before the previous one's second cycle
                      least = min(least, qc[UI(Q_LB + i), q])
                      continue
                  req = qc[UI(Q_REQ + i), q]
                  t = max(now, qc[UI(Q_LB + i), q])
                  o = ahead + order[UI(req)]
                  if found and not (t < bt or t == bt and (cls < bcls or cls == bcls and o < bord)):
                      least = min(least, qc[UI(Q_LB + i), q])
                      continue                  # its bound cannot win
                  t = _earliest(C, next_at, base, cmd, b, max(t, eligible[UI(req)]))
                  qc[UI(Q_LB + i), q] = t
                  least = min(least, t)
                  if not found or t < bt or t == bt and (cls < bcls or cls == bcls and o < bord):
                      found = True
                      bt, bcls, bord, bcmd, bk, breq = t, cls, o, cmd, b, req
              qc[Q_LEAST, q] = least
            if found and bt <= thr:         # the queues left have bounds above `thr`: none can win
                break
            thr = bt if found else now
    return found, bt, bcls, bord, bcmd, bk, breq


@njit(cache=True, inline="always", _nrt=False)
def _at_most(qc, q0, n, thr):
    """A bitmask of the queues q0 .. q0 + n - 1 whose least bound is at most `thr`. Two bits go in a step, by
    constant shifts: a bit shifted in per queue makes each step wait for the one before, and a shift per queue
    by its index gets the loop vectorized, which for the generic x86-64 of the ahead-of-time build (no 64-bit
    compares, no per-lane shifts) ran many times slower."""
    least = qc[Q_LEAST]
    m = np.uint64(0)
    i = n
    if i % 2:                           # (unsigned indexes: no test for a negative one)
        i -= 1
        m = np.uint64(least[UI(q0 + i)] <= thr)
    while i:
        i -= 2
        q = UI(q0 + i)
        m = (m << np.uint64(2)) | (np.uint64(least[q + ONE_BIT] <= thr) << ONE_BIT | np.uint64(least[q] <= thr))
    return m


@njit(cache=True, inline="always", _nrt=False)
def _least(qc, q0, live):
    """The least bound among the queues q0 + i of the bits i set in `live`."""
    lo = NEVER64
    while live:
        lo = min(lo, qc[Q_LEAST, q0 + _lowest_bit(live)])
        live &= live - ONE_BIT
    return lo

@njit(cache=True, inline="always", _nrt=False)     # (a few stores: less than the call)
def _touch(qc, nb, c, b0, b1):
    """Banks b0 .. b1 - 1 changed (a queue, the open row, the hit count): their cached candidates are stale."""
    for kind in range(4):
        for b in range(b0, b1):
            qc[Q_STALE, (c * 4 + kind) * nb + b] = 1
            qc[Q_LEAST, (c * 4 + kind) * nb + b] = 0     # (so that a decision visits it: _at_most)


@njit(cache=True, _nrt=False)
def _column_cmd(P, c, hit, orow, b, qhead, nxt, row, is_write):
    """The column command for a queued hit: RDA/WRA (closed page) unless another queued request hits."""
    writing = is_write[hit]
    if P[P_RDA] >= 0:
        nb = P[P_NB]
        more = False
        for kind in range(4):
            r = qhead[(c * 4 + kind) * nb + b]
            while r >= 0:
                if r != hit and row[r] == orow:
                    more = True
                    break
                r = nxt[r]
            if more:
                break
        if not more:
            return P[P_WRA] if writing else P[P_RDA]
    return P[P_WR] if writing else P[P_RD]


@njit(cache=True, _nrt=False)
def _issued_request(P, cs, c, cmd, b, req, t, BS, first_cmd, R, in_bank, qhead, qtail, qlen, qmask):
    open_row, hits = BS[BS_OPEN], BS[BS_HITS]
    nxt, prv, done, where = R[R_NXT], R[R_PRV], R[R_DONE], R[R_WHERE]
    row, is_write = R[R_ROW], R[R_WRITE]
    cs[c, LAST_BANK] = b
    if cmd == P[P_ACT]:
        if P[P_AAD]:
            cs[c, ACT2_BANK] = b
            cs[c, ACT2_DUE] = t + P[P_AAD]
        open_row[c, b] = row[req]
        hits[c, b] = 0
        if first_cmd[req] == 0:
            first_cmd[req] = MISS
        if not P[P_PER_BANK]:       # into the active buffer, freeing its read/write slot
            _dequeue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, is_write, c, b, req)
            _bank_push(P, qhead, qtail, qlen, qmask, nxt, prv, c, AQ, b, req)
            where[req] = AQ
            cs[c, N_ACTIVE] += 1
        return
    if cmd == P[P_PRE]:
        open_row[c, b] = -1
        if first_cmd[req] == 0:
            first_cmd[req] = CONFLICT
        return
    if first_cmd[req] == 0:
        first_cmd[req] = HIT
    cs[c, F_CMD] = -1
    if P[P_SYNC]:
        end = t + (P[P_WL] if is_write[req] else P[P_RL]) + P[P_POST]
        if end > cs[c, CLOCK_UNTIL]:
            cs[c, CLOCK_UNTIL] = end
    hits[c, b] += 1
    _dequeue(P, cs, qhead, qtail, qlen, qmask, nxt, prv, where, is_write, c, b, req)
    d = t if is_write[req] else t + P[P_RL]
    done[req] = d
    if d > cs[c, LAST_DONE]:
        cs[c, LAST_DONE] = d
    if cmd == P[P_RDA] or cmd == P[P_WRA]:
        open_row[c, b] = -1
    if P[P_PER_BANK]:
        in_bank[c, b] -= 1


@njit(cache=True, _nrt=False)
def _track_rows(effect, width, per_rank, bank_open, rows, c, k, t):
    """energy.RowActivity.issue over arrays: banks k * width .. open (effect > 0) or close."""
    opening = effect > 0
    for b in range(k * width, (k + 1) * width):
        if bank_open[c, b] == opening:
            continue
        bank_open[c, b] = opening
        r = b // per_rank
        if opening:
            if rows[c, r, 0] == 0:
                rows[c, r, 1] = t
            rows[c, r, 0] += 1
        else:
            rows[c, r, 0] -= 1
            if rows[c, r, 0] == 0:
                rows[c, r, 2] += t - rows[c, r, 1]


@njit(cache=True, _nrt=False)
def _refresh_step(P, RF, cs, c, cmd, k, open_row, blocked, level, span):
    if cmd == P[P_PRE]:
        open_row[c, k] = -1
        return
    lv = level[cmd]
    b0, b1 = k * span[lv], (k + 1) * span[lv]
    if cmd == P[P_PREA]:
        for b in range(b0, b1):
            open_row[c, b] = -1
        return
    for u in range(P[P_NU]):
        unit = RF[c, u]
        if unit[UF_PENDING] and unit[UF_CMD] == cmd and unit[UF_K] == k:
            unit[UF_PENDING] = 0
            unit[UF_DUE] += unit[UF_EVERY]
            for b in range(unit[UF_B0], unit[UF_B1]):
                blocked[c, b] = False
            if unit[UF_DUE] < cs[c, NEXT_DUE]:
                cs[c, NEXT_DUE] = unit[UF_DUE]
            break


bind(globals(), __file__)          # replay_core from its ahead-of-time build when current (aot.py)


# ---- the Python side ------------------------------------------------------------------------------

def run(tables: ChannelTables, arrival, channel, is_write, bank, row, n_ch: int, record: bool):
    """Replay with the compiled core: (accepted, done, first_cmd, issued[ch, cmd], last_done[ch],
    records [(cycle, channel, cmd, node, request)] or None, rows[ch, rank] as `_track_rows` leaves it)."""
    from .controller import ChannelController, RequestLog
    probe = ChannelController(tables, RequestLog([0], [0], [False]))    # the options, as the reference reads them
    cfg = probe.cfg
    T = build_tables(tables)
    P = np.zeros(N_P, np.int64)
    neg = lambda x: -1 if x is None else x
    P[P_ACT], P[P_PRE], P[P_RD], P[P_WR] = probe.ACT, probe.PRE, probe.RD, probe.WR
    P[P_RDA], P[P_WRA], P[P_PREA] = neg(probe.RDA), neg(probe.WRA), neg(tables.roles.prea)
    P[P_NB], P[P_NCMDS] = tables.banks, tables.n_cmds
    P[P_PER_BANK], P[P_FCFS], P[P_ROWHIT], P[P_CAP] = probe.per_bank, probe.fcfs, probe.rowhit, probe.cap
    P[P_RQ_DEPTH], P[P_WQ_DEPTH], P[P_CQ_DEPTH] = cfg.read_queue_depth, cfg.write_queue_depth, cfg.command_queue_depth
    P[P_RL] = tables.read_latency
    P[P_NA] = tables.n_nodes * tables.n_cmds
    P[P_NW] = len(tables.window_slots)
    P[P_ANY], P[P_AAD], P[P_SYNC] = probe.any_miss, probe.aad, probe.sync
    P[P_WL], P[P_POST] = probe.write_latency, probe.postamble
    P[P_BATCH], P[P_IDLE] = probe.batch, cfg.write_drain_idle
    P[P_RR] = len(arrival) + 1 if probe.round_robin else 0     # bank distance weighs over any age
    # the drain thresholds as the reference computes them; it compares a count with them, and for a whole
    # count n <= x is n <= floor(x), n >= x is n >= ceil(x)
    P[P_LOW] = math.floor(cfg.write_drain_low * cfg.write_queue_depth)
    P[P_HIGH] = math.ceil(cfg.write_drain_high * cfg.write_queue_depth)
    prea = tables.roles.prea
    units = np.zeros((max(len(probe.units), 1), 8), np.int64)
    for u, (cmd, level, k, first_due, interval, banks, _) in enumerate(probe.units):
        prea_ok = (prea is not None and level < BANK and tables.target_level(prea) == level
                   and cfg.refresh_precharge == "all_bank")
        units[u] = (cmd, level, k, first_due, interval, banks[0], banks[-1] + 1, prea_ok)
    P[P_NU] = len(probe.units)
    args = [np.ascontiguousarray(a, np.int64) for a in (arrival, channel, bank, row)]
    w = np.ascontiguousarray(is_write, np.bool_)
    cap = 4 * len(arrival) + 1024 if record else 0
    E = np.asarray(effects(tables), np.int64)
    while True:
        rows = np.zeros((n_ch, tables.count[RANK], 3), np.int64)
        status, accepted, done, first_cmd, issued, last_done, records, n_rec = replay_core(
            T, P, units, args[0], args[1], w, args[2], args[3], n_ch, cap, E, rows)
        if status != 2:
            break
        cap *= 2
    if status == 1:
        raise RuntimeError("the DRAM engine stalled with requests outstanding")
    return accepted, done, first_cmd, issued, last_done, records[:n_rec] if record else None, rows
