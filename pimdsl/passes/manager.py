"""The pass manager: runs passes in order, times each, and can print the IR after any of them.

A pass is a function `run(program) -> program` in a module of its own with a
docstring saying what it assumes and guarantees. With `verify`, the manager
checks after each pass that the graph is still acyclic and that every op
has the attributes the passes so far promise (`PROVIDES`).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .program import Program

# the passes in order, each `run` of pimdsl/passes/<name>.py (imported when a pipeline runs: a
# command that only lists them, such as `pimc --help`, does not load the compiler)
PASS_NAMES = ("placement", "layout", "tiling", "allocation", "smc", "lowering", "transfers")
PROVIDES = {"placement": ("device",), "layout": (), "tiling": (), "allocation": (), "smc": (),
            "lowering": ("lowered",), "transfers": ("lowered",)}


def pipeline() -> tuple[tuple[str, Callable[[Program], Program]], ...]:
    return tuple((name, importlib.import_module(f".{name}", __package__).run) for name in PASS_NAMES)


@dataclass
class PassManager:
    print_after: set[str] = field(default_factory=set)     # pass names, or {"all"}
    verify: bool = False
    printer: Callable[[str], None] = print
    times_s: dict[str, float] = field(default_factory=dict)

    def run(self, program: Program) -> Program:
        for name, run in pipeline():
            start = time.perf_counter()
            program = run(program)
            self.times_s[name] = self.times_s.get(name, 0.0) + time.perf_counter() - start
            if self.verify:
                self._verify(name, program)
            if name in self.print_after or "all" in self.print_after:
                self.printer(f"// IR after {name}\n{program.dump()}")
        return program

    @staticmethod
    def _verify(name: str, program: Program) -> None:
        import networkx as nx                # here: loops that build no graph do not import it
        if not nx.is_directed_acyclic_graph(program.graph):
            raise AssertionError(f"after {name}: the op graph has a cycle")
        done = PASS_NAMES[:PASS_NAMES.index(name) + 1]
        for op, attrs in program.ops():
            for p in done:
                for key in PROVIDES[p]:
                    if key not in attrs:
                        raise AssertionError(f"after {name}: op {op} lacks '{key}' ({p} provides it)")
