"""Energy of a whole run, from how long each resource was busy and the power its spec declares.

Every run loop reports how long it ran (`makespan_s` for the request-serving loops, whose `end_to_end_s`
is a per-request mean; `end_to_end_s` for the others) and, per resource, `utilization` (busy time over it);
this module turns them into energy, so that every loop reports it the same way (driver.run_loaded):

  * a processor that declares `active_power` (and `idle_power`): per instance, active power while
    busy and idle power for the rest of the run;
  * a memory whose DRAM part declares currents (`power` block): its standby energy over the run,
    every rank of every channel and instance at precharge standby (VDD x IDD2N) while its PIM unit
    is idle and at active standby (VDD x IDD3N: a PIM op keeps rows open) while it is busy.

  * a memory whose part declares currents and `tREFI`: every rank's all-bank refresh once per tREFI
    (V x (IDD5B - IDD3N) x tRFC each), over the run less the busy time a PIM command sample (which
    counts its own refreshes) covers.

  * the command energy of a PIM memory's ops (`dram/energy.command_energy_pj`: ACT, RD/WR bursts,
    refresh and all-bank compute commands from the part's currents), where the loop reports the
    commands of a step's PIM ops (`pim.command_counts` over `pim.seconds`, one channel: the step
    loop): that step's command power, times the memory's channels, over all of its busy time.

  * where the loop reports a command sample per PIM memory (`pim_command_samples`: memory ->
    {command_counts, seconds, refreshes}, one channel, as `pim` above), that memory's command power
    while busy; and where it also reports the bytes the memory's PIM units read in its banks over the
    run (`pim_traffic_bytes`: memory -> bytes, all channels) and the sample the bytes its commands read
    (`bytes`), the sample's energy per byte times those bytes instead (the work the loop timed, not its
    busy time). With `pim_traffic_bytes` and no sample, the bytes streamed as a host's accesses (a burst
    per access, an ACT per row: a rank PU reading over the rank's bus).

  * a memory's host accesses, where the loop reports the bytes its processors moved to and from it
    (`dram_traffic_bytes`: memory -> bytes read, or {"read": .., "write": ..}): streamed row by row,
    a burst per access and an ACT per row (`dram/energy.traffic_energy_pj`).

  * a link that declares `energy_per_bit`, for each utilization key that names it (`link:name`, its
    name, or its kind when one link has it): busy at its bandwidth, so util x run x bandwidth bytes;
    or, where the loop reports the bytes it moved over the link (`link_bytes`: link name -> bytes,
    all its instances), those bytes (and then not its utilization, which would count them twice).

A memory that a processor with a declared power lists in `power_covers` (a GPU's board power with its
own HBM on the board) adds no standby and no host-access energy: the processor's power holds them.
Its PIM commands still count, as work the processor's declared power was not measured with.

A utilization key that names a loop's role rather than a resource (`dimm_bank`, `hbm_pim`) counts for
the resource the loop's `utilization_of` maps it to (key -> memory or processor name).

Not counted, and listed under `energy_j.not_counted`: host accesses and PIM ops in loops that report
no traffic or command counts (a run reports time per resource, not the requests behind it; `pimc
dram` counts command energy for a request trace), and resources and links that declare no power or
energy (a utilization key nothing here owns is listed as it is). `energy_per_token_j` is the average
power over the run divided by the reported `tokens_per_s` (absent for a graph model, which has no tokens).
"""
from __future__ import annotations

from .dram.energy import command_energy_pj, event_energies_pj, traffic_energy_pj


def _link_of(key: str, links: dict):
    """The link a utilization key names: `link:name`, `name`, or a bare kind (`pcie`: the one link of
    that kind); else None."""
    name = (key.split(":", 1)[1] if ":" in key else key).split("[", 1)[0]
    if name in links:
        return links[name]
    kinds = [l for l in links.values() if l.kind == name]
    return kinds[0] if len(kinds) == 1 else None


def _resource_owner(key: str, processors: dict, memories: dict):
    """The processor or memory a utilization key names: `kind:name`, `kind:name[i]` (one instance),
    `kind:name.pool` (a thread pool: its processor's busy time is its own key), or a bare kind
    (`gpu`, `npu`: the first processor of that kind, the one loops use unless told otherwise; `pim`:
    the one memory with a PIM unit); else None."""
    name = key.split(":", 1)[1] if ":" in key else key
    if "." in name:
        return None, "pool"
    name = name.split("[", 1)[0]
    if name in processors:
        return processors[name], "processor"
    if name in memories:
        return memories[name], "memory"
    kinds = [p for p in processors.values() if p.kind == name]
    if kinds:                   # several: the first declared, the processor loops default to
        return kinds[0], "processor"
    if name == "pim":
        pims = [m for m in memories.values() if m.pim is not None]
        if len(pims) == 1:
            return pims[0], "memory"
    return None, None


def _covered(processors: dict) -> dict[str, str]:
    """Memory name -> the processor (`kind:name`) whose declared power includes it (`power_covers`)."""
    return {name: f"{p.kind}:{p.name}" for p in processors.values()
            if p.active_power_w or p.idle_power_w for name in p.power_covers}


def _ranks(memory) -> int:
    org = memory.organization
    return org.channels * org.pseudo_channels * org.ranks * memory.count


def _standby_w(memory) -> tuple[float, float] | None:
    """(precharge, active) standby power of every rank of every instance, in W; None without currents."""
    per = event_energies_pj(memory.part, memory.organization)
    if per is None:
        return None
    to_w = _ranks(memory) * 1e-12 / memory.part.tck_s
    return per["precharge_standby"] * to_w, per["active_standby"] * to_w


def _refresh_w(memory) -> float:
    """W of every rank's all-bank refreshes, one per tREFI (the controller's schedule); 0 without
    currents or tREFI."""
    per = event_energies_pj(memory.part, memory.organization)
    t_refi = memory.part.timing_cycles.get("tREFI", 0)
    if per is None or not t_refi:
        return 0.0
    return per["REF"] * _ranks(memory) * 1e-12 / (t_refi * memory.part.tck_s)


def _pim_command_w(memory, pim: dict | None) -> float | None:
    """W the commands of one instance's PIM ops draw while it is busy, from a step's command counts
    (one channel, times the memory's channels); None when the loop reports none or the part has no currents."""
    if not pim or not pim.get("command_counts") or not pim.get("seconds"):
        return None
    counts = {**pim["command_counts"], "cmd.REF": pim.get("refreshes", 0)}
    energy = command_energy_pj(memory, counts)
    if energy is None:
        return None
    return energy["total"] * 1e-12 * memory.organization.channels / pim["seconds"]


def _pim_sample(memory, report: dict, pims: list) -> dict | None:
    """The loop's command sample of `memory`'s PIM ops: its own (`pim_command_samples`), or the run's
    `pim` when it has one PIM memory."""
    own = (report.get("pim_command_samples") or {}).get(memory.name)
    return own if own is not None else (report.get("pim") if len(pims) == 1 else None)


def _pim_commands_j(memory, sample: dict | None, moved, busy_s: float) -> float | None:
    """J of one PIM memory's commands over the run (every instance), by the rules above; None when the
    loop reports nothing to count them from."""
    if moved is not None and sample and sample.get("bytes"):
        energy = command_energy_pj(memory, {**sample["command_counts"], "cmd.REF": sample.get("refreshes", 0)})
        total = sum(moved.values()) if isinstance(moved, dict) else moved
        return None if energy is None else energy["total"] * 1e-12 * total / sample["bytes"]
    if moved is not None:
        return _traffic_j(memory, moved)
    rate = _pim_command_w(memory, sample)
    return None if rate is None else rate * busy_s * memory.count


def _traffic_j(memory, moved) -> float | None:
    """J of the host accesses a loop reports for `memory` (bytes read, or {"read", "write"})."""
    if moved is None:
        return None
    read, write = (moved.get("read", 0.0), moved.get("write", 0.0)) if isinstance(moved, dict) else (moved, 0.0)
    energy = traffic_energy_pj(memory, read, write)
    return None if energy is None else energy * 1e-12


def run_energy(system, report: dict) -> dict:
    """`energy_j` (by resource, by component, total, and `not_counted`: what it leaves out, comma-separated),
    `energy_per_token_j`, `average_power_w`."""
    end = report.get("makespan_s") or report.get("end_to_end_s") or 0.0    # serving loops: the whole run
    processors = {p.name: p for p in system.processors}
    memories = {m.name: m for m in system.memories}
    links = {l.name: l for l in system.links}
    busy_of: dict[str, list[float]] = {}
    not_counted = []
    moved = report.get("link_bytes") or {}
    link_j = {f"link:{n}": b * 8 * links[n].energy_per_bit_j for n, b in moved.items()
              if n in links and links[n].energy_per_bit_j}
    roles = report.get("utilization_of") or {}
    for key, util in (report.get("utilization") or {}).items():
        owner, kind = _resource_owner(roles.get(key, key), processors, memories)
        if kind == "pool":
            continue
        link = _link_of(key, links) if owner is None else None
        if link is not None and (not link.energy_per_bit_j or link.name in moved):
            continue                       # listed below with the links that count nothing, or counted by bytes
        if link is not None:
            # busy at its bandwidth, each instance that reports apart for its share
            share = 1 if "[" in key else link.count
            link_j[f"link:{link.name}"] = link_j.get(f"link:{link.name}", 0.0) + (
                min(1.0, max(0.0, util)) * end * link.bandwidth_bytes_per_s * share * 8 * link.energy_per_bit_j)
            continue
        if owner is None:
            not_counted.append(key)
            continue
        busy_of.setdefault(owner.name, []).append(min(1.0, max(0.0, util)))
    by_resource: dict[str, float] = {}
    by_component = {"processor_active": 0.0, "processor_idle": 0.0, "dram_standby": 0.0, "dram_refresh": 0.0,
                    "pim_commands": 0.0,
                    "host_accesses": 0.0, "links": 0.0}
    for p in processors.values():
        if not (p.active_power_w or p.idle_power_w):
            not_counted.append(f"{p.kind}:{p.name}")
            continue
        share = busy_of.get(p.name, [0.0])
        busy = sum(share) / len(share) * end         # mean over the instances that report apart
        active, idle = p.active_power_w * busy * p.count, p.idle_power_w * (end - busy) * p.count
        by_component["processor_active"] += active
        by_component["processor_idle"] += idle
        by_resource[f"{p.kind}:{p.name}"] = active + idle
    pims = [m for m in memories.values() if m.pim is not None]
    covered = _covered(processors)
    for m in memories.values():
        standby = _standby_w(m)
        if standby is None:
            not_counted.append(f"memory:{m.name}")
            continue
        share = busy_of.get(m.name, [0.0])
        busy = sum(share) / len(share) * end
        energy = 0.0 if m.name in covered else standby[0] * (end - busy) + standby[1] * busy
        by_component["dram_standby"] += energy
        sampled = 0.0                                   # time a command sample's refreshes already cover
        if m.pim is not None:
            sample = _pim_sample(m, report, pims)
            commands = _pim_commands_j(m, sample, (report.get("pim_traffic_bytes") or {}).get(m.name), busy)
            if commands is None and busy > 0:          # a PIM memory the run never used misses nothing
                not_counted.append(f"PIM command energy of {m.name}")
            if commands is not None and sample is not None:
                sampled = busy
            by_component["pim_commands"] += commands or 0.0
            energy += commands or 0.0
        refresh = 0.0 if m.name in covered else _refresh_w(m) * (end - sampled)
        by_component["dram_refresh"] += refresh
        energy += refresh
        traffic = _traffic_j(m, (report.get("dram_traffic_bytes") or {}).get(m.name))
        if m.name in covered:                           # inside the processor's declared power
            traffic = 0.0
        if traffic is None:
            not_counted.append(f"host accesses of {m.name}")
        else:
            by_component["host_accesses"] += traffic
            energy += traffic
        by_resource[f"memory:{m.name}"] = energy
    not_counted += [f"link:{name}" for name in links if f"link:{name}" not in link_j]
    by_component["links"] = sum(link_j.values())
    by_resource.update(link_j)
    total = sum(by_component.values())
    counted = bool(by_resource)
    power = total / end if end and counted else None
    out = {"energy_j": {"by_resource": by_resource, "by_component": by_component, "total": total,
                        "not_counted": ", ".join(sorted(set(not_counted))),
                        "in_processor_power": ", ".join(f"memory:{m} in {p}" for m, p in sorted(covered.items())
                                                        if m in memories)},
           "average_power_w": power}
    if "tokens_per_s" in report:               # a graph model (one op) has no tokens: its energy is the total
        rate = report["tokens_per_s"]
        out["energy_per_token_j"] = power / rate if power is not None and rate else None
    return out


def power_levels(system, report: dict | None = None):
    """(base W, extra W of a resource while busy) for a power-over-time track: the base is every
    declared idle power and every memory's precharge standby and refresh; a busy processor adds active - idle
    power, a busy PIM memory active - precharge standby and, with the run's `report`, the command
    power of its PIM ops (per instance for `name[i]`; a loop's role through the report's `utilization_of`;
    `replicaN.role`, one of the report's `dp` data-parallel replicas, for its share)."""
    processors = {p.name: p for p in system.processors}
    memories = {m.name: m for m in system.memories}
    base = sum(p.idle_power_w * p.count for p in processors.values())
    covered = _covered(processors)
    standby = {m.name: (0.0, 0.0) if m.name in covered else w
               for m in memories.values() if (w := _standby_w(m)) is not None}
    base += sum(pre for pre, _ in standby.values())
    refresh = {m.name: _refresh_w(m) for m in memories.values() if m.name not in covered}
    base += sum(refresh.values())
    pims = [m for m in memories.values() if m.pim is not None]
    commands = {m.name: _pim_command_w(m, _pim_sample(m, report or {}, pims)) or 0.0 for m in pims}

    roles = (report or {}).get("utilization_of") or {}
    replicas = (report or {}).get("dp") or 1

    def extra(resource: str) -> float:
        share = 1.0
        head, _, role = resource.partition(".")
        if role and ":" not in head:             # one data-parallel replica's role (`replica0.gpu`)
            resource, share = role, 1 / replicas
        resource = roles.get(resource, resource)
        owner, kind = _resource_owner(resource, processors, memories)
        share *= 1 / owner.count if owner is not None and "[" in resource else 1
        if kind == "processor":
            return (owner.active_power_w - owner.idle_power_w) * owner.count * share
        if kind == "memory" and owner.name in standby:
            pre, act = standby[owner.name]
            sample = commands.get(owner.name, 0.0)       # counts its own refreshes
            return (act - pre) * share + (sample * owner.count - (refresh[owner.name] if sample else 0.0)) * share
        return 0.0
    return base, extra
