"""Memory-request traces: reading DRAMsim3 and Ramulator 2 formats, decoding addresses.

Formats ([REFDATA] dram README Sec. 10):
  * dramsim3: `<hex address> <op> <arrival cycle>` per line; the op is a write
    when it is WRITE, write, P_MEM_WR or BOFF, a read otherwise.
  * ramulator: LoadStoreTrace lines `LD <addr>` / `ST <addr>` (decimal or 0x
    hex), or ReadWriteTrace lines `R <v0,v1,...>` / `W <...>` with the address
    vector in the standard's level order (channel, rank or pseudo-channel,
    bank group, bank, row, column in transactions). Ramulator traces carry no
    timing: every request may arrive at cycle 0, as in the reference harness's
    sustained runs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.hardware import Memory

DRAMSIM3_WRITES = {"WRITE", "write", "P_MEM_WR", "BOFF"}
FORMATS = ("dramsim3", "ramulator")


class TraceError(Exception):
    def __init__(self, path: str, line: int, col: int, message: str, text: str = "", hint: str = ""):
        super().__init__(message)
        self.path, self.line, self.col, self.message, self.text, self.hint = path, line, col, message, text, hint

    def render(self) -> str:
        out = f"{self.path}:{self.line}:{self.col}: error: {self.message}"
        if self.text:
            out += f"\n  {self.text}\n  {' ' * (self.col - 1)}^"
        if self.hint:
            out += f"\n  hint: {self.hint}"
        return out


@dataclass
class Trace:
    """Requests in trace order, decoded onto a memory's hierarchy."""
    arrival: list[int]
    is_write: list[bool]
    channel: list[int]
    bank: list[int]          # flat bank index within its channel
    row: list[int]
    column: list[int]

    def __len__(self) -> int:
        return len(self.arrival)


def read_trace(path: str, memory: Memory, fmt: str) -> Trace:
    if fmt not in FORMATS:
        raise TraceError(path, 1, 1, f"unknown trace format '{fmt}'", hint="use " + " or ".join(FORMATS))
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise TraceError(path, 1, 1, f"cannot read the trace: {exc.strerror}") from None
    if fmt == "dramsim3":
        return _dramsim3(path, lines, memory)
    return _ramulator(path, lines, memory)


def _bad(path, i, text, token, message, hint):
    col = text.find(token) + 1 if token and token in text else 1
    return TraceError(path, i + 1, col, message, text, hint)


def _dramsim3(path, lines, memory):
    addrs, writes, arrival = [], [], []
    for i, text in enumerate(lines):
        parts = text.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) != 3:
            raise _bad(path, i, text, "", f"expected `<hex address> <READ|WRITE> <cycle>`, found {len(parts)} field(s)",
                       "is this a Ramulator trace? use --trace-format ramulator")
        a, op, cyc = parts
        try:
            addrs.append(int(a, 16))
        except ValueError:
            raise _bad(path, i, text, a, f"'{a}' is not a hexadecimal address", "write e.g. 0x1f40") from None
        try:
            arrival.append(int(cyc))
        except ValueError:
            raise _bad(path, i, text, cyc, f"'{cyc}' is not a decimal cycle", "write the arrival cycle, e.g. 0") from None
        writes.append(op in DRAMSIM3_WRITES)
    return _decode(path, memory, addrs, writes, arrival)


def _ramulator(path, lines, memory):
    addrs, writes, vectors = [], [], []
    for i, text in enumerate(lines):
        parts = text.split()
        if not parts or parts[0].startswith("#"):
            continue
        op = parts[0]
        if op not in ("LD", "ST", "R", "W") or len(parts) != 2:
            raise _bad(path, i, text, op, "expected `LD <addr>`, `ST <addr>`, `R <v0,v1,...>` or `W <...>`",
                       "is this a DRAMsim3 trace? use --trace-format dramsim3")
        writes.append(op in ("ST", "W"))
        value = parts[1]
        try:
            if op in ("LD", "ST"):
                addrs.append(int(value, 0))
            else:
                vectors.append([int(v) for v in value.split(",")])
        except ValueError:
            raise _bad(path, i, text, value, f"'{value}' is not an address", "decimal or 0x hexadecimal") from None
    if vectors and addrs:
        raise TraceError(path, 1, 1, "the trace mixes LD/ST addresses and R/W address vectors")
    if vectors:
        return _from_vectors(path, memory, vectors, writes)
    return _decode(path, memory, addrs, writes, [0] * len(addrs))


def _decode(path, memory: Memory, addrs, writes, arrival) -> Trace:
    org = memory.organization
    a = np.array(addrs, dtype=np.uint64)
    bits = memory.address_bits

    def field(name):
        if name not in bits:
            return np.zeros(len(a), dtype=np.int64)
        low, width = bits[name]
        return ((a >> np.uint64(low)) & np.uint64((1 << width) - 1)).astype(np.int64)

    if not bits:
        raise TraceError(path, 1, 1, f"memory '{memory.name}' has no address_map to decode the trace with",
                         hint="add e.g. `address_map = [row, bank, bank_group, rank, column];`")
    ch, pc, ra = field("channel"), field("pseudo_channel"), field("rank")
    bg, ba = field("bank_group"), field("bank")
    bank = ((pc * org.ranks + ra) * org.bank_groups + bg) * org.banks_per_group + ba
    return Trace(list(arrival), list(writes), ch.tolist(), bank.tolist(), field("row").tolist(),
                 field("column").tolist())


def _from_vectors(path, memory: Memory, vectors, writes) -> Trace:
    org = memory.organization
    hbm = memory.part.family.startswith("hbm")
    levels = ("channel", "pseudo_channel" if hbm else "rank", "bank_group", "bank", "row", "column")
    sizes = {"channel": org.channels, "pseudo_channel": org.pseudo_channels, "rank": org.ranks,
             "bank_group": org.bank_groups, "bank": org.banks_per_group, "row": org.rows,
             "column": org.bursts_per_row}
    v = np.array(vectors, dtype=np.int64) if vectors else np.zeros((0, 6), dtype=np.int64)
    if v.ndim != 2 or v.shape[1] != len(levels):
        raise TraceError(path, 1, 1, f"an address vector needs {len(levels)} values ({', '.join(levels)})")
    for j, name in enumerate(levels):
        bad = np.nonzero((v[:, j] < 0) | (v[:, j] >= sizes[name]))[0]
        if len(bad):
            raise TraceError(path, int(bad[0]) + 1, 1, f"{name} {v[bad[0], j]} is out of range (0..{sizes[name] - 1})")
    col = dict(zip(levels, v.T))
    pc = col.get("pseudo_channel", np.zeros(len(v), dtype=np.int64))
    ra = col.get("rank", np.zeros(len(v), dtype=np.int64))
    bank = ((pc * org.ranks + ra) * org.bank_groups + col["bank_group"]) * org.banks_per_group + col["bank"]
    return Trace([0] * len(v), list(writes), col["channel"].tolist(), bank.tolist(), col["row"].tolist(),
                 col["column"].tolist())
