"""The NeuPIMs command family: K.q tiles against the NeuPIMs simulator's cycles and trace."""
from __future__ import annotations

import json

import pytest

from pimdsl.ir.commands import StreamError
from pimdsl.loops.iteration_serving.pim_attention import attention_lets, attention_stream
from pimdsl.validation import neupims as N

from .conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "pim_neupims.json").read_text())


@pytest.fixture(scope="module")
def memory():
    return N.neupims_memory()


def test_tiling_from_the_spec(memory):
    t = attention_lets(memory, "attn_score", 100, 6, 128)
    # 32 banks per channel (2 ranks x 16), 1 KB rows of 4 heads x 128 FP16, 128 / 16 lanes = 8 COMPs
    assert (t["units"], t["per_row"], t["steps"], t["tiles"], t["head_sets"]) == (32, 4, 8, 4, 2)
    kinds = [c.name for c in attention_stream(memory, "attn_score", 100, 6, 128)]
    assert kinds.count("PIM_HEADER") == 8 and kinds.count("PIM_GEMV") == 4 * (4 + 2)
    assert kinds.count("PIM_ACT") == 8 * 8 and kinds.count("PIM_PRECHARGE") == 32 * 8


def test_cold_start_trace_is_the_reference(memory):
    cold = N.cold_start(memory)
    for name, cycles in N.REFERENCE_COLD.items():
        assert cold[name] == cycles, name


@pytest.mark.parametrize("row", COMMITTED["score"], ids=lambda r: str(r["seq_len"]))
def test_score_cycles(memory, row):
    ours = N.score_cycles(memory, row["seq_len"])
    assert abs(ours / row["reference"] - 1) * 100 <= abs(row["error_pct"]) + 1.0


def test_period_and_the_strict_precharge_rule(memory):
    assert N.tile_period(memory) == N.REFERENCE_PERIOD
    strict = N.neupims_memory("neupims_pim_strict")
    assert N.tile_period(strict) == N.REFERENCE_PERIOD + 18        # waits out the last GEMV (tGEMV)


def test_a_gemv_without_its_rows_open_is_a_lowering_bug(memory):
    from pimdsl.interpreter.dram.command_stream import CommandTimer
    from pimdsl.ir.commands import Command
    pim = memory.pim
    timer = CommandTimer(memory, pim.commands, pim.rules, pim.windows)
    with pytest.raises(StreamError, match="PIM_GEMV to bank 0, which has no open row"):
        timer.issue(Command("PIM_GEMV"), 0)
