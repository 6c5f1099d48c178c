"""Lines of the readable command trace and of the DRAMsim3 request trace, produced lazily.

`structured_lines` lists a stream as written: each loop once, with its trip
count, and the commands of its first iteration indented below it (later
iterations differ only in rows, columns and payloads). `timed_chunks`
writes every placed command (PimWork.placed: no Loop or Command objects)
with its exact issue cycle (each op from an idle device, its own timing;
`pimc run` then carries the refresh phase from op to op) and each refresh
the timer takes as a REF line with its cycle, by one %-format per issue
site. Both print each command's arguments besides its places with their
values (the issue's own, so a GEMV's `k` is the one its timing rules read),
and an announcing command's `estimate`. `request_lines` is the host
kernels' weight traffic as DRAMsim3 requests. All are generators of text
that a template streams to disk in chunks of lines (a template expression
per line would cost more than timing the command). Ops of one stream shape
(one key) have the same issue cycles, so `timed_chunks` times each shape
once per process.
"""
from __future__ import annotations

from array import array
from itertools import islice
from typing import Iterable, Iterator

from ..interpreter.dram.command_stream import CommandTimer
from ..interpreter.dram.compiled_timer import make_timer
from ..ir.commands import ESTIMATE_ARG, Command
from ..interpreter.op_timing import refresh_policy
from ..ir.hardware import Memory
from ..lowering.pim_program import to_command
from ..lowering.stream import Loop


def _decls(memory: Memory) -> dict:
    """Command name -> (scope, whether it announces work by an `estimate`), worked out once per stream."""
    return {d.name: (d.scope, ESTIMATE_ARG in d.args)
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


def _format(decls, name: str, kind: str, channel: int, op: str, shown: tuple, depth: int = 0,
            cycle: bool = True) -> tuple[str, bool]:
    """The %-format of a command's line, `[cycle] channel scope rank bank_group bank row column
    command arguments kind op` (the column headers of codegen/commands.txt.j2; the structured
    listing has no cycle), and whether it announces work. `arguments` are the issue's own
    arguments besides its places (`shown`), each with its value, then an announced `estimate`."""
    scope, announces = decls.get(name, ("-", False))
    names = tuple(shown) + ((ESTIMATE_ARG,) if announces else ())
    text = " ".join(f"{_escaped(str(a))}=%s" for a in names) or "-"
    return (f"{'  ' * depth}{'%s ' if cycle else ''}{channel} {_escaped(scope)} %s %s %s %s %s {_escaped(name)} "
            f"{text} {_escaped(kind or '-')} {_escaped(op)}\n", announces)


def _escaped(text: str) -> str:
    return text.replace("%", "%%")


class _Formats(dict):
    """Issue site -> its line's format and whether it announces (1 or 0; `_format`), at its first command."""

    def __init__(self, memory: Memory, channel: int, op: str):
        super().__init__()
        self.decls, self.channel, self.op = _decls(memory), channel, op

    def __missing__(self, site):
        text, announces = _format(self.decls, site.name, site.kind, self.channel, self.op,
                                  tuple(n for n, _ in site.shown))
        entry = self[site] = (text, int(announces))
        return entry


def _lines(formats: _Formats, placed: list, cycles) -> list[str]:
    """The lines of placed commands (PLACED, with `args`) issued at `cycles`: each the cycle, then
    rank, bank group, bank, row, column, the issue's other arguments and an announced estimate
    (`p[7:8]` once when its site announces, else not at all)."""
    return [(f := formats[p[0]])[0] % ((cycle,) + p[2:7] + p[9] + p[7:8] * f[1]) for p, cycle in zip(placed, cycles)]


def structured_lines(memory: Memory, items, op: str, depth: int = 0) -> Iterator[str]:
    """`items` from a stream expanded with `values` (each command's `data` holds its arguments)."""
    decls = _decls(memory)

    def line(c: Command, depth: int) -> str:
        args = {k: v for k, v in (c.data or {}).items() if k != "command"}
        text, announces = _format(decls, c.name, c.kind, c.channel, op, tuple(args), depth, cycle=False)
        return text % ((c.rank, c.bank_group, c.bank, c.row, c.column) + tuple(args.values())
                       + ((c.estimate,) if announces else ()))

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


_CYCLES: dict[tuple, tuple] = {}           # (memory id, key) -> (memory, issue cycles, refreshes, REF decl)
MAX_CACHED_CYCLES = 50_000_000             # 400 MB of cycles at most


def timed_chunks(memory: Memory, placed: Iterable[list], op: str, key: tuple | None = None,
                 channel: int = 0) -> Iterator[str]:
    """The lines of one channel's placed commands (PimWork.placed with `args`), each with its exact
    issue cycle, a chunk of text per list of commands, and a REF line with its cycle before the
    command each refresh the timer takes comes before. With `key` (the op's stream shape), the
    cycles are computed once for every op of that shape."""
    formats = _Formats(memory, channel, op)
    cached = _CYCLES.get((id(memory), key)) if key is not None else None
    fresh = cached is None or cached[0] is not memory
    if fresh:
        pim = memory.pim
        # the reference timer, moving onto the compiled core as `pimc run` does (same cycles)
        timer = make_timer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh_policy(memory),
                           record_refreshes=True)
        cycles, refreshes = array("q"), []          # refreshes: (position of the command after, unit, cycle)
        ref_decl = timer.tables.commands[timer.ref] if timer.ref is not None else None
    else:
        _, cycles, refreshes, ref_decl = cached
    ref = _ref_format(ref_decl, channel, op)
    done, next_ref = 0, 0
    for chunk in placed:
        if fresh:
            log = timer.refresh_log
            taken = len(log)
            issued, error = timer.issue_many([to_command(p, channel) for p in chunk], done)
            if error is not None:
                raise error
            cycles.extend(issued)
            # a refresh comes before the first command issued after it (the timer logs a chunk's at once)
            n = 0
            for _, unit, at in sorted(log[taken:], key=lambda r: r[2]):
                while n < len(issued) and issued[n] <= at:
                    n += 1
                refreshes.append((done + n, unit, at))
        lines, start, end = [], 0, done + len(chunk)
        while next_ref < len(refreshes) and refreshes[next_ref][0] < end:
            at = refreshes[next_ref][0] - done            # the refresh comes before command `at`
            lines += _lines(formats, chunk[start:at], cycles[done + start:done + at])
            lines.append(ref % (refreshes[next_ref][2], refreshes[next_ref][1]))
            start, next_ref = at, next_ref + 1
        lines += _lines(formats, chunk[start:], cycles[done + start:end])
        done = end
        yield "".join(lines)
    if fresh and key is not None and sum(len(v[1]) for v in _CYCLES.values()) + len(cycles) <= MAX_CACHED_CYCLES:
        _CYCLES[(id(memory), key)] = (memory, cycles, refreshes, ref_decl)


def _ref_format(decl, channel: int, op: str) -> str:
    """A refresh's line: its cycle and refresh unit (rank or pseudo-channel, by the REF's scope)."""
    name, scope = (decl.name, decl.scope) if decl is not None else ("REF", "-")
    return f"%s {channel} {_escaped(scope)} - - - - - {_escaped(name)} unit=%s refresh {_escaped(op)}\n"


def request_lines(memory: Memory, kernels_allocs, limit: int) -> Iterator[str]:
    """`0x<address> READ <cycle>`: each host kernel's weights, burst by burst, arriving at the
    memory's peak rate (one burst per `access_bytes / peak bytes per cycle`), ops in program order.
    Past `limit` bursts in all, each kernel gives its first bursts, its share of `limit` by its
    bytes, so that a capped trace still has every kernel of its step (prefill's differ from decode's)."""
    burst = memory.organization.access_bytes
    per_cycle = memory.peak_bandwidth_bytes_per_s * memory.part.tck_s
    sizes = [-(-alloc.size_bytes // burst) for alloc in kernels_allocs]
    total = sum(sizes)
    quotas = sizes
    if total > limit:
        quotas = [s * limit // total for s in sizes]
        for i in range(limit - sum(quotas)):       # what rounding down left, to the first kernels
            quotas[i] += 1
    n = 0
    for alloc, quota in zip(kernels_allocs, quotas):
        for offset in range(alloc.offset_bytes, alloc.offset_bytes + quota * burst, burst):
            yield f"0x{offset:x} READ {int(n * burst / per_cycle)}"
            n += 1
