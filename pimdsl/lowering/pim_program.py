"""The generic PIM expander: a declared PIM program (ir/pim_program) to a structured command stream.

One channel's stream for one op: each `for` becomes a `Loop` (so streams stay
small and fast timing keeps working), each issue a typed `Command` (its kind
is the command's declared effect, or its name for effect `none`). A command
declared `issued_as` a DRAM command of the part goes on the bus as that
command (timed by the part's rules) and keeps its own kind; in values mode
its data names the unit's command, whose effect the executor applies. The names
a program reads are the op's shape, the program's lets, the loop variables
and `constants(memory)`: the organization as the unit sees it and the sizes
of its state, in entries of one SIMD word.

A loop's period is found statically: the body's command shape (names and
places) depends on the loop variable only if a place argument (pseudo
channel, rank, bank) or a nested loop's trip count reads it, directly or
through a let; then the period is the whole trip count (timed exactly),
else 1 (the fast timer extrapolates the steady state).

A command whose declaration lists an `estimate` argument announces the work
it heads (ir/commands.py): the expander gives it the cycles from
it to the end of its enclosing body, that stretch timed alone by the spec's
rules (fresh timer, no refresh), once per command shape.

`placed(...)` walks the same program in order into placed tuples (PLACED:
the issue site and the command's places), building no Loop or Command: all
that a text trace or a timer of every command needs. Both walks share each
statement's site (names, argument and place functions), worked out once per
expansion, and give a loop the scope of the point where it stands (a later
`let` of its body does not reach it). `placed` evaluates a whole loop nest at
once where it can (`placed_batch`: each statement once over numpy arrays of
every iteration, the commands then put in program order), and walks command
by command a loop that heads announced work, whose nested trip counts differ
between iterations, or that is too large to hold at once.

A program's top-level `let`s are its parameters: `expand(..., params=)` sets
any of them by name instead of its declared expression.

`check(...)` evaluates every issue of the program at the first and last
iteration of each loop and reports an index outside the declared state (a
tile that does not fit a register file, the global buffer, a row or the
banks); `layout_problem(...)` checks that a layout places every element of a
tensor inside the memory and no two at the same place.
"""
from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from itertools import repeat
from typing import Iterator

import numpy as np

from ..interpreter.dram.command_stream import CommandTimer
from ..ir.commands import ESTIMATE_ARG, Command
from ..ir.hardware import Memory
from ..ir.pim_program import (PLACE_ARGS, PLACE_FIELDS, For, Issue, Let, PimProgram, ProgramError,
                              evaluate, names_in, specialized)
from ..ir.workload import DTYPE_BYTES
from .stream import Item, Loop, unroll
from ..bounded_cache import BoundedCache


def constants(memory: Memory) -> dict[str, int]:
    org, pim = memory.organization, memory.pim
    word = max(1, pim.simd_width_bits // 8)
    out = {"channels": org.channels, "pseudo_channels": org.pseudo_channels, "ranks": org.ranks,
           "bank_groups": org.bank_groups, "banks_per_group": org.banks_per_group,
           "banks": org.banks_per_rank, "rows": org.rows, "bursts": org.bursts_per_row,
           "words": org.row_bytes // word, "lanes": pim.lanes, "global_buffer": pim.global_buffer_bytes // word}
    out.update({rf.name: rf.count for rf in pim.register_files})
    return out


def environment(memory: Memory, program: PimProgram, shape: dict, channel: int = 0, first_row: int = 0,
                params: dict | None = None) -> dict:
    env = {**constants(memory), **{k: int(v) for k, v in shape.items()}, "channel": channel, "first_row": first_row}
    params = params or {}
    unknown = set(params) - {let.name for let in program.lets}
    if unknown:
        raise ProgramError(f"program {program.op_class} has no parameter {', '.join(sorted(unknown))}",
                           program.span, f"its top-level lets: {', '.join(l.name for l in program.lets)}")
    for let in program.lets:
        env[let.name] = int(params[let.name]) if let.name in params else evaluate(let.expr, env)
    return env


def expand(memory: Memory, program: PimProgram, shape: dict, channel: int = 0, first_row: int = 0,
           op: str = "", values: bool = False, params: dict | None = None) -> list[Item]:
    """One channel's stream of `program` for an op of `shape`. With `values`, each command's
    `data` holds its effect arguments (reg, input, src, acc, output, ...) for the values executor."""
    ex = _Expansion(memory, program, shape, channel, first_row, params)
    return ex.items(ex.root, ex.start(), op, values)


def placed(memory: Memory, program: PimProgram, shape: dict, channel: int = 0, first_row: int = 0,
           params: dict | None = None, times: int = 1, args: bool = False, fast: bool = True) -> Iterator[list[tuple]]:
    """The same commands as `unroll(expand(...))` (the whole stream `times` over), as placed
    tuples (PLACED) built in program order with no Loop or Command objects, in lists of about
    CHUNK or more: what a text trace or a timer that wants every command needs. With `args`, each
    tuple's last item holds the values of the issue's other arguments (`Site.shown`), for a trace.
    With `fast`, loops are evaluated whole over numpy arrays where they can be (placed_batch);
    without, command by command (the same tuples)."""
    ex = _Expansion(memory, program, shape, channel, first_row, params, args, fast)
    out: list[tuple] = []
    for _ in range(times):
        for _ in ex.chunks(ex.root, ex.start(), out):
            chunk = out.copy()
            out.clear()
            yield chunk
    if out:
        yield out


# A placed command: its issue site, then its places and the cycles it announces, the order of
# Command's fields from pseudo_channel on (to_command).
PLACED = ("site", "pseudo_channel", "rank", "bank_group", "bank", "row", "column", "estimate", "timing_arg",
          "args")


def to_command(p: tuple, channel: int, data=None) -> Command:
    site = p[0]
    return Command(site.name, channel, p[1], p[2], p[3], p[4], p[5], p[6], site.kind, data, p[7], p[8])


@dataclass(frozen=True, eq=False, slots=True)
class Site:
    """What every command of one issue statement needs, worked out once per expansion."""
    name: str                 # on the bus: the part's command when `issued_as`, else its own
    kind: str                 # the declared effect, or the lower-cased name for effect `none`
    command: str              # the unit's command the program issues
    args: tuple               # (argument, function of env), in source order
    place: tuple              # one function of env per PLACE_ARGS (0 when not given)
    announces: bool           # carries an `estimate` of the work it heads
    banks_per_group: int
    timing: object = None     # function of env: the argument its timing rules depend on (Command.timing_arg)
    shown: tuple = ()         # (argument, function of env) of its other arguments, when a trace asks

    def at(self, env: dict) -> tuple:
        """This site's placed command (PLACED) under `env`."""
        pc, rank, bank, row, column = self.place
        bank_group, b = divmod(bank(env), self.banks_per_group)
        return (self, pc(env), rank(env), bank_group, b, row(env), column(env), 0,
                self.timing(env) if self.timing is not None else 0,
                tuple([f(env) for _, f in self.shown]) if self.shown else ())


@dataclass(frozen=True, eq=False, slots=True)
class _Body:
    sites: tuple              # Site, _LetSite and _LoopSite, in program order
    announces: bool           # a command of its own heads work (an estimate): walked whole, never cut
    nested: bool              # it holds loops
    flat: bool                # it holds commands only, none announcing
    announcing: bool = False  # a command of its own or of a nested loop announces work


@dataclass(frozen=True, eq=False, slots=True)
class _LoopSite:
    var: str
    count: object             # trip count, a function of env
    periodic: bool            # the body's command shape reads the loop variable: period = trip count
    body: _Body
    binds: bool               # its body binds lets: each iteration gets a scope of its own
    captures: bool            # a let follows it in its own body: its (lazy) iterations keep the env of the loop


@dataclass(frozen=True, eq=False, slots=True)
class _LetSite:
    name: str
    value: object             # function of env


CHUNK = 4096                  # placed commands `placed` builds before it hands them on (at least)


class _Expansion:
    """One op's program on one channel, walked as a structured stream (`items`: Loops and
    Commands, lazily) or as placed commands in order (`chunks`); both from the same statement
    sites, each worked out once (its command's names, argument and place functions, with the
    names no statement binds taken as constants)."""

    def __init__(self, memory: Memory, program: PimProgram, shape: dict, channel: int, first_row: int,
                 params: dict | None, args: bool = False, fast: bool = False):
        self.memory, self.channel, self.args, self.fast = memory, channel, args, fast
        self.decls = {c.name: c for c in memory.pim.commands}
        self.announcing = {name for name, d in self.decls.items() if ESTIMATE_ARG in d.args}
        self.timing_args = timing_args(memory)
        self.env = environment(memory, program, shape, channel, first_row, params)
        bound = _bound(program.body)
        self.constants = {k: v for k, v in self.env.items() if k not in bound}
        self.root = self.body(program.body)

    def start(self) -> dict:
        return dict(self.env)      # lets bind into the walk's scope: each walk gets its own

    def function(self, expr):
        return specialized(expr, self.constants)

    def body(self, stmts: tuple) -> _Body:
        sites = tuple(self._site(s, stmts[i + 1:]) for i, s in enumerate(stmts))
        announces = any(type(s) is Site and s.announces for s in sites)
        return _Body(sites, announces, any(type(s) is _LoopSite for s in sites),
                     not announces and all(type(s) is Site for s in sites),
                     announces or any(type(s) is _LoopSite and s.body.announcing for s in sites))

    def _site(self, stmt, rest: tuple):
        if type(stmt) is Let:
            return _LetSite(stmt.name, self.function(stmt.expr))
        if type(stmt) is For:
            return _LoopSite(stmt.var, self.function(stmt.count), _shape_depends_cached(stmt, self.timing_args),
                             self.body(stmt.body),
                             any(type(s) is Let for s in stmt.body), any(type(s) is Let for s in rest))
        decl = self.decls.get(stmt.command)
        effect = decl.effect if decl is not None else "none"
        name = decl.issued_as if decl is not None and decl.issued_as else stmt.command
        args = tuple((n, self.function(e)) for n, e in stmt.args)
        given = dict(args)                               # a repeated argument: the last one counts
        timing = self.timing_args.get(stmt.command)
        return Site(name, stmt.command.lower() if effect == "none" else effect, stmt.command, args,
                    tuple(given.get(n, _zero) for n in PLACE_ARGS), name in self.announcing,
                    self.memory.organization.banks_per_group, given.get(timing, _zero) if timing else None,
                    tuple((n, f) for n, f in given.items() if n not in PLACE_ARGS) if self.args else ())

    # ---- structured: Loops and Commands --------------------------------------------------------
    def items(self, body: _Body, env: dict, op: str, values: bool) -> list[Item]:
        # `env` is the caller's fresh scope: lets may bind into it without a copy
        out: list[Item] = []
        for site in body.sites:
            if type(site) is Site:
                out.append(self.command(site, env, values))
            elif type(site) is _LetSite:
                env[site.name] = site.value(env)
            else:
                out.append(self.loop(site, env, op, values))
        if self.announcing:
            for i, c in enumerate(out):
                if isinstance(c, Command) and c.name in self.announcing:
                    out[i] = dataclasses.replace(c, estimate=estimate(self.memory, list(unroll(out[i:]))))
        return out

    def command(self, site: Site, env: dict, values: bool) -> Command:
        if not values:                                   # only the places: no per-command dict
            return to_command(site.at(env), self.channel)
        data = {n: f(env) for n, f in site.args if n not in PLACE_ARGS}
        if site.name != site.command:                    # on the bus an ordinary DRAM command, timed as one
            data["command"] = site.command
        return to_command(site.at(env), self.channel, data)

    def loop(self, site: _LoopSite, env: dict, op: str, values: bool) -> Loop:
        count = max(0, int(site.count(env)))
        body, var = site.body, site.var
        if site.captures:                                # later lets of this body must not reach it
            env = dict(env)
        return Loop(count, lambda i: self.items(body, {**env, var: i}, op, values), var,
                    max(1, count) if site.periodic else 1, op)

    # ---- placed commands, in order -------------------------------------------------------------
    def fill(self, sites: tuple, env: dict, out: list) -> None:
        """Append the placed commands of `sites` under `env` to `out`, every loop run through."""
        marks = []
        for site in sites:
            if type(site) is Site:
                if site.announces:
                    marks.append(len(out))
                out.append(site.at(env))
            elif type(site) is _LetSite:
                env[site.name] = site.value(env)
            elif self.batched(site, env, out):
                pass
            elif site.body.flat:         # commands only: no call per iteration
                out.extend([s.at(scope) for scope in _scopes(site, env) for s in site.body.sites])
            else:
                inner = site.body.sites
                for scope in _scopes(site, env):
                    self.fill(inner, scope, out)
        for i in marks:                  # the work it heads: the rest of its body, nested loops included
            out[i] = out[i][:7] + (estimate(self.memory, [to_command(p, 0) for p in out[i:]]),) + out[i][8:]

    def chunks(self, body: _Body, env: dict, out: list) -> Iterator[None]:
        """`fill`, pausing whenever `out` holds CHUNK placed commands or more (between iterations of
        loops that hold loops)."""
        if body.announces:
            self.fill(body.sites, env, out)
            return
        for site in body.sites:
            if type(site) is _LoopSite and site.body.nested:
                if self.batched(site, env, out):
                    continue
                for scope in _scopes(site, env):
                    yield from self.chunks(site.body, scope, out)
                    if len(out) >= CHUNK:
                        yield
            else:
                self.fill((site,), env, out)


    def batched(self, site: _LoopSite, env: dict, out: list) -> bool:
        """Append the placed commands of the whole loop `site` to `out`, its iterations evaluated
        together over numpy arrays (placed_batch), and say so; False (nothing appended) for a loop
        that is small, announces work, or whose nested trip counts differ between iterations."""
        if not self.fast or site.body.announcing:
            return False
        count = max(0, int(site.count(env)))
        if site.body.flat and count * len(site.body.sites) < MIN_BATCH:
            return False
        try:
            out.extend(placed_batch(site, env, self.memory.organization.banks_per_group))
        except (_Unbatched, ProgramError, ArithmeticError, ValueError):
            return False             # the walk gives it (and any error, at the same command as ever)
        return True


def _scopes(site: _LoopSite, env: dict) -> Iterator[dict]:
    """The scope of each iteration of a loop: a fresh one when its body binds lets (as `items`
    gives), else one dict with the loop variable updated."""
    var, count = site.var, max(0, int(site.count(env)))
    if site.binds:
        for i in range(count):
            yield {**env, var: i}
        return
    scope = dict(env)
    for i in range(count):
        scope[var] = i
        yield scope


MIN_BATCH = 64                # a flat loop of fewer commands is walked command by command (numpy's overhead)
MAX_LANES = 1 << 17           # iterations placed_batch evaluates at once, nested ones included (memory)


class _Unbatched(Exception):
    """A loop placed_batch leaves to the walk: too many iterations at once, nested trip counts that
    differ between iterations, or a value that is not an integer."""


def placed_batch(site: _LoopSite, env: dict, banks_per_group: int) -> list[tuple]:
    """The placed commands (PLACED) of the whole loop `site` under `env`, in program order, as
    `fill` gives them: every statement of the loop nest evaluated once over numpy arrays of all its
    iterations (lanes), then the commands put in order by their positions."""
    _, groups = _batch_body((site,), dict(env), 1)
    placed, positions = [], []
    for s, _lane, pos, (pc, rank, bank, row, column, timing, shown) in groups:
        n = len(pos)
        bank_group, b = np.divmod(bank, banks_per_group)
        placed += zip(repeat(s, n), pc.tolist(), rank.tolist(), bank_group.tolist(), b.tolist(), row.tolist(),
                      column.tolist(), repeat(0, n), timing.tolist(),
                      zip(*[a.tolist() for a in shown]) if shown else repeat((), n))
        positions.append(pos)
    if not placed:
        return []
    return list(map(placed.__getitem__, np.argsort(np.concatenate(positions)).tolist()))


def _batch_body(sites: tuple, env: dict, n: int) -> tuple[int, list]:
    """`sites` over `n` lanes (each name of `env` an int, or an array of one value per lane): the
    commands each lane issues, and the groups of its commands, (site, lane, position in its lane,
    values) with arrays of one entry per command (lane None: one command per lane, at `position`)."""
    groups, per_lane = [], 0
    for site in sites:
        if type(site) is Site:
            groups.append((site, None, per_lane, _batch_values(site, env, n)))
            per_lane += 1
        elif type(site) is _LetSite:
            env[site.name] = site.value(env)
        else:
            count = np.unique(np.asarray(site.count(env)))
            if len(count) != 1:
                raise _Unbatched
            count = max(0, int(count[0]))
            if count == 0:
                continue
            lanes = n * count
            if lanes > MAX_LANES:
                raise _Unbatched
            inner = {k: np.repeat(v, count) if isinstance(v, np.ndarray) else v for k, v in env.items()}
            inner[site.var] = np.tile(np.arange(count, dtype=np.int64), n)
            each, inner_groups = _batch_body(site.body.sites, inner, lanes)
            for s, lane, pos, values in inner_groups:
                lane = np.arange(lanes) if lane is None else lane
                groups.append((s, lane // count, per_lane + (lane % count) * each + pos, values))
            per_lane += count * each
    return per_lane, groups


def _batch_values(site: Site, env: dict, n: int) -> tuple:
    """A site's places, timing argument and shown arguments over `n` lanes, each an int64 array."""
    def lanes(f) -> np.ndarray:
        value = np.asarray(f(env))
        if value.dtype.kind not in "iu":
            raise _Unbatched
        return np.broadcast_to(value.astype(np.int64, copy=False), (n,))
    zero = np.zeros(n, dtype=np.int64)
    return (*(lanes(f) for f in site.place), lanes(site.timing) if site.timing is not None else zero,
            tuple(lanes(f) for _, f in site.shown))


def _bound(stmts: tuple) -> set[str]:
    """The names the statements bind (lets and loop variables, nested ones included)."""
    names = set()
    for s in stmts:
        if type(s) is Let:
            names.add(s.name)
        elif type(s) is For:
            names |= {s.var} | _bound(s.body)
    return names


def _zero(env) -> int:
    return 0


_ESTIMATES: dict[int, tuple[weakref.ref, dict]] = {}      # id(memory) -> (memory, shape -> cycles)


def estimate(memory: Memory, commands: list[Command]) -> int:
    """Cycles from the first of `commands` to their last, timed alone (fresh timer, no
    refresh); what an announcing command says of the work it heads. Cached per command shape."""
    key = tuple((c.name, c.pseudo_channel, c.rank, c.bank_group, c.bank, c.timing_arg) for c in commands)
    entry = _ESTIMATES.get(id(memory))
    if entry is None or entry[0]() is not memory:
        entry = _ESTIMATES[id(memory)] = (weakref.ref(memory), {})
    if key not in entry[1]:
        pim = memory.pim
        issued = CommandTimer(memory, pim.commands, pim.rules, pim.windows).run(
            [dataclasses.replace(c, channel=0, estimate=0) for c in commands])
        entry[1][key] = issued[-1] - issued[0]
    return entry[1][key]


_SHAPE_DEPENDS: dict[tuple, tuple[For, bool]] = BoundedCache(10_000)      # (id(For), timing args) -> (the loop, its answer)


def timing_args(memory: Memory) -> dict[str, str]:
    """The unit's commands whose timing rules depend on one of their arguments: command -> argument."""
    rules = memory.part.rules + (memory.pim.rules if memory.pim is not None else ())
    return {c: r.arg for r in rules if r.arg for c in r.preceding}


def _shape_depends_cached(stmt: For, timing: dict[str, str]) -> bool:
    key = (id(stmt), tuple(sorted(timing.items())))
    entry = _SHAPE_DEPENDS.get(key)
    if entry is None:
        entry = _SHAPE_DEPENDS[key] = (stmt, _shape_depends(stmt.body, {stmt.var}, timing))
    return entry[1]


def _shape_depends(body: tuple, tainted: set[str], timing: dict[str, str]) -> bool:
    """Whether the body's command shape (names, places, the arguments timing rules depend on,
    nested trip counts) reads a tainted name."""
    tainted = set(tainted)
    for stmt in body:
        if isinstance(stmt, Let):
            if names_in(stmt.expr) & tainted:
                tainted.add(stmt.name)
        elif isinstance(stmt, Issue):
            shaping = ("pseudo_channel", "rank", "bank", timing.get(stmt.command))
            if any(names_in(e) & tainted for n, e in stmt.args if n in shaping):
                return True
        elif names_in(stmt.count) & tainted or _shape_depends(stmt.body, tainted, timing):
            return True
    return False


def op_stream(memory: Memory, op_class: str, shape: dict, channel: int = 0, first_row: int = 0,
              params: dict | None = None) -> Iterator[Command]:
    """Every command, in order, of the unit's program for `op_class` on one channel."""
    program = memory.pim.program(op_class) if memory.pim is not None else None
    if program is None:
        raise ProgramError(f"memory '{memory.name}' has no PIM program for {op_class}")
    return (to_command(p, channel) for chunk in placed(memory, program, shape, channel, first_row, params)
            for p in chunk)


def place_of(memory: Memory, program: PimProgram, shape: dict, tensor: str, index: tuple[int, ...],
             first_row: int = 0) -> dict[str, int]:
    """Where the program's layout of `tensor` puts one element: channel, ..., row, column, lane."""
    layout = program.layout(tensor)
    if layout is None:
        raise ProgramError(f"program {program.op_class} lays out no tensor '{tensor}'", program.span)
    env = {**environment(memory, program, shape, 0, first_row), **dict(zip(layout.indices, index))}
    return {f: int(evaluate(layout.place[f], env)) if f in layout.place else 0 for f in PLACE_FIELDS}


def tensor_rows(memory: Memory, program: PimProgram, shape: dict, tensor: str) -> int | None:
    """The row indices a layout says its tensor spans (its `rows`), or None if it does not say."""
    layout = program.layout(tensor)
    if layout is None or layout.rows is None:
        return None
    return int(evaluate(layout.rows, environment(memory, program, shape)))


# ---- checks for one op's shape -------------------------------------------------------------------
def bounds(memory: Memory) -> dict[str, int]:
    """The exclusive upper bound of each issue argument that indexes declared state."""
    org = memory.organization
    return {"pseudo_channel": org.pseudo_channels, "rank": org.ranks, "bank": org.banks_per_rank,
            "row": org.rows, "column": org.bursts_per_row}


def check(memory: Memory, program: PimProgram, shape: dict) -> list[ProgramError]:
    """Indices out of the declared state, at the first and last iteration of every loop."""
    decls = {c.name: c for c in memory.pim.commands}
    sizes = {**constants(memory)}
    limits = bounds(memory)
    problems: dict[tuple, ProgramError] = {}

    def state_size(name: str) -> int | None:
        return sizes.get(name) if name != "row" else None

    def visit(body: tuple, env: dict) -> None:
        env = dict(env)
        for stmt in body:
            if isinstance(stmt, Let):
                env[stmt.name] = evaluate(stmt.expr, env)
            elif isinstance(stmt, For):
                count = evaluate(stmt.count, env)
                for i in sorted({0, count - 1}) if count > 0 else ():
                    visit(stmt.body, {**env, stmt.var: i})
            else:
                issue(stmt, env)

    def issue(stmt: Issue, env: dict) -> None:
        decl = decls.get(stmt.command)
        state = {}
        if decl is not None:
            src = [s for s in decl.reads if s != "row"]
            dst = [s for s in decl.writes if s != "row"]
            state = {"reg": dst[:1], "src": src[:1],
                     "acc": (dst if decl.effect in ("mac", "scale", "dot_acc", "activation") else src)[:1]}
            if decl.effect == "reduce":
                state["output"] = [s for s in dst if s != "host"]
        values = {name: evaluate(e, env) for name, e in stmt.args}
        if decl is not None and decl.effect in ("dot", "group_dot") and state["src"]:
            values = {**values, "src": values.get("src", 0) + values.get("k", 1) - 1}   # the last entry read
        # the last element a rank-file effect touches (elements: entry x lanes + lane)
        elements = {"scale": lambda v: ("src", v["src"] + (sizes["banks"] - 1) // max(1, v["share"])),
                    "softmax": lambda v: ("src", v["src"] + v["n"] - 1),
                    "reduce": lambda v: ("output", v["output"] + v["stride"] * (sizes["banks"] - 1))}
        element = elements[decl.effect](values) if decl is not None and decl.effect in elements else (None, 0)
        for name, e in stmt.args:
            value = values[name]
            limit, what = limits.get(name), name
            if name in state and state[name]:
                limit, what = state_size(state[name][0]), f"{state[name][0]} entry"
                if name == element[0]:
                    value, limit, what = element[1], limit * sizes["lanes"], f"{state[name][0]} element"
            if limit is not None and not 0 <= value < limit:
                problems.setdefault((stmt.span, name), ProgramError(
                    f"{stmt.command}: {what} {value} is outside the declared 0..{limit - 1} "
                    f"(op shape {', '.join(f'{k}={v}' for k, v in shape.items())})", e.span if hasattr(e, "span")
                    else stmt.span, "the tile does not fit: shrink the tile in the program, or declare more "
                    "state (register_file count, global_buffer)"))

    try:
        visit(program.body, environment(memory, program, shape))
    except ProgramError as exc:
        return [exc]
    return list(problems.values())


def layout_problem(memory: Memory, program: PimProgram, shape: dict, tensor: str, dims: tuple[int, ...],
                   first_row: int = 0, edges: int | None = None) -> str | None:
    """Why the layout of `tensor` (dims) does not cover it inside the memory, or None. With
    `edges`, only the first and last `edges` indices of each dimension are checked."""
    layout = program.layout(tensor)
    org = memory.organization
    env = environment(memory, program, shape, 0, first_row)
    axes = [np.arange(d, dtype=np.int64) for d in dims]
    if edges is not None:
        axes = [np.unique(np.concatenate([a[:edges], a[-edges:]])) for a in axes]
    grids = np.meshgrid(*axes, indexing="ij")
    env.update(dict(zip(layout.indices, grids)))
    limits = {"channel": org.channels, **bounds(memory), "lane": org.access_bytes // DTYPE_BYTES[memory.pim.dtype]}
    place = {}
    for name, limit in limits.items():
        e = layout.place.get(name)
        value = np.broadcast_to(np.asarray(evaluate(e, env) if e is not None else 0), grids[0].shape)
        bad = (value < 0) | (value >= limit)
        if bad.any():
            where = tuple(int(g[bad][0]) for g in grids)
            return f"element {list(where)} of {tensor} gets {name} {int(value[bad][0])}, outside 0..{limit - 1}"
        place[name] = value
    flat = np.zeros(grids[0].shape, dtype=np.int64)
    for name, limit in limits.items():
        flat = flat * limit + place[name]
    unique, counts = np.unique(flat.reshape(-1), return_counts=True)
    if (counts > 1).any():
        return f"{int((counts > 1).sum())} places of {tensor} hold more than one element"
    return None

