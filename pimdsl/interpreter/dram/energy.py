"""DRAM energy from the part's declared currents: the Micron power calculation as DRAMsim3 applies it.

Every issued command adds its event energy over the standby current it rides on, and every rank
(rank-level node) adds standby energy for each cycle of the run: active standby (IDD3N) while any
of its banks has a row open, precharge standby (IDD2N) while all are closed ([DRAMSIM3]
configuration.cc and controller.cc; DRAMPower's core model counts the same way). Per device, times
the devices of a rank, for each supply domain the part declares (VDD with its IDD currents; VPP
with its IPP currents):

    activation   V x (I0 x tRC - (I3N x tRAS + I2N x (tRC - tRAS)))    per ACT
    read / write V x (I4R - I3N) x data cycles (I4W for writes)         per RD / WR
    refresh      V x (I5AB - I3N) x tRFC per all-bank REF, (I5PB - I3N) x tRFCpb per per-bank REF
    standby      V x I3N (a rank with a row open) or V x I2N (all closed), per cycle

Power-down and self-refresh are not modelled (no controller here enters them), so IDD2P, IDD3P and
IDD6 are declared data only. `RowActivity` follows which banks are open from the commands issued,
the way the compiled core (`core._track_rows`) does for its replays.
"""
from __future__ import annotations

from ...ir.errors import PimdslError
from ...ir.hardware import DramSpec, Organization
from .tables import BANK

COMPONENTS = ("activation", "read", "write", "refresh", "active_standby", "precharge_standby")
RANK = 2                           # the hierarchy level whose standby current counts (LEVELS[2])
DOMAINS = (("VDD", "IDD"), ("VPP", "IPP"))


class EnergyUnavailable(PimdslError):
    """The part's currents do not cover what the replay issued (the timing stands; the energy is None)."""


def event_energies_pj(part: DramSpec, org: Organization) -> dict[str, float] | None:
    """pJ of one ACT, one burst of each declared command that reads or writes the array, one
    refresh of each kind, and one rank-cycle of active and of precharge standby; None without currents."""
    power = part.power
    if power is None:
        return None
    t = part.timing_cycles
    t_ras, t_rp = t.get("tRAS", 0), t.get("tRP", 0)
    t_rc = t.get("tRC", t_ras + t_rp)
    scale = org.devices_per_rank * part.tck_s * 1e12       # A x V x cycles -> pJ, for the rank's devices
    out = {"ACT": 0.0, "REF": 0.0, "active_standby": 0.0, "precharge_standby": 0.0}
    if "IDD5PB" in power.amps:
        out["REFpb"] = 0.0
    for cmd in part.commands:
        if cmd.reads or cmd.writes:
            out[cmd.name] = 0.0
    for volt, cur in DOMAINS:
        if volt not in power.volts:
            continue
        v = power.volts[volt]

        def i(name, standby=False, cur=cur):
            # a burst or refresh current the domain does not declare draws no more than its standby
            return power.amps.get(cur + name, power.amps.get(cur + "3N", 0.0) if standby else 0.0)
        out["ACT"] += v * (i("0") * t_rc - (i("3N") * t_ras + i("2N") * (t_rc - t_ras))) * scale
        for cmd in part.commands:
            if cmd.reads or cmd.writes:
                burst = i("4W", True) if cmd.writes else i("4R", True)
                out[cmd.name] += v * (burst - i("3N")) * cmd.data_cycles * scale
        out["REF"] += v * (i("5AB", True) - i("3N")) * t.get("tRFC", 0) * scale
        if cur + "5PB" in power.amps:
            out["REFpb"] += v * (i("5PB") - i("3N")) * t.get("tRFCpb", 0) * scale
        out["active_standby"] += v * i("3N") * scale
        out["precharge_standby"] += v * i("2N") * scale
    return out


def command_component(cmd) -> str | None:
    """The energy component a declared command's issue adds to (None: it adds nothing)."""
    if cmd.refresh:
        return "refresh"
    if cmd.writes:
        return "write"
    if cmd.reads:
        return "read"
    if cmd.opens:
        return "activation"
    return None


def dram_energy_pj(part: DramSpec, org: Organization, commands: dict[str, int], active_rank_cycles: int,
                   rank_cycles: int) -> dict[str, float] | None:
    """Energy by component (pJ) and `total`, from command counts and rank-cycles with a row open out
    of all rank-cycles of the run; None when the part declares no currents; EnergyUnavailable when
    they do not cover a command issued."""
    per = event_energies_pj(part, org)
    if per is None:
        return None
    out = dict.fromkeys(COMPONENTS, 0.0)
    for cmd in part.commands:
        n = commands.get(cmd.name, 0)
        comp = command_component(cmd)
        if not n or comp is None:
            continue
        if comp == "refresh":
            key = "REFpb" if cmd.scope in ("bank", "bank_pair") else "REF"
            if key not in per:
                raise EnergyUnavailable(f"{part.name} issued {n} per-bank refreshes ({cmd.name}) but its power "
                                        "block declares no IDD5PB")
        else:
            key = "ACT" if comp == "activation" else cmd.name
        out[comp] += n * per[key]
    out["active_standby"] = active_rank_cycles * per["active_standby"]
    out["precharge_standby"] = (rank_cycles - active_rank_cycles) * per["precharge_standby"]
    out["total"] = sum(out[c] for c in COMPONENTS)
    return out


# A command that computes in several banks at once draws this many times a read's burst current over
# active standby: [NEUPIMS] Sec. 7 "Power overhead" ("all-bank computation command incurs 4x higher
# power than read command", after Newton, He et al. MICRO 2020), the model its Table 5 is computed with.
MULTI_BANK_COMPUTE_OVER_READ = 4.0


def banks_reached(scope: str, org: Organization) -> int:
    """Banks one command of `scope` acts on (per pseudo-channel for the rank-level scopes)."""
    per_rank = org.bank_groups * org.banks_per_group
    return {"bank": 1, "bank_pair": 2, "bank_group": org.banks_per_group, "parity_banks": per_rank // 2,
            "all_banks": per_rank, "rank": per_rank, "pseudo_channel": per_rank * org.ranks,
            "channel": per_rank * org.ranks * org.pseudo_channels}.get(scope, 1)


def command_energy_pj(memory, counts: dict[str, int]) -> dict[str, float] | None:
    """Energy by component (pJ) of the commands `counts` names ("kind.NAME" as a PIM stream's timer
    counts them, kind the PIM command's effect or lowercase name, NAME the command issued; or "NAME") on
    one channel of `memory`, from its part's currents; None without currents. A PIM command counts as
    the part command it is issued as (or by what it declares): one that opens rows as an ACT per bank
    it reaches; one that reads or writes the array in one bank as that burst; one that does so in
    several banks at once as MULTI_BANK_COMPUTE_OVER_READ reads' bursts (the all-bank compute model
    above); any other issued as a read or write (a register load, a mode change) as one burst of it;
    a refresh as the part's. Commands that only close rows or move no array data add nothing
    over standby (standby is counted apart, over time)."""
    part, org = memory.part, memory.organization
    per = event_energies_pj(part, org)
    if per is None:
        return None
    decls = {c.name: c for c in part.commands}
    own, kinds = {}, {}                    # a stream's kind: a PIM command's effect or its name, lowercase
    for c in (memory.pim.commands if memory.pim is not None else ()):
        own[c.name] = c
        kinds.setdefault(c.name.lower(), c)
        if c.effect != "none":
            kinds.setdefault(c.effect, c)
    burst = per.get("RD", 0.0)
    out = dict.fromkeys(("activation", "read", "write", "refresh", "pim_compute"), 0.0)
    for key, n in counts.items():
        kind, _, name = key.rpartition(".")
        decl = own.get(name) or kinds.get(kind) or decls.get(name)
        if decl is None or not n:
            continue
        base = decls.get(decl.issued_as, decl) if decl.issued_as else decl
        banks = banks_reached(decl.scope, org)
        if base.refresh:
            out["refresh"] += n * per["REFpb" if base.scope in ("bank", "bank_pair") and "REFpb" in per else "REF"]
        elif decl.opens or base.opens:
            out["activation"] += n * banks * per["ACT"]
        elif banks > 1 and "row" in decl.reads + decl.writes:
            out["pim_compute"] += n * MULTI_BANK_COMPUTE_OVER_READ * burst
        elif "row" in base.reads + base.writes:         # one burst on the data bus (a register write too)
            comp = "write" if "row" in base.writes else "read"
            out[comp] += n * per.get(base.name, per.get("WR" if comp == "write" else "RD", 0.0))
    out["total"] = sum(out.values())
    return out


def traffic_energy_pj(memory, read_bytes: float, write_bytes: float = 0.0) -> float | None:
    """pJ of host reads and writes of so many bytes, streamed row by row: a burst per access and an
    ACT per row (every row opened once, each of its bursts a row hit); None without currents."""
    org = memory.organization
    per = event_energies_pj(memory.part, org)
    if per is None:
        return None
    rd, wr = per.get("RD", 0.0), per.get("WR", per.get("RD", 0.0))
    bursts = lambda n: n / org.access_bytes
    return (bursts(read_bytes) * rd + bursts(write_bytes) * wr
            + (read_bytes + write_bytes) / org.row_bytes * per["ACT"])


def average_power_mw(energy_pj: dict | None, cycles: int, tck_s: float) -> float | None:
    if energy_pj is None or not cycles:
        return None
    return energy_pj["total"] / (cycles * tck_s * 1e9)       # pJ / ns = mW


def effects(tables) -> list[int]:
    """Per command id: +1 it opens rows (under its node), -1 it closes them, 0 neither."""
    out = []
    for i in range(tables.n_ids):
        decl = tables.commands[tables.base[i]]
        out.append(-1 if decl.closes else 1 if decl.opens else 0)
    return out


def banks_under(tables) -> list[int]:
    """Banks under one node of each level of a channel."""
    span = [1] * (BANK + 1)
    for lv in range(BANK - 1, -1, -1):
        span[lv] = span[lv + 1] * tables.fanout[lv + 1]
    return span


class RowActivity:
    """Which banks of one channel have a row open, and the cycles each rank spent with any open."""

    def __init__(self, tables):
        self.tables = tables
        self.effect = effects(tables)
        self.span = banks_under(tables)
        self.per_rank = self.span[RANK]
        self.open = [False] * tables.banks
        n = tables.count[RANK]
        self.n_open, self.since, self.active = [0] * n, [0] * n, [0] * n

    def issue(self, cmd: int, k: int, t: int) -> None:
        e = self.effect[cmd] if cmd < len(self.effect) else 0
        if not e:
            return
        width = self.span[self.tables.target_level(cmd)]
        for b in range(k * width, (k + 1) * width):
            if self.open[b] == (e > 0):
                continue
            self.open[b] = e > 0
            r = b // self.per_rank
            if e > 0:
                if not self.n_open[r]:
                    self.since[r] = t
                self.n_open[r] += 1
            else:
                self.n_open[r] -= 1
                if not self.n_open[r]:
                    self.active[r] += t - self.since[r]

    def active_cycles(self, end: int) -> int:
        """Rank-cycles with a row open up to cycle `end` (rows still open count until then)."""
        return sum(a + (end - s if n else 0) for a, s, n in zip(self.active, self.since, self.n_open))
