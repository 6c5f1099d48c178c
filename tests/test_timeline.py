"""Chrome / Perfetto trace export of timelines."""
from __future__ import annotations

import json

import pytest

from pimdsl.emit.timeline import chrome_trace, split_resource
from pimdsl.ir.intervals import Interval

INTERVALS = [
    Interval("cpu:s24_cpu", "L0.q_proj", 0.0, 122.9e-6, "gemv", {"bytes": 8388608}),
    Interval("pim:s24_lpddr5x", "L0.k_proj", 10e-9, 0.3e-6, "pim"),
    Interval("link:pcie", "L0.kv", 1e-6, 3e-6),
    Interval("cpu:s24_cpu", "L0.o_proj", 122.9e-6, 130e-6, "gemv"),
    Interval("pim:s24_lpddr5x_ch1", "L0.v_proj", 0.0, 1e-6, "pim"),
    Interval("host", "sync", 0.0, 0.0),
]


def by_phase(trace, ph):
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def test_complete_events_in_microseconds():
    trace = chrome_trace(INTERVALS)
    assert trace["displayTimeUnit"] == "ns"
    events = by_phase(trace, "X")
    assert [e["name"] for e in events] == [iv.name for iv in INTERVALS]
    q, k = events[0], events[1]
    assert (q["ts"], q["dur"], q["cat"], q["args"]) == (0.0, 122.9, "gemv", {"bytes": 8388608})
    assert (k["ts"], k["dur"]) == (0.01, 0.29)                    # rounded, no float noise
    assert "cat" not in events[2] and "args" not in events[2]
    assert events[-1]["dur"] == 0.0


def test_resources_group_into_processes_and_threads():
    trace = chrome_trace(INTERVALS)
    meta = by_phase(trace, "M")
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert processes == {1: "cpu", 2: "pim", 3: "link", 4: "host"}
    assert threads == {(1, 1): "s24_cpu", (2, 1): "s24_lpddr5x", (3, 1): "pcie",
                       (2, 2): "s24_lpddr5x_ch1", (4, 1): "host"}
    events = by_phase(trace, "X")
    assert (events[0]["pid"], events[0]["tid"]) == (events[3]["pid"], events[3]["tid"]) == (1, 1)
    assert (events[4]["pid"], events[4]["tid"]) == (2, 2)
    # every event's (pid, tid) is named
    assert {(e["pid"], e["tid"]) for e in events} <= set(threads)
    # metadata comes first, so a viewer knows the names before the events
    assert trace["traceEvents"][:len(meta)] == meta


def test_split_resource():
    assert split_resource("pim:s24_lpddr5x") == ("pim", "s24_lpddr5x")
    assert split_resource("link:dimm:0") == ("link", "dimm:0")
    assert split_resource("host") == ("host", "host")


def test_json_round_trip():
    trace = chrome_trace(INTERVALS)
    assert json.loads(json.dumps(trace)) == trace
    assert chrome_trace([]) == {"traceEvents": [], "displayTimeUnit": "ns"}


def test_bad_intervals_are_refused():
    with pytest.raises(ValueError, match="before it starts"):
        Interval("cpu:a", "x", 2.0, 1.0)
    with pytest.raises(ValueError, match="non-finite"):
        Interval("cpu:a", "x", 0.0, float("inf"))
