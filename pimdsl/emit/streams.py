"""Lines of the readable command trace and of the DRAMsim3 request trace, produced lazily.

`structured_lines` lists a stream as written: each loop once, with its trip
count, and the commands of its first iteration indented below it (later
iterations differ only in rows, columns and payloads). `timed_lines`
unrolls every command and times it exactly (each op from an idle device,
as `pimc run` does). `request_lines` is the host kernels' weight traffic
as DRAMsim3 requests. All are generators: a template streams them to disk.
"""
from __future__ import annotations

from typing import Iterator

from ..interpreter.command_stream import Command, CommandTimer
from ..interpreter.op_timing import refresh_policy
from ..ir.hardware import Memory
from ..lowering.stream import Loop, unroll


def _args(decl, c: Command) -> str:
    values = {"row": c.row, "column": c.column, "reg": c.column, "k": c.column, "estimate": c.estimate}
    return " ".join(f"{a}={values.get(a, '-')}" for a in decl.args) if decl else ""


def _decls(memory: Memory) -> dict:
    return {d.name: d for d in memory.part.commands + (memory.pim.commands if memory.pim else ())}


def _line(decls, c: Command, cycle, depth: int, op: str) -> dict:
    d = decls.get(c.name)
    return {"depth": depth, "cycle": cycle, "c": c, "scope": d.scope if d else "-", "args": _args(d, c), "op": op}


def structured_lines(memory: Memory, items, op: str, depth: int = 0) -> Iterator[dict]:
    decls = _decls(memory)

    def walk(items, depth):
        for item in items:
            if isinstance(item, Loop):
                if item.count <= 0:           # runs nothing (e.g. a program's `for g[flag]` with flag 0)
                    continue
                if item.period > 1:           # iterations differ in shape (places): list each
                    for i in range(item.count):
                        yield from walk(item.body(i), depth)
                    continue
                yield {"depth": depth, "loop": item}
                yield from walk(item.body(0), depth + 1)
            else:
                yield _line(decls, item, None, depth, op)
    yield from walk(items, depth)


def timed_lines(memory: Memory, items, op: str) -> Iterator[dict]:
    pim = memory.pim
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows, refresh=refresh_policy(memory))
    decls = _decls(memory)
    for n, c in enumerate(unroll(items)):
        yield _line(decls, c, timer.issue(c, n), 0, op)


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
