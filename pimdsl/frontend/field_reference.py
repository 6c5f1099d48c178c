"""The field reference of LANGUAGE.md, read off the elaborator itself.

The builders ask a `Reader` for every field they understand (its docstring: the names asked *are*
the block's schema), so the reference is what they ask while elaborating a set of spec files: for
each block kind (nested kinds as `memory > region`) each field, the kind of value it takes, its
default, and what it means (`MEANINGS`, a line per field: a field the elaborator reads with none is
a test failure, so a new field gets its line). A field read only by a construct no given file uses
is missing; the bundled specs and the test fixtures use every construct. `python -m pimdsl.frontend.field_reference` prints the Markdown
that LANGUAGE.md's "Field reference" holds (a test keeps the two in sync); `--update` rewrites it there.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from ..ir import units as U
from . import reader as R
from .elaborate_program import SCHEMA
from .pipeline import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _value(method: str, args: tuple) -> str:
    """What a getter call takes, in words, from its arguments."""
    if method == "quantity":
        dims, what = args[0], (args[2] if len(args) > 2 else None)
        allowed = dims if isinstance(dims, list) else [dims]
        return what or " or ".join(U.dimension_name(d) for d in allowed)
    if method == "choice":
        return "one of " + " ".join(f"`{c}`" for c in args[0])
    if method == "symbols":
        return "list of names" + (" from " + " ".join(f"`{c}`" for c in args[0]) if args and args[0] else "")
    if method in ("ref", "refs"):
        kinds = "/".join(args[0])
        return f"name of a {kinds}" if method == "ref" else f"list of {kinds} names"
    return {"integer": "a whole number", "number": "a plain number", "bits": "a width in bits",
            "bytes": "a size", "flag": "`true` or `false`", "string": "a string in quotes"}[method]


def _default(method: str, args: tuple, kwargs: dict) -> str:
    position = {"quantity": 1, "choice": 1, "symbols": 1, "ref": 1, "refs": 1}.get(method, 0)
    default = kwargs.get("default", args[position] if len(args) > position else R.MISSING)
    if default is R.MISSING:
        return "required"
    if default is None or default in ((), [], ""):
        return "none"
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, (tuple, list)):
        return "[" + ", ".join(map(str, default)) + "]"
    return str(default)


def _one(noted: set, index: int) -> str:
    """A field's value or default as one text; where it depends on the spec (the choices of a name
    are the processors a mapping's system has, a strategy the names its loop knows), says so."""
    texts = {n[index] for n in noted}
    if len(texts) == 1:
        return texts.pop()
    if index == 1 and len(texts) == 2 and "from `hf_config`" in texts:
        return (texts - {"from `hf_config`"}).pop() + ", or from `hf_config`"
    return "a name (which names: see the block's section)" if index == 0 else "worked out from the block"


# What each field means, by the block it stands in (processors share one table, as do a part's and a
# PIM unit's commands; `peak`, `threads` and the mapping's phase blocks are described per block).
MEANINGS = {
    "processor": {
        "clock": "core clock (NPU: the cycles of its systolic arrays and vector units)",
        "cores": "cores; a kernel given fewer threads gets that share of the peak",
        "count": "identical devices working together (also `cpu name[N]`)",
        "efficiency": "share of the peak that kernels reach",
        "memory": "the device's own memory (capacity checks)",
        "memory_bandwidth": "DRAM bandwidth of the device, the roofline's memory roof",
        "pim_dispatch": "how PIM work is handed out: one stream, or one request group at a time",
        "pim_issue_rate": "PIM instructions issued per cycle to all channels (0: no limit)",
        "scratchpad": "on-chip memory that bounds a `grouped` dispatch's request group",
        "active_power": "power of one instance while busy (run energy)",
        "idle_power": "power of one instance while idle (run energy)",
        "power_covers": "memories the declared power already includes (their standby and host accesses)",
    },
    "calibration": {
        "tensor_efficiency": "achieved share of the tensor peak by a large GEMM's tiles (fitted: calibration)",
        "memory_efficiency": "achieved share of memory_bandwidth by a GEMM's operands (fitted: calibration)",
        "elementwise_efficiency": "achieved share of memory_bandwidth by element-wise kernels (fitted: calibration)",
        "launch_latency": "the per-kernel floor: launch and tail (fitted: calibration)",
        "exposed_fraction": "share of the smaller roof not hidden under the larger (fitted: calibration)",
    },
    "collective": {
        "algorithm": "how an all-reduce runs over the link's endpoints",
        "bus_bandwidth": "bus bandwidth a collective step achieves (fitted: calibration)",
        "step_latency": "latency of one step of the algorithm (fitted: calibration)",
    },
    "data": {
        "weights": "the memory the weights of ops on no PIM unit are read from",
        "kv_cache": "the memory that holds the KV cache",
        "activations": "the memory activations live in",
    },
    "power": {
        "VDD": "core supply voltage", "VPP": "wordline pump supply voltage (where the standard has one)",
        "IDD0": "one-bank ACT-PRE current", "IDD2N": "precharge standby current", "IDD2P": "precharge power-down current",
        "IDD3N": "active standby current", "IDD3P": "active power-down current", "IDD4R": "burst read current",
        "IDD4W": "burst write current", "IDD5AB": "all-bank refresh current", "IDD5PB": "per-bank refresh current",
        "IDD6": "self-refresh current", "IPP0": "VPP current of ACT-PRE", "IPP2N": "VPP precharge standby current",
        "IPP2P": "VPP precharge power-down current", "IPP3N": "VPP active standby current",
        "IPP3P": "VPP active power-down current", "IPP4R": "VPP burst read current", "IPP4W": "VPP burst write current",
        "IPP5AB": "VPP all-bank refresh current", "IPP5PB": "VPP per-bank refresh current", "IPP6": "VPP self-refresh current",
    },
    "cache": {"shared": "shared by all cores (else per core)", "size": "capacity of the cache"},
    "systolic_array": {"cols": "columns of one array", "count": "arrays", "rows": "rows of one array",
                       "gemv_issue": "how decode attention's GEMVs are timed on the arrays",
                       "issue": "how a GEMM's instructions are timed: pipelined tiles, or strictly in order"},
    "vector_unit": {"count": "vector units", "width": "lanes per unit, one FLOP per lane per cycle"},
    "dram": {
        "clock": "command clock (CK); cycle counts are of this clock",
        "data_rate": "transfers per second per data pin",
        "family": "the standard the part belongs to",
        "read_latency": "time from RD to the end of its data (default tCL + tBL)",
        "refresh_modes": "the refresh commands the part has",
    },
    "organization": {
        "bank_groups": "bank groups per rank", "banks_per_group": "banks per bank group",
        "burst_length": "transfers per burst", "bus_width": "data bus width of a channel",
        "channels": "channels", "columns": "columns per row", "device_width": "data width of one chip",
        "pseudo_channels": "pseudo-channels per channel (HBM)", "ranks": "ranks per channel",
        "rows": "rows per bank",
    },
    "command": {
        "args": "arguments a command carries (a rule's latency may name one)",
        "bus": "the command bus it takes (HBM: separate row and column buses)",
        "bus_cycles": "cycles it holds its command bus (0: none)",
        "closes": "closes the row it acts on", "opens": "opens a row",
        "data_cycles": "cycles it holds the data bus",
        "effect": "what it does to the unit's registers and buffers (the values executor)",
        "issued_as": "the DRAM command of the part it goes out as on the bus",
        "reads": "what it reads (`row`: a column access; registers, buffers)",
        "writes": "what it writes", "refresh": "it is a refresh",
        "row_buffer": "the row buffer it uses: the memory's, the PIM unit's, or none",
        "scope": "the unit it acts on",
    },
    "memory": {
        "address_map": "address fields from the most significant down",
        "capacity": "capacity of one instance", "channels": "channels (overrides the part's)",
        "count": "identical instances (also `memory name[N]`)",
        "interleave": "bytes mapped to one channel before the next (default: one burst)",
        "part": "the DRAM part it is built from", "pim": "the PIM unit in it",
    },
    "controller": {
        "bank_arbitration": "which ready command issues first", "blocked_gemv_issue": "PIM GEMV instructions the host issues",
        "command_queue_depth": "per-bank command queue depth", "data_clock_sync": "a sync command before a RD/WR once the data clock stopped",
        "page_policy": "keep rows open, or close them", "pim_blocking": "how a single-buffer PIM unit shares channels with reads and writes",
        "precharge_for": "which request may close a row it misses", "queue_structure": "transaction queues or per-bank command queues",
        "read_queue_depth": "reads the controller accepts", "refresh": "refresh policy",
        "refresh_precharge": "how a refresh closes open banks", "refresh_stagger": "PIM streams: refresh units staggered over tREFI",
        "row_hit_cap": "row hits before a precharge may pre-empt them", "scheduler": "request scheduling policy",
        "split_activate": "two-cycle ACT (LPDDR5)", "write_drain": "when queued writes are drained",
        "write_drain_high": "write queue share that starts a drain", "write_drain_idle": "writes that start a batch drain when idle",
        "write_drain_low": "write queue share that ends a drain", "write_queue_depth": "writes the controller accepts",
    },
    "region": {
        "cacheable": "host accesses go through the caches", "holds": "what data it holds",
        "layout": "host-friendly (consecutive bytes) or PIM-aware (the program's rows)",
        "offset": "start in the memory (default: after the previous region)", "size": "size in each instance",
    },
    "link": {"bandwidth": "bandwidth per direction of one instance", "count": "parallel instances",
             "energy_per_bit": "energy to move one bit across it (run energy)",
             "endpoints": "the memories or devices it joins", "kind": "the kind of link", "latency": "per transfer"},
    "storage": {"capacity": "capacity", "kind": "the kind of device",
                "read_bandwidth": "read rate of the whole device (concurrent readers share it)", "read_latency": "per read"},
    "mapping": {"loop": "the run loop that runs the system", "strategies": "strategies a sweep may choose from",
                "strategy": "the strategy the loop runs (its names: the loop's section)"},
    "model": {
        "activation": "FFN activation", "architecture": "decoder, encoder, or a graph of declared ops",
        "dtype": "datatype of weights and activations", "ffn": "FFN width", "gated_ffn": "gated FFN (three matrices)",
        "head_dim": "width of one head (default hidden / heads)", "heads": "attention heads",
        "hf_config": "a HuggingFace config.json the other fields default from", "hidden": "hidden size",
        "kv_heads": "key/value heads (GQA; default heads)", "layers": "decoder or encoder layers",
        "max_seq_len": "longest context; a workload past it is warned about", "norm": "normalisation",
        "parallel_attention": "attention and FFN read the same input (parallel block)",
        "parallel_norms": "norms of a parallel block's input: 1 shared or 2", "tied_embeddings": "the LM head reuses the embedding",
        "vocab": "vocabulary size",
    },
    "op": {"inputs": "the tensors and ops it reads", "op": "the operation", "output": "the tensor it writes (default: the op's name)"},
    "tensor": {"dtype": "datatype", "role": "what the tensor is to the graph"},
    "pim_unit": {
        "clock": "clock of the unit's cycles (default the DRAM command clock)", "dtype": "datatype of its lanes",
        "global_buffer": "input buffer shared by the channel's units", "operations": "op kinds it computes",
        "placement": "where one unit sits (per bank, bank group, rank, ...)",
        "row_buffers": "one row buffer shared with the host, or a PIM buffer of its own",
        "simd_width": "SIMD width (lanes = width / dtype)",
    },
    "program": {"covers": "op kinds right after it that it performs too", "rows": "row indices the op takes in every bank"},
    "layout": {"bank": "bank (flat within the rank)", "channel": "channel", "column": "burst of the row", "dims": "extent per index",
               "indices": "one name per dimension of the tensor", "lane": "element within the burst",
               "pseudo_channel": "pseudo-channel", "rank": "rank", "row": "row",
               "rows": "row indices the tensor spans in every bank (padding included)"},
    "result": {"dims": "extent per index", "indices": "one name per dimension of the result",
               "output": "the host's output element it lands in (or an element of a rank file)",
               "value": "what the element is: its operands' product, summed over their other indices (`pimc check --values`)"},
    "register_file": {"count": "registers", "placement": "where the file sits (default: with the unit)", "width": "width of one register"},
    "system": {"links": "links between its memories and devices", "mapping": "the mapping policy", "memories": "its memories",
               "model": "the model it runs", "processors": "its host processors", "storage": "devices the weights are read from",
               "workload": "the workload"},
    "workload": {
        "batch": "requests served together (serving loops: the batch limit)", "dataset": "request lengths from a dataset's statistics",
        "distribution": "how request lengths are drawn", "input_len": "prompt tokens", "kv_admission": "KV cache reserved whole, or on demand",
        "mean_input_len": "mean prompt length", "mean_output_len": "mean output length", "memory_limit": "memory the pipelined loop may use",
        "output_len": "generated tokens", "requests": "requests to serve", "requests_csv": "a CSV of requests instead",
        "seed": "seed of drawn lengths", "std_input_len": "standard deviation of prompt lengths",
        "std_output_len": "standard deviation of output lengths",
    },
}
SAME = {"cpu": "processor", "gpu": "processor", "npu": "processor"}


def meaning(kind: str, field: str) -> str:
    """What `field` of a `kind` block (its path: `memory > region`) means."""
    last = kind.split(" > ")[-1]
    if last == "peak":
        return f"peak rate for {field} kernels, all cores together"
    if last == "threads":
        return f"threads of the {field} pool"
    if last in ("prefill", "decode"):
        return f"where the {last} step's {field} ops run: a processor, `pim` or `host`"
    return MEANINGS.get(SAME.get(last, last), {}).get(field, "")


GETTERS = ("quantity", "integer", "number", "bits", "bytes", "flag", "string", "choice", "symbols", "ref", "refs")


@contextmanager
def recording():
    """Within it, every field a Reader is asked for is noted: {block kind: {field: {(value, default)}}};
    a getter called by another getter (an integer is a quantity) is noted once, as the outer one."""
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    depth = [0]
    originals = {name: getattr(R.Reader, name) for name in GETTERS}

    def wrap(name, method):
        @functools.wraps(method)
        def noted(self, field, *args, **kwargs):
            if depth[0] == 0:
                kinds, node = [], self.node
                while node is not None:
                    kinds.append(node.kind)
                    node = node.parent
                default = _default(name, args, kwargs)
                if "hf_config" in self.node.fields and field != "hf_config" and default != "required":
                    default = "from `hf_config`"        # a model's defaults are its HuggingFace config's
                seen[" > ".join(reversed(kinds))][field].add((_value(name, args), default))
            depth[0] += 1
            try:
                return method(self, field, *args, **kwargs)
            finally:
                depth[0] -= 1
        return noted

    for name, method in originals.items():
        setattr(R.Reader, name, wrap(name, method))
    try:
        yield seen
    finally:
        for name, method in originals.items():
            setattr(R.Reader, name, method)


def spec_files() -> list[Path]:
    return sorted((ROOT / "specs").rglob("*.pim")) + sorted((ROOT / "tests" / "pim").rglob("*.pim"))


def reference(files=None) -> str:
    """The Markdown of the field reference: one table per block kind, fields in sorted order."""
    with recording() as seen:
        for path in files or spec_files():
            load_spec(path)
    for kind, fields in SCHEMA.items():          # a program's blocks are read by elaborate_program itself
        for field, noted in fields.items():
            seen[kind][field].add(noted)
    out = []
    for kind in sorted(seen):
        out += [f"**`{kind}`**", "", "| field | value | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{f}` | {_one(seen[kind][f], 0)} | {_one(seen[kind][f], 1)} | {meaning(kind, f)} |"
                for f in sorted(seen[kind])]
        out.append("")
    return "\n".join(out)


BEGIN, END = "<!-- field reference: generated, do not edit by hand -->\n", "<!-- end of field reference -->"


def kept(text: str) -> str:
    """The reference as a Markdown text holds it, between its two markers."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)]


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--update"]:
        doc = ROOT / "LANGUAGE.md"
        text = doc.read_text()
        doc.write_text(text.replace(BEGIN + kept(text) + END, BEGIN + reference() + END))
    else:
        print(reference(), end="")
