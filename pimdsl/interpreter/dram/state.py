"""The timing state of one DRAM channel: when each command may next issue where.

`DeviceState` is the exact, rule-by-rule core shared by the request
controller (`controller.py`) and ordered command streams
(`command_stream`). It knows nothing about queues or policies: `earliest`
answers "when may this command issue at this node", `issue` records that it
did and raises every constraint the spec's rules and windows attach to it.
"""
from __future__ import annotations

from collections import deque

from .tables import ChannelTables


class DeviceState:
    def __init__(self, tables: ChannelTables):
        self.tables = tables
        self.next_at = [0] * (tables.n_nodes * tables.n_cmds)
        self.window_history = [deque() for _ in range(len(tables.window_slots))]
        self.issued = [0] * tables.n_cmds          # command counts

    def earliest(self, cmd: int, k: int, now: int = 0) -> int:
        """First cycle >= now at which `cmd` may issue at node k of its level."""
        at = self.next_at
        t = now
        for idx in self.tables.checks(cmd, k):
            if at[idx] > t:
                t = at[idx]
        return t

    def issue(self, cmd: int, k: int, t: int) -> None:
        """Record `cmd` issued at node k (of its level) in cycle t."""
        at = self.next_at
        pairs, windows = self.tables.updates(cmd, k)
        for idx, latency in pairs:
            v = t + latency
            if v > at[idx]:
                at[idx] = v
        for slot, count, cycles, members in windows:
            hist = self.window_history[slot]
            hist.append(t)
            if len(hist) > count:
                hist.popleft()
            if len(hist) == count:             # the next member waits for the oldest + window
                v = hist[0] + cycles
                for idx in members:
                    if v > at[idx]:
                        at[idx] = v
        self.issued[self.tables.base[cmd]] += 1
