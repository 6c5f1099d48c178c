"""Structured command streams: commands and loops over tiles, never materialised whole.

A stream is a sequence of items; an item is a `Command` or a `Loop`. A loop
has a trip count and a body function: `body(i)` yields the items of
iteration i (commands, or nested loops). A full-model stream of hundreds of
millions of commands is therefore a handful of small objects until someone
unrolls it (a text trace, the values interpreter) or times it.

The contract that makes fast timing exact: a loop's body has a *uniform
shape* with period `period`: iterations i and i + period issue the same
command names to the same channel, rank, bank group and bank, with the same
kinds; only rows, columns and payloads may differ. `shape_of` computes that
shape, and `check_uniform` verifies it (the fast timer relies on it).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Callable, Iterable, Iterator, Union

from ..ir.commands import Command


@dataclass(frozen=True)
class Loop:
    count: int
    body: Callable[[int], Iterable["Item"]]
    label: str = ""               # what one iteration is (e.g. "tile (o, i)")
    period: int = 1               # iterations after which the body's shape repeats
    op: str = ""                  # the graph op the loop belongs to

    def __post_init__(self):
        if self.count < 0 or self.period < 1:
            raise ValueError(f"loop '{self.label}': count {self.count} and period {self.period} must be >= 0 and >= 1")


Item = Union[Command, Loop]


def unroll(items: Iterable[Item]) -> Iterator[Command]:
    """Every command of a stream, in program order (a stack of iterators, not nested generators:
    a whole model's stream is millions of commands deep in loops)."""
    stack = [iter(items)]
    while stack:
        for item in stack[-1]:
            if type(item) is Loop:
                stack.append(chain.from_iterable(map(item.body, range(item.count))))
                break
            yield item
        else:
            stack.pop()


def shape_of(items: Iterable[Item]) -> tuple:
    """What timing depends on: the unrolled (name, place, kind) sequence, without rows and columns."""
    return tuple((c.name, c.channel, c.pseudo_channel, c.rank, c.bank_group, c.bank, c.kind) for c in unroll(items))


def check_uniform(loop: Loop, iterations: int | None = None) -> None:
    """Raise ValueError unless iterations i and i + period of `loop` have the same shape."""
    n = loop.count if iterations is None else min(loop.count, iterations)
    shapes = [shape_of(loop.body(i)) for i in range(n)]
    for i in range(loop.period, n):
        if shapes[i] != shapes[i - loop.period]:
            raise ValueError(f"loop '{loop.label}': iteration {i} differs in shape from iteration "
                             f"{i - loop.period} (period {loop.period})")


def count_commands(items: Iterable[Item]) -> int:
    """Commands in a stream, by walking one period of each loop (uniform shapes: counts repeat)."""
    total = 0
    for item in items:
        if isinstance(item, Loop):
            full, rest = divmod(item.count, item.period)
            per_period = sum(count_commands(item.body(i)) for i in range(min(item.period, item.count)))
            total += full * per_period + sum(count_commands(item.body(full * item.period + i)) for i in range(rest))
        else:
            total += 1
    return total
