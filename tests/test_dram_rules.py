"""Every timing rule and window of every bundled DRAM part, checked against an oracle.

For each rule and each (preceding, following) pair it names, the first command
issues at one address and the second is asked for as early as possible at an
address the rule covers (the same unit at its scope, or a sibling for `other`
rules), and at one it does not. The engine's answer must equal the oracle's:
the issue cycle plus the largest latency of all rules that relate the two
addresses (and the command bus), computed here directly from the rule rows by
comparing address prefixes, independently of the engine's node tables.
"""
from __future__ import annotations

import dataclasses
import glob
from types import SimpleNamespace

import numpy as np
import pytest

from pimdsl.frontend.pipeline import load_spec
from pimdsl.interpreter.dram.state import DeviceState
from pimdsl.interpreter.dram.tables import SCOPE_LEVEL, ChannelTables

from .conftest import ROOT, bundled_spec

T0 = 1000


def _bundled_parts():
    """(label, part, extra PIM unit or None) for every DRAM part and PIM memory in specs/."""
    seen, out = set(), []
    files = sorted(glob.glob(str(ROOT / "specs" / "dram" / "*.pim"))) + \
        sorted(glob.glob(str(ROOT / "specs" / "reference" / "*.pim"))) + \
        sorted(glob.glob(str(ROOT / "specs" / "hardware" / "*.pim")))
    for path in files:
        spec = bundled_spec(path)
        for part in spec.drams.values():
            if part.name not in seen and part.commands:
                seen.add(part.name)
                out.append((part.name, part, None))
        for memory in spec.memories.values():
            if memory.pim is not None and memory.pim.commands and memory.name not in seen:
                seen.add(memory.name)
                out.append((f"{memory.name}+{memory.pim.name}", memory.part, memory.pim))
    return out


PARTS = _bundled_parts()


def _tables(part, pim):
    # at least two units at every level, so that `other` rules can be exercised
    org = dataclasses.replace(part.organization, pseudo_channels=max(2, part.organization.pseudo_channels),
                              ranks=max(2, part.organization.ranks),
                              bank_groups=max(2, part.organization.bank_groups),
                              banks_per_group=max(4, part.organization.banks_per_group))
    memory = SimpleNamespace(name=part.name, organization=org, part=part)
    if pim is None:
        return ChannelTables(memory)
    return ChannelTables(memory, part.commands + pim.commands, part.rules + pim.rules, part.windows + pim.windows)


# ---- the oracle: addresses are (pseudo_channel, rank, bank_group, bank) tuples -------------
def _touched_prefix(level, addr):
    return addr[:level]


def _relates(rule, la, a, lb, b):
    """Does `rule` (scope, other) relate command levels/addresses (la, a) and (lb, b)?"""
    s = SCOPE_LEVEL[rule.scope]
    m = min(la, lb, s)
    if not rule.other:
        return a[:m] == b[:m]
    if la < s or lb < s:
        return False            # a rank-wide command has no single sibling unit (engine skips these)
    return a[:s] != b[:s] and a[:s - 1] == b[:s - 1]


def oracle_delay(tables, cmd_a, a, cmd_b, b):
    # a command id may be a variant (ChannelTables.variant): its command, with the value of the
    # argument its rules' latencies depend on
    value = tables.variant_args[cmd_a - tables.n_cmds][1] if cmd_a >= tables.n_cmds else None
    ca, cb = tables.commands[tables.base[cmd_a]], tables.commands[tables.base[cmd_b]]
    la, lb = SCOPE_LEVEL[ca.scope], SCOPE_LEVEL[cb.scope]
    delay = ca.bus_cycles if ca.bus == cb.bus else 0
    for rule in tables.rules:
        if ca.name in rule.preceding and cb.name in rule.following and _relates(rule, la, a, lb, b):
            delay = max(delay, rule.latency(value))
    return delay


def assert_keeps_every_rule(tables, events):
    """Every pair of one channel's issued commands `events` ((cycle, command id, address), any order) is
    at least the oracle's delay apart, and every window of `tables` holds.

    The oracle reads two addresses only through the length of the prefix they share (`_relates`
    compares prefixes), and never asks for more than the longest rule latency or bus occupancy: so it
    is asked once per (first command, second command, shared prefix) among the pairs closer than
    that, which are every pair that could break a rule, checked at once over arrays."""
    if not events:
        return
    events = sorted(events, key=lambda e: e[0])
    t = np.array([e[0] for e in events], dtype=np.int64)
    cmd = np.array([e[1] for e in events], dtype=np.int64)
    addr = np.array([e[2] for e in events], dtype=np.int64).reshape(len(events), 4)
    longest = max([c.bus_cycles for c in tables.commands] + [x for r in tables.rules for x in (r.cycles, *r.by_arg)])
    # the pairs (i, j), i < j, with t[j] - t[i] <= longest: event i's later neighbours up to `end[i]`
    end = np.searchsorted(t, t + longest, side="right")
    count = end - np.arange(len(t)) - 1
    first = np.repeat(np.arange(len(t)), count)
    second = first + 1 + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    shared = np.cumprod(addr[first] == addr[second], axis=1).sum(axis=1)
    key = (cmd[first] * (cmd.max() + 1) + cmd[second]) * 5 + shared
    kinds, inverse = np.unique(key, return_inverse=True)
    delays = np.array([oracle_delay(tables, *_pair_of_kind(int(k), cmd.max() + 1)) for k in kinds], dtype=np.int64)
    broken = np.flatnonzero(t[second] - t[first] < delays[inverse.reshape(-1)])
    assert broken.size == 0, [(tables.commands[tables.base[cmd[i]]].name, int(t[i]), tuple(addr[i]),
                               tables.commands[tables.base[cmd[j]]].name, int(t[j]), tuple(addr[j]))
                              for i, j in zip(first[broken[:3]], second[broken[:3]])]
    for w in tables.windows:
        units = {}
        for ti, c, a in events:
            if tables.commands[tables.base[c]].name in w.commands:
                units.setdefault(a[:SCOPE_LEVEL[w.scope]], []).append(ti)
        for times in units.values():
            assert all(b - a >= w.cycles for a, b in zip(times, times[w.count:])), (w.commands, w.cycles)


def _pair_of_kind(key, n):
    """(first command, an address, second command, an address sharing `shared` leading fields with it)."""
    pair, shared = divmod(key, 5)
    return pair // n, (0, 0, 0, 0), pair % n, tuple(1 if j == shared else 0 for j in range(4))


def _node(tables, cmd, addr):
    level = tables.target_level(cmd)
    f = tables.fanout
    flat = ((addr[0] * f[2] + addr[1]) * f[3] + addr[2]) * f[4] + addr[3]
    return tables.ancestor(4, flat, level)


def _engine_delay(tables, cmd_a, a, cmd_b, b):
    state = DeviceState(tables)
    state.issue(cmd_a, _node(tables, cmd_a, a), T0)
    return state.earliest(cmd_b, _node(tables, cmd_b, b), T0) - T0


def _address_pairs(scope_level, other):
    """(covered, not covered) second addresses for a rule at this scope, first at (0,0,0,0)."""
    a = (0, 0, 0, 0)
    if other:
        i = scope_level - 1
        covered = tuple(1 if j == i else 0 for j in range(4))
        uncovered = a
    else:
        # same unit at the scope, different below it
        covered = tuple(0 if j < scope_level else 1 for j in range(4))
        uncovered = tuple(1 if j == max(0, scope_level - 1) else 0 for j in range(4)) if scope_level > 0 else None
    return a, covered, uncovered


def _rule_cases():
    for label, part, pim in PARTS:
        rules = part.rules + (pim.rules if pim else ())
        for i, rule in enumerate(rules):
            yield pytest.param(label, part, pim, i, id=f"{label}-{i}-{rule.scope}-{'/'.join(rule.preceding)}>"
                               f"{'/'.join(rule.following)}")


@pytest.mark.parametrize("label,part,pim,index", list(_rule_cases()))
def test_rule_delays_the_second_command_by_its_latency(label, part, pim, index):
    tables = _tables(part, pim)
    rule = tables.rules[index]
    s = SCOPE_LEVEL[rule.scope]
    for pre in rule.preceding:
        for fol in rule.following:
            cmd_a, cmd_b = tables.index[pre], tables.index[fol]
            a, covered, uncovered = _address_pairs(s, rule.other)
            expected = oracle_delay(tables, cmd_a, a, cmd_b, covered)
            got = _engine_delay(tables, cmd_a, a, cmd_b, covered)
            assert got == expected, f"{pre} -> {fol}: engine {got}, oracle {expected}"
            assert got >= rule.cycles, f"{pre} -> {fol} waited {got} < {rule.cycles}"
            if uncovered is not None and (SCOPE_LEVEL[tables.commands[cmd_b].scope] >= s
                                          and SCOPE_LEVEL[tables.commands[cmd_a].scope] >= s):
                assert _engine_delay(tables, cmd_a, a, cmd_b, uncovered) == \
                    oracle_delay(tables, cmd_a, a, cmd_b, uncovered)


def _window_cases():
    for label, part, pim in PARTS:
        windows = part.windows + (pim.windows if pim else ())
        for i, w in enumerate(windows):
            yield pytest.param(label, part, pim, i, id=f"{label}-{w.count}{'/'.join(w.commands)}-in-{w.cycles}")


@pytest.mark.parametrize("label,part,pim,index", list(_window_cases()))
def test_window_holds(label, part, pim, index):
    tables = _tables(part, pim)
    w = tables.windows[index]
    cmd = tables.index[w.commands[0]]
    s = SCOPE_LEVEL[w.scope]
    level = tables.target_level(cmd)
    state = DeviceState(tables)
    # count + 1 commands of the window, each at another bank of one unit at its scope
    bgs, bpg = tables.fanout[3], tables.fanout[4]
    assert w.count + 1 <= bgs * bpg
    banks = [(0, 0, i % bgs, (i // bgs) % bpg) if level == 4 else (0, 0, 0, 0) for i in range(w.count + 1)]
    issued = []
    for addr in banks:
        earliest = state.earliest(cmd, _node(tables, cmd, addr), T0)
        expected = max([T0] + [t + oracle_delay(tables, cmd, x, cmd, addr) for t, x in issued])
        if len(issued) >= w.count:
            expected = max(expected, issued[-w.count][0] + w.cycles)
        assert earliest == expected, f"command {len(issued) + 1}: engine {earliest}, expected {expected}"
        state.issue(cmd, _node(tables, cmd, addr), earliest)
        issued.append((earliest, addr))
    last_gap = issued[-1][0] - issued[0][0]
    assert last_gap >= w.cycles, f"{w.count + 1} {w.commands[0]} within {last_gap} < {w.cycles} cycles"
    if s > 0:
        # a sibling unit at the window's scope is not held by it
        other = tuple(1 if j == s - 1 else 0 for j in range(4))
        t = state.earliest(cmd, _node(tables, cmd, other), T0)
        expected = max([T0] + [ti + oracle_delay(tables, cmd, x, cmd, other) for ti, x in issued])
        assert t == expected


def test_every_bundled_part_is_covered():
    names = {label for label, _, _ in PARTS}
    for expected in ("DDR4", "DDR5", "LPDDR4", "LPDDR5", "LPDDR5X", "HBM2", "HBM3",
                     "ddr4_3200_part", "hbm2_part", "lpddr4_2400_part", "lpddr5_6400_part"):
        assert expected in names
    assert sum(len(p.rules) for _, p, _ in PARTS) > 300


# ---- a rule latency that names its command's argument ------------------------------------------

def test_a_rule_latency_follows_the_commands_argument():
    from pimdsl.interpreter.dram.command_stream import CommandTimer
    from pimdsl.ir.commands import Command
    from pimdsl.frontend.pipeline import load_spec
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "neupims.pim"), [])
    assert spec is not None, diags.render_all()
    memory = spec.memories["neupims_hbm"]
    rule = next(r for r in memory.pim.rules if r.preceding == ("PIM_GEMV",) and r.following == ("PIM_GEMV",))
    # [REFDATA] pim README Sec. 2: 2 x (max(k, 6) + 1); 18 cycles for the reference's k = 8
    assert rule.arg == "k" and [rule.latency(k) for k in (0, 6, 8, 32)] == [14, 14, 18, 66]
    pim = memory.pim

    def gemvs(*ks):
        timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows)
        for rank in (0, 1):
            for g in range(4):
                timer.issue(Command("PIM_ACT", rank=rank, bank_group=g, row=3))
        return [timer.issue(Command("PIM_GEMV", row=3, timing_arg=k)) for k in ks]

    cycles = gemvs(8, 32, 8, 3)
    assert [b - a for a, b in zip(cycles, cycles[1:])] == [18, 66, 18]
    with pytest.raises(Exception, match="tabulated for k = 0 .. 512"):
        gemvs(8, 600)


def test_a_latency_table_that_names_a_parameter_follows_each_spec(tmp_path):
    """Tables of latencies of numbers and the argument alone are worked out once per process (the
    elaborator keeps them by the expression's shape and tCK); one that names a timing parameter is
    worked out for each spec, here the same rule under two values of tRTP in one process."""
    from pimdsl.frontend.pipeline import load_spec
    text = (ROOT / "specs" / "hardware" / "neupims.pim").read_text()
    rule = "PIM_GEMV -> PIM_GEMV = 2 cycles * (max(k, 6) + 1);"
    assert text.count(rule) == 1
    path = tmp_path / "neupims.pim"
    path.write_text(text.replace(rule, "PIM_GEMV -> PIM_GEMV = tRTP * (max(k, 6) + 1);")
                    .replace('import "../', f'import "{ROOT}/specs/').replace('import "gpus', f'import "{ROOT}/specs/hardware/gpus'))
    got = []
    for overrides in ([], ["NEUPIMS_HBM2.timing.tRTP=9 cycles"], []):
        spec, diags = load_spec(str(path), overrides)
        assert spec is not None, diags.render_all()
        gemv = next(r for r in spec.memories["neupims_hbm"].pim.rules
                    if r.preceding == ("PIM_GEMV",) and r.following == ("PIM_GEMV",))
        got.append([gemv.latency(k) for k in (0, 8)])
    assert got == [[35, 45], [63, 81], [35, 45]]          # tRTP = 5 cycles ([REFDATA]), then 9


def test_a_rule_latency_may_name_one_argument_only(tmp_path):
    from pimdsl.frontend.pipeline import load_spec
    spec_file = tmp_path / "two.pim"
    spec_file.write_text(
        'import "dram/hbm2.pim";\n'
        "pim_unit u {\n  placement = bank;\n"
        "  command G { scope = channel; row_buffer = pim; args = [k, n]; }\n"
        "  rules { rule channel: G -> G = 2 cycles * (k + n); }\n}\n")
    spec, diags = load_spec(str(spec_file), [])
    text = diags.render_all()
    assert "may depend on one argument of its preceding command, not k, n" in text and "two.pim:5:" in text


def test_a_rule_latency_undefined_at_some_values_is_an_error_only_where_used(tmp_path):
    from pimdsl.frontend.pipeline import load_spec
    spec_file = tmp_path / "div.pim"
    spec_file.write_text(
        'import "dram/hbm2.pim";\n'
        "pim_unit u {\n  placement = bank; dtype = fp16; simd_width = 256 bit;\n"
        "  command G { scope = channel; row_buffer = pim; args = [k]; }\n"
        "  rules { rule channel: G -> G = 100 cycles / k; }\n}\n")
    spec, diags = load_spec(str(spec_file), [])
    assert spec is not None and not diags.errors, diags.render_all()
    rule = spec.pim_units["u"].rules[0]
    assert [rule.latency(k) for k in (1, 2, 4)] == [100, 50, 25] and rule.cycles == 100
    for k in (0, 3):                       # division by zero; 33.3 cycles is not a whole number
        with pytest.raises(Exception, match=f"has no value for k = {k}"):
            rule.latency(k)
    # defined nowhere: the diagnostic of the first value, at the expression
    spec_file.write_text(spec_file.read_text().replace("100 cycles / k", "-1 cycles * (k + 1)"))
    spec, diags = load_spec(str(spec_file), [])
    assert "div.pim:5:" in diags.render_all() and "negative" in diags.render_all()


def test_the_pair_check_finds_a_command_issued_a_cycle_early():
    """assert_keeps_every_rule, which the replay tests hold their logs to, against hand-made logs:
    RD after ACT at the same bank, tRCD apart, passes; a cycle sooner, or a fifth ACT of one rank
    inside tFAW, fails."""
    part = next(p for label, p, pim in PARTS if label == "DDR4")
    tables = _tables(part, None)
    act, rd = tables.index["ACT"], tables.index["RD"]
    rcd = oracle_delay(tables, act, (0, 0, 0, 0), rd, (0, 0, 0, 0))
    assert rcd > 1
    assert_keeps_every_rule(tables, [(T0, act, (0, 0, 0, 0)), (T0 + rcd, rd, (0, 0, 0, 0))])
    assert_keeps_every_rule(tables, [(T0, act, (0, 0, 0, 0)), (T0 + rcd - 1, rd, (0, 1, 0, 0))])   # another rank
    with pytest.raises(AssertionError, match="'ACT', 1000"):
        assert_keeps_every_rule(tables, [(T0 + rcd - 1, rd, (0, 0, 0, 0)), (T0, act, (0, 0, 0, 0))])
    faw = next(w for w in tables.windows if "ACT" in w.commands)
    banks = [(0, 0, i % 2, i // 2) for i in range(faw.count + 1)]          # one rank, every ACT at another bank
    spaced = max(oracle_delay(tables, act, a, act, b) for a in banks for b in banks if a != b)
    acts = [(T0 + i * spaced, act, bank) for i, bank in enumerate(banks)]
    assert faw.count * spaced < faw.cycles
    with pytest.raises(AssertionError, match="ACT"):
        assert_keeps_every_rule(tables, acts)


@pytest.mark.parametrize("trtp,cycles", [("5 cycles", 5), ("9 cycles", 9), ("4 ns", 4), ("5 cycles", 5)])
def test_a_latency_of_the_argument_and_a_named_timing_follows_both(trtp, cycles):
    """The strict NeuPIMs unit's `PIM_GEMV -> PIM_PRECHARGE = 2 cycles * (max(k, 6) + 1) + tRTP`: its
    table (worked out once per process for each value of tRTP, frontend/elaborate_hardware.py) follows
    a tRTP set in cycles or in time (1 GHz), and comes back when tRTP does."""
    spec, diags = load_spec(str(ROOT / "specs" / "hardware" / "neupims.pim"),
                            ["memory.neupims_hbm.pim=neupims_pim_strict", f"NEUPIMS_HBM2.timing.tRTP={trtp}"])
    assert spec is not None, diags.render_all()
    (rule,) = [r for r in spec.memories["neupims_hbm"].pim.rules if r.arg and "PIM_PRECHARGE" in r.following]
    assert rule.arg == "k" and rule.by_arg[:9] == tuple(2 * (max(k, 6) + 1) + cycles for k in range(9))
    assert rule.by_arg[512] == 2 * 513 + cycles
