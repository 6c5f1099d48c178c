"""Elaboration: scope tree -> checked, typed IR (frozen dataclasses with spans).

Every top-level block is built once (references share the built object);
errors are collected, not raised, so one run reports all of a file's
mistakes. Values that nothing reads are warnings (STYLE.md, 7).
"""
from __future__ import annotations

from ..ir import units as U
from ..ir.workload import Spec
from .data_files import DataTree
from .diagnostics import Diagnostics, SpecError, did_you_mean
from .elaborate_hardware import HardwareBuilder
from .elaborate_model import ModelBuilder
from .evaluate import Evaluator
from .nodes import Node
from .reader import Reader

KIND_TABLES = {
    "dram": "drams", "memory": "memories", "pim_unit": "pim_units", "cpu": "processors",
    "gpu": "processors", "npu": "processors", "link": "links", "storage": "storages", "model": "models",
    "mapping": "mappings", "workload": "workloads", "system": "systems",
}


def _add_what_systems_use(tables: dict[str, dict]) -> None:
    """The tables hold the root file's blocks and every block its systems use, wherever declared:
    a system whose hardware is imported still shows its memories, parts and units."""
    for system in list(tables["systems"].values()):
        used = {"processors": system.processors, "memories": system.memories, "links": system.links,
                "storages": system.storage, "models": [system.model], "mappings": [system.mapping],
                "workloads": [system.workload], "drams": [m.part for m in system.memories],
                "pim_units": [m.pim for m in system.memories]}
        for table, items in used.items():
            for item in items:
                if item is not None:
                    tables[table].setdefault(item.name, item)


class Elaborator:
    def __init__(self, globals_: dict[str, Node], diags: Diagnostics, data: DataTree | None = None):
        self.globals = globals_
        self.data = data or DataTree(())
        self.diags = diags
        self.ev = Evaluator(globals_, diags)
        self._built: dict[int, object] = {}
        self._building: set[int] = set()
        hw, mb = HardwareBuilder(self), ModelBuilder(self)
        self.builders = {
            "dram": hw.dram, "memory": hw.memory, "pim_unit": hw.pim_unit, "cpu": hw.processor,
            "gpu": hw.processor, "npu": hw.processor, "link": hw.link, "storage": hw.storage, "model": mb.model,
            "mapping": mb.mapping, "workload": mb.workload, "system": mb.system,
        }

    def build(self, node: Node):
        """The IR of a top-level block, built once; None if it has errors."""
        key = id(node)
        if key in self._built:
            return self._built[key]
        if key in self._building:
            self.diags.error(f"{node.label} refers to itself", node.span)
            return None
        builder = self.builders.get(node.kind)
        if builder is None:
            self.diags.error(f"unknown kind of block '{node.kind}'", node.span,
                             did_you_mean(node.kind, self.builders, "kinds"))
            self._built[key] = None
            return None
        self._building.add(key)
        try:
            result = builder(node)
        except SpecError:
            result = None
        except RecursionError:
            self.diags.error(f"{node.label} is nested or chained too deeply", node.span)
            result = None
        finally:
            self._building.discard(key)
        self._built[key] = result
        return result

    def count(self, node: Node, r: Reader) -> int:
        """How many identical instances: `memory dimm[8]` or `count = 8` (a `count` field, e.g. from
        `--set memory.dimm.count=4`, wins over the brackets)."""
        if node.count is None or "count" in node.fields:
            return r.integer("count", 1)
        r.asked.add("count")
        try:
            q = self.ev.quantity(node.count, node)
        except SpecError:
            return 1
        if q.dims != U.NONE or not q.is_integer() or q.value < 1:
            self.diags.error("a count in [...] must be a positive whole number", node.count.span)
            return 1
        return int(q.value)

    def elaborate(self, root: str, root_names: list[str] | None = None) -> Spec:
        tables: dict[str, dict] = {t: {} for t in set(KIND_TABLES.values())}
        for name, node in self.globals.items():
            built = self.build(node)
            if built is not None and (root_names is None or name in root_names):
                tables[KIND_TABLES[node.kind]][name] = built
        _add_what_systems_use(tables)
        self.warn_unread()
        return Spec(root=root, **tables, reads=tuple((what, str(path)) for what, path in self.data.read))

    def warn_unread(self) -> None:
        for node in self.globals.values():
            self._warn_node(node)

    def _warn_node(self, node: Node) -> None:
        for name, stmt in node.lets.items():
            if (id(node), name) not in self.ev.read:
                self.diags.warning(f"'{name}' is set but nothing reads it", stmt.span,
                                   "remove it, or use it in an expression")
        if node.kind == "timing":
            for name, stmt in node.fields.items():
                if (id(node), name) not in self.ev.read:
                    self.diags.warning(f"timing parameter '{name}' is declared but no timing rule uses it",
                                       stmt.span, "add a rule that uses it, or remove it")
        for child in node.children:
            self._warn_node(child)
