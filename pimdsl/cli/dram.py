"""`pimc dram`: replay a memory-request trace through the DRAM timing engine.

Prints `cycles`, `bandwidth_gbps`, `avg_read_latency_cycles` and `row_hit_rate`
(the ARCHITECTURE.md contract), plus latency percentiles and command counts.
"""
from __future__ import annotations

import json
import os
import sys

from ..interpreter.dram import TRACE_FORMATS
from ..ir.files import note_input
from .loading import NothingToDo, add_allow_outside, load_reported
from .system import add_max_work, no_such_block, output_file, print_fields, refuse_inputs_as_outputs


def add_parser(sub) -> None:
    p = sub.add_parser("dram", help="replay a memory-request trace through the DRAM timing engine")
    p.add_argument("file", metavar="FILE", help="spec file that declares the memory")
    p.add_argument("--memory", required=True, metavar="NAME", help="memory block to simulate")
    p.add_argument("--trace", required=True, metavar="TRACE", help="request trace file")
    p.add_argument("--trace-format", required=True, choices=TRACE_FORMATS, help="trace file format")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--command-trace", metavar="OUT", type=output_file, help="also write every issued command, one per line")
    add_max_work(p)
    add_allow_outside(p)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")


def run(args) -> int:
    # The replay uses one thread; OpenBLAS, started when numpy loads, would start a pool of threads that spin
    # for a while (about 60 ms of the machine per run, as much as the spec's elaboration). Not for a caller
    # that set it, nor once numpy is loaded (in-process callers).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from ..interpreter.dram.memory_system import compiled_core_is_cached, default_engine, replay
    from ..interpreter.dram.tables import EngineError
    from ..interpreter.dram.traces import TraceError, read_trace
    try:
        spec, _ = load_reported(args.file, args.overrides, args.allow_outside)
    except NothingToDo:
        print(f"{args.file}:1:1: error: the file declares no memory\n  hint: name a spec that declares or "
              f"imports memory '{args.memory}'", file=sys.stderr)
        return 1
    if spec is None:
        return 1
    memory = spec.memories.get(args.memory)
    if memory is None:
        return no_such_block(args.file, "memory", args.memory, spec.memories, "memories", "this file declares no memory")
    note_input(args.trace)
    if not refuse_inputs_as_outputs(args, "command_trace"):
        return 1
    try:
        trace = read_trace(args.trace, memory, args.trace_format, args.max_work)
        if not len(trace):
            print(f"{args.trace}:1:1: error: the trace has no requests\n  hint: a {args.trace_format} trace "
                  "holds one request a line; lines starting with # are comments", file=sys.stderr)
            return 1
        if default_engine(len(trace)) == "compiled" and not compiled_core_is_cached():
            print("pimc dram: compiling the DRAM core once (about 20 s; cached for later runs)",
                  file=sys.stderr)
        result = replay(memory, trace, record_commands=bool(args.command_trace))
    except TraceError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except EngineError as exc:
        print(f"{args.file}: error: memory '{memory.name}': {exc}", file=sys.stderr)
        return 1
    if args.command_trace:
        from ..emit.templates import write_atomic
        try:
            write_atomic(args.command_trace, "dram_commands.txt.j2", memory=memory.name,
                         commands=result.command_log, tck_ns=memory.part.tck_s * 1e9)
        except OSError as exc:
            print(f"pimc dram: error: cannot write {args.command_trace}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    out = result.to_json()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_fields(out)
    return 0
