"""Validation of the NeuPIMs command family against the NeuPIMs simulator ([REFDATA] pim README Sec. 2).

Times the K.q attention-score stream (program `attn_score` of the bundled
specs/pim/neupims_pim.pim, through the generic expander) on one channel of specs/hardware/neupims.pim with the ordered-stream timer, as
the reference measured it: every transaction handed over at cycle 0 (the
first command issues at cycle 1), no refresh inside, counted until the last
PIM_GEMV's result returns (CL + burst after it issues).
"""
from __future__ import annotations

from ..frontend.pipeline import load_spec
from ..frontend.resources import specs_dir
from ..interpreter.dram.command_stream import CommandTimer
from ..loops.iteration_serving.pim_attention import attention_stream

# [REFDATA] pim README Sec. 2: seq_len -> cycles (one channel, 4 heads of 128 per tile); cold-start trace
REFERENCE = {32: 178, 64: 375, 128: 769, 256: 1557}
REFERENCE_PERIOD = 197
REFERENCE_COLD = {"ACT": [1], "PIM_GWRITE": [15], "PIM_HEADER": [111],
                  "PIM_ACT": [112, 113, 142, 143, 172, 173, 202, 203], "PIM_GEMV": [217, 235, 253, 271],
                  "PIM_PRECHARGE": list(range(276, 308))}
FIRST_ISSUE = 1           # [REFDATA] pim README Sec. 2 cold start: the controller issues its first command at cycle 1


def neupims_memory(unit: str = "neupims_pim"):
    overrides = [] if unit == "neupims_pim" else [f"neupims_hbm.pim={unit}"]
    spec, diags = load_spec(str(specs_dir() / "hardware" / "neupims.pim"), overrides)
    if spec is None:
        raise RuntimeError(diags.render_all())
    return spec.memories["neupims_hbm"]


def timed(memory, seq_len, heads=4, head_dim=128, gwrite=False):
    pim = memory.pim
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows)
    timer.last[0] = FIRST_ISSUE
    cmds = list(attention_stream(memory, "attn_score", seq_len, heads, head_dim, gwrite=gwrite))
    return cmds, [timer.issue(c, i) for i, c in enumerate(cmds)]


def score_cycles(memory, seq_len, heads=4, head_dim=128) -> int:
    cmds, cycles = timed(memory, seq_len, heads, head_dim)
    last_gemv = max(t for c, t in zip(cmds, cycles) if c.name == "PIM_GEMV")
    return last_gemv + memory.part.read_latency_cycles + 1


def tile_period(memory, tiles=8) -> int:
    cmds, cycles = timed(memory, 32 * tiles)
    headers = [t for c, t in zip(cmds, cycles) if c.name == "PIM_HEADER"]
    return headers[-1] - headers[-2]


def cold_start(memory) -> dict[str, list[int]]:
    cmds, cycles = timed(memory, 32, gwrite=True)
    out: dict[str, list[int]] = {}
    for c, t in zip(cmds, cycles):
        out.setdefault(c.name, []).append(t)
    return out
