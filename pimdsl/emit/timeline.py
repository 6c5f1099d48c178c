"""Timelines as Chrome / Perfetto traces (the Trace Event Format, JSON object form).

An `Interval` is one busy span of one resource. A resource is named
``group:unit`` ("pim:s24_lpddr5x", "cpu:s24_cpu", "link:pcie"): the group
becomes a trace *process* and the unit a *thread* in it, so Perfetto shows
one track per resource, gathered under its group. A name without ':' is its
own group with one thread of the same name. Processes and threads are
numbered from 1 in order of first appearance, so the same intervals always
give the same trace.

Each interval is a complete event (``ph`` "X") with ``ts`` and ``dur`` in
microseconds, the format's unit; ``displayTimeUnit`` "ns" makes the viewer
label times in nanoseconds. Metadata events (``ph`` "M", process_name and
thread_name) carry the names. A power counter (``ph`` "C", process 0 "power") may go beside them.
"""
from __future__ import annotations

from ..ir.intervals import Interval

# Times are rounded to a picosecond (in microseconds, 6 decimals) so that float noise
# (0.30000000000000004) does not reach the file.
_DECIMALS = 6




def per_thread(intervals) -> list[Interval]:
    """Each interval whose `args` name `threads` (a host kernel split over CPU threads) as one
    interval per thread, on tracks "<resource> thread <i>", as PIM-SHERPA Fig. 11 draws them;
    the others unchanged."""
    out = []
    for iv in intervals:
        n = iv.args.get("threads")
        if not n:
            out.append(iv)
            continue
        out.extend(Interval(f"{iv.resource} thread {i}", iv.name, iv.start_s, iv.end_s, iv.category, iv.args)
                   for i in range(n))
    return out


def split_resource(resource: str) -> tuple[str, str]:
    """("pim", "s24_lpddr5x") for "pim:s24_lpddr5x"; (name, name) for a name without ':'."""
    group, sep, unit = resource.partition(":")
    return (group, unit) if sep else (resource, resource)


def _us(seconds: float) -> float:
    return round(seconds * 1e6, _DECIMALS)


def power_counter(intervals, base_w: float, extra_w) -> list[dict]:
    """A counter track ("ph" "C", process "power") of the power drawn over time: `base_w`, plus
    `extra_w(resource)` for each resource while any of its intervals is busy."""
    edges: list[tuple[float, str, int]] = []
    for iv in intervals:
        if iv.end_s > iv.start_s:
            edges += [(iv.start_s, iv.resource, 1), (iv.end_s, iv.resource, -1)]
    edges.sort(key=lambda e: (e[0], e[2]))
    busy: dict[str, int] = {}
    extra = {r: extra_w(r) for _, r, _ in edges}
    power, events = base_w, []
    for i, (t, resource, step) in enumerate(edges):
        before = busy.get(resource, 0)
        busy[resource] = before + step
        if (before == 0) != (busy[resource] == 0):
            power += extra[resource] * step
        if i + 1 == len(edges) or edges[i + 1][0] != t:
            events.append({"name": "power_w", "ph": "C", "ts": _us(t), "pid": 0,
                           "args": {"power_w": round(power, 6)}})
    if events:
        events.insert(0, {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "power"}})
    return events


def chrome_trace(intervals, counters: list[dict] = ()) -> dict:
    """The Trace Event Format object of `intervals` (any iterable of `Interval`), with `counters`
    (e.g. `power_counter`) beside them; `json.dump` it and open the file in
    https://ui.perfetto.dev or chrome://tracing."""
    pids: dict[str, int] = {}
    threads: dict[int, int] = {}                  # pid -> threads numbered so far
    tids: dict[str, tuple[int, int]] = {}
    metadata: list[dict] = []
    events: list[dict] = []
    for iv in intervals:
        if iv.resource not in tids:
            group, unit = split_resource(iv.resource)
            if group not in pids:
                pids[group] = len(pids) + 1
                metadata.append({"name": "process_name", "ph": "M", "pid": pids[group], "tid": 0,
                                 "args": {"name": group}})
            pid = pids[group]
            tid = threads[pid] = threads.get(pid, 0) + 1
            tids[iv.resource] = (pid, tid)
            metadata.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                             "args": {"name": unit}})
        pid, tid = tids[iv.resource]
        event = {"name": iv.name, "ph": "X", "ts": _us(iv.start_s), "dur": _us(iv.end_s - iv.start_s),
                 "pid": pid, "tid": tid}
        if iv.category:
            event["cat"] = iv.category
        if iv.args:
            event["args"] = dict(iv.args)
        events.append(event)
    return {"traceEvents": metadata + events + list(counters), "displayTimeUnit": "ns"}
