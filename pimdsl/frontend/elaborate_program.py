"""Elaboration of PIM programs: `program OP_CLASS { ... }` blocks of a pim_unit, to ir/pim_program.

Checks what can be checked without an op: the op class, the statements a
program may hold, every name an expression reads (loop variables, lets, the
op class's shape, the organization's constants, register files), each issue's
arguments against its command's scope and effect, and each command's effect
against the unit's declared state. Command names that are not the unit's own
may be the DRAM part's: `check_program_commands` resolves them where a memory
joins the two. What depends on the op's shape (a layout covering the tensor, a
tile fitting the buffers) is checked by passes/tiling.py, for every op at once.
"""
from __future__ import annotations

from ..ir import pim_program as P
from ..ir.hardware import PimUnit
from .diagnostics import Diagnostics, did_you_mean
from .nodes import Node
from .syntax import Assign, BinOp, Block, Call, Issue, Let, Neg, Num, Ref

STATE_BUILTINS = ("row", "global_buffer", "host")   # host: where a dot returns its results

# The fields of a program's blocks (field -> (value, default)), as this module reads them: LANGUAGE.md's
# field reference lists them beside the Reader-read blocks. A program's body holds `let`s, loops and issues.
_EXPR = "an integer expression"
SCHEMA = {
    "pim_unit > program": {"rows": (_EXPR, "required with a layout"), "covers": ("list of op kinds", "none")},
    "pim_unit > program > layout": {"indices": ("list of names", "required"), "dims": ("list of expressions", "none"),
                                    "rows": (_EXPR, "none"),
                                    **{f: (_EXPR + " of the indices", "0" if f not in ("row", "column", "lane")
                                           else "required") for f in P.PLACE_FIELDS}},
    "pim_unit > program > result": {"indices": ("list of names", "required"), "dims": ("list of expressions", "required"),
                                    "output": (_EXPR + " of the indices, or `FILE(expression)`", "required"),
                                    "value": ("a product of operands, or `softmax(INDEX, product)`", "required")},
}
RESULT_FIELDS = tuple(SCHEMA["pim_unit > program > result"])
LAYOUT_FIELDS = tuple(SCHEMA["pim_unit > program > layout"])


class _Skip(Exception):
    """A statement already reported; elaboration goes on with the next."""


def programs(unit: PimUnit, nodes: list[Node], diags: Diagnostics) -> tuple[P.PimProgram, ...]:
    _check_effects(unit, diags)
    return tuple(p for p in (_Program(unit, node, diags).build() for node in nodes) if p is not None)


def check_program_commands(unit: PimUnit, known: set[str], diags: Diagnostics) -> None:
    """Issues of commands neither the unit nor the memory's part declares."""
    def walk(body):
        for stmt in body:
            if isinstance(stmt, P.For):
                walk(stmt.body)
            elif isinstance(stmt, P.Issue) and stmt.command not in known:
                diags.error(f"program issues the undeclared command '{stmt.command}'", stmt.span,
                            did_you_mean(stmt.command, sorted(known), "commands of the unit and the memory"))
    for program in unit.programs:
        walk(program.body)


def _check_effects(unit: PimUnit, diags: Diagnostics) -> None:
    files = {rf.name for rf in unit.register_files}
    ranked = {rf.name for rf in unit.register_files if rf.placement == "rank"}
    state = files | set(STATE_BUILTINS)
    for c in unit.commands:
        if c.effect == "none":
            continue
        for name in c.reads + c.writes:
            if name not in state:
                diags.error(f"command {c.name} ({c.effect}) names '{name}', which the unit does not declare",
                            c.span, did_you_mean(name, sorted(state), "register files and state"))
        buffers = [s for s in c.writes if s in files or s == "global_buffer"]
        need = {
            "load": (len(buffers) == 1, "writes one register file or global_buffer"),
            "mac": ("row" in c.reads and len([s for s in c.reads if s != "row"]) == 1
                    and len([s for s in c.writes if s in files]) == 1,
                    "reads [row, <source>] and writes one register file (the accumulators)"),
            "store": (c.writes == ("row",) and len([s for s in c.reads if s in files]) == 1,
                      "reads one register file and writes [row]"),
            "readback": (c.reads == ("row",) and c.scope == "bank", "reads [row] at scope bank"),
            "copy": (c.reads == ("row",) and len(buffers) == 1, "reads [row] and writes one register file or "
                     "global_buffer"),
            "dot": ("row" in c.reads and len([s for s in c.reads if s != "row"]) == 1 and c.writes == ("host",),
                    "reads [row, <source>] and writes [host]"),
            "dot_acc": ("row" in c.reads and len([s for s in c.reads if s != "row"]) == 1
                        and len([s for s in c.writes if s in files]) == 1,
                        "reads [row, <source>] and writes one register file (a MAC register per bank)"),
            "group_dot": ("row" in c.reads and len([s for s in c.reads if s != "row"]) == 1 and c.writes == ("host",),
                          "reads [row, <source>] and writes [host]"),
            "scale": ("row" in c.reads and len([s for s in c.reads if s in ranked]) == 1
                      and len([s for s in c.writes if s in files]) == 1,
                      "reads [row, <register file placed per rank>] and writes one register file (the accumulators)"),
            "reduce": (len(c.reads) == 1 and c.reads[0] in files and len(c.writes) == 1
                       and (c.writes[0] in ranked or c.writes[0] == "host"),
                       "reads one register file and writes [host] or a register file placed per rank"),
            "accumulate": (len(c.reads) == 1 and c.reads[0] in files and c.writes == ("host",),
                           "reads one register file and writes [host]"),
            "activation": (len(c.reads) == 1 and c.reads[0] in files and len(c.writes) == 1 and c.writes[0] in files,
                           "reads one register file and writes one register file"),
            "softmax": (len(c.reads) == 1 and c.reads[0] in ranked and c.writes == c.reads,
                        "reads and writes one register file placed per rank"),
        }[c.effect]
        if not need[0]:
            diags.error(f"command {c.name} has effect {c.effect}, which needs a command that {need[1]}",
                        c.span, f"declare e.g. reads/writes so that {c.name} {need[1]}")


class _Program:
    def __init__(self, unit: PimUnit, node: Node, diags: Diagnostics):
        self.unit, self.node, self.diags = unit, node, diags
        self.commands = {c.name: c for c in unit.commands}
        self.files = tuple(rf.name for rf in unit.register_files)

    def build(self) -> P.PimProgram | None:
        node = self.node
        if node.name not in P.OP_SHAPES:
            self.diags.error(f"'{node.name}' is not an op class a program can be written for", node.span,
                             did_you_mean(node.name or "", P.OP_SHAPES, "op classes"))
            return None
        scope = set(P.CONSTANTS) | set(P.OP_SHAPES[node.name]) | set(self.files)
        lets, layouts, rows, body, covers, results = [], [], None, [], (), []
        for stmt in node.body:
            try:
                if isinstance(stmt, Let):
                    let = P.Let(stmt.name, self.expr(stmt.expr, scope), stmt.span)
                    (lets if not body else body).append(let)
                    scope = scope | {stmt.name}
                elif isinstance(stmt, Assign) and stmt.name == "rows":
                    rows = self.expr(stmt.expr, scope)
                elif isinstance(stmt, Assign) and stmt.name == "covers":
                    covers = self.covers(stmt)
                elif isinstance(stmt, Block) and stmt.kind == "layout":
                    layouts.append(self.layout(stmt, scope))
                elif isinstance(stmt, Block) and stmt.kind == "result":
                    results.append((stmt, scope))
                else:
                    body.extend(self.statements((stmt,), scope))
            except _Skip:
                continue
        if layouts and rows is None:
            self.diags.error(f"program {node.name} lays out a tensor but does not say how many rows it takes",
                             node.span, "add `rows = <row indices the op takes in every bank>;`")
        self.check_covered(covers, body)
        result = None
        for i, (stmt, at) in enumerate(results):
            if i:
                self.diags.error(f"program {node.name} says its result twice", stmt.span, "keep one `result { ... }`")
                continue
            try:
                result = self.result(stmt, at, layouts, {n.name for n in lets})
            except _Skip:
                pass
        return P.PimProgram(node.name, tuple(lets), tuple(body), tuple(layouts), rows, node.span, covers, result)

    def check_covered(self, covers: tuple[str, ...], body: list) -> None:
        """A covered kind must be something the unit does: a command of the program with that effect
        (softmax: the values executor applies it), or an operation the unit declares (`operations`,
        a unit whose command for it changes no declared state): `covers` states what the commands
        do, it does not replace them."""
        effects = set()
        def walk(stmts):
            for stmt in stmts:
                if isinstance(stmt, P.For):
                    walk(stmt.body)
                elif isinstance(stmt, P.Issue) and stmt.command in self.commands:
                    effects.add(self.commands[stmt.command].effect)
        walk(body)
        for kind in covers:
            if kind not in effects and kind not in self.unit.operations:
                self.diags.error(f"program {self.node.name} covers {kind}, but it issues no command of effect "
                                 f"{kind} and unit '{self.unit.name}' does not list {kind} in its operations",
                                 self.node.span, f"issue the unit's {kind} command in the program (`effect = {kind};`), "
                                 f"or remove {kind} from `covers`")

    def covers(self, stmt: Assign) -> tuple[str, ...]:
        """`covers = [KIND, ...];`: the op kinds that follow the program's op class in a model step
        and that the program already performs (L3's score program ends with the rank PU's softmax)."""
        follows = P.COVERABLE.get(self.node.name, ())
        items = getattr(stmt.expr, "items", None)
        if items is None or not all(isinstance(i, Ref) and len(i.parts) == 1 for i in items):
            self.diags.error("`covers` is a list of op kinds", stmt.span, "write e.g. `covers = [softmax];`")
            raise _Skip
        kinds = []
        for item in items:
            kind = item.parts[0]
            if kind not in follows:
                self.diags.error(f"program {self.node.name} cannot cover '{kind}'", item.span,
                                 did_you_mean(kind, follows, f"op kinds that directly follow {self.node.name}")
                                 if follows else f"no op kind directly follows {self.node.name} in a model step")
                continue
            if kind in kinds:
                self.diags.error(f"'{kind}' is covered twice", item.span)
                continue
            kinds.append(kind)
        return tuple(kinds)

    def statements(self, stmts, scope: set) -> list:
        out = []
        for stmt in stmts:
            try:
                if isinstance(stmt, Let):
                    out.append(P.Let(stmt.name, self.expr(stmt.expr, scope), stmt.span))
                    scope = scope | {stmt.name}
                elif isinstance(stmt, Block) and stmt.kind == "for":
                    out.append(self.loop(stmt, scope))
                elif isinstance(stmt, Issue):
                    out.append(self.issue(stmt, scope))
                else:
                    what = f"{stmt.kind} block" if isinstance(stmt, Block) else type(stmt).__name__.lower()
                    self.diags.error(f"a {what} cannot appear in a program's body", stmt.span,
                                     "a program holds `let`s, `for VAR[COUNT] { ... }` loops and command "
                                     "issues `NAME(arg = expr, ...);`, and at its top `rows = ...;` and "
                                     "`layout TENSOR { ... }` and `result { ... }`")
            except _Skip:
                continue
        return out

    def loop(self, block: Block, scope: set) -> P.For:
        if block.name is None or block.count is None:
            self.diags.error("a loop needs a variable and a trip count", block.span, "write `for t[n_tiles] { ... }`")
            raise _Skip
        try:
            count = self.expr(block.count, scope)
        except _Skip:
            count = P.Num(0)                  # reported; the body's own mistakes are reported too
        return P.For(block.name, count, tuple(self.statements(block.body, scope | {block.name})), block.span)

    def issue(self, stmt: Issue, scope: set) -> P.Issue:
        decl = self.commands.get(stmt.command)
        allowed = P.PLACE_ARGS + (P.EFFECTS[decl.effect] if decl else tuple(a for e in P.EFFECTS.values() for a in e))
        args, seen = [], set()
        for name, expr, span in stmt.args:
            if name in seen:
                self.diags.error(f"argument '{name}' is given twice", span)
                continue
            seen.add(name)
            if name not in allowed:
                self.diags.error(f"{stmt.command} takes no argument '{name}'", span,
                                 did_you_mean(name, allowed, f"arguments of {stmt.command}"))
                continue
            try:
                args.append((name, self.expr(expr, scope)))
            except _Skip:
                continue
        if decl is not None:
            missing = [a for a in P.EFFECTS[decl.effect] if a not in seen]
            if missing:
                self.diags.error(f"{stmt.command} ({decl.effect}) needs the argument(s) {', '.join(missing)}",
                                 stmt.span, f"write e.g. `{stmt.command}({', '.join(a + ' = ...' for a in missing)});`")
        return P.Issue(stmt.command, tuple(args), stmt.span)

    def layout(self, block: Block, scope: set) -> P.Layout:
        indices, place, rows = (), {}, None
        for stmt in block.body:
            if isinstance(stmt, Assign) and stmt.name == "indices":
                items = getattr(stmt.expr, "items", None)
                if items is None or not all(isinstance(i, Ref) and len(i.parts) == 1 for i in items):
                    self.diags.error("`indices` is a list of names, one per dimension of the tensor",
                                     stmt.span, "write e.g. `indices = [o, i];`")
                    raise _Skip
                indices = tuple(i.parts[0] for i in items)
        dims = None
        for stmt in block.body:
            if isinstance(stmt, Assign) and stmt.name == "rows":
                try:
                    rows = self.expr(stmt.expr, scope)
                except _Skip:
                    pass
            elif isinstance(stmt, Assign) and stmt.name == "dims":
                items = getattr(stmt.expr, "items", None)
                if items is None or len(items) != len(indices):
                    self.diags.error(f"`dims` gives one extent per index ({len(indices)})", stmt.span,
                                     "write e.g. `dims = [kv, heads, head_dim];`")
                    continue
                try:
                    dims = tuple(self.expr(i, scope) for i in items)
                except _Skip:
                    pass
            elif isinstance(stmt, Assign) and stmt.name in P.PLACE_FIELDS:
                try:
                    place[stmt.name] = self.expr(stmt.expr, scope | set(indices))
                except _Skip:
                    pass
            elif not (isinstance(stmt, Assign) and stmt.name == "indices"):
                name = getattr(stmt, "name", None) or getattr(stmt, "kind", "?")
                self.diags.error(f"'{name}' is not a field of a layout", stmt.span,
                                 did_you_mean(name, LAYOUT_FIELDS, "layout fields"))
        if not indices:
            self.diags.error(f"layout {block.name} does not name its indices", block.span, "add `indices = [o, i];`")
        missing = [f for f in ("row", "column", "lane") if f not in place]
        if missing:
            self.diags.error(f"layout {block.name} does not say the {', '.join(missing)} of an element", block.span,
                             "a layout gives row, column (burst) and lane, and optionally channel, rank and bank")
        return P.Layout(block.name or "?", indices, place, rows, block.span, dims)

    def result(self, block: Block, scope: set, layouts: list, params: set) -> P.Result:
        """`result { indices; dims; output; value; let ...; }`: what the program computes, for
        `pimc check --values` (LANGUAGE.md). The value is a product of operands, each a laid-out
        tensor, `input` or a register file placed per rank, optionally `softmax(INDEX, product)`."""
        fields, lets = {}, []
        for stmt in block.body:
            if isinstance(stmt, Let) and stmt.name in params:
                lets.append((stmt.name, self.expr(stmt.expr, scope)))
            elif isinstance(stmt, Let):
                self.diags.error(f"'{stmt.name}' is not a parameter of program {self.node.name}", stmt.span,
                                 did_you_mean(stmt.name, sorted(params), "its top-level lets"))
            elif isinstance(stmt, Assign) and stmt.name in RESULT_FIELDS:
                fields[stmt.name] = stmt
            else:
                name = getattr(stmt, "name", None) or getattr(stmt, "kind", "?")
                self.diags.error(f"'{name}' is not a field of a result", stmt.span,
                                 did_you_mean(name, RESULT_FIELDS, "result fields") + "; or `let PARAMETER = ...;`")
        missing = [f for f in RESULT_FIELDS if f not in fields]
        if missing:
            self.diags.error(f"the result of program {self.node.name} does not give {', '.join(missing)}", block.span,
                             "write e.g. `result { indices = [o]; dims = [n]; output = o; "
                             "value = weight(o, i) * input(i); }`")
            raise _Skip
        items = getattr(fields["indices"].expr, "items", None)
        if items is None or not all(isinstance(i, Ref) and len(i.parts) == 1 for i in items):
            self.diags.error("`indices` is a list of names, one per dimension of the result", fields["indices"].span,
                             "write e.g. `indices = [h, t];`")
            raise _Skip
        indices = tuple(i.parts[0] for i in items)
        dims = getattr(fields["dims"].expr, "items", None)
        if dims is None or len(dims) != len(indices):
            self.diags.error(f"`dims` gives one extent per index ({len(indices)})", fields["dims"].span,
                             "write e.g. `dims = [all_heads, kv];`")
            raise _Skip
        dims = tuple(self.expr(d, scope) for d in dims)
        tensors = {l.tensor: l for l in layouts}
        ranked = {rf.name for rf in self.unit.register_files if rf.placement == "rank"}
        value, softmax = fields["value"].expr, None
        if isinstance(value, Call) and value.name == "softmax":
            if len(value.args) != 2 or not (isinstance(value.args[0], Ref) and value.args[0].dotted in indices):
                self.diags.error("softmax takes an index of the result and a product", value.span,
                                 f"write e.g. `softmax({indices[-1]}, key(t, h, d) * query(h, d))`")
                raise _Skip
            softmax, value = value.args[0].dotted, value.args[1]
        factors = []
        def collect(e):
            if isinstance(e, BinOp) and e.op == "*":
                collect(e.left)
                collect(e.right)
            else:
                factors.append(e)
        collect(value)
        known = sorted(tensors) + ["input"] + sorted(ranked)
        for f in factors:
            if not isinstance(f, Call) or f.name not in known:
                self.diags.error("a result's value is a product of operands", getattr(f, "span", fields["value"].span),
                                 f"an operand is a laid-out tensor at its indices, `input(ELEMENT)` or a register file "
                                 f"placed per rank at one element: here {', '.join(known)}")
                raise _Skip
            want = len(tensors[f.name].indices) if f.name in tensors else 1
            if len(f.args) != want:
                self.diags.error(f"{f.name} takes {want} index expression(s), not {len(f.args)}", f.span)
                raise _Skip
        # the summed indices: names a tensor operand is indexed by that are not otherwise in scope
        inner = scope | set(indices) | {a.dotted for f in factors if f.name in tensors for a in f.args
                                        if isinstance(a, Ref) and len(a.parts) == 1}
        operands = [P.Operand(f.name, tuple(self.expr(a, inner) for a in f.args), f.span) for f in factors]
        used = set().union(*(P.names_in(a) for o in operands for a in o.args)) - scope
        for name in sorted(used - set(indices)):      # a summed index needs an extent: a tensor's dims
            if not any(o.name in tensors and tensors[o.name].dims and P.Name(name, None) in o.args for o in operands):
                self.diags.error(f"the result sums over '{name}', but no operand gives its extent", fields["value"].span,
                                 f"use {name} as an index of a laid-out tensor whose layout gives `dims`")
                raise _Skip
        output, into = fields["output"].expr, None
        if isinstance(output, Call) and output.name in ranked and len(output.args) == 1:
            into, output = output.name, output.args[0]
        return P.Result(indices, dims, self.expr(output, scope | set(indices)), into, tuple(operands), softmax,
                        tuple(lets), block.span)

    # ---- expressions ----------------------------------------------------------
    def expr(self, e, scope: set) -> P.Expr:
        if isinstance(e, Num):
            text = e.text.replace("_", "")
            if e.unit is not None or not text.isdigit():
                self.diags.error(f"program expressions are whole numbers without units, not '{e.text} {e.unit or ''}'"
                                 .rstrip("' ") + "'", e.span, "write e.g. `8`, or a name of the unit's state")
                raise _Skip
            return P.Num(int(text))
        if isinstance(e, Ref):
            if len(e.parts) != 1 or e.parts[0] not in scope:
                self.diags.error(f"'{e.dotted}' is not defined in this program", e.span,
                                 did_you_mean(e.dotted, sorted(scope), "names in scope"))
                raise _Skip
            return P.Name(e.parts[0], e.span)
        if isinstance(e, BinOp):
            return P.Apply(e.op, (self.expr(e.left, scope), self.expr(e.right, scope)), e.span)
        if isinstance(e, Neg):
            return P.Apply("neg", (self.expr(e.operand, scope),), e.span)
        if isinstance(e, Call) and P.FUNCTIONS.get(e.name) == len(e.args):
            return P.Apply(e.name, tuple(self.expr(a, scope) for a in e.args), e.span)
        span = getattr(e, "span", self.node.span)
        self.diags.error("not an integer expression of a program", span,
                         f"use + - * / (floor) ^ and {', '.join(f'{f}(a, b)' for f in P.FUNCTIONS)}")
        raise _Skip

