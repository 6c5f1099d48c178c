"""The fast readers of DRAMsim3 traces (the compiled scanner, dram/trace_scan.py, and the numpy
reader used without its build) against the line-by-line reader (the reference): same requests
wherever they take a trace on trust, and every diagnostic still located."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pimdsl.interpreter.dram import trace_scan
from pimdsl.interpreter.dram import traces as T
from pimdsl.interpreter.dram.traces import TraceError, read_trace

from .conftest import ROOT
from .test_dram_engine import memory

COLUMNS = ("arrival", "is_write", "channel", "bank", "row", "column")


@pytest.fixture(params=["compiled", "numpy"], autouse=True)
def reader(request, monkeypatch):
    """Each test with the compiled scanner (built ahead of time) and with the numpy reader."""
    if request.param == "compiled":
        assert trace_scan.built(), "the trace scanner has no current ahead-of-time build: run `python -m pimdsl.aot`"
    else:
        monkeypatch.setattr(trace_scan, "built", lambda: False)
    return request.param


def by_lines(path, mem, max_work=1e8):
    check = T._Checker(str(path), mem, max_work)
    return T._dramsim3(check, path.read_text().splitlines())


def same(a, b):
    return all(np.array_equal(np.asarray(getattr(a, c)), np.asarray(getattr(b, c))) for c in COLUMNS)


def test_plain_lines_are_read_by_arrays_identically(tmp_path, reader):
    mem = memory()
    rng = np.random.default_rng(5)
    n = 120_000                       # several blocks
    addrs = rng.integers(0, mem.capacity_bytes, n) & ~63
    ops = rng.choice(["READ", "WRITE", "write", "P_MEM_WR", "BOFF", "RD", "WRITEBACK", "P_MEM_RD"], n)
    arrival = np.cumsum(rng.integers(0, 3, n))
    form = ["0x{:x}", "0X{:X}", "{:x}", "0x{:08X}"]
    lines = [f"{form[i % 4].format(a)}{' ' if i % 5 else chr(9)}{o}  {t}" for i, (a, o, t) in enumerate(zip(addrs, ops, arrival))]
    path = tmp_path / "t.trace"
    path.write_text("\n".join(lines[:1000]) + "\r\n\n" + "\n".join(lines[1000:]) + "\n")
    fast = (trace_scan.scan(path.read_bytes(), mem, T._WRITE_WORDS) if reader == "compiled"
            else T._dramsim3_arrays(path.read_bytes(), mem.capacity_bytes))
    assert fast is not None                                   # nothing here needs the line reader
    assert same(read_trace(str(path), mem, "dramsim3"), by_lines(path, mem))
    assert read_trace(str(path), mem, "dramsim3").is_write.sum() == np.isin(ops, ["WRITE", "write", "P_MEM_WR", "BOFF"]).sum()


LINE = st.one_of(
    st.tuples(st.integers(0, 1 << 36), st.sampled_from(["READ", "WRITE", "BOFF", "write", "X"]),
              st.integers(0, 50)).map(lambda t: f"0x{t[0]:x} {t[1]} {t[2]}"),
    st.sampled_from(["", "   ", "# a comment", "0x40 READ", "0x40 READ 5 6", "0xZZ READ 1", "-0x40 READ 1",
                     "0x40 READ +3", "0x40 READ -1", "0x_40 READ 1", "0x40 READ 1_0", "0x40\x0bREAD 1",
                     "0x40 READ 1\r", "0x40 RÉAD 1", "0x40 _ 1", "0x40 RE_AD 1", "0x40 READ 1 # x", "0x" + "f" * 20 + " READ 1", "0x40 READ " + "9" * 25]))


@settings(max_examples=150, deadline=None)
@given(st.lists(LINE, max_size=12))
def test_any_text_reads_as_the_line_reader_reads_it(tmp_path_factory, lines):
    mem = memory()
    path = tmp_path_factory.mktemp("t") / "t.trace"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        expected = by_lines(path, mem)
    except TraceError as exc:
        with pytest.raises(TraceError) as err:
            read_trace(str(path), mem, "dramsim3")
        assert err.value.render() == exc.render()
        return
    assert same(read_trace(str(path), mem, "dramsim3"), expected)


def test_a_bad_line_deep_in_a_large_trace_is_located(tmp_path):
    mem = memory()
    lines = [f"0x{64 * i:x} READ {i}" for i in range(100_000)]
    lines[77_776] = "0x40 READ 12"                         # goes backwards, in a later block
    path = tmp_path / "big.trace"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as err:
        read_trace(str(path), mem, "dramsim3")
    assert err.value.render().splitlines()[0] == (f"{path}:77777:11: error: arrival cycle 12 goes backwards "
                                                  "(the request before arrives at 77775)")


@pytest.mark.parametrize("path", sorted((ROOT / "validation" / "reference" / "dram" / "traces").glob("*.trace")),
                         ids=lambda p: p.stem)
def test_every_stored_reference_trace_decodes_as_the_line_reader_decodes_it(path):
    """Channels, banks, rows and columns of four memories (one to eight channels, ranks, pseudo-channels)."""
    mem = memory(path.name.split("__")[0])
    fast = read_trace(str(path), mem, "dramsim3")
    assert same(fast, by_lines(path, mem)) and len(fast) >= 2000
    assert any(len(np.unique(getattr(fast, c))) > 1 for c in ("bank", "row", "column"))     # not all zero
