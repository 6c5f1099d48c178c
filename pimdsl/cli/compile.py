"""`pimc compile FILE -o DIR`: write what the compiler produces for inspection (ARCHITECTURE.md).

Per step (`prefill`, and for decoders the first `decode` step) in DIR/<step>/:
  commands.txt    the PIM command stream, one command per line (structured:
                  loops once with their trip counts; `--unroll`: every
                  command with its exactly timed issue cycle)
  kernels.txt     host kernels, one per line (kernels.json: the same as JSON)
  requests.trace  the host kernels' weight reads as a DRAMsim3 request trace
                  (at most --max-requests lines: past that, the first reads of every
                  kernel, each its share by bytes; summary.json and the output say so)
  transfers.json  data moved between memories over links, when any (passes/transfers.py)
  graph.json, graph.dot   the op graph
and DIR/summary.json (per step: op counts by device, PIM ops, kernels, transfers, and
`absorbed`: the ops a PIM program covers, each with its covering op); `--gzip`
writes commands.txt.gz and requests.trace.gz instead, compressed as they stream. Everything is written into a temporary folder beside
DIR that replaces DIR as a whole at the end (emit/atomic.py): a failed or
interrupted compile leaves DIR as it was, and no file of an earlier compile
survives in it. Pass times go to stderr (--time-passes), never into the
folder, so that identical compiles give identical folders.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections import Counter
from contextlib import contextmanager

from ..emit.atomic import atomic_folder, check_folder
from ..ir.errors import CompileError
from .system import add_common, load_system, pass_manager, print_pass_times, report_compile_error


def add_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile a system's model and write streams, kernels and graphs")
    add_common(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.set_defaults(usage_error=p.error)
    p.add_argument("--graph", action="store_true", help="write only the op graphs (JSON and DOT) and the summary")
    p.add_argument("--unroll", action="store_true",
                   help="write every PIM command with its exactly timed issue cycle (large for whole models)")
    p.add_argument("--gzip", action="store_true",
                   help="gzip commands.txt and requests.trace as they are written (.gz names)")
    p.add_argument("--max-requests", type=count, default=100_000, metavar="N",
                   help="lines of requests.trace per step (default 100000)")


def count(text: str) -> int:
    """An argparse type: a whole number >= 0; anything else is a usage error (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count (a whole number >= 0)")
    return value


def run(args) -> int:
    from ..loops.step.step_run import compile_step, memory_bytes       # here: `pimc --help` needs none of it
    if not args.output.strip():
        args.usage_error("-o needs a folder name")
    try:
        check_folder(args.output)                 # before the work: a refused folder costs no compile
    except OSError as exc:
        print(f"pimc compile: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    system, diags = load_system(args, steps=2)
    if system is None:
        return 1
    manager = pass_manager(args)
    work = system.workload
    batch, input_len = (work.batch, work.input_len) if work else (1, 1)
    try:
        steps = [compile_step(system, "prefill", batch, input_len, 0, manager)]
        if system.model.architecture == "decoder":
            steps.append(compile_step(system, "decode", batch, 1, input_len, manager))
    except CompileError as exc:
        return report_compile_error(exc, diags, args.file)
    lines = _written_lines(steps, args)
    if lines > args.max_work:                     # a unit of work per line written (budget.py)
        print(f"{args.file}: error: the request traces would hold about {lines:.3g} lines (about "
              f"{lines * BYTES_PER_REQUEST_LINE / 1e9:.3g} GB), past the limit of {args.max_work:.3g}\n"
              f"  hint: lower --max-requests or raise the limit with --max-work {lines * 2:.2g}", file=sys.stderr)
        return 1
    summary = {"system": system.name, "model": system.model.name, "steps": {}, "memory_bytes": memory_bytes(*steps)}
    try:
        with atomic_folder(args.output) as tmp, _few_collections():
            for program in steps:
                summary["steps"][program.phase] = _write_step(program, os.path.join(tmp, program.phase), args)
            # no wall-clock pass times here: two identical compiles give identical folders
            with open(os.path.join(tmp, "summary.json"), "w") as out:
                json.dump(summary, out, indent=2)
    except OSError as exc:
        print(f"pimc compile: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.time_passes:
        print_pass_times(manager.times_s)
    print(f"wrote {args.output}: " + ", ".join(f"{p}: {s['pim_ops']} PIM ops ({s['pim_commands']} commands), "
                                              f"{s['kernels']} kernels" for p, s in summary["steps"].items()))
    for p, s in summary["steps"].items():
        if s.get("requests_written", 0) < s.get("requests_total", 0):
            print(f"{p}/requests.trace: {s['requests_written']:,} of the step's {s['requests_total']:,} weight "
                  "reads (--max-requests), the first of each kernel in its share by bytes")
    return 0


@contextmanager
def _few_collections():
    """Writing: the compiled steps (frozen) live to the end, and the placed commands an unrolled
    trace builds by the hundred thousand are freed by their counts as they are written, so the
    cycle collector need not walk either every 700 new objects (about a second of an unrolled phone)."""
    threshold = gc.get_threshold()
    ours = gc.get_freeze_count() == 0           # a caller's frozen heap (a test worker's) stays frozen
    if ours:
        gc.freeze()
    gc.set_threshold(100_000, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if ours:
            gc.unfreeze()


def _host_requests(program):
    """(host memory, the kernels' allocations in it, how many access-sized requests they make)."""
    from ..lowering.records import Kernel
    host_memory = program.home("weights")
    host_allocs = [a["alloc"] for _, a in program.ops() if isinstance(a["lowered"], Kernel) and "alloc" in a
                   and a["alloc"].memory in (None, getattr(host_memory, "name", None))]
    if host_memory is None:
        return None, host_allocs, 0
    return host_memory, host_allocs, sum(-(-a.size_bytes // host_memory.organization.access_bytes) for a in host_allocs)


def _written_lines(steps, args) -> int:
    """Lines the request traces would hold (each about BYTES_PER_REQUEST_LINE on disk)."""
    if args.graph:
        return 0
    return sum(min(_host_requests(p)[2], args.max_requests) for p in steps)


BYTES_PER_REQUEST_LINE = 27      # measured: a requests.trace line of the bundled systems


def _write_step(program, folder: str, args) -> dict:
    from ..emit.streams import chunks, request_lines, structured_lines, timed_chunks
    from ..emit.templates import write_atomic
    from ..graph.export import graph_to_dot, graph_to_json
    from ..lowering.records import Absorbed, Kernel, PimWork, Transfer
    from ..lowering.stream import count_commands
    os.makedirs(folder)
    g = program.graph
    with open(os.path.join(folder, "graph.json"), "w") as out:
        json.dump(graph_to_json(g), out, indent=1)
    with open(os.path.join(folder, "graph.dot"), "w") as out:
        out.write(graph_to_dot(g))
    ops = list(program.ops())
    pim = [(name, a["lowered"]) for name, a in ops if isinstance(a["lowered"], PimWork)]
    kernels = [a["lowered"] for _, a in ops if isinstance(a["lowered"], Kernel)]
    transfers = [a["lowered"] for _, a in ops if isinstance(a["lowered"], Transfer)]
    devices = Counter(a["device"] for _, a in ops)
    info = {"batch": program.batch, "tokens": program.tokens, "context": program.context,
            "ops": len(ops), "ops_by_device": dict(devices), "pim_ops": len(pim), "kernels": len(kernels),
            "pim_commands": 0, "kernel_flops": sum(k.flops for k in kernels),
            "kernel_bytes": sum(k.bytes for k in kernels),
            "transfers": len(transfers), "transfer_bytes": sum(t.bytes for t in transfers)}
    absorbed = {name: a["lowered"].by for name, a in ops if isinstance(a["lowered"], Absorbed)}
    if absorbed:                # ops a PIM program covers (`covers`): listed, never silently gone
        info["absorbed"] = absorbed
    if args.graph:
        return info
    memory = program.pim_memory
    gz = ".gz" if args.gzip else ""
    if pim:
        listing, first_of, counted = [], {}, {}
        for name, w in pim:                 # ops with the same stream shape are listed once
            same = None if args.unroll else first_of.setdefault(w.key, name)
            text = (timed_chunks(memory, w.placed(0, args=True), name, w.key) if args.unroll
                    else chunks(structured_lines(memory, w.stream(0, values=True), name)))
            if w.key not in counted:        # same key, same stream shape: the same count
                counted[w.key] = count_commands(w.stream(0))
            listing.append({"name": name, "commands": counted[w.key],
                            "same_as": same if same != name else None, "chunks": text})
        info["pim_commands"] = sum(op["commands"] for op in listing)
        write_atomic(os.path.join(folder, "commands.txt" + gz), "commands.txt.j2", system=program.system.name,
                     phase=program.phase, memory=memory.name, tck_ns=memory.part.tck_s * 1e9,
                     timed=args.unroll, refresh=memory.controller.refresh, ops=listing)
    write_atomic(os.path.join(folder, "kernels.txt"), "kernels.txt.j2", system=program.system.name,
                 phase=program.phase, kernels=kernels)
    with open(os.path.join(folder, "kernels.json"), "w") as out:
        json.dump([k.to_json() for k in kernels], out, indent=1)
    if transfers:
        with open(os.path.join(folder, "transfers.json"), "w") as out:
            json.dump([t.to_json() for t in transfers], out, indent=1)
    host_memory, host_allocs, total = _host_requests(program)
    if host_memory is not None:
        write_atomic(os.path.join(folder, "requests.trace" + gz), "requests.trace.j2",
                     lines=request_lines(host_memory, host_allocs, args.max_requests))
        info["requests_total"] = total
        info["requests_written"] = min(total, args.max_requests)
    return info
