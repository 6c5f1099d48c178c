"""Lowering: PIM ops to structured command streams, host ops to kernel records.

Assumes allocation (PIM GEMV layouts carry their rows). Guarantees: every op
has `lowered`: a `PimWork` for ops on PIM (the stream of one channel, built
lazily by the generic expander from the unit's declared program), an `Absorbed`
for an op on PIM that the previous op's program covers (tiling.py: no commands,
no time), a `Kernel` for ops on a processor. A GEMV over m > 1 tokens on PIM repeats the single-vector stream
m times (PIM units hold one input vector at a time).

On a PIM memory with a count (`memory d[4]`) each instance runs its share of the op
(`_instance_shapes`) at once, on its own resource `pim:d[i]` (`resources`,
`instances`); the op takes the time of the largest share.

Host kernels: kind from the op (gemm/gemv, attention for score and context,
softmax, norm, embedding, copy for KV appends, elementwise otherwise); bytes
are the weights plus the activations and KV cache the op reads and writes;
matrix ops on a CPU use its `gemm` threads when the spec names them. A host
op's traffic moves no faster than the peak bandwidth of the memory that holds its
weights (all its instances; the mapping's `data` block says which), when that is
below the processor's. A host
op whose weights are non-cacheable (access `noncacheable`, NC-GEMM) rereads
them for every token at the platform's uncached read rate; a swizzled copy
(an `smc` op) moves its traffic at the SMC rate of its threads (strategy.py).
"""
from __future__ import annotations

from ..ir.pim_program import OP_SHAPES
from ..lowering.pim_program import expand, placed
from ..lowering.records import Absorbed, Kernel, PimWork
from ..lowering.stream import Loop
from .program import Program
from .strategy import noncacheable_read_bandwidth, smc_bandwidth

KERNEL_KIND = {"gemm": "gemm", "gemv": "gemv", "attn_score": "attention", "attn_context": "attention",
               "softmax": "softmax", "norm": "norm", "embedding": "embedding", "kv_append": "copy"}


def run(program: Program) -> Program:
    processors = {p.name: p for p in program.system.processors}
    memory = program.pim_memory
    for name, attrs in program.ops():
        op, device = attrs["op"], attrs["device"]
        if attrs.get("family") == "covered":          # the covering op's commands did it (tiling.py)
            attrs["lowered"] = Absorbed(name, memory.name, attrs["covered_by"])
        elif device.startswith("pim:"):
            g = program.graph
            covered = {g.nodes[s]["op"].kind for s in g.successors(name) if g.nodes[s].get("covered_by") == name}
            works = [_pim_work(memory, name, op, attrs, shape, covered) for shape in _instance_shapes(memory, op, attrs)]
            attrs["lowered"] = works[0]               # the largest share: the op's time
            if memory.count > 1:
                attrs["instances"] = tuple(works)
                attrs["resources"] = tuple(f"{device}[{i}]" for i in range(len(works)))
        elif op.kind == "smc":
            threads = attrs["smc_threads"]
            attrs["lowered"] = Kernel(name, "copy", device, op.dtype, 0.0, attrs["smc_bytes"], dict(op.shape),
                                      threads, smc_bandwidth(program.system, processors[device], threads))
        else:
            attrs["lowered"] = _kernel(program, processors[device], name, op, attrs.get("access"),
                                       _weights_memory(program, attrs))
    return program


def _kernel(program: Program, proc, name: str, op, access: str | None, held_in=None) -> Kernel:
    kind = KERNEL_KIND.get(op.kind, "elementwise")
    threads = proc.threads.get("gemm") if kind in ("gemm", "gemv") and proc.kind == "cpu" else None
    weight_bytes, bandwidth = op.weight_bytes, None
    if access == "noncacheable":
        # uncached: no reuse across the step's tokens, so a GEMM of m tokens rereads them m times
        weight_bytes *= op.shape.get("m", 1) if kind in ("gemm", "gemv") else 1
        bandwidth = noncacheable_read_bandwidth(program.system)
    if held_in is not None and op.weight_bytes:
        # the weights stream from the memory that holds them: no faster than its peak (every instance)
        peak = held_in.count * held_in.peak_bandwidth_bytes_per_s
        if peak < (bandwidth or proc.count * proc.memory_bandwidth_bytes_per_s):
            bandwidth = peak
    return Kernel(name, kind, proc.name, op.dtype, op.flops, weight_bytes + op.read_bytes + op.write_bytes,
                  dict(op.shape), threads, bandwidth)


def _weights_memory(program: Program, attrs: dict):
    """The memory that holds a host op's weights (allocation's record), if the system has it."""
    alloc = attrs.get("alloc")
    name = alloc.memory if alloc is not None else None
    return next((m for m in program.system.memories if m.name == name), None)


def _repeat(items: list, times: int, op: str) -> list:
    return items if times == 1 else [Loop(times, lambda _: items, "token", op=op)]


def _instance_shapes(memory, op, attrs) -> list[dict]:
    """The op's shape on each instance of a memory with a count: its first dimension (a GEMV's
    output rows, an attention's keys) split as evenly as it goes, the larger shares first (the
    data is striped over the instances), instances left without work dropped."""
    if memory.count == 1:
        return [op.shape]
    dim = OP_SHAPES[attrs["program"].op_class][0]
    share = lambda v, i: v // memory.count + (i < v % memory.count)
    shapes = []
    for i in range(memory.count):
        v = op.shape[dim]
        part = [share(x, i) for x in v] if isinstance(v, list) else share(v, i)
        if (max(part) if isinstance(part, list) else part) > 0:
            shapes.append({**op.shape, dim: part})
    return shapes


def _pim_work(memory, name, op, attrs, s: dict, covered: set = frozenset()) -> PimWork:
    fam = attrs["family"]
    if fam == "program":                    # declared in the unit: the generic expander
        declared, first_row = attrs["program"], attrs.get("first_row") or 0
        # a program for the op's own class covers its tokens; a GEMV program runs once per token
        times = 1 if declared.op_class == op.kind else s.get("m", 1)
        shape = dict(s) if times == 1 else {**s, "m": 1}
        # a covered op that follows: the program's 0/1 parameter of that kind's name, if it has one, is 1
        params = {kind: 1 for kind in sorted(covered) if any(let.name == kind for let in declared.lets)} or None
        stream = lambda ch, values=False: _repeat(expand(memory, declared, shape, ch, first_row, op=name,
                                                         params=params, values=values), times, name)
        commands = lambda ch, args=False: placed(memory, declared, shape, ch, first_row, params=params,
                                                 times=times, args=args)
        key = (fam, declared.op_class, *sorted(shape.items()), times, *sorted((params or {}).items()))
    return PimWork(name, memory.name, fam, stream, key, commands)
