"""Elaboration of hardware blocks: dram, memory, pim_unit, cpu/gpu/npu, link.

Each builder reads its block through a Reader (which is its schema), computes
the derived numbers once and runs the block's semantic checks.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..ir import units as U
from ..ir.hardware import (ADDRESS_FIELDS, LEVELS, Cache, CommandDecl, Collective, Controller, DramPower,
                           DramSpec, KernelCalibration, Link, Storage,
                           Memory, Organization, PimUnit, Processor, Region, RegisterFile,
                           TimingRule, TimingWindow)
from ..ir.units import Quantity
from ..ir.pim_program import EFFECTS
from .diagnostics import SpecError, Span, did_you_mean
from .elaborate_program import check_program_commands, programs
from .nodes import Node
from .evaluate import _NOT_FOUND as _UNBOUND
from .reader import Reader, is_power_of_two, log2_int
from .syntax import BinOp, Call, ListExpr, Neg, Num, Ref

FAMILIES = ("ddr3", "ddr4", "ddr5", "lpddr4", "lpddr5", "lpddr5x", "hbm2", "hbm3", "gddr6")
DTYPES = ("fp32", "fp16", "bf16", "int8", "int4", "fp8")
DTYPE_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "int8": 8, "int4": 4, "fp8": 8}
PLACEMENTS = ("bank", "bank_pair", "bank_group", "rank", "buffer_chip", "pseudo_channel", "channel")
COMMAND_SCOPES = LEVELS + ("bank_pair", "all_banks", "parity_banks")
RULE_SCOPES = LEVELS + ("bank_pair",)
# A channel's command buses: one shared bus, or HBM's separate row and column buses.
COMMAND_BUSES = ("command", "row", "column")
# A rule latency that depends on a command argument is tabulated for its values 0 .. ARG_VALUES - 1.
ARG_VALUES = 513
# Those tables of latencies written with plain and cycle numbers, the argument and named values, by the
# expression's shape, the names' values and tCK: the same in every spec that writes them, worked out once per process
# (the 513 evaluations were most of elaborating a PIM unit, again for every spec a sweep or test loads).
_BY_ARG: dict[tuple, tuple[int, ...]] = {}
# The longest interval of a DRAM timing table: every row is refreshed within the refresh window,
# 64 ms ([JESD79-4] tREFW; 32 ms above 85 C), so a longer timing value is a typo or a unit mistake
# (and simulating it would replay that long an idle stretch, refresh by refresh).
LONGEST_TIMING_S = 64e-3
# Timing parameters the engine itself reads (beyond those that rules name).
# A DRAM part's `power` block: supply voltages and per-device currents by their datasheet names. The
# energy model (interpreter/dram/energy.py) needs VDD and the IDD currents of REQUIRED_CURRENTS; a
# VPP domain counts when VPP and its IPP currents are declared; power-down and self-refresh currents
# are data for controllers that use those states.
VOLTAGES = ("VDD", "VPP")
CURRENTS = ("IDD0", "IDD2N", "IDD2P", "IDD3N", "IDD3P", "IDD4R", "IDD4W", "IDD5AB", "IDD5PB", "IDD6",
            "IPP0", "IPP2N", "IPP2P", "IPP3N", "IPP3P", "IPP4R", "IPP4W", "IPP5AB", "IPP5PB", "IPP6")
REQUIRED_CURRENTS = ("IDD0", "IDD2N", "IDD3N", "IDD4R", "IDD4W", "IDD5AB")
ENGINE_TIMINGS = ("tCK", "tREFI", "tRFC", "tREFIpb", "tRFCpb", "tCL", "tCWL", "tBL", "tRCD", "tRP", "tAAD", "tWCKPST")


class HardwareBuilder:
    """Builds hardware IR from nodes; `el` is the elaborator (cache + evaluator)."""

    def __init__(self, el):
        self.el = el
        self.ev = el.ev
        self.diags = el.diags

    # ---- timing values ----------------------------------------------------
    def cycles(self, value, tck: float, where, name: str) -> int | None:
        """A timing value (cycles or a time) in whole cycles. A plain number is an error: whether `7`
        meant cycles or nanoseconds is the spec's to say (LANGUAGE.md, units)."""
        if not isinstance(value, Quantity) or value.dims not in (U.CYCLES, U.TIME):
            got = value.dimension if isinstance(value, Quantity) else "not a number"
            if isinstance(value, Quantity) and value.dims == U.NONE:
                got = f"the plain number {value.value:g}, with no unit"
            self.diags.error(f"a time or a cycle count was expected for '{name}', this is {got}", where,
                             "write e.g. `18 ns` or `22 cycles`")
            return None
        seconds = value.value if value.dims == U.TIME else None
        if value.dims == U.CYCLES and value.clock:
            seconds = value.value * self.ev.clock_period(None, value.clock, where)
        if seconds is None and not float(value.value).is_integer():
            self.diags.error(f"'{name}' is {value.value:g} cycles; a cycle count must be whole", where)
            return None
        if (seconds if seconds is not None else value.value * tck) > LONGEST_TIMING_S:
            self.diags.error(f"'{name}' is longer than {LONGEST_TIMING_S * 1e3:g} ms, the DRAM refresh window: "
                             "no DRAM interval is that long", where, "check the value and its unit")
            return None
        if seconds is not None:
            # JEDEC rounding: nCK = ceil(t / tCK), forgiving float noise.
            return int(math.ceil(seconds / tck - 1e-6))
        return int(value.value)

    def timing_table(self, owner: Node, tck: float) -> tuple[dict[str, int], Node | None]:
        """All parameters of the `timing` sub-block, in cycles, without marking them read."""
        timing = owner.child("timing")
        out: dict[str, int] = {}
        if timing is None:
            return out, None
        used: set = set()       # what one parameter reads of others (tRC = tRAS + tRP) counts as use
        for name, stmt in timing.fields.items():
            before = set(self.ev.read)
            try:
                value = self.ev.member(timing, name)
            except SpecError:
                continue
            finally:
                used |= self.ev.read - before - {(id(timing), name)}
                self.ev.read.intersection_update(before)
            n = self.cycles(value, tck, stmt.expr.span, name)
            if n is not None:
                out[name] = n
        self.ev.read |= used
        return out, timing

    def rules(self, owner: Node, tck: float, commands: set[str] | None, args_of: dict | None = None):
        rules, windows = [], []
        holders = [owner] + owner.children_of("rules")
        for holder in holders:
            for rule in holder.rules.values():
                self._check_rule_names(rule.scope, rule.preceding + rule.following, commands, rule.span)
                arg = self._rule_arg(rule, holder, args_of or {})
                if arg:
                    by_arg = self._latencies_by_arg(rule.expr, holder, tck, arg)
                    if by_arg:
                        first = next(n for n in by_arg if n >= 0)
                        rules.append(TimingRule(rule.scope, rule.other, rule.preceding, rule.following, first,
                                                rule.span, arg, by_arg))
                    continue
                n = self._latency(rule.expr, holder, tck)
                if n is not None:
                    rules.append(TimingRule(rule.scope, rule.other, rule.preceding, rule.following, n, rule.span))
            for win in holder.windows.values():
                self._check_rule_names(win.scope, win.commands, commands, win.span)
                n = self._latency(win.expr, holder, tck)
                if n is not None:
                    windows.append(TimingWindow(win.scope, win.other, win.commands, win.count, n, win.span))
            if holder is not owner:
                Reader(self.ev, holder).finish()
        return tuple(rules), tuple(windows)

    def _rule_arg(self, rule, holder, args_of: dict) -> str:
        """The argument of the preceding command(s) the rule's latency names (`= 2 * (max(k, 6) + 1)`),
        or "": a name the spec does not define that every preceding command declares in `args`."""
        names, stack = set(), [rule.expr]
        while stack:
            e = stack.pop()
            if isinstance(e, Ref) and len(e.parts) == 1:
                names.add(e.parts[0])
            elif isinstance(e, BinOp):
                stack += [e.left, e.right]
            elif isinstance(e, Neg):
                stack.append(e.operand)
            elif isinstance(e, (Call, ListExpr)):
                stack += list(e.args if isinstance(e, Call) else e.items)
        found = sorted(n for n in names if self.ev.lookup(n, holder) is _UNBOUND
                       and rule.preceding and all(n in args_of.get(c, ()) for c in rule.preceding))
        if len(found) > 1:
            self.diags.error(f"a timing rule's latency may depend on one argument of its preceding command, "
                             f"not {', '.join(found)}", rule.expr.span, "write the rule once per value instead")
        return found[0] if found else ""

    def _latencies_by_arg(self, expr, holder, tck, arg: str) -> tuple[int, ...]:
        """The rule's cycles for the argument's values 0 .. ARG_VALUES - 1 (the engine looks them up
        per command issued); -1 where the latency is not defined (`100 cycles / k` at k = 0), which
        is an error only if a command is issued with that value. None defined: the first value's
        diagnostic."""
        def at(value: int, quiet: bool):
            self.ev.globals[arg] = Quantity(float(value))
            before = len(self.diags.items)
            try:
                n = self._latency(expr, holder, tck)
            finally:
                del self.ev.globals[arg]
            if n is None and quiet:
                del self.diags.items[before:]
            return n
        names: list[Ref] = []
        key = (_latency_shape(expr, arg, names), tck, self._named_values(names, holder))
        if key[2] is None:
            key = (None,)
        out = _BY_ARG.get(key) if key[0] is not None else None
        if out is None:
            out = tuple(-1 if n is None else n for n in (at(v, True) for v in range(ARG_VALUES)))
            if key[0] is not None:
                _BY_ARG[key] = out
        if all(n < 0 for n in out):
            at(0, False)
            return ()
        return out

    def _named_values(self, names: list, holder) -> tuple | None:
        """The values of the names a latency reads besides its argument (read here, as the tabulation
        would read them), when each is a number or a time (cycles follow from tCK): with them the
        expression's shape fixes its cycles. None if one is anything else (a cycle count of a named
        clock, an error)."""
        values = []
        for ref in names:
            try:
                value = self.ev.eval(ref, holder)
            except SpecError:
                return None
            if not isinstance(value, Quantity) or value.clock is not None:
                return None
            values.append((ref.parts, value))
        return tuple(values)

    def _latency(self, expr, holder, tck):
        try:
            value = self.ev.eval(expr, holder)
        except SpecError:
            return None
        if isinstance(value, Quantity) and value.value < 0:
            self.diags.error("a timing rule's latency cannot be negative", expr.span)
            return None
        if not isinstance(value, Quantity):
            try:
                self.ev.quantity(expr, holder)
            except SpecError:
                pass
            return None
        return self.cycles(value, tck, expr.span, "the rule's latency")

    def _check_rule_names(self, scope, names, commands, span):
        if scope not in RULE_SCOPES:
            self.diags.error(f"'{scope}' is not a timing-rule scope", span,
                             did_you_mean(scope, RULE_SCOPES, "scopes"))
        if commands:
            for name in names:
                if name not in commands:
                    self.diags.error(f"timing rule names the undeclared command '{name}'", span,
                                     did_you_mean(name, commands, "commands"))

    def commands(self, owner: Node) -> tuple[CommandDecl, ...]:
        out = []
        for node in owner.children_of("command"):
            r = Reader(self.ev, node)
            out.append(CommandDecl(
                name=node.name or "?",
                scope=r.choice("scope", COMMAND_SCOPES, "bank"),
                args=r.symbols("args", default=()),
                row_buffer=r.choice("row_buffer", ("mem", "pim", "none"), "mem"),
                opens=r.flag("opens", False),
                closes=r.flag("closes", False),
                reads=r.symbols("reads", default=()),
                writes=r.symbols("writes", default=()),
                bus=r.choice("bus", COMMAND_BUSES, "command"),
                bus_cycles=self._whole_cycles(r, "bus_cycles", 1),
                data_cycles=self._whole_cycles(r, "data_cycles", 0),
                refresh=r.flag("refresh", False),
                span=node.span,
                effect=r.choice("effect", tuple(EFFECTS), "none"),
                issued_as=self._issued_as(r)))
            r.finish()
        return tuple(out)

    def _issued_as(self, r: Reader) -> str:
        names = r.symbols("issued_as", default=())
        if len(names) > 1:
            r.fail("'issued_as' names one DRAM command of the part", "issued_as", "e.g. issued_as = RD;")
        return names[0] if names else ""

    def _whole_cycles(self, r: Reader, name: str, default: int) -> int:
        """A command's bus occupancy: a plain number or cycles (`data_cycles = tBL`)."""
        value = r.quantity(name, [U.CYCLES, U.NONE], None, "a cycle count")
        if value is None:
            return default
        if not value.is_integer() or value.value < 0:
            r.fail(f"'{name}' must be a whole, non-negative number of cycles", name)
            return default
        return int(value.value)

    # ---- dram -------------------------------------------------------------
    def dram(self, node: Node) -> DramSpec:
        r = Reader(self.ev, node)
        clock = r.quantity("clock", U.FREQUENCY) or 1.0
        rate = r.quantity("data_rate", U.DATA_RATE) or 1.0
        tck = 1.0 / clock
        org_node = r.block("organization")
        if org_node is None:
            r.fail(f"{node.label} needs an `organization {{ ... }}` block")
            org_node = Node("organization", None, node.span, node)
        org = self.organization(org_node, {})
        timing, timing_node = self.timing_table(node, tck)
        r.blocks_asked.add("timing")
        commands = self.commands(node)
        r.blocks_asked.update(("command", "rules"))
        names = {c.name for c in commands} or None
        rules, windows = self.rules(node, tck, names, {c.name: c.args for c in commands})
        for engine_name in ENGINE_TIMINGS:
            if timing_node is not None and engine_name in timing_node.fields:
                self.ev.read.add((id(timing_node), engine_name))
        read_latency = self._derived_latency(r, "read_latency", ("tCL", "tBL"), timing, tck)
        write_latency = self._derived_latency(r, "write_latency", ("tCWL", "tBL"), timing, tck)
        self.check_timing(timing, timing_node or node)
        power = self.power(r.block("power"))
        spec = DramSpec(
            name=node.name, base=node.base, family=r.choice("family", FAMILIES),
            clock_hz=clock, tck_s=tck, data_rate_tps=rate, organization=org,
            timing_cycles=timing, rules=rules, windows=windows, commands=commands,
            read_latency_cycles=read_latency, write_latency_cycles=write_latency,
            refresh_modes=r.symbols("refresh_modes", ("all_bank", "per_bank", "same_bank"), ("all_bank",)),
            peak_bandwidth_bytes_per_s=rate * org.bus_width_bits / 8,
            span=node.span, power=power)
        r.finish()
        return spec

    def power(self, node: Node | None) -> DramPower | None:
        """The `power` block: VDD and the IDD currents of one device, as the datasheet gives them."""
        if node is None:
            return None
        r = Reader(self.ev, node)
        volts = {n: v for n in VOLTAGES if (v := r.quantity(n, U.VOLTAGE, None)) is not None}
        amps = {n: a for n in CURRENTS if (a := r.quantity(n, U.CURRENT, None)) is not None}
        r.finish()
        missing = [n for n in ("VDD",) + REQUIRED_CURRENTS if n not in volts and n not in amps]
        if missing and not r.failed:
            r.fail(f"a power block needs {', '.join(missing)} (the energy model's VDD-domain currents)", None,
                   "add them from the part's datasheet, e.g. `IDD0 = 57 mA;`")
        if "VPP" in volts and not all(n in amps for n in ("IPP0", "IPP2N", "IPP3N")):
            r.fail("VPP counts only with its activation and standby currents IPP0, IPP2N and IPP3N", "VPP",
                   "declare them too, or leave VPP out (the VPP domain is then not counted)")
        return None if r.failed else DramPower(volts, amps, node.span)

    def _derived_latency(self, r: Reader, name, parts, timing, tck) -> int:
        if r.has(name):
            value = r.quantity(name, [U.CYCLES, U.TIME, U.NONE], None, "a time or a cycle count")
            n = self.cycles(value, tck, r.span(name), name) if value is not None else None
            return n or 0
        return sum(timing.get(p, 0) for p in parts)

    def organization(self, node: Node, overrides: dict[str, int]) -> Organization:
        r = Reader(self.ev, node)
        def get(name, default=1):
            own = r.integer(name, default)         # read (and checked) even when overridden
            return overrides.get(name) or own
        channels, pcs, ranks = get("channels"), get("pseudo_channels"), get("ranks")
        groups, banks = get("bank_groups"), get("banks_per_group", None)
        rows, columns = get("rows", None), get("columns", None)
        device_width = r.bits("device_width") or 8
        bus_width = r.bits("bus_width") or 64
        burst = get("burst_length", None)
        r.finish()
        banks, rows, columns, burst = banks or 1, rows or 1, columns or 1, burst or 1
        if bus_width % device_width:
            r.fail(f"bus width {bus_width} bit is not a multiple of the device width {device_width} bit",
                   "bus_width")
        devices = max(1, bus_width // device_width)
        row_bytes = columns * device_width * devices // 8
        access = bus_width * burst // 8
        if columns % burst:
            r.fail(f"{columns} columns do not hold a whole number of bursts of {burst}", "columns")
        capacity = channels * pcs * ranks * groups * banks * rows * row_bytes
        return Organization(channels, pcs, ranks, groups, banks, rows, columns, device_width, bus_width,
                            burst, groups * banks, devices, access, row_bytes, max(1, columns // burst),
                            capacity)

    def check_timing(self, t: dict[str, int], where: Node) -> None:
        def at(name):
            stmt = where.fields.get(name)
            return stmt.span if stmt is not None else where.span

        checks = [
            ("tRC", ">=", ("tRAS", "tRP"), "a row cycle cannot be shorter than tRAS + tRP"),
            ("tRAS", ">=", ("tRCD",), "a row must stay open at least until it can be read"),
            ("tCCD_L", ">=", ("tCCD_S",), "the same-bank-group spacing is the longer one"),
            ("tRRD_L", ">=", ("tRRD_S",), "the same-bank-group spacing is the longer one"),
            ("tWTR_L", ">=", ("tWTR_S",), "the same-bank-group spacing is the longer one"),
            ("tFAW", ">=", ("tRRD_S",), "four activates cannot fit in less than one ACT-to-ACT gap"),
            ("tREFI", ">=", ("tRFC",), "a refresh must finish before the next is due"),
        ]
        for lhs, _, rhs, why in checks:
            if lhs in t and all(x in t for x in rhs):
                need = sum(t[x] for x in rhs)
                # Parameters given in ns round up one by one; JEDEC rounds the sum once,
                # so a sum of n rounded terms may exceed the true bound by n - 1 cycles.
                if t[lhs] < need - (len(rhs) - 1):
                    self.diags.error(f"inconsistent timing: {lhs} = {t[lhs]} cycles < {' + '.join(rhs)} = {need}",
                                     at(lhs), why)

    # ---- memory -----------------------------------------------------------
    def memory(self, node: Node) -> Memory:
        r = Reader(self.ev, node)
        part_node = r.ref("part", ("dram",))
        part = self.el.build(part_node) if part_node is not None else None
        overrides = {k: r.integer(k) for k in ("channels", "ranks", "pseudo_channels") if r.has(k)}
        count = self.el.count(node, r)
        if part is None:
            raise SpecError("memory without a part")     # reported where the part failed
        org = self.organization(self._own_organization(part_node, overrides), overrides) \
            if overrides else part.organization
        address_map = r.symbols("address_map", ADDRESS_FIELDS)
        bits, offset = self.address_bits(r, org, address_map)
        capacity = org.capacity_bytes
        sets = self._organization_sets(node, part_node)
        if r.has("capacity"):
            declared = r.bytes("capacity")
            if declared is not None and declared != capacity:
                r.fail(f"the organization gives {U.Quantity(capacity, U.BYTES)} "
                       f"({capacity / 2**30:g} GiB), but capacity says {declared / 2**30:g} GiB",
                       "capacity", "fix the organization (channels, ranks, rows, ...) or the capacity")
                self._at_sets(sets, f"this gives memory '{node.name}' {capacity / 2**30:g} GiB, but its capacity "
                              f"({r.span('capacity')}) says {declared / 2**30:g} GiB",
                              f"leave `capacity` out (the organization gives it) or also --set "
                              f"memory.{node.name}.capacity={capacity / 2**30:g}GiB")
        else:
            self.ev.provide(node, "capacity", U.Quantity(capacity, U.BYTES))
        controller = self.controller(r.block("controller") or Node("controller", None, node.span, node), part)
        regions = self.regions(r, capacity, sets)
        pim_node = r.ref("pim", ("pim_unit",), None)
        pim = self.el.build(pim_node) if pim_node is not None else None
        units = self.pim_units(r, pim, org) if pim else 0
        if pim is not None:
            known = {c.name for c in part.commands + pim.commands}
            for rule in pim.rules + pim.windows:
                names = rule.commands if isinstance(rule, TimingWindow) else rule.preceding + rule.following
                self._check_rule_names(rule.scope, names, known, rule.span)
            check_program_commands(pim, known, self.diags)
            for c in pim.commands:
                if c.issued_as and c.issued_as not in {p.name for p in part.commands}:
                    self.diags.error(f"command {c.name} is issued as '{c.issued_as}', which {part.name} does not "
                                     "declare", c.span, did_you_mean(c.issued_as, sorted(p.name for p in part.commands),
                                                                     f"commands of {part.name}"))
        memory = Memory(
            name=node.name, count=count, part=part, organization=org, address_map=address_map,
            address_bits=bits, offset_bits=offset,
            interleave_bytes=r.bytes("interleave", org.access_bytes),
            capacity_bytes=capacity,
            peak_bandwidth_bytes_per_s=part.data_rate_tps * org.bus_width_bits / 8 * org.channels * org.pseudo_channels,
            controller=controller, regions=regions, pim=pim, pim_units=units, span=node.span, set_by=tuple(sets))
        r.finish()
        return memory

    def address_bits(self, r: Reader, org: Organization, fields: tuple[str, ...]):
        sizes = {"channel": org.channels, "pseudo_channel": org.pseudo_channels, "rank": org.ranks,
                 "bank_group": org.bank_groups, "bank": org.banks_per_group, "row": org.rows,
                 "column": org.bursts_per_row}
        offset = log2_int(org.access_bytes)
        if not fields:
            return {}, offset
        for name in set(fields):
            if fields.count(name) > 1:
                r.fail(f"'{name}' appears {fields.count(name)} times in the address map", "address_map")
        missing = [f for f, n in sizes.items() if n > 1 and f not in fields]
        if missing:
            r.fail(f"the address map has no field for {', '.join(missing)}, but the organization has "
                   + ", ".join(f"{sizes[m]} {m}s" for m in missing), "address_map",
                   "list every level with more than one unit, most significant first")
        out, low = {}, offset
        for name in reversed(fields):
            n = sizes[name]
            if not is_power_of_two(n):
                r.fail(f"the address map needs a power of two {name}s, the organization has {n}", "address_map")
            width = log2_int(n)
            out[name] = (low, width)
            low += width
        return out, offset

    def controller(self, node: Node, part: DramSpec) -> Controller:
        r = Reader(self.ev, node)
        out = Controller(
            scheduler=r.choice("scheduler", ("fcfs", "frfcfs", "frfcfs_rowhit"), "frfcfs"),
            read_queue_depth=r.integer("read_queue_depth", 32),
            write_queue_depth=r.integer("write_queue_depth", 32),
            page_policy=r.choice("page_policy", ("open", "closed"), "open"),
            refresh=r.choice("refresh", ("none", "all_bank", "per_bank"), "all_bank"),
            row_hit_cap=r.integer("row_hit_cap", 4, minimum=0),
            write_drain_high=r.number("write_drain_high", 0.8),
            write_drain_low=r.number("write_drain_low", 0.2),
            queue_structure=r.choice("queue_structure", ("transaction", "per_bank"), "transaction"),
            command_queue_depth=r.integer("command_queue_depth", 8),
            pim_blocking=r.choice("pim_blocking", ("serial", "channel"), "serial"),
            blocked_gemv_issue=r.choice("blocked_gemv_issue", ("fused", "per_step"), "fused"),
            refresh_stagger=r.flag("refresh_stagger", False),
            precharge_for=r.choice("precharge_for", ("oldest", "any"), "oldest"),
            write_drain=r.choice("write_drain", ("watermark", "batch"), "watermark"),
            write_drain_idle=r.integer("write_drain_idle", 8, minimum=0),
            bank_arbitration=r.choice("bank_arbitration", ("oldest", "round_robin"), "oldest"),
            refresh_precharge=r.choice("refresh_precharge", ("all_bank", "per_bank"), "all_bank"),
            split_activate=r.flag("split_activate", False),
            data_clock_sync=r.flag("data_clock_sync", False))
        if out.write_drain == "batch" and out.queue_structure != "per_bank":
            r.fail("write_drain = batch moves writes into per-bank command queues", "write_drain",
                   "set queue_structure = per_bank, or write_drain = watermark")
        act = next((c for c in part.commands if c.opens and c.scope == "bank" and c.row_buffer != "pim"), None)
        if out.split_activate:
            aad = part.timing_cycles.get("tAAD")
            if act is None or act.bus_cycles != 2 or not aad:
                r.fail(f"split_activate needs an ACT of bus_cycles = 2 and tAAD in {part.name}'s timing",
                       "split_activate", "declare the two-part activate (LPDDR5 ACT-1/ACT-2) and its tAAD, "
                       "or leave split_activate out")
            elif aad >= min(part.timing_cycles.get("tRCD", aad + 1), part.timing_cycles.get("tRAS", aad + 1)):
                # the second half then always issues before its row can be read or closed
                r.fail(f"split_activate needs tAAD ({aad}) shorter than tRCD and tRAS", "split_activate")
        if out.data_clock_sync and "tWCKPST" not in part.timing_cycles:
            r.fail(f"data_clock_sync needs tWCKPST (the data clock's postamble) in {part.name}'s timing",
                   "data_clock_sync")
        if out.refresh != "none" and out.refresh not in part.refresh_modes:
            r.fail(f"{part.name} has no {out.refresh} refresh (it has {', '.join(part.refresh_modes)})", "refresh",
                   "choose one of " + ", ".join(part.refresh_modes + ("none",)))
        r.finish()
        return out

    def _own_organization(self, part_node: Node, overrides: dict[str, int]) -> Node:
        """The part's organization as this memory sees it: its own channels, ranks or pseudo-channels
        in every expression of the block (`rows = capacity / (channels * ...)` follows them)."""
        org = part_node.child("organization") or Node("organization", None, part_node.span)
        twin = org.copy(part_node)
        for name, value in overrides.items():
            if value is not None:
                twin.fields.pop(name, None)
                self.ev.provide(twin, name, U.Quantity(value))
        return twin

    @staticmethod
    def _organization_sets(node: Node, part_node: Node | None) -> list[Span]:
        """The `--set` arguments that changed a memory's size: its channels, ranks, pseudo-channels
        or capacity, its part's organization, or a region."""
        spans = [node.set_by[k] for k in ("channels", "ranks", "pseudo_channels", "capacity") if k in node.set_by]
        org = part_node.child("organization") if part_node is not None else None
        spans += list(org.set_by.values()) if org is not None else []
        return spans + [s for c in node.children_of("region") for s in c.set_by.values()]

    def _at_sets(self, sets: list[Span], message: str, hint: str) -> None:
        """A spec error that a `--set` caused, also shown at that argument of the command line."""
        for span in sets:
            self.diags.error(message, span, hint)

    def regions(self, r: Reader, capacity: int, sets: list[Span] = ()) -> tuple[Region, ...]:
        """The memory's regions, in order; inside a region `remaining` is the room from its offset
        to the memory's end (and `capacity`, unless the memory declares it, the whole memory)."""
        out, cursor = [], 0
        for node in r.blocks("region"):
            rr = Reader(self.ev, node)
            offset = rr.bytes("offset", cursor)
            self.ev.provide(node, "remaining", U.Quantity(max(0, capacity - (offset or 0)), U.BYTES))
            size = rr.bytes("size")
            region = Region(node.name or "?", offset or 0, size or 0,
                            rr.flag("cacheable", True),
                            rr.choice("layout", ("host_friendly", "pim_aware"), "host_friendly"),
                            rr.symbols("holds", ("weights", "kv_cache", "buffers", "activations", "code"), ()),
                            node.span, tuple(sets))
            rr.finish()
            if region.offset_bytes + region.size_bytes > capacity:
                message = (f"region '{region.name}' ends at {(region.offset_bytes + region.size_bytes) / 2**30:g} GiB, "
                           f"past the memory's {capacity / 2**30:g} GiB")
                self.diags.error(message, node.span, "shrink the region or the regions before it, or size it "
                                 "by the memory: `size = capacity / 2;`, `size = remaining;`")
                self._at_sets(sets, f"with this, {message} ({node.span})",
                              "size the region by the memory (`capacity`, `remaining`) or --set its size too")
            for other in out:
                if region.offset_bytes < other.offset_bytes + other.size_bytes and \
                        other.offset_bytes < region.offset_bytes + region.size_bytes:
                    self.diags.error(f"region '{region.name}' overlaps region '{other.name}'", node.span)
            out.append(region)
            cursor = region.offset_bytes + region.size_bytes
        return tuple(out)

    def pim_units(self, r: Reader, pim: PimUnit, org: Organization) -> int:
        # One buffer chip per DIMM, i.e. per channel of a DIMM memory, whatever its ranks.
        per_rank = {"bank": org.banks_per_rank, "bank_pair": org.banks_per_rank // 2,
                    "bank_group": org.bank_groups, "rank": 1}
        problem = None
        if pim.placement == "bank_group" and org.bank_groups < 2:
            problem = "bank groups"
        elif pim.placement == "bank_pair" and org.banks_per_rank % 2:
            problem = "an even number of banks"
        elif pim.placement == "pseudo_channel" and org.pseudo_channels < 2:
            problem = "pseudo-channels"
        if problem:
            r.fail(f"PIM unit '{pim.name}' sits per {pim.placement}, but this memory has no {problem}", "pim",
                   "choose a placement the organization has: " + ", ".join(
                       p for p in PLACEMENTS if p not in ("bank_group", "pseudo_channel")))
            return 0
        units = org.channels * org.pseudo_channels
        if pim.placement in per_rank:
            units *= org.ranks * per_rank[pim.placement]
        return units

    # ---- pim unit ---------------------------------------------------------
    def pim_unit(self, node: Node) -> PimUnit:
        r = Reader(self.ev, node)
        dtype = r.choice("dtype", DTYPES)
        simd = r.bits("simd_width") or 0
        clock = r.quantity("clock", U.FREQUENCY, None)
        tck = 1.0 / clock if clock else 1e-9
        timing, _ = self.timing_table(node, tck)
        r.blocks_asked.update(("timing", "command", "rules"))
        commands = self.commands(node)
        # A PIM unit's rules may also name the DRAM commands of the memory it joins (ACT -> PIM
        # command); those names are checked in `memory`, which knows both command sets.
        rules, windows = self.rules(node, tck, None, {c.name: c.args for c in commands})
        files = []
        for rf in r.blocks("register_file"):
            rr = Reader(self.ev, rf)
            files.append(RegisterFile(rf.name or "?", rr.integer("count"), rr.bits("width") or 0,
                                      rr.choice("placement", ("rank",), "")))
            rr.finish()
        lanes = simd // DTYPE_BITS.get(dtype, 16) if dtype else 0
        if dtype and simd % DTYPE_BITS[dtype]:
            r.fail(f"a {simd}-bit SIMD unit does not hold a whole number of {dtype} lanes", "simd_width")
        unit = PimUnit(
            name=node.name, placement=r.choice("placement", PLACEMENTS), simd_width_bits=simd,
            dtype=dtype, lanes=lanes, row_buffers=r.choice("row_buffers", ("single", "dual"), "single"),
            register_files=tuple(files), operations=r.symbols("operations", default=()),
            commands=commands, rules=rules, windows=windows, timing_cycles=timing,
            global_buffer_bytes=r.bytes("global_buffer", 0), clock_hz=clock, span=node.span)
        r.blocks_asked.add("program")
        unit = replace(unit, programs=programs(unit, node.children_of("program"), self.diags))
        r.finish()
        return unit

    # ---- processors and links ----------------------------------------------
    def processor(self, node: Node) -> Processor:
        r = Reader(self.ev, node)
        peak = {}
        peak_node = r.block("peak")
        if peak_node is not None:
            pr = Reader(self.ev, peak_node)
            for dtype in peak_node.fields:
                if dtype not in DTYPES:
                    pr.asked.add(dtype)
                    self.diags.error(f"'{dtype}' is not a datatype", peak_node.fields[dtype].span,
                                     did_you_mean(dtype, DTYPES, "datatypes"))
                    continue
                value = pr.quantity(dtype, U.FLOPS)
                if value is not None:
                    peak[dtype] = value
            pr.finish()
        caches = []
        for cache in r.blocks("cache"):
            cr = Reader(self.ev, cache)
            caches.append(Cache(cache.name or "?", cr.bytes("size"), cr.flag("shared", False)))
            cr.finish()
        threads = {}
        threads_node = r.block("threads")
        if threads_node is not None:
            tr = Reader(self.ev, threads_node)
            threads = {name: tr.integer(name) for name in threads_node.fields}   # a pool of 0 threads runs nothing
            tr.finish()
        arrays, vectors = r.block("systolic_array"), r.block("vector_unit")
        sa = Reader(self.ev, arrays) if arrays is not None else None
        vu = Reader(self.ev, vectors) if vectors is not None else None
        out = Processor(
            name=node.name, kind=node.kind, count=self.el.count(node, r),
            clock_hz=r.quantity("clock", U.FREQUENCY, None), cores=r.integer("cores", 1),
            peak_flops=peak, memory_bytes=r.bytes("memory", 0),
            memory_bandwidth_bytes_per_s=r.quantity("memory_bandwidth", U.BANDWIDTH, 0.0),
            efficiency=r.number("efficiency", 1.0), caches=tuple(caches), threads=threads,
            systolic_arrays=sa.integer("count", 1) if sa else 0,
            systolic_rows=sa.integer("rows") if sa else 0,
            systolic_cols=sa.integer("cols") if sa else 0,
            vector_units=vu.integer("count", 1) if vu else 0,
            vector_width=vu.integer("width") if vu else 0,
            systolic_issue=sa.choice("issue", ("overlapped", "in_order"), "overlapped") if sa else "overlapped",
            systolic_gemv_issue=sa.choice("gemv_issue", ("overlapped", "serial"), "overlapped") if sa else "overlapped",
            span=node.span, pim_issue_rate=r.integer("pim_issue_rate", 0, minimum=0),
            pim_dispatch=r.choice("pim_dispatch", ("overlapped", "grouped", "batch"), "overlapped"),
            scratchpad_bytes=r.bytes("scratchpad", 0), calibration=self.calibration(node, r),
            active_power_w=r.quantity("active_power", U.POWER, 0.0), idle_power_w=r.quantity("idle_power", U.POWER, 0.0),
            power_covers=tuple(n.name for n in r.refs("power_covers", ("memory",), [])))
        for sub in (sa, vu):
            if sub is not None:
                sub.finish()
        if not 0 < out.efficiency <= 1:
            r.fail(f"efficiency must be a fraction in (0, 1], not {out.efficiency:g}", "efficiency")
        if out.pim_dispatch == "grouped" and not out.scratchpad_bytes:
            r.fail("pim_dispatch = grouped cuts request groups by the scratchpad; give `scratchpad = ...;`",
                   "pim_dispatch")
        r.finish()
        return out

    def calibration(self, node: Node, r: Reader) -> KernelCalibration | None:
        """A gpu's `calibration { ... }`: the fitted quantities of the measured GPU kernel model."""
        block = r.block("calibration")
        if block is None:
            return None
        if node.kind != "gpu":
            r.failed = True
            self.diags.error(f"a {node.kind} has no calibration block; the measured kernel model is a gpu's",
                             block.span, "remove the block, or declare the device as a gpu")
            return None
        cr = Reader(self.ev, block)
        out = KernelCalibration(
            launch_latency_s=cr.quantity("launch_latency", U.TIME), memory_efficiency=cr.number("memory_efficiency"),
            tensor_efficiency=cr.number("tensor_efficiency"), elementwise_efficiency=cr.number("elementwise_efficiency"),
            exposed_fraction=cr.number("exposed_fraction", 0.0))
        for name in ("memory_efficiency", "tensor_efficiency", "elementwise_efficiency"):
            value = getattr(out, name)
            if value is not None and not 0 < value <= 1:
                cr.fail(f"{name} must be a fraction in (0, 1], not {value:g}", name)
        if out.exposed_fraction is not None and not 0 <= out.exposed_fraction <= 1:
            cr.fail(f"exposed_fraction must be a fraction in [0, 1], not {out.exposed_fraction:g}", "exposed_fraction")
        if out.launch_latency_s is not None and out.launch_latency_s < 0:
            cr.fail("launch_latency cannot be negative", "launch_latency")
        cr.finish()
        return None if cr.failed else out

    def link(self, node: Node) -> Link:
        r = Reader(self.ev, node)
        out = Link(node.name, r.choice("kind", ("pcie", "dimm_link", "nvlink", "cxl", "on_chip", "ethernet", "disk")),
                   self.el.count(node, r), r.quantity("bandwidth", U.BANDWIDTH) or 0.0,
                   r.quantity("latency", U.TIME, 0.0), r.symbols("endpoints", default=()), node.span,
                   energy_per_bit_j=r.quantity("energy_per_bit", U.ENERGY, 0.0))
        for name, value in (("latency", out.latency_s), ("energy_per_bit", out.energy_per_bit_j)):
            if value < 0:
                r.fail(f"a link's {name} cannot be negative", name)
        block = r.block("collective")
        if block is not None:
            cr = Reader(self.ev, block)
            coll = Collective(cr.choice("algorithm", ("ring", "tree"), "ring"), cr.quantity("step_latency", U.TIME, 0.0),
                              cr.quantity("bus_bandwidth", U.BANDWIDTH) or 0.0)
            if coll.bus_bandwidth_bytes_per_s <= 0:
                cr.fail("a collective needs a positive bus_bandwidth", "bus_bandwidth", "e.g. `bus_bandwidth = 150 GB/s;`")
            if coll.step_latency_s < 0:
                cr.fail("a collective's step_latency cannot be negative", "step_latency")
            cr.finish()
            out = replace(out, collective=None if cr.failed else coll)
        r.finish()
        return out

    def storage(self, node: Node) -> Storage:
        r = Reader(self.ev, node)
        out = Storage(node.name, r.choice("kind", ("disk", "ssd", "flash")), r.bytes("capacity", 0),
                      r.quantity("read_bandwidth", U.BANDWIDTH) or 0.0, r.quantity("read_latency", U.TIME, 0.0),
                      node.span)
        if out.read_bandwidth_bytes_per_s <= 0:
            r.fail("a storage device needs a positive read_bandwidth", "read_bandwidth", "e.g. `read_bandwidth = 2 GB/s;`")
        r.finish()
        return out


def _latency_shape(expr, arg: str, names: list):
    """The shape of a latency of plain numbers, cycle counts without a named clock, `arg` and other
    names (appended to `names`; operators and functions over them), or None if it holds anything
    else: given the names' values no time arises in it but theirs, so its cycles depend on the
    argument, their values and tCK (the longest-interval check) only."""
    if isinstance(expr, Num):
        plain = expr.unit is None or expr.unit in U.CYCLE_UNITS
        return ("num", expr.text, expr.unit) if plain else None
    if isinstance(expr, Ref):
        if expr.parts == (arg,):
            return ("arg",)
        names.append(expr)
        return ("name", expr.parts)
    if isinstance(expr, Neg):
        inner = _latency_shape(expr.operand, arg, names)
        return None if inner is None else ("neg", inner)
    if isinstance(expr, (BinOp, Call)):
        operands = (expr.left, expr.right) if isinstance(expr, BinOp) else expr.args
        shapes = tuple(_latency_shape(e, arg, names) for e in operands)
        return None if None in shapes else (expr.op if isinstance(expr, BinOp) else expr.name, shapes)
    return None
