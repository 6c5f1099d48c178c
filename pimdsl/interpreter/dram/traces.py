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

import re
from dataclasses import dataclass

import numpy as np

from ...ir.errors import PimdslError, Span
from ...ir.files import TRACE_LIMIT_BYTES, InputFileError, read_input
from ...ir.hardware import Memory
MAX_CYCLE = 2**62 - 1      # cycles are int64 in the compiled engine; leave room to add latencies

from ...budget import DEFAULT_MAX_WORK, trace_estimate, trace_work
from . import TRACE_FORMATS, trace_scan

DRAMSIM3_WRITES = {"WRITE", "write", "P_MEM_WR", "BOFF"}
FORMATS = TRACE_FORMATS


class TraceError(PimdslError):
    def __init__(self, path: str, line: int, col: int, message: str, text: str = "", hint: str = ""):
        super().__init__(message, Span(path, line, col), hint)
        self.path, self.line, self.col, self.text = path, line, col, text

    def render(self) -> str:
        out = f"{self.path}:{self.line}:{self.col}: error: {self.message}"
        if self.text:
            out += f"\n  {self.text}\n  {' ' * (self.col - 1)}^"
        if self.hint:
            out += f"\n  hint: {self.hint}"
        return out


@dataclass
class Trace:
    """Requests in trace order, decoded onto a memory's hierarchy (numpy arrays as read; any
    sequences will do)."""
    arrival: list[int]
    is_write: list[bool]
    channel: list[int]
    bank: list[int]          # flat bank index within its channel
    row: list[int]
    column: list[int]

    def __len__(self) -> int:
        return len(self.arrival)


def read_trace(path: str, memory: Memory, fmt: str, max_work: float = DEFAULT_MAX_WORK) -> Trace:
    """The requests of a trace file, each checked where it stands: a bad one is a TraceError at
    its line and column. Replays estimated past `max_work` (see budget.py) are refused at the
    request that crosses the limit."""
    if fmt not in FORMATS:
        raise TraceError(path, 1, 1, f"unknown trace format '{fmt}'", hint="use " + " or ".join(FORMATS))
    try:
        data = read_input(path, "trace", TRACE_LIMIT_BYTES)
    except InputFileError as exc:
        raise TraceError(path, 1, 1, exc.message, hint=exc.hint) from None
    check = _Checker(path, memory, max_work)
    if fmt == "dramsim3" and memory.address_bits and trace_scan.built():
        columns = trace_scan.scan(data, memory, _WRITE_WORDS)        # compiled: read and decoded in one pass
        if columns is not None and not (len(columns[0]) and trace_work(len(columns[0]), int(columns[0][-1])) > max_work):
            return Trace(*columns)
    elif fmt == "dramsim3":
        fast = _dramsim3_arrays(data, memory.capacity_bytes)
        if fast is not None and not (len(fast[0]) and trace_work(len(fast[0]), int(fast[2][-1])) > max_work):
            return _decode(check, *fast)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TraceError(path, line, col, f"byte 0x{data[exc.start]:02x} is not UTF-8 text",
                         hint="a trace is a text file of requests, one per line") from None
    reader = _dramsim3 if fmt == "dramsim3" else _ramulator
    return reader(check, lines)


class _Checker:
    """Checks each request's values as it is read, so that an error points at its line."""

    def __init__(self, path: str, memory: Memory, max_work: float):
        self.path, self.memory, self.max_work = path, memory, max_work
        self.last_arrival = 0
        self.requests = 0

    def bad(self, i, text, where, message, hint=""):
        """An error at line i, under the field `where` (its text, or its index; "" for the line)."""
        fields = list(re.finditer(r"\S+", text))
        if isinstance(where, int):
            at = fields[where] if fields else None
        else:
            at = next((f for f in fields if where and f.group() == where), None)
        return TraceError(self.path, i + 1, at.start() + 1 if at else 1, message, text, hint)

    def address(self, i, text, token, value) -> int:
        capacity = self.memory.capacity_bytes
        if value < 0:
            raise self.bad(i, text, token, f"address {token} is negative", "addresses are byte offsets from 0")
        if value >= capacity:
            raise self.bad(i, text, token, f"address {token} is beyond memory '{self.memory.name}' "
                           f"({capacity} B, the last address is {capacity - 1:#x})",
                           "is the trace meant for a larger memory? check --memory")
        return value

    def arrival(self, i, text, value) -> int:
        if value < 0:
            raise self.bad(i, text, 2, f"arrival cycle {value} is negative", "cycles count from 0")
        if value > MAX_CYCLE:
            raise self.bad(i, text, 2, f"arrival cycle of {len(str(value))} digits is beyond the engine's range "
                           f"(at most {MAX_CYCLE})", "check the arrival cycles")
        if value < self.last_arrival:
            raise self.bad(i, text, 2, f"arrival cycle {value} goes backwards (the request before "
                           f"arrives at {self.last_arrival})", "sort the trace by arrival cycle")
        self.last_arrival = value
        return value

    def count(self, i, text):
        """One more request; refused where the replay's estimated work crosses the limit."""
        self.requests += 1
        if trace_work(self.requests, self.last_arrival) > self.max_work:
            estimate = trace_estimate(self.requests, self.last_arrival)
            refusal = estimate.refusal(self.max_work)
            raise self.bad(i, text, -1, refusal,
                           f"check the arrival cycles, or raise the limit with --max-work {estimate.work * 2:.2g}")


def _dramsim3(check: _Checker, lines):
    addrs, writes, arrival = [], [], []
    for i, text in enumerate(lines):
        parts = text.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) != 3:
            raise check.bad(i, text, "", f"expected `<hex address> <READ|WRITE> <cycle>`, found {len(parts)} field(s)",
                            "is this a Ramulator trace? use --trace-format ramulator")
        a, op, cyc = parts
        try:
            address = int(a, 16)
        except ValueError:
            raise check.bad(i, text, a, f"'{a}' is not a hexadecimal address", "write e.g. 0x1f40") from None
        try:
            cycle = int(cyc)
        except ValueError:
            raise check.bad(i, text, 2, f"'{cyc}' is not a decimal cycle", "write the arrival cycle, e.g. 0") from None
        if not op.replace("_", "").isalpha():        # a number or a sign where the op goes: a shifted line
            raise check.bad(i, text, 1, f"'{op}' is not an operation", "write READ or WRITE")
        addrs.append(check.address(i, text, a, address))
        arrival.append(check.arrival(i, text, cycle))
        writes.append(op in DRAMSIM3_WRITES)
        check.count(i, text)
    return _decode(check, addrs, writes, arrival)


BLOCK_BYTES = 1 << 20               # numpy's temporaries stay a few MB whatever the trace's size
# byte classes: 0 anything the line-by-line reader must judge (a comment, control or non-ASCII
# bytes), then blank, newline, carriage return (only before a newline: Python's line numbers stay
# ours) and a token's character
BAD, BLANK, NEWLINE, CR, SOLID = range(5)
_CLASS = np.zeros(256, np.uint8)
_CLASS[[9, 32]], _CLASS[10], _CLASS[13], _CLASS[0x21:0x7f] = BLANK, NEWLINE, CR, SOLID
_CLASS[ord("#")] = BAD
_HEX = np.full(256, 99, np.uint64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _HEX[bytes([_c]).upper()[0]] = _i
# the write op names as little-endian 8-byte words, zero padded (all are at most 8 bytes)
_WRITE_WORDS = np.array([int.from_bytes(op.encode().ljust(8, b"\0"), "little") for op in DRAMSIM3_WRITES], np.uint64)


def _dramsim3_arrays(data: bytes, capacity: int):
    """(addresses, is_write, arrivals) of a DRAMsim3 trace as numpy arrays, or None where a line
    needs the line-by-line reader (see the module's docstring)."""
    parts, start, last = [], 0, 0
    while start < len(data):
        end = data.find(b"\n", min(start + BLOCK_BYTES, len(data)) - 1)
        end = len(data) if end < 0 else end + 1
        block = _dramsim3_block(np.frombuffer(data, np.uint8, end - start, start))
        if block is None:
            return None
        if len(block[2]):
            if block[2][0] < last:
                return None
            last = block[2][-1]
        parts.append(block)
        start = end
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.bool_), np.zeros(0, np.int64)
    addrs, writes, arrival = (np.concatenate(p) for p in zip(*parts))
    if len(addrs) and (addrs.max() >= capacity):
        return None
    return addrs, writes, arrival


def _dramsim3_block(b: np.ndarray):
    """One block of whole lines; None unless every line is `<hex> <op> <decimal>` or blank, in order."""
    cls = _CLASS[b]
    if not cls.all():
        return None
    if (b == 13).any() and ((cls[:-1] == CR) & (b[1:] != 10)).any() or cls[-1] == CR:
        return None
    solid = np.zeros(len(b) + 2, np.bool_)
    solid[1:-1] = cls == SOLID
    edges = np.flatnonzero(solid[1:] != solid[:-1])
    starts, ends = edges[0::2], edges[1::2]
    if len(starts) % 3:
        return None
    # three tokens a line: no newline inside a triple, one between triples
    newlines = np.flatnonzero(cls == NEWLINE)
    first, last = np.searchsorted(newlines, starts[0::3]), np.searchsorted(newlines, ends[2::3])
    if (first != last).any() or (first[1:] == last[:-1]).any():
        return None
    a0, a1 = starts[0::3], ends[0::3]
    prefixed = (a1 - a0 > 2) & (b[a0] == ord("0")) & ((b[np.minimum(a0 + 1, len(b) - 1)] | 0x20) == ord("x"))
    addrs = _digits(b, a0 + 2 * prefixed, a1, 16, 15)
    arrival = _digits(b, starts[2::3], ends[2::3], 10, 18)
    if addrs is None or arrival is None:
        return None
    arrival = arrival.astype(np.int64)
    if (arrival[1:] < arrival[:-1]).any():
        return None
    o0, length = starts[1::3], ends[1::3] - starts[1::3]
    # an op of letters and `_` only, one letter at least: a number or a sign there (a shifted line), or
    # `_` alone, goes to the line reader
    alpha = ((b | 0x20) >= ord("a")) & ((b | 0x20) <= ord("z"))
    others = np.concatenate(([0], np.cumsum(~(alpha | (b == ord("_"))))))
    letters = np.concatenate(([0], np.cumsum(alpha)))
    if (others[ends[1::3]] - others[o0]).any() or not (letters[ends[1::3]] - letters[o0]).all():
        return None
    word = np.zeros(len(o0), np.uint64)
    for col in range(8):                   # the op's first 8 bytes as a little-endian word
        byte = b[np.minimum(o0 + col, len(b) - 1)].astype(np.uint64)
        word |= np.where(col < length, byte, 0) << np.uint64(8 * col)
    writes = np.isin(word, _WRITE_WORDS) & (length <= 8)
    return addrs, writes, arrival


def _digits(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, base: int, most: int):
    """The numbers written from starts to ends in `base` (uint64), or None where a token is empty,
    longer than `most` digits or holds a character that is not a digit."""
    length = ends - starts
    if not len(length):
        return np.zeros(0, np.uint64)
    if length.min() < 1 or length.max() > most:
        return None
    value = np.zeros(len(starts), np.uint64)
    for col in range(int(length.max())):          # Horner's rule, one digit column at a time
        inside = col < length
        d = _HEX[b[np.minimum(starts + col, len(b) - 1)]]
        if (d[inside] >= base).any():
            return None
        value = np.where(inside, value * np.uint64(base) + d, value)
    return value


def _ramulator(check: _Checker, lines):
    levels = _levels(check.memory)
    addrs, writes, vectors = [], [], []
    for i, text in enumerate(lines):
        parts = text.split()
        if not parts or parts[0].startswith("#"):
            continue
        op = parts[0]
        if op not in ("LD", "ST", "R", "W") or len(parts) != 2:
            raise check.bad(i, text, op, "expected `LD <addr>`, `ST <addr>`, `R <v0,v1,...>` or `W <...>`",
                            "is this a DRAMsim3 trace? use --trace-format dramsim3")
        value = parts[1]
        vector = op in ("R", "W")
        if (vectors if not vector else addrs):
            raise check.bad(i, text, op, "the trace mixes LD/ST addresses and R/W address vectors",
                            "use one kind of line in a trace")
        try:
            numbers = [int(v) for v in value.split(",")] if vector else int(value, 0)
        except ValueError:
            raise check.bad(i, text, value, f"'{value}' is not an address",
                            "a vector of decimal numbers" if vector else "decimal or 0x hexadecimal") from None
        if vector:
            vectors.append(_vector(check, i, text, value, numbers, levels))
        else:
            addrs.append(check.address(i, text, value, numbers))
        writes.append(op in ("ST", "W"))
        check.count(i, text)
    if vectors:
        return _from_vectors(check.memory, levels, vectors, writes)
    return _decode(check, addrs, writes, [0] * len(addrs))


def _levels(memory: Memory) -> dict[str, int]:
    """The address-vector levels of a Ramulator ReadWriteTrace, in order, with their sizes."""
    org = memory.organization
    second = "pseudo_channel" if memory.part.family.startswith("hbm") else "rank"
    return {"channel": org.channels, second: org.pseudo_channels if second == "pseudo_channel" else org.ranks,
            "bank_group": org.bank_groups, "bank": org.banks_per_group, "row": org.rows,
            "column": org.bursts_per_row}


def _vector(check: _Checker, i, text, token, numbers, levels) -> list[int]:
    if len(numbers) != len(levels):
        raise check.bad(i, text, token, f"an address vector needs {len(levels)} values ({', '.join(levels)}), "
                        f"this one has {len(numbers)}")
    for value, (name, size) in zip(numbers, levels.items()):
        if not 0 <= value < size:
            raise check.bad(i, text, token, f"{name} {value} is out of range (0..{size - 1})")
    return numbers


def _decode(check: _Checker, addrs, writes, arrival) -> Trace:
    memory, path = check.memory, check.path
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
    return Trace(np.asarray(arrival, np.int64), np.asarray(writes, np.bool_), ch, bank, field("row"),
                 field("column"))


def _from_vectors(memory: Memory, levels: dict[str, int], vectors, writes) -> Trace:
    org = memory.organization
    v = np.array(vectors, dtype=np.int64).reshape(len(vectors), len(levels))
    col = dict(zip(levels, v.T))
    pc = col.get("pseudo_channel", np.zeros(len(v), dtype=np.int64))
    ra = col.get("rank", np.zeros(len(v), dtype=np.int64))
    bank = ((pc * org.ranks + ra) * org.bank_groups + col["bank_group"]) * org.banks_per_group + col["bank"]
    return Trace(np.zeros(len(v), np.int64), np.asarray(writes, np.bool_), col["channel"], bank, col["row"],
                 col["column"])
