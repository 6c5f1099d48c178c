"""A memory's timing rules compiled into flat lookup tables for the DRAM engine.

The engine keeps, for every node of one channel's hierarchy (the channel,
its pseudo-channels, ranks, bank groups and banks) and every command, the
earliest cycle at which that command may next issue there: `next_at[node *
n_commands + command]`. Issuing a command raises entries by the spec's rules;
checking a command takes the maximum over the entries it is subject to. Both
lists of entries are precomputed here, once per (command, node), so the hot
loop only indexes lists. Nothing here knows a command by name: the roles the
controller needs (activate, precharge, read, write, refresh) come from what
each command declares (opens, closes, reads, writes, refresh, scope).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.errors import PimdslError
from ...ir.hardware import LEVELS, CommandDecl, Memory, TimingRule, TimingWindow

# Command scopes that name a level of the hierarchy; all_banks acts on a rank.
SCOPE_LEVEL = {"channel": 0, "pseudo_channel": 1, "rank": 2, "all_banks": 2, "parity_banks": 2,
               "bank_group": 3, "bank": 4, "bank_pair": 4}
BANK = len(LEVELS) - 1


class EngineError(PimdslError):
    """The memory cannot be simulated as specified (a role without a command)."""


@dataclass(frozen=True)
class Roles:
    """Which declared command plays each part of a memory access (indices)."""
    act: int
    pre: int
    prea: int | None
    rd: int
    wr: int
    rda: int | None
    wra: int | None
    ref: int | None
    refpb: int | None


def find_roles(commands: tuple[CommandDecl, ...]) -> Roles:
    def pick(test):
        for i, c in enumerate(commands):
            if c.row_buffer != "pim" and test(c):
                return i
        return None

    bank_level = lambda c: SCOPE_LEVEL.get(c.scope) == BANK
    roles = dict(
        act=pick(lambda c: c.opens and bank_level(c)),
        pre=pick(lambda c: c.closes and bank_level(c) and not c.reads and not c.writes and not c.refresh),
        prea=pick(lambda c: c.closes and not bank_level(c) and not c.refresh and not c.reads),
        rd=pick(lambda c: "row" in c.reads and not c.closes),
        wr=pick(lambda c: "row" in c.writes and not c.closes),
        rda=pick(lambda c: "row" in c.reads and c.closes),
        wra=pick(lambda c: "row" in c.writes and c.closes),
        ref=pick(lambda c: c.refresh and not bank_level(c)),
        refpb=pick(lambda c: c.refresh and bank_level(c)),
    )
    missing = [k for k in ("act", "pre", "rd", "wr") if roles[k] is None]
    if missing:
        raise EngineError("the DRAM engine needs commands that " + ", ".join(
            {"act": "open a row (opens = true, scope = bank)", "pre": "close a bank (closes = true, scope = bank)",
             "rd": "read a row (reads = [row])", "wr": "write a row (writes = [row])"}[m] for m in missing))
    return Roles(**roles)


class ChannelTables:
    """Node numbering and precomputed update/check lists for one channel of `memory`.

    `commands`, `rules` and `windows` default to the DRAM part's; a PIM unit's
    are appended by the caller that needs them (command streams).
    """

    def __init__(self, memory: Memory, commands=None, rules=None, windows=None):
        org = memory.organization
        part = memory.part
        self.memory = memory
        self.commands: tuple[CommandDecl, ...] = tuple(commands if commands is not None else part.commands)
        self.rules: tuple[TimingRule, ...] = tuple(rules if rules is not None else part.rules)
        self.windows: tuple[TimingWindow, ...] = tuple(windows if windows is not None else part.windows)
        self.index = {c.name: i for i, c in enumerate(self.commands)}
        self.n_cmds = len(self.commands)
        # fan-out of each level below its parent
        self.fanout = (1, org.pseudo_channels, org.ranks, org.bank_groups, org.banks_per_group)
        self.count = []            # nodes per level
        n = 1
        for f in self.fanout:
            n *= f
            self.count.append(n)
        self.first = []            # id of a level's first node
        total = 0
        for c in self.count:
            self.first.append(total)
            total += c
        self.n_nodes = total
        self.banks = self.count[BANK]
        self.banks_per_rank = org.bank_groups * org.banks_per_group
        try:
            self.roles = find_roles(self.commands)
        except EngineError as exc:               # a part without the commands: point at the memory
            raise EngineError(exc.message, memory.span) from None
        self.timing = part.timing_cycles
        self.read_latency = part.read_latency_cycles
        # rules by preceding command; windows by member command
        self._rules_after = [[r for r in self.rules if c.name in r.preceding] for c in self.commands]
        # Commands whose rules' latencies depend on one of their arguments (`TimingRule.arg`) issue as
        # *variants*, one id per (command, value) from n_cmds on: a variant raises the constraints of
        # its value's latencies and is bound by its command's (next_at keeps one entry per command).
        self.arg_dependent = [any(r.arg for r in after) for after in self._rules_after]
        self.base = list(range(self.n_cmds))          # id -> its declared command
        self.variant_args: list[tuple[int, int]] = []  # id - n_cmds -> (command, value)
        self._variant_ids: dict[tuple[int, int], int] = {}
        self._windows_of = [[(w_i, w) for w_i, w in enumerate(self.windows) if c.name in w.commands]
                            for c in self.commands]
        self._update_cache: dict[tuple[int, int], tuple] = {}
        self._check_cache: dict[tuple[int, int], tuple[int, ...]] = {}
        # window instances: one per (window, node at its scope level)
        self.window_slots = {}
        for w_i, w in enumerate(self.windows):
            level = SCOPE_LEVEL[w.scope]
            for k in range(self.count[level]):
                self.window_slots[(w_i, k)] = len(self.window_slots)
        self.bank_chains = [self.chain(BANK, b) for b in range(self.banks)]

    # ---- hierarchy --------------------------------------------------------
    def node(self, level: int, k: int) -> int:
        return self.first[level] + k

    def ancestor(self, level: int, k: int, up_to: int) -> int:
        """Index (within its level) of the ancestor at level `up_to` of node (level, k)."""
        for lv in range(level, up_to, -1):
            k //= self.fanout[lv]
        return k

    def chain(self, level: int, k: int) -> tuple[int, ...]:
        """Node ids of (level, k) and its ancestors, outermost first."""
        return tuple(self.node(lv, self.ancestor(level, k, lv)) for lv in range(level + 1))

    def descendants(self, level: int, k: int, at: int) -> range:
        """Indices (within level `at`) of the descendants of (level, k)."""
        span = 1
        for lv in range(level + 1, at + 1):
            span *= self.fanout[lv]
        return range(k * span, (k + 1) * span)

    def siblings(self, level: int, k: int) -> list[int]:
        parent = self.ancestor(level, k, level - 1) if level > 0 else 0
        kids = self.descendants(level - 1, parent, level) if level > 0 else range(1)
        return [j for j in kids if j != k]

    def target_level(self, cmd: int) -> int:
        return SCOPE_LEVEL[self.commands[self.base[cmd]].scope]

    @property
    def n_ids(self) -> int:
        """Command ids so far: the declared commands, then the variants made."""
        return len(self.base)

    def variant(self, cmd: int, value: int) -> int:
        """The id of `cmd` issued with `value` for the argument its rules depend on (`cmd` itself
        when none does)."""
        if not self.arg_dependent[cmd]:
            return cmd
        key = (cmd, value)
        uid = self._variant_ids.get(key)
        if uid is None:
            for rule in self._rules_after[cmd]:
                rule.latency(value)               # a value beyond the rule's table is an error now
            uid = self._variant_ids[key] = len(self.base)
            self.base.append(cmd)
            self.variant_args.append(key)
        return uid

    # ---- precomputed lists -------------------------------------------------
    def updates(self, cmd: int, k: int) -> tuple:
        """(next_at index, latency) pairs raised when `cmd` issues at node (its level, k),
        plus the window slots it enters: ((idx, lat), ...), ((slot, count, cycles, idxs), ...)."""
        key = (cmd, k)
        hit = self._update_cache.get(key)
        if hit is not None:
            return hit
        level = self.target_level(cmd)
        n = self.n_cmds
        value = self.variant_args[cmd - n][1] if cmd >= n else None
        cmd = self.base[cmd]
        pairs: dict[int, int] = {}

        def raise_at(node_id: int, following, latency: int):
            for f in following:
                idx = node_id * n + f
                if pairs.get(idx, -1) < latency:
                    pairs[idx] = latency

        for rule in self._rules_after[cmd]:
            scope = SCOPE_LEVEL[rule.scope]
            following = [self.index[f] for f in rule.following if f in self.index]
            if scope <= level:
                own = self.ancestor(level, k, scope)
                targets = self.siblings(scope, own) if rule.other else [own]
            else:                              # a rank-wide command constrains each bank below it
                targets = [] if rule.other else list(self.descendants(level, k, scope))
            latency = rule.latency(value)
            for t in targets:
                raise_at(self.node(scope, t), following, latency)
        # the command bus: one command at a time on each bus of the channel
        me = self.commands[cmd]
        same_bus = [i for i, c in enumerate(self.commands) if c.bus == me.bus]
        raise_at(self.node(0, 0), same_bus, me.bus_cycles)
        windows = []
        for w_i, w in self._windows_of[cmd]:
            scope = SCOPE_LEVEL[w.scope]
            own = self.ancestor(level, k, scope) if scope <= level else 0
            members = [self.node(scope, own) * n + self.index[c] for c in w.commands if c in self.index]
            windows.append((self.window_slots[(w_i, own)], w.count, w.cycles, tuple(members)))
        out = (tuple(pairs.items()), tuple(windows))
        self._update_cache[key] = out
        return out

    def checks(self, cmd: int, k: int) -> tuple[int, ...]:
        """next_at indices that bound `cmd` issued at node (its level, k)."""
        key = (cmd, k)
        hit = self._check_cache.get(key)
        if hit is not None:
            return hit
        level = self.target_level(cmd)
        nodes = list(self.chain(level, k))
        for below in range(level + 1, len(LEVELS)):
            nodes += [self.node(below, j) for j in self.descendants(level, k, below)]
        out = tuple(node * self.n_cmds + self.base[cmd] for node in nodes)
        self._check_cache[key] = out
        return out

    def bank_checks(self, cmd: int) -> list[tuple[int, ...]]:
        """checks(cmd, b) for every bank (bank-level commands)."""
        return [self.checks(cmd, b) for b in range(self.banks)]
