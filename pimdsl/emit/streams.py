"""Lines of the readable command trace and of the DRAMsim3 request trace, produced lazily.

`structured_lines` lists a stream as written: each loop once, with its trip
count, and the commands of its first iteration indented below it (later
iterations differ only in rows, columns and payloads). `timed_chunks`
writes every placed command (PimWork.placed: no Loop or Command objects)
with its exact issue cycle (each op from an idle device, as `pimc run`
does), by one %-format per issue site. `request_lines` is the host
kernels' weight traffic as DRAMsim3 requests. All are generators of text
that a template streams to disk in chunks of lines (a template expression
per line would cost more than timing the command). Ops of one stream shape
(one key) have the same issue cycles, so `timed_chunks` times each shape
once per process.
"""
from __future__ import annotations

from array import array
from itertools import islice
from operator import itemgetter
from typing import Iterable, Iterator

from ..interpreter.dram.compiled_timer import make_timer
from ..ir.commands import Command
from ..interpreter.op_timing import refresh_policy
from ..ir.hardware import Memory
from ..lowering.pim_program import PLACED, to_command
from ..lowering.stream import Loop


# the Command field each declared argument shows (others show "-")
_ARG_FIELDS = {"row": "row", "column": "column", "reg": "column", "k": "column", "estimate": "estimate"}


def _decls(memory: Memory) -> dict:
    """Command name -> (scope, ((argument, Command field or None), ...)), worked out once per stream."""
    return {d.name: (d.scope, tuple((a, _ARG_FIELDS.get(a)) for a in d.args))
            for d in memory.part.commands + (memory.pim.commands if memory.pim else ())}


CHUNK_LINES = 4096


def chunks(lines: Iterable[str]) -> Iterator[str]:
    """Lines joined into chunks of CHUNK_LINES, for a template to write."""
    it = iter(lines)
    while True:
        chunk = "".join(islice(it, CHUNK_LINES))
        if not chunk:
            return
        yield chunk


def _format(decls, name: str, kind: str, channel: int, op: str, depth: int = 0) -> tuple[str, itemgetter]:
    """The %-format of a command's line, `cycle channel scope rank bank_group bank row column
    command arguments kind op` (the column header of codegen/commands.txt.j2), and the getter of
    the values after the cycle from a placed command (lowering/pim_program.PLACED)."""
    d = decls.get(name)
    scope, args = ("-", ()) if d is None else d
    text = " ".join(f"{_escaped(a)}=" + ("%s" if f else "-") for a, f in args) or "-"
    fields = (_PLACED[f] for a, f in args if f)
    return (f"{'  ' * depth}%s {channel} {_escaped(scope)} %s %s %s %s %s {_escaped(name)} {text} "
            f"{_escaped(kind or '-')} {_escaped(op)}\n", itemgetter(2, 3, 4, 5, 6, *fields))


_PLACED = {f: PLACED.index(f) for f in set(_ARG_FIELDS.values())}


def _escaped(text: str) -> str:
    return text.replace("%", "%%")


class _Formats(dict):
    """Issue site -> its line's format and getter (`_format`), worked out at its first command."""

    def __init__(self, memory: Memory, channel: int, op: str):
        super().__init__()
        self.decls, self.channel, self.op = _decls(memory), channel, op

    def __missing__(self, site):
        entry = self[site] = _format(self.decls, site.name, site.kind, self.channel, self.op)
        return entry


def structured_lines(memory: Memory, items, op: str, depth: int = 0) -> Iterator[str]:
    decls = _decls(memory)

    def line(c: Command, depth: int) -> str:
        text, pick = _format(decls, c.name, c.kind, c.channel, op, depth)
        return text % (("-",) + pick((None, c.pseudo_channel, c.rank, c.bank_group, c.bank, c.row, c.column,
                                       c.estimate)))

    def walk(items, depth):
        for item in items:
            if isinstance(item, Loop):
                if item.count <= 0:           # runs nothing (e.g. a program's `for g[flag]` with flag 0)
                    continue
                if item.period > 1:           # iterations differ in shape (places): list each
                    for i in range(item.count):
                        yield from walk(item.body(i), depth)
                    continue
                yield f"{'  ' * depth}repeat {item.count} ({item.label}):\n"
                yield from walk(item.body(0), depth + 1)
            else:
                yield line(item, depth)
    yield from walk(items, depth)


_CYCLES: dict[tuple, tuple] = {}           # (memory id, key) -> (memory, issue cycles)
MAX_CACHED_CYCLES = 50_000_000             # 400 MB of cycles at most


def timed_chunks(memory: Memory, placed: Iterable[list], op: str, key: tuple | None = None,
                 channel: int = 0) -> Iterator[str]:
    """The lines of one channel's placed commands (PimWork.placed), each with its exact issue
    cycle, a chunk of text per list of commands. With `key` (the op's stream shape), the cycles
    are computed once for every op of that shape."""
    formats = _Formats(memory, channel, op)
    cached = _CYCLES.get((id(memory), key)) if key is not None else None
    fresh = cached is None or cached[0] is not memory
    if fresh:
        pim = memory.pim
        # the reference timer, moving onto the compiled core as `pimc run` does (same cycles)
        timer = make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh_policy(memory))
        cycles = array("q")
    done = 0
    for chunk in placed:
        if fresh:
            issued, error = timer.issue_many([to_command(p, channel) for p in chunk], done)
            if error is not None:
                raise error
            cycles.extend(issued)
        lines = []
        for p, cycle in zip(chunk, (cycles if fresh else cached[1])[done:done + len(chunk)]):
            text, pick = formats[p[0]]
            lines.append(text % ((cycle,) + pick(p)))
        done += len(chunk)
        yield "".join(lines)
    if fresh and key is not None and sum(len(v[1]) for v in _CYCLES.values()) + len(cycles) <= MAX_CACHED_CYCLES:
        _CYCLES[(id(memory), key)] = (memory, cycles)


def request_lines(memory: Memory, kernels_allocs, limit: int) -> Iterator[str]:
    """`0x<address> READ <cycle>`: each host kernel's weights, burst by burst, arriving at the
    memory's peak rate (one burst per `access_bytes / peak bytes per cycle`), ops in program order."""
    burst = memory.organization.access_bytes
    per_cycle = memory.peak_bandwidth_bytes_per_s * memory.part.tck_s
    n = 0
    for alloc in kernels_allocs:
        for offset in range(alloc.offset_bytes, alloc.offset_bytes + alloc.size_bytes, burst):
            if n >= limit:
                return
            yield f"0x{offset:x} READ {int(n * burst / per_cycle)}"
            n += 1
