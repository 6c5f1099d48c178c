"""`pimc kernel`: time one operator on one declared processor (CPU, GPU or NPU).

Prints `seconds` and the `bound` (memory, compute or launch), with the roofs behind them.
"""
from __future__ import annotations

import dataclasses
import json
import sys

from ..interpreter.host.op_kernels import OPS, OpError, op_kernel
from .loading import load_reported
from .system import no_such_block, print_fields


def add_parser(sub) -> None:
    p = sub.add_parser("kernel", help="time one operator (gemm or an element-wise op) on a declared processor")
    p.add_argument("file", metavar="FILE", help="spec file that declares the processor")
    p.add_argument("--processor", required=True, metavar="NAME", help="cpu, gpu or npu block to time on")
    p.add_argument("--op", required=True, choices=OPS, help="the operator")
    p.add_argument("--shape", required=True, metavar="M,N[,K]",
                   help="gemm: M tokens, N outputs, K inputs; element-wise ops: M tokens, N row width")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor-parallel degree: time one device's share (a gemm's N, or K with --split k)")
    p.add_argument("--split", choices=("n", "k"), default="n",
                   help="which gemm dimension tensor parallelism splits (n: column-parallel, k: row-parallel)")
    p.add_argument("--dtype", default="fp16", help="datatype of weights and activations (default fp16)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a spec value by its dotted path, with units (repeatable)")


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise OpError(f"--shape takes whole numbers separated by commas, not '{text}'") from None


def run(args) -> int:
    from ..interpreter.host.models import kernel_time      # here: `pimc --help` needs no numpy
    spec, _ = load_reported(args.file, args.overrides)
    if spec is None:
        return 1
    processor = spec.processors.get(args.processor)
    if processor is None:
        return no_such_block(args.file, "processor", args.processor, spec.processors, "processors",
                             "this file declares no cpu, gpu or npu")
    try:
        kernel = op_kernel(args.op, _shape(args.shape), processor.name, tp=args.tp, dtype=args.dtype,
                           split=args.split)
    except OpError as exc:
        print(f"pimc kernel: error: {exc}", file=sys.stderr)
        return 2
    device = dataclasses.replace(processor, count=1)       # one device's share is timed on one device
    t = kernel_time(device, kernel)
    out = {"processor": processor.name, "kind": processor.kind, "op": args.op, "shape": kernel.shape,
           "tp": args.tp, "dtype": args.dtype, "seconds": t.seconds, "bound": t.bound, "model": t.model,
           "compute_s": t.compute_s, "memory_s": t.memory_s, "launch_s": t.launch_s,
           "flops": kernel.flops, "bytes": kernel.bytes}
    if t.tile:
        out["tile"] = t.tile
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_fields(out, digits=6)
    return 0
