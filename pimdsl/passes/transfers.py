"""Transfers: data that moves between memories becomes an op on the link that joins them.

Assumes lowering. Guarantees: wherever an op's output is read by an op that keeps its data in
another memory, a node `xfer:<producer>-><memory>` of kind `transfer` sits between them, with
`device` and `resource` `link:<name>` and `lowered` a `Transfer` of the output's bytes; the
interpreter times it with the link model (`interpreter/host/models.transfer_time`) and the schedule overlaps
it with whatever else can run. An op keeps its data in its PIM memory when it runs on PIM, else
where the mapping's `data { activations = M; }` puts activations (by default the PIM memory, so a
system of one memory moves nothing). The link is the one whose endpoints name both sides (the
processor or the memory of each), else the system's only link; with none, a CompileError.
"""
from __future__ import annotations

from ..graph.build import Op
from ..lowering.records import Transfer
from .program import Program
from ..ir.errors import CompileError


def run(program: Program) -> Program:
    system, g = program.system, program.graph
    host_home = program.home("activations")
    home = lambda device: device[4:] if device.startswith("pim:") else (host_home.name if host_home else None)
    moves: dict[tuple[str, str], list[str]] = {}
    for name, attrs in program.ops():
        src = home(attrs["device"])
        for succ in g.successors(name):
            dst = home(g.nodes[succ]["device"])
            if src and dst and src != dst:
                moves.setdefault((name, dst), []).append(succ)
    for (name, dst), readers in moves.items():
        attrs = g.nodes[name]
        src_names = {attrs["device"].removeprefix("pim:"), home(attrs["device"])}
        dst_names = {dst, *(g.nodes[r]["device"].removeprefix("pim:") for r in readers)}
        link = _link(system, src_names, dst_names)
        op, nbytes = attrs["op"], g.edges[name, readers[0]].get("bytes", attrs["op"].write_bytes)
        xfer = f"xfer:{name}->{dst}"
        g.add_node(xfer, op=Op(xfer, "transfer", "transfer", op.layer, op.dtype, {"bytes": nbytes},
                               read_bytes=nbytes, write_bytes=nbytes),
                   device=f"link:{link.name}", resource=f"link:{link.name}",
                   lowered=Transfer(name, link.name, home(attrs["device"]), dst, nbytes))
        g.add_edge(name, xfer, bytes=nbytes)
        for reader in readers:
            g.remove_edge(name, reader)
            g.add_edge(xfer, reader, bytes=nbytes)
    if moves:
        g.graph.pop("order", None)
    return program


def _link(system, src: set[str], dst: set[str]):
    both = [l for l in system.links if src & set(l.endpoints) and dst & set(l.endpoints)]
    if both:
        return both[0]
    if len(system.links) == 1:
        return system.links[0]
    what = f"{' / '.join(sorted(src))} and {' / '.join(sorted(dst))}"
    raise CompileError(f"data moves between {what}, but " + ("no link joins them" if system.links else
                       f"system '{system.name}' declares no link"), system.span,
                       "declare a link with `endpoints = [...]` naming both sides and add it to the system's links")
