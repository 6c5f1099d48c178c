"""The generic values executor: any declared PIM program (ir/pim_program) run on numpy-backed banks.

State, as the unit declares it: the banks' rows (`Banks`, per channel,
pseudo-channel and rank), one global buffer per channel, and each register
file once per PIM unit (per bank, bank pair, bank group or rank, as its
`placement` says), each entry one SIMD word of `lanes` elements of the unit's
datatype. A command acts on the banks its scope covers (`parity_banks`: the
banks of the rank with the addressed bank's parity, the even or the odd bank
of every pair), by its declared effect:

  load      the input vector's `lanes` elements from `input` (zeros past its end) into entry `reg`
            of the buffer or register file it writes
  mac       per bank: acc[acc] += row burst `column` x source[src], lane by lane; the product and
            then the sum rounded to the datatype (the order the bundled executors state)
  store     per bank: row burst `column` = acc[acc]; the accumulator entry is cleared
  readback  the host adds the burst's lanes in float32, lane 0 first, into output `output`
            (outputs past the op's end, padding, are dropped)
  copy      the open row's SIMD words into the buffer's entries from `reg` on (as many as fit)
  dot       per bank: `k` SIMD words of the row from word `src` dotted with entries `src`.. of the
            source: each word's `lanes` products and their adder tree in float32, words added in
            float32, the result rounded to the datatype; the host adds it in float32 into output
            `output + stride x` the bank's index in the channel (rank x banks + bank)
  dot_acc   per bank: burst `column` x source[src], the `lanes` products and their adder tree in
            float32, the sum rounded to the datatype and added into lane 0 of acc[acc], rounded to
            the datatype (a MAC register per bank: AiM's MAC_ABK)
  group_dot as dot, each word taken as runs of `group` lanes (lanes past the last whole run unused):
            run j of the k words dotted with run j of the entries, its sum added into output
            `output + stride x` the bank's index `+ step x j`

A register file declared `placement = rank` is one file per rank, shared by the rank's units (a
buffer chip's unit); its elements are numbered entry x lanes + lane. With b a bank's index within
its rank, in bank order:

  scale     per bank: acc[acc] += row burst `column` x element `src + b / share` of the rank file,
            lane by lane; the product and then the sum rounded to the datatype
  reduce    per bank: the lanes of acc[acc] summed by an adder tree in float32, rounded to the
            datatype, written to element `output + stride x b` of the rank file (or added by the
            host in float32 into that output); the entry is cleared
  accumulate per bank: lane l of acc[acc] added by the host in float32 into output
            `output + stride x mod(b, share) + l`; the entry is cleared
  softmax   elements `src` .. `src + n - 1` of the rank file: exp(x - max) in float32, summed in
            float32 in order, each divided by the sum and rounded to the datatype

A unit's activation function (AiM's AF_ABK):

  activation per unit: entry `acc` of the file it writes = the activation function (the executor's
            `activation`, the one the unit's lookup table holds) of entry `acc` of the file it reads,
            lane by lane in float32, rounded to the datatype; the read entry is cleared when the two
            files differ (the MAC register is free for the next output)

A command of scope `channel` acts on the banks of every rank of its channel.

Commands of effect `none` (activations, precharges, mode changes) change no
values; the timer checks that rows are open where the program reads them.
"""
from __future__ import annotations

import numpy as np

from ...ir.hardware import Memory
from ...ir.pim_program import PimProgram, ProgramError, evaluate
from ...lowering.pim_program import constants, environment, expand
from ...lowering.stream import unroll
from ...ir.commands import Command
from .banks import NUMPY_DTYPES, Banks

# Banks sharing one PIM unit, by placement: the unit index of flat bank b (within a rank).
_UNIT_OF = {"bank": lambda b, bpg: b, "bank_pair": lambda b, bpg: b // 2,
            "bank_group": lambda b, bpg: b // bpg}


class ProgramExecutor:
    def __init__(self, memory: Memory, x: np.ndarray | None = None, outputs: int = 0, activation=None):
        self.activation = activation            # a function of a float32 array (effect `activation`)
        self.memory, self.org, pim = memory, memory.organization, memory.pim
        self.dt = NUMPY_DTYPES[pim.dtype]
        self.lanes = pim.lanes
        self.decls = {c.name: c for c in pim.commands}
        self.files = {rf.name: rf.count for rf in pim.register_files}
        self.ranked = {rf.name for rf in pim.register_files if rf.placement == "rank"}
        self.unit_of = _UNIT_OF.get(pim.placement, lambda b, bpg: 0)
        self.banks: dict[tuple, Banks] = {}
        self.state: dict[tuple, np.ndarray] = {}
        self.x = None if x is None else np.asarray(x, dtype=self.dt)
        self.y = np.zeros(outputs, dtype=np.float32)

    def bank_rows(self, channel: int, pseudo_channel: int, rank: int) -> Banks:
        key = (channel, pseudo_channel, rank)
        if key not in self.banks:
            self.banks[key] = Banks(self.memory, self.memory.pim.dtype)
        return self.banks[key]

    def entries(self, name: str, key: tuple) -> np.ndarray:
        """A register file of one unit (key: channel, pseudo-channel, rank, unit) or the channel's global buffer."""
        key = (name, key[0]) if name == "global_buffer" else (name, *key[:3]) if name in self.ranked else (name, *key)
        if key not in self.state:
            count = constants(self.memory)["global_buffer"] if name == "global_buffer" else self.files[name]
            self.state[key] = np.zeros((count, self.lanes), dtype=self.dt)
        return self.state[key]

    def file_element(self, name: str, element: int) -> tuple[np.ndarray, int]:
        """(the flat file of one rank, the index in it) of element `element` of a register file placed
        per rank, channel 0's ranks numbered on: rank x entries x lanes + entry x lanes + lane."""
        per_rank = self.files[name] * self.lanes
        if not 0 <= element < per_rank * self.org.ranks:
            raise ProgramError(f"element {element} of {name} is outside its 0..{per_rank * self.org.ranks - 1}", None)
        return self.entries(name, (0, 0, element // per_rank)).reshape(-1), element % per_rank

    @staticmethod
    def apart(files: list[np.ndarray]) -> bool:
        """Whether no two of these register files (one per bank) are one file."""
        return len({id(f) for f in files}) == len(files)

    def _banks(self, decl, c: Command) -> list[tuple[int, int]]:
        """(rank, flat bank within the rank) of every bank the command acts on."""
        bpg, per_rank = self.org.banks_per_group, self.org.banks_per_rank
        flat = c.bank_group * bpg + c.bank
        if decl.scope == "channel":
            return [(r, b) for r in range(self.org.ranks) for b in range(per_rank)]
        return [(c.rank, b) for b in {"bank": [flat], "bank_pair": [flat - flat % 2, flat - flat % 2 + 1],
                                      "parity_banks": list(range(flat % 2, per_rank, 2)),
                                      "bank_group": list(range(c.bank_group * bpg, (c.bank_group + 1) * bpg))}
                .get(decl.scope, range(per_rank))]

    def execute(self, c: Command) -> None:
        name = c.data.get("command", c.name) if isinstance(c.data, dict) else c.name
        decl = self.decls.get(name)
        if decl is None or decl.effect == "none":
            return
        a = c.data
        targets = self._banks(decl, c)
        if decl.effect in ("dot", "group_dot"):
            return self._dot(decl, c, targets)
        if decl.effect in _RANK_EFFECTS:
            return _RANK_EFFECTS[decl.effect](self, decl, c, targets)
        if decl.effect == "copy":
            words = self.bank_rows(c.channel, c.pseudo_channel, c.rank).row(targets[0][1], c.row).reshape(-1, self.lanes)
            target = next(s for s in decl.writes if s != "row")
            entries = self.entries(target, (c.channel, c.pseudo_channel, c.rank, self.unit_of(targets[0][1], self.org.banks_per_group)))
            n = min(len(words), len(entries) - a["reg"])
            entries[a["reg"]:a["reg"] + n] = words[:n]
            return
        rows = self.bank_rows(c.channel, c.pseudo_channel, c.rank)
        where = (c.channel, c.pseudo_channel, c.rank)
        banks = [b for _, b in targets]
        units = lambda b: (*where, self.unit_of(b, self.org.banks_per_group))
        if decl.effect == "load":
            start = a["input"]
            word = np.zeros(self.lanes, dtype=self.dt)
            piece = self.x[start:start + self.lanes] if start >= 0 else self.x[:0]
            word[:len(piece)] = piece
            target = next(s for s in decl.writes if s != "row")
            for key in {units(b) for b in banks} if target != "global_buffer" else {where + (0,)}:
                self.entries(target, key)[a["reg"]] = word
        elif decl.effect == "mac":
            src = next(s for s in decl.reads if s != "row")
            acc = next(s for s in decl.writes if s != "row")
            for b in banks:
                burst = rows.row(b, c.row)[c.column]
                product = (burst * self.entries(src, units(b))[a["src"]]).astype(self.dt)
                entry = self.entries(acc, units(b))
                entry[a["acc"]] = (entry[a["acc"]] + product).astype(self.dt)
        elif decl.effect == "dot_acc":
            src = next(s for s in decl.reads if s != "row")
            acc = next(s for s in decl.writes if s != "row")
            sources = [self.entries(src, units(b)) for b in banks]
            regs = [self.entries(acc, units(b)) for b in banks]
            bursts = [rows.row(b, c.row)[c.column] for b in banks]
            if banks and src != acc and self.apart(regs):
                # one MAC register per bank, none a source: every bank at once (row by row the same
                # float32 adder trees and roundings as bank by bank below)
                totals = adder_tree_dot(np.stack(bursts), np.stack([s[a["src"]] for s in sources]), self.lanes)
                sums = (np.array([r[a["acc"], 0] for r in regs], self.dt).astype(np.float32)
                        + totals.astype(self.dt).astype(np.float32)).astype(self.dt)
                for r, value in zip(regs, sums):
                    r[a["acc"], 0] = value
            else:
                for burst, source, entry in zip(bursts, sources, regs):
                    total = adder_tree_dot(burst, source[a["src"]], self.lanes).astype(self.dt)
                    entry[a["acc"], 0] = (entry[a["acc"], 0].astype(np.float32) + total.astype(np.float32)).astype(self.dt)
        elif decl.effect == "activation":
            if self.activation is None:
                raise ProgramError(f"{name} applies the activation function, but the values run was given none",
                                   None, "pass the function the unit's table holds (`activation=`)")
            src, dst = decl.reads[0], decl.writes[0]
            for key in {units(b) for b in banks}:
                value = self.entries(src, key)[a["acc"]].astype(np.float32)
                self.entries(dst, key)[a["acc"]] = np.asarray(self.activation(value), np.float32).astype(self.dt)
                if src != dst:
                    self.entries(src, key)[a["acc"]] = 0
        elif decl.effect == "store":
            acc = next(s for s in decl.reads if s != "row")
            for b in banks:
                rows.row(b, c.row)[c.column] = self.entries(acc, units(b))[a["acc"]]
            for key in {units(b) for b in banks}:
                self.entries(acc, key)[a["acc"]] = 0
        elif decl.effect == "readback":
            out = a["output"]
            if 0 <= out < len(self.y):
                total = np.float32(0)
                for v in rows.row(banks[0], c.row)[c.column].astype(np.float32):
                    total = np.float32(total + v)
                self.y[out] = np.float32(self.y[out] + total)

    def _dot(self, decl, c: Command, targets: list[tuple[int, int]]) -> None:
        a, lanes = c.data, self.lanes
        src = next(s for s in decl.reads if s != "row")
        words = slice(a["src"] * lanes, (a["src"] + a["k"]) * lanes)
        rows = np.stack([self.bank_rows(c.channel, c.pseudo_channel, r).row(b, c.row).reshape(-1)[words]
                         for r, b in targets])
        vector = np.stack([self.entries(src, (c.channel, c.pseudo_channel, r, self.unit_of(b, self.org.banks_per_group)))
                           [a["src"]:a["src"] + a["k"]].reshape(-1) for r, b in targets])
        if decl.effect == "group_dot":          # runs of `group` lanes, each its own adder tree
            group = a["group"]
            runs = lanes // group
            words_of = lambda x: x.reshape(len(targets), a["k"], lanes)[..., :runs * group]
            runs_of = lambda x: words_of(x).reshape(len(targets), a["k"], runs, group).transpose(0, 2, 1, 3)
            results = adder_tree_dot(runs_of(rows).reshape(len(targets), runs, -1),
                                     runs_of(vector).reshape(len(targets), runs, -1), group).astype(self.dt)
        else:
            results = adder_tree_dot(rows, vector, lanes).astype(self.dt)[:, None]
        for (r, b), values in zip(targets, results):
            for j, value in enumerate(values):
                out = a["output"] + a["stride"] * (r * self.org.banks_per_rank + b) + a.get("step", 0) * j
                if 0 <= out < len(self.y):
                    self.y[out] = np.float32(self.y[out] + np.float32(value))


def _scale(ex: ProgramExecutor, decl, c: Command, targets) -> None:
    a, src = c.data, next(s for s in decl.reads if s != "row")
    acc = next(s for s in decl.writes)
    scalars = ex.entries(src, (c.channel, c.pseudo_channel, c.rank)).reshape(-1)
    rows = ex.bank_rows(c.channel, c.pseudo_channel, c.rank)
    for r, b in targets:
        burst = rows.row(b, c.row)[c.column]
        product = (burst * scalars[a["src"] + b // a["share"]]).astype(ex.dt)
        entry = ex.entries(acc, (c.channel, c.pseudo_channel, r, ex.unit_of(b, ex.org.banks_per_group)))
        entry[a["acc"]] = (entry[a["acc"]] + product).astype(ex.dt)


def _drain(ex: ProgramExecutor, decl, c: Command, targets):
    """(bank index within its rank, its accumulator entry as float32) for each target; entries cleared."""
    a, acc = c.data, decl.reads[0]
    for r, b in targets:
        entry = ex.entries(acc, (c.channel, c.pseudo_channel, r, ex.unit_of(b, ex.org.banks_per_group)))
        value = entry[a["acc"]].astype(np.float32)
        entry[a["acc"]] = 0
        yield b, value


def _reduce(ex: ProgramExecutor, decl, c: Command, targets) -> None:
    a, target = c.data, decl.writes[0]
    for b, value in list(_drain(ex, decl, c, targets)):
        total = adder_tree_dot(value, np.ones_like(value), ex.lanes)
        out = a["output"] + a["stride"] * b
        if target == "host":
            if 0 <= out < len(ex.y):
                ex.y[out] = np.float32(ex.y[out] + total)
        else:
            ex.entries(target, (c.channel, c.pseudo_channel, c.rank)).reshape(-1)[out] = total


def _accumulate(ex: ProgramExecutor, decl, c: Command, targets) -> None:
    a = c.data
    for b, value in list(_drain(ex, decl, c, targets)):
        start = a["output"] + a["stride"] * (b % a["share"])
        n = max(0, min(ex.lanes, len(ex.y) - start))
        ex.y[start:start + n] = (ex.y[start:start + n] + value[:n]).astype(np.float32)


def _softmax(ex: ProgramExecutor, decl, c: Command, targets) -> None:
    a = c.data
    elements = ex.entries(decl.reads[0], (c.channel, c.pseudo_channel, c.rank)).reshape(-1)
    x = elements[a["src"]:a["src"] + a["n"]].astype(np.float32)
    if x.size:
        e = np.exp(x - x.max()).astype(np.float32)
        total = np.add.accumulate(e, dtype=np.float32)[-1]      # in order, as the unit adds them
        elements[a["src"]:a["src"] + a["n"]] = (e / total).astype(ex.dt)


_RANK_EFFECTS = {"scale": _scale, "reduce": _reduce, "accumulate": _accumulate, "softmax": _softmax}


def adder_tree_dot(a: np.ndarray, b: np.ndarray, lanes: int) -> np.ndarray:
    """Dot products along the last axis (operands broadcast) as a `dot` computes them, in float32:
    per SIMD word the `lanes` products summed pairwise (an adder tree), words added in order."""
    acc = np.zeros(np.broadcast_shapes(a.shape, b.shape)[:-1], dtype=np.float32)
    for start in range(0, a.shape[-1], lanes):
        level = (a[..., start:start + lanes].astype(np.float32) * b[..., start:start + lanes].astype(np.float32))
        while level.shape[-1] > 1:
            if level.shape[-1] % 2:
                level = np.concatenate([level, np.zeros(level.shape[:-1] + (1,), np.float32)], axis=-1)
            level = (level[..., 0::2] + level[..., 1::2]).astype(np.float32)
        acc = (acc + level[..., 0]).astype(np.float32)
    return acc



def place(ex: ProgramExecutor, program: PimProgram, shape: dict, tensor: str, w: np.ndarray,
          first_row: int = 0, params: dict | None = None) -> None:
    """Write `w` into the banks where the program's layout of `tensor` puts each element."""
    layout = program.layout(tensor)
    env = environment(ex.memory, program, shape, 0, first_row, params)
    grids = np.meshgrid(*(np.arange(d, dtype=np.int64) for d in w.shape), indexing="ij")
    env.update(dict(zip(layout.indices, grids)))
    at = {f: np.broadcast_to(np.asarray(evaluate(layout.place[f], env) if f in layout.place else 0), w.shape)
          .reshape(-1) for f in ("channel", "pseudo_channel", "rank", "bank", "row", "column", "lane")}
    values = w.reshape(-1)
    # Element by element this was most of a large attention test's time: write each touched row at
    # once instead. Where two elements land on one place the later one wins, as element order would.
    bursts, lanes = ex.org.bursts_per_row, ex.org.access_bytes // ex.dt.itemsize     # a row's shape (Banks)
    if not ((0 <= at["column"]) & (at["column"] < bursts) & (0 <= at["lane"]) & (at["lane"] < lanes)).all():
        raise IndexError(f"the layout of {tensor} places an element outside a row's bursts and lanes")
    where = np.stack([at[f].astype(np.int64) for f in ("channel", "pseudo_channel", "rank", "bank", "row")])
    order = np.lexsort(where[::-1])                  # stable: element order within a row
    ranked = where[:, order]
    starts = np.flatnonzero(np.r_[True, (ranked[:, 1:] != ranked[:, :-1]).any(axis=0), True])
    for lo, hi in zip(starts[:-1], starts[1:]):
        ch, pc, rank, bank, row = (int(v) for v in ranked[:, lo])
        target = ex.bank_rows(ch, pc, rank).row(bank, row)
        idx = order[lo:hi]
        flat = at["column"][idx].astype(np.int64) * target.shape[1] + at["lane"][idx]
        last = idx.size - 1 - np.unique(flat[::-1], return_index=True)[1]     # each place's last element
        target.reshape(-1)[flat[last]] = values[idx[last]]


def execute(memory: Memory, program: PimProgram, shape: dict, tensors: dict[str, np.ndarray], outputs: int,
            x: np.ndarray | None = None, first_row: int = 0, channels: int | None = None,
            params: dict | None = None, activation=None, files: dict | None = None) -> ProgramExecutor:
    """Place each tensor by the program's layout and each of `files` (register file placed per rank ->
    {element: value}, elements of channel 0 numbered rank x entries x lanes + entry x lanes + lane),
    run the program's commands on the first `channels` channels (all by default): the executor after."""
    ex = ProgramExecutor(memory, x, outputs, activation)
    for name, value in tensors.items():
        place(ex, program, shape, name, value, first_row, params)
    for name, elements in (files or {}).items():
        for element, value in elements.items():
            flat, at = ex.file_element(name, element)
            flat[at] = value
    for channel in range(memory.organization.channels if channels is None else channels):
        for c in unroll(expand(memory, program, shape, channel, first_row, values=True, params=params)):
            ex.execute(c)
    return ex


def run(memory: Memory, program: PimProgram, shape: dict, tensors: dict[str, np.ndarray], outputs: int,
        x: np.ndarray | None = None, first_row: int = 0, channels: int | None = None,
        params: dict | None = None) -> np.ndarray:
    """Place each tensor by the program's layout, run the program's commands on the first
    `channels` channels (all by default) and return the outputs the host collected."""
    return execute(memory, program, shape, tensors, outputs, x, first_row, channels, params).y


def run_gemv(memory: Memory, program: PimProgram, w: np.ndarray, x: np.ndarray, first_row: int = 0) -> np.ndarray:
    """y = W x through the program's commands on every channel: the values the host reads back."""
    return run(memory, program, {"n": w.shape[0], "k": w.shape[1], "m": 1}, {"weight": w}, w.shape[0], x, first_row)
