"""Where the step loop's headline numbers come from (`pimc explain`): TTFT is the prefill step and
TPOT the decode steps (`step_run.py`), so each step is taken apart.

For the prefill step and the first decode step: the step's time, the resource that bounds it (the
one busy longest) and, per resource and op kind, the ops' time and what bounds them: a host kernel
its roofline's compute or memory roof (or the systolic / vector model), a transfer its link, a PIM
op its DRAM command stream. Each group names the spec values its time is computed from, at their
file:line: a processor's `memory_bandwidth`, `peak` and `efficiency`, a link's `bandwidth` and
`latency`, a PIM memory's part clock and the timing rules that bind its stream. A rule binds when
one cycle more on it lengthens the stream of the step's largest PIM op (re-timed on the DRAM engine
once per rule between commands that op issues); the share of that op's cycles it adds is given.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from ...interpreter.op_timing import OpTimer, time_pim
from ...interpreter.schedule import resources_of, schedule, step_seconds
from ...lowering.records import Absorbed, PimWork, Transfer
from .step_run import compile_step


def explain(system, nodes: dict) -> dict:
    """{system, steps: [{phase, seconds, bound, groups: [...]}]}; `nodes` is the spec's scope tree
    (`frontend.pipeline.spec_nodes`), for the file:line of each value."""
    work, model = system.workload, system.model
    batch, input_len = (work.batch, work.input_len) if work else (1, 1)
    timer = OpTimer(system)
    steps = [("prefill", "op_s" if model.architecture == "graph" else "ttft_s", batch, input_len, 0)]
    if model.architecture == "decoder" and (work.output_len if work else 1) > 0:
        steps.append(("decode", "tpot_s", batch, 1, input_len))
    out = {"system": system.name, "strategy": system.mapping.strategy if system.mapping else None, "steps": []}
    for phase, headline, b, tokens, context in steps:
        program = compile_step(system, phase, b, tokens, context)
        step = schedule(program, timer)         # as the run does: the refresh phase carried op to op
        bound = max(step.busy_s, key=step.busy_s.get)
        out["steps"].append({"phase": phase, "headline": headline, "seconds": step.seconds,
                             "bound": bound, "bound_share": step.busy_s[bound] / step.seconds,
                             "groups": _groups(system, program, timer, nodes, step.seconds)})
    return out


def _groups(system, program, timer: OpTimer, nodes: dict, step_s: float) -> list[dict]:
    """The step's ops by (resource, kind, what bounds them), longest first, with their spec values."""
    groups: dict[tuple, dict] = {}
    largest_pim: dict[str, tuple] = {}         # memory -> (total seconds, PimWork) of its largest op
    by_key: dict[tuple, float] = defaultdict(float)          # PIM op key -> its ops' seconds
    first: dict[tuple, str] = {}                             # PIM op key -> the first op with it
    ops = list(program.ops())
    for (name, attrs), seconds in zip(ops, step_seconds(timer, [attrs for _, attrs in ops])):
        lowered = attrs["lowered"]
        if isinstance(lowered, Absorbed):
            continue
        resource = resources_of(attrs)[0]
        if isinstance(lowered, PimWork):
            key, values = (resource, attrs["op"].kind, "DRAM command stream"), None
            by_key[lowered.key] += seconds
            first.setdefault(lowered.key, name)
            if by_key[lowered.key] > largest_pim.get(lowered.memory, (0.0,))[0]:
                largest_pim[lowered.memory] = (by_key[lowered.key], lowered, first[lowered.key])
        elif isinstance(lowered, Transfer):
            link = lowered.link
            key, values = (resource, "transfer", "link"), [_value(nodes, link, "bandwidth"), _value(nodes, link, "latency")]
        else:
            kt = timer.kernel(lowered)
            key = (resource, lowered.kind, f"{kt.model} {kt.bound}" if kt.model == "roofline" else kt.model)
            values = _kernel_values(nodes, lowered, kt)
        group = groups.setdefault(key, {"resource": key[0], "kind": key[1], "bound_by": key[2], "ops": 0,
                                        "seconds": 0.0, "values": values})
        group["ops"] += 1
        group["seconds"] += seconds
    memories = {m.name: m for m in system.memories}
    for group in groups.values():
        group["share"] = group["seconds"] / step_s if step_s else 0.0
        if group["values"] is None:
            memory = memories[group["resource"].split(":", 1)[1].split("[")[0]]
            group["values"] = _pim_values(memory, nodes, *largest_pim[memory.name][1:])
    return sorted(groups.values(), key=lambda g: -g["seconds"])


def _kernel_values(nodes: dict, kernel, kt) -> list[dict]:
    device = kernel.device
    if kt.bound == "memory" and kt.model == "roofline":
        if kernel.bandwidth is not None:
            return [{"value": "the kernel's own bandwidth, set by its lowering (an uncached read, a swizzled copy)",
                     "at": None, "text": ""}]
        return [_value(nodes, device, "memory_bandwidth")]
    if kt.model == "roofline":
        return [_value(nodes, device, "peak", kt.peak_dtype or kernel.dtype), _value(nodes, device, "efficiency")]
    if kt.model == "systolic":
        return [_value(nodes, device, "clock"), _value(nodes, device, "systolic_array", "rows"),
                _value(nodes, device, "systolic_array", "cols"), _value(nodes, device, "efficiency")]
    return [_value(nodes, device, "clock"), _value(nodes, device, "vector_unit", "width"),
            _value(nodes, device, "efficiency")]


def _pim_values(memory, nodes: dict, work: PimWork, op_name: str) -> list[dict]:
    """The part's clock, then each timing rule between commands the memory's largest op issues that
    binds it: one cycle more on the rule lengthens the op's stream (`share`: of the op's cycles)."""
    base = time_pim(memory, work.stream(0))
    issued = {key.split(".", 1)[1] for key in base.counts}
    values = []
    for owner, rules in (("part", memory.part.rules), ("pim", memory.pim.rules)):
        for i, rule in enumerate(rules):
            if not (issued & set(rule.preceding) and issued & set(rule.following)):
                continue
            longer = replace(rule, cycles=rule.cycles + 1, by_arg=tuple(c + 1 if c >= 0 else c for c in rule.by_arg))
            changed = tuple(longer if j == i else r for j, r in enumerate(rules))
            trial = replace(memory, part=replace(memory.part, rules=changed)) if owner == "part" else \
                replace(memory, pim=replace(memory.pim, rules=changed))
            extra = time_pim(trial, work.stream(0)).cycles - base.cycles
            if extra > 0:
                values.append({**_at(rule.span), "share": extra / base.cycles,
                               "value": f"{op_name}: +1 cycle on this rule adds {extra} cycles "
                                        f"({extra / base.cycles:.1%} of its {base.cycles})"})
    return [_value(nodes, memory.part.name, "clock"), *sorted(values, key=lambda v: -v["share"])]


def _value(nodes: dict, block: str, *path: str) -> dict:
    """Where `block`'s field `path` (through unnamed sub-blocks: `peak`, `fp16`) is written."""
    node = nodes.get(block)
    for part in path[:-1]:
        node = node.child(part) if node is not None else None
    stmt = node.fields.get(path[-1]) if node is not None else None
    name = f"{block}.{'.'.join(path)}"
    if stmt is None:
        return {"value": f"{name} (not set: its default)", "at": None, "text": ""}
    return {"value": name, **_at(stmt.span)}


def _at(span) -> dict:
    """file:line of a span and the text of that line (a `--set` has no file: its own text)."""
    text = ""
    if span.line and Path(span.path).is_file():
        lines = Path(span.path).read_text().splitlines()
        text = lines[span.line - 1].strip() if span.line <= len(lines) else ""
        text = text if len(text) <= 100 else text[:97] + "..."
    return {"at": f"{span.path}:{span.line}" if span.line else span.path, "text": text}


def render(report: dict) -> str:
    lines = [f"{report['system']} (step loop, strategy {report['strategy']})"]
    for step in report["steps"]:
        what = {"ttft_s": "TTFT is this step", "op_s": "op_s (a graph model's one step) is this step",
                "tpot_s": "TPOT is the mean of the decode steps, the KV cache growing; this is the first"}
        lines.append(f"{step['phase']} step: {_time(step['seconds'])}, bound by {step['bound']} "
                     f"(busy {step['bound_share']:.0%} of it); {what[step['headline']]}")
        for g in step["groups"]:
            lines.append(f"  {g['resource']:<22} {g['kind']:<12} {g['ops']:>4} ops {_time(g['seconds']):>10} "
                         f"{g['share']:>6.1%}  {g['bound_by']}")
            for v in g["values"]:
                where = f"{v['at']}: " if v["at"] else ""
                lines.append(f"      {where}{v['text'] or v['value']}" +
                             (f"    <- {v['value']}" if v["text"] and "share" in v else ""))
    return "\n".join(lines)


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.2f} us"

