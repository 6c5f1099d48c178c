"""Scope tree: blocks after derivation (`a : b`), merging and `--set` overrides.

A `Node` is a block whose base has been folded in: fields of the derived
block override the base's, nested blocks merge by (kind, name), rules merge by
(scope, preceding, following). Values stay unevaluated expressions here; the
evaluator reads them on demand.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .diagnostics import Diagnostics, Span, did_you_mean
from .syntax import Assign, Block, Issue, Let, Ref, Rule, Window

# Blocks whose statements run in order (PIM programs): kept as written, in `Node.body`, and
# elaborated by frontend/elaborate_program.py instead of being merged into fields.
ORDERED_KINDS = ("program",)


@dataclass(eq=False)
class Node:
    kind: str
    name: str | None
    span: Span
    parent: "Node | None" = None
    fields: dict[str, Assign] = field(default_factory=dict)
    lets: dict[str, Let] = field(default_factory=dict)
    children: list["Node"] = field(default_factory=list)
    rules: dict[tuple, Rule] = field(default_factory=dict)
    windows: dict[tuple, Window] = field(default_factory=dict)
    count: object | None = None
    base: str | None = None
    body: tuple = ()              # ORDERED_KINDS: the statements as written
    set_by: dict[str, Span] = field(default_factory=dict)   # field -> the `--set` that gave it

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}" if self.name else self.kind

    @property
    def path(self) -> str:
        own = self.name or self.kind
        return f"{self.parent.path}.{own}" if self.parent else own

    def child(self, kind: str, name: str | None = None) -> "Node | None":
        for c in self.children:
            if c.kind == kind and c.name == name:
                return c
        return None

    def named(self, name: str) -> "Node | None":
        for c in self.children:
            if c.name == name:
                return c
        return None

    def children_of(self, kind: str) -> list["Node"]:
        return [c for c in self.children if c.kind == kind]

    def anonymous(self) -> list["Node"]:
        return [c for c in self.children if c.name is None]

    def copy(self, parent: "Node | None") -> "Node":
        twin = Node(self.kind, self.name, self.span, parent, dict(self.fields), dict(self.lets),
                    [], dict(self.rules), dict(self.windows), self.count, self.base, self.body)
        twin.children = [c.copy(twin) for c in self.children]
        return twin


def rule_key(rule: Rule) -> tuple:
    return (rule.other, rule.scope, rule.preceding, rule.following)


def window_key(window: Window) -> tuple:
    return (window.other, window.scope, window.commands)


class ScopeBuilder:
    """Builds the top-level nodes of every loaded file, resolving derivation."""

    def __init__(self, blocks: list[Block], diags: Diagnostics):
        self.diags = diags
        self.blocks: dict[str, Block] = {}
        self.globals: dict[str, Node] = {}
        self._building: list[str] = []
        self._failed: set[str] = set()
        for block in blocks:
            if block.name is None:
                diags.error(f"a top-level '{block.kind}' block needs a name",
                            block.span, f"write `{block.kind} my_name {{ ... }}`")
                continue
            if block.name in self.blocks:
                first = self.blocks[block.name]
                diags.error(f"'{block.name}' is declared twice (first as {first.kind} at {first.span})",
                            block.span, "rename one of them; top-level names are global across imports")
                continue
            self.blocks[block.name] = block

    def build_all(self) -> dict[str, Node]:
        for name in self.blocks:
            self.node(name)
        return self.globals

    def node(self, name: str) -> Node | None:
        if name in self.globals:
            return self.globals[name]
        if name in self._failed:
            return None
        block = self.blocks[name]
        if name in self._building:
            cycle = self._building[self._building.index(name):]
            self._failed.update(cycle)
            self.diags.error(f"'{name}' derives from itself ({' : '.join(cycle + [name])})", block.span,
                             "a block may not be its own base, even indirectly")
            return None
        self._building.append(name)
        try:
            built = self.build(block, None)
        finally:
            self._building.pop()
        if built is not None:
            self.globals[name] = built
        return built

    def build(self, block: Block, parent: Node | None) -> Node | None:
        node = None
        if block.base is not None:
            base = self.resolve_base(block)
            if base is None:
                return None
            node = base.copy(parent)
            node.name, node.span, node.base = block.name, block.span, block.base.dotted
        else:
            node = Node(block.kind, block.name, block.span, parent)
        if block.count is not None:
            node.count = block.count
        if block.kind in ORDERED_KINDS:
            node.body = block.body            # a derived unit's program replaces its base's whole
        else:
            self.apply(node, block.body)
        return node

    def resolve_base(self, block: Block) -> Node | None:
        ref = block.base
        target = ref.parts[0]
        if target not in self.blocks:
            self.diags.error(f"unknown base '{ref.dotted}' for {block.kind} '{block.name}'", ref.span,
                             did_you_mean(target, [n for n, b in self.blocks.items() if b.kind == block.kind],
                                          f"{block.kind} blocks"))
            return None
        base_block = self.blocks[target]
        if base_block.kind != block.kind:
            self.diags.error(f"{block.kind} '{block.name}' cannot derive from {base_block.kind} '{target}'",
                             ref.span, f"a block derives from a block of the same kind ({block.kind})")
            return None
        node = self.node(target)
        for part in ref.parts[1:]:
            node = node.named(part) if node else None
        return node

    def apply(self, node: Node, body: tuple) -> None:
        seen: dict[str, Span] = {}
        blocks_seen: dict[tuple, Span] = {}        # sub-blocks of this body: a repeat would silently merge
        for stmt in body:
            if isinstance(stmt, (Assign, Let)):
                if stmt.name in seen:
                    self.diags.error(f"'{stmt.name}' is set twice in {node.label}", stmt.span,
                                     f"the first is at {seen[stmt.name]}; remove one")
                    continue
                seen[stmt.name] = stmt.span
                (node.fields if isinstance(stmt, Assign) else node.lets)[stmt.name] = stmt
            elif isinstance(stmt, Rule):
                node.rules[rule_key(stmt)] = stmt
            elif isinstance(stmt, Window):
                node.windows[window_key(stmt)] = stmt
            elif isinstance(stmt, Block):
                key = (stmt.kind, stmt.name)
                if key in blocks_seen:
                    what = f"{stmt.kind} '{stmt.name}'" if stmt.name else f"a '{stmt.kind}' block"
                    self.diags.error(f"{what} is declared twice in {node.label}", stmt.span,
                                     f"the first is at {blocks_seen[key]}; merge them into one or rename one")
                    continue
                blocks_seen[key] = stmt.span
                existing = node.child(stmt.kind, stmt.name)
                if existing is not None and stmt.base is None and stmt.kind not in ORDERED_KINDS:
                    if stmt.count is not None:
                        existing.count = stmt.count
                    self.apply(existing, stmt.body)     # derived blocks extend their base's
                    continue
                child = self.build(stmt, node)
                if child is None:
                    continue
                if existing is not None:
                    node.children[node.children.index(existing)] = child
                else:
                    node.children.append(child)
            elif isinstance(stmt, Issue):
                self.diags.error(f"command issue '{stmt.command}(...)' outside a program", stmt.span,
                                 "command issues belong in a `program OP_CLASS { ... }` block of a pim_unit")
            else:
                self.diags.error("an import must come at the top level of a file", stmt.span)


def apply_override(globals_: dict[str, Node], path: str, expr, span: Span, diags: Diagnostics,
                   roots: list[Node]) -> None:
    """`--set a.b.c=VALUE`: replace (or add) field `c` of the block that `a.b` names."""
    parts = path.split(".")
    if len(parts) < 2 or not all(parts):
        raise diags.error(f"--set path '{path}' needs a block and a field, as in workload.batch", span)
    node, rest = _override_root(globals_, parts, roots, span, diags)
    for part in rest[:-1]:
        nxt = node.named(part) or node.child(part)
        if nxt is None and part in node.fields and isinstance(node.fields[part].expr, Ref):
            nxt = globals_.get(node.fields[part].expr.parts[0])
        if nxt is None:
            names = [c.name or c.kind for c in node.children] + list(node.fields)
            raise diags.error(f"--set: {node.label} has no block '{part}'", span, did_you_mean(part, names))
        node = nxt
    name = rest[-1]
    if name in node.lets:
        node.lets[name] = Let(name, expr, span)
        node.set_by[name] = span
        return
    holder = node
    if name not in node.fields:
        holder = next((c for c in node.anonymous() if name in c.fields), node)
    holder.fields[name] = Assign(name, expr, span)
    holder.set_by[name] = span


def _override_root(globals_, parts, roots, span, diags):
    if parts[0] in globals_:
        return globals_[parts[0]], parts[1:]
    kind = parts[0]
    of_kind = [n for n in globals_.values() if n.kind == kind]
    if len(parts) > 2 and parts[1] in globals_ and globals_[parts[1]].kind == kind:
        return globals_[parts[1]], parts[2:]
    # the blocks of the entry file, else those its systems name (`workload = l3_openr1;`), else all
    named = {f.expr.parts[0] for r in roots if r.kind == "system" for f in r.fields.values() if isinstance(f.expr, Ref)}
    used = [n for n in of_kind if n in roots] or [n for n in of_kind if n.name in named] or of_kind
    if len(used) == 1:
        return used[0], parts[1:]
    if not used:
        raise diags.error(f"--set: no block or kind named '{kind}'", span,
                          did_you_mean(kind, list(globals_) + sorted({n.kind for n in globals_.values()})))
    raise diags.error(f"--set: several {kind} blocks ({', '.join(n.name for n in used)}); name one",
                      span, f"write --set {kind}.{used[0].name}.{'.'.join(parts[1:])}=...")
