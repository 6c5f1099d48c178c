"""Ordered command streams on the compiled timing state: `CommandTimer`'s issue loop under numba.

`command_stream.CommandTimer` is the reference (readable, one `DeviceState` per
channel); `CompiledCommandTimer` issues whole runs of commands with the same
algorithm, step for step, over the arrays of `core.py` (`next_at`, the window
rings) and through its `_earliest` / `_state_issue`, so the timing rules exist
once. Python turns each run of `Command`s into arrays (a command's place is
looked up once per distinct place), one compiled call issues them all and
returns their cycles; a stream error ends the run at its command and Python
raises it with the reference's message. tests/test_stream_core.py holds the
two timers to identical cycles, refreshes and error positions.

Per channel (a slot, numbered in order of first use): `next_at[slot * n_at:]`,
the window rings, the open row of every bank in every row buffer, the command
and node that opened each bank's MEM row (refresh reopens it), the last issue
cycle and when each refresh unit falls due.
"""
from __future__ import annotations

import numpy as np

from ...aot import bind
from ...jit_cache import njit
from .core import T_SPAN, _earliest, _state_issue, checks, updates
from .tables import BANK

# per-command table columns
C_LEVEL, C_TWIN, C_BUF, C_OPENS, C_USES_ROW, C_CLOSES, C_ANNOUNCES, C_MEM_OPENER, N_C = range(9)
# parameters
Q_NAT, Q_NW, Q_REF, Q_PREA, Q_REF_LEVEL, Q_PREA_LEVEL, Q_TREFI, N_Q = range(8)
# scalars kept between runs
G_REFRESHES, G_MAX_ESTIMATE, G_NLOG, N_G = range(4)
# run results: the status, then the failing command's index and two details
OK, UNDECLARED, STRAY_ESTIMATE, OPEN_BANK, CLOSED_BANK = range(5)
# the rows of a row buffer no command has used yet on the channel (the reference has no list for it)
UNUSED = -2


@njit(cache=True)
def _refresh_before(T, Q, G, next_at, hist, hist_len, hist_head, issued, rows, opener, last, due, log,
                    s, bank, u, cycle, span, cmd, k):
    """Refresh unit `u` while it falls due by cycle + span (CommandTimer._refresh_before); the cycle
    the command may issue from, and the log (grown when full). Called only when one falls due (a
    call with the NRT's reference counts of some thirty arrays costs more than issuing a command)."""
    span_of = T[T_SPAN]
    ref, prea, tREFI = Q[Q_REF], Q[Q_PREA], Q[Q_TREFI]
    base, wbase = s * Q[Q_NAT], s * Q[Q_NW]
    b0 = u * span_of[Q[Q_REF_LEVEL]]
    b1 = b0 + span_of[Q[Q_REF_LEVEL]]
    reopen = np.empty((b1 - b0, 2), np.int64)
    while cycle + span >= due[s, u]:
        at = last[s]
        if not span and due[s, u] > at:
            at = due[s, u]
        pb = bank if b0 <= bank < b1 else b0
        n = 0
        for b in range(b0, b1):          # the distinct openers of the open rows, in bank order
            if rows[s, 0, b] >= 0:
                seen = False
                for j in range(n):
                    if reopen[j, 0] == opener[s, b, 0] and reopen[j, 1] == opener[s, b, 1]:
                        seen = True
                        break
                if not seen:
                    reopen[n, 0], reopen[n, 1] = opener[s, b, 0], opener[s, b, 1]
                    n += 1
        if n:
            pk = pb // span_of[Q[Q_PREA_LEVEL]]
            at = _earliest(checks(T), next_at, base, prea, pk, at)
            _state_issue(updates(T), next_at, base, hist, hist_len, hist_head, wbase, issued, s, prea, pk, at)
        at = _earliest(checks(T), next_at, base, ref, u, at)
        _state_issue(updates(T), next_at, base, hist, hist_len, hist_head, wbase, issued, s, ref, u, at)
        G[G_REFRESHES] += 1
        if G[G_NLOG] == log.shape[0]:
            grown = np.empty((2 * log.shape[0], 3), np.int64)
            grown[:log.shape[0]] = log
            log = grown
        log[G[G_NLOG], 0], log[G[G_NLOG], 1], log[G[G_NLOG], 2] = s, u, at
        G[G_NLOG] += 1
        for j in range(n):
            at = _earliest(checks(T), next_at, base, reopen[j, 0], reopen[j, 1], at)
            _state_issue(updates(T), next_at, base, hist, hist_len, hist_head, wbase, issued, s, reopen[j, 0],
                         reopen[j, 1], at)
        last[s] = at
        due[s, u] += tREFI
        cycle = _earliest(checks(T), next_at, base, cmd, k, at)
    return cycle, log


@njit(cache=True)
def issue_run(T, Q, C, places, code, row, estimate, G, next_at, hist, hist_len, hist_head, issued, rows, opener,
              last, due, log, cycles):
    """Issue commands 0.. of the run in order (CommandTimer.issue); `cycles[i]` their cycles.
    Returns (status, index, detail, detail, log): status OK when all issued, else the error of
    command `index`, before which every command has issued."""
    span_of = T[T_SPAN]
    n_at, n_w, ref_level = Q[Q_NAT], Q[Q_NW], Q[Q_REF_LEVEL]
    for i in range(code.shape[0]):
        p = code[i]
        if p < 0:
            return UNDECLARED, i, 0, 0, log
        s, cmd, k, bank = places[p, 0], places[p, 1], places[p, 2], places[p, 3]
        level = C[cmd, C_LEVEL]
        base = s * n_at
        buf = C[cmd, C_BUF]
        if rows[s, buf, 0] == UNUSED:
            rows[s, buf, :] = -1
        if Q[Q_REF] >= 0 and rows[s, 0, 0] == UNUSED:
            rows[s, 0, :] = -1
        cycle = _earliest(checks(T), next_at, base, cmd, k, last[s])
        twin = C[cmd, C_TWIN]
        if twin >= 0:                    # one row buffer: also wait as the other buffer's command would
            tl = C[twin, C_LEVEL]
            if level < tl:
                ratio = span_of[level] // span_of[tl]
                for node in range(k * ratio, (k + 1) * ratio):
                    cycle = _earliest(checks(T), next_at, base, twin, node, cycle)
            else:
                cycle = _earliest(checks(T), next_at, base, twin, bank // span_of[tl], cycle)
        span = estimate[i]
        if span and not C[cmd, C_ANNOUNCES]:
            return STRAY_ESTIMATE, i, 0, 0, log
        if Q[Q_REF] >= 0:
            if 0 < span < Q[Q_TREFI]:
                if span > G[G_MAX_ESTIMATE]:
                    G[G_MAX_ESTIMATE] = span
                ratio = span_of[level] // span_of[ref_level] if level < ref_level else 1
                u0 = k * ratio if level < ref_level else bank // span_of[ref_level]
            else:
                ratio, u0, span = 1, bank // span_of[ref_level], 0
            for u in range(u0, u0 + ratio):
                if cycle + span >= due[s, u]:
                    cycle, log = _refresh_before(T, Q, G, next_at, hist, hist_len, hist_head, issued, rows, opener,
                                                 last, due, log, s, bank, u, cycle, span, cmd, k)
        # open rows (CommandTimer._track_rows)
        b0 = bank if level == BANK else k * span_of[level]
        b1 = b0 + 1 if level == BANK else b0 + span_of[level]
        if C[cmd, C_OPENS]:
            for b in range(b0, b1):
                if rows[s, buf, b] >= 0:
                    return OPEN_BANK, i, b, rows[s, buf, b], log
                rows[s, buf, b] = row[i]
        elif C[cmd, C_USES_ROW]:
            for b in range(b0, b1):
                if rows[s, buf, b] < 0:
                    return CLOSED_BANK, i, b, 0, log
        if C[cmd, C_CLOSES]:
            for b in range(b0, b1):
                rows[s, buf, b] = -1
        if C[cmd, C_MEM_OPENER]:
            for b in range(b0, b1):
                opener[s, b, 0], opener[s, b, 1] = cmd, k
        _state_issue(updates(T), next_at, base, hist, hist_len, hist_head, s * n_w, issued, s, cmd, k, cycle)
        last[s] = cycle
        cycles[i] = cycle
    return OK, code.shape[0], 0, 0, log


bind(globals(), __file__)          # the kernels called from Python, from their ahead-of-time build (aot.py)
