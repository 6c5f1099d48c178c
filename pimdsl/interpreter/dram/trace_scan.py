"""A DRAMsim3 trace read and decoded in one compiled pass over the file's bytes.

`traces.read_trace` takes a well-formed trace from here when the kernel is built ahead of time
(aot.py), else from its numpy reader (`traces._dramsim3_arrays`); either way a file with anything
the line-by-line reader must judge (a comment, a control or non-ASCII byte, a malformed or
out-of-range field, arrivals going backwards) is left to that reader, which locates the error.
The kernel accepts exactly the lines `<hex address> <op> <decimal cycle>` that the numpy reader
accepts (an op must hold a letter here, so `_` alone goes to the line reader, which refuses it)
and decodes each address onto the hierarchy as `traces._decode` does.
"""
from __future__ import annotations

import numpy as np

from ...aot import bind, entry
from ...jit_cache import njit

# address fields, in the order of `fields` rows
FIELDS = ("channel", "pseudo_channel", "rank", "bank_group", "bank", "row", "column")
MAX_HEX, MAX_DEC = 15, 18               # the numpy reader's digit limits (int64 with room to spare)
# each byte's value as a hexadecimal digit, -1 if none: a lookup rather than range tests, whose branches a random
# address's mix of digits and letters mispredicts
HEX_VALUE = np.full(256, -1, np.int64)
for _i, _ch in enumerate(b"0123456789abcdef"):
    HEX_VALUE[_ch] = HEX_VALUE[ord(chr(_ch).upper())] = _i


@njit(cache=True, _nrt=False)
def _token_end(data, i):
    n = data.shape[0]
    while i < n and 0x21 <= data[i] <= 0x7E:
        i += 1
    return i


@njit(cache=True)
def scan_dramsim3(data, capacity, write_words, fields, dims):
    """(count, arrival, is_write, channel, bank, row, column) of the trace in `data`, or count -1 where
    the line reader must judge a line. `fields[f]` is (low bit, width) of FIELDS[f] (width 0: absent);
    `dims` the ranks, bank groups and banks per group."""
    n = data.shape[0]
    lines = 1
    for i in range(n):
        if data[i] == 10:
            lines += 1
    arrival = np.zeros(lines, np.int64)
    is_write = np.zeros(lines, np.bool_)
    channel = np.zeros(lines, np.int64)
    bank = np.zeros(lines, np.int64)
    row = np.zeros(lines, np.int64)
    column = np.zeros(lines, np.int64)
    value = np.zeros(len(FIELDS), np.int64)
    starts = np.zeros(3, np.int64)
    ends = np.zeros(3, np.int64)
    count = 0
    last = 0
    i = 0
    while i < n:
        # one line: blanks, then three tokens separated by blanks, then blanks and its end
        tokens = 0
        while True:
            while i < n and (data[i] == 32 or data[i] == 9):
                i += 1
            if i >= n or data[i] == 10:
                break
            if data[i] == 13:
                if i + 1 < n and data[i + 1] == 10:
                    i += 1
                    break
                return -1, arrival, is_write, channel, bank, row, column
            if data[i] < 0x21 or data[i] > 0x7E or data[i] == 35 or tokens == 3:    # control, non-ASCII, '#'
                return -1, arrival, is_write, channel, bank, row, column
            starts[tokens] = i
            i = _token_end(data, i)
            ends[tokens] = i
            tokens += 1
            if i < n and not (data[i] == 32 or data[i] == 9 or data[i] == 10 or data[i] == 13):
                return -1, arrival, is_write, channel, bank, row, column
        i += 1                                          # past the newline
        if tokens == 0:
            continue
        if tokens != 3:
            return -1, arrival, is_write, channel, bank, row, column
        # the address: hexadecimal, optionally 0x-prefixed
        a0, a1 = starts[0], ends[0]
        if a1 - a0 > 2 and data[a0] == 48 and data[a0 + 1] | 0x20 == 120:
            a0 += 2
        if a1 - a0 > MAX_HEX:
            return -1, arrival, is_write, channel, bank, row, column
        address = 0
        for j in range(a0, a1):
            d = HEX_VALUE[data[j]]
            if d < 0:
                return -1, arrival, is_write, channel, bank, row, column
            address = address * 16 + d
        if address >= capacity:
            return -1, arrival, is_write, channel, bank, row, column
        # the arrival cycle: decimal, not before the previous one
        c0, c1 = starts[2], ends[2]
        if c1 - c0 > MAX_DEC:
            return -1, arrival, is_write, channel, bank, row, column
        cycle = 0
        for j in range(c0, c1):
            d = data[j]
            if d < 48 or d > 57:
                return -1, arrival, is_write, channel, bank, row, column
            cycle = cycle * 10 + (d - 48)
        if cycle < last:
            return -1, arrival, is_write, channel, bank, row, column
        last = cycle
        # the op: letters and `_`, at least one letter; a write when one of `write_words`
        o0, o1 = starts[1], ends[1]
        word = np.uint64(0)
        letters = 0
        for j in range(o0, o1):
            d = data[j]
            if 97 <= d | 0x20 <= 122:
                letters += 1
            elif d != 95:
                return -1, arrival, is_write, channel, bank, row, column
            if j - o0 < 8:
                word |= np.uint64(d) << np.uint64(8 * (j - o0))
        if letters == 0:
            return -1, arrival, is_write, channel, bank, row, column
        writing = False
        if o1 - o0 <= 8:
            for j in range(write_words.shape[0]):       # (by index: iterating an array counts references)
                if write_words[j] == word:
                    writing = True
        # decoded onto the hierarchy (traces._decode)
        for f in range(len(FIELDS)):
            low, width = fields[f, 0], fields[f, 1]
            value[f] = (address >> low) & ((1 << width) - 1) if width > 0 and low < 63 else 0
        arrival[count] = cycle
        is_write[count] = writing
        channel[count] = value[0]
        bank[count] = ((value[1] * dims[0] + value[2]) * dims[1] + value[3]) * dims[2] + value[4]
        row[count] = value[5]
        column[count] = value[6]
        count += 1
    return count, arrival, is_write, channel, bank, row, column


bind(globals(), __file__)          # scan_dramsim3 from its ahead-of-time build when current (aot.py)


def built() -> bool:
    """Is the scanner built ahead of time? (Without a build the numpy reader is quicker than loading numba.)"""
    return entry(__file__, "scan_dramsim3") is not None


def scan(data: bytes, memory, write_words: np.ndarray):
    """(arrival, is_write, channel, bank, row, column) arrays of a well-formed DRAMsim3 trace on
    `memory`, or None where the line reader must judge a line."""
    bits = memory.address_bits
    fields = np.array([bits.get(name, (0, 0)) for name in FIELDS], np.int64).reshape(len(FIELDS), 2)
    org = memory.organization
    dims = np.array([org.ranks, org.bank_groups, org.banks_per_group], np.int64)
    buffer = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    count, *columns = scan_dramsim3(buffer, np.int64(min(memory.capacity_bytes, 1 << 62)),
                                    np.ascontiguousarray(write_words, np.uint64), fields, dims)
    if count < 0:
        return None
    return tuple(c[:count] for c in columns)
