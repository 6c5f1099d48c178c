"""Traces a reader can follow (issue 32 part 6, issue 34 item 6): each command's arguments with
their values (a GEMV's `k` is the one its timing rules read), REF lines with their cycles in
unrolled traces, a structured listing that says what it leaves out, and request traces of the
prefill and decode steps that differ as the steps do (and say when they are capped)."""
from __future__ import annotations

from pathlib import Path

from pimdsl.cli.main import main
from pimdsl.emit.streams import request_lines, structured_lines, timed_chunks
from pimdsl.interpreter.dram.command_stream import CommandTimer
from pimdsl.interpreter.op_timing import refresh_policy, time_pim
from pimdsl.lowering.pim_program import expand, placed
from pimdsl.lowering.stream import unroll
from pimdsl.loops.iteration_serving.pim_attention import attention_shape
from pimdsl.validation import neupims as N

SPECS = Path(__file__).resolve().parent.parent / "specs"
GEMV = str(SPECS / "reference" / "hbm_pim_gemv.pim")
PHONE = str(SPECS / "systems" / "pim_sherpa_llama3_2_1b.pim")


def _args(line: list[str]) -> dict[str, int]:
    return {a.split("=")[0]: int(a.split("=")[1]) for a in line if "=" in a}


def _neupims(op_class="attn_score", seq=96, heads=4, dim=128):
    memory = N.neupims_memory()
    program = memory.pim.program(op_class)
    return memory, program, attention_shape(seq, heads, dim), None


def test_the_printed_k_of_a_gemv_is_the_timed_one():
    """NeuPIMs' PIM_GEMV: `k` (COMP steps, 128 / 16 = 8) is what its timing rule reads, not the column."""
    memory, program, shape, params = _neupims()
    timed = [c for c in unroll(expand(memory, program, shape, params=params)) if c.name == "PIM_GEMV"]
    assert {c.timing_arg for c in timed} == {8} and len({c.column for c in timed}) > 1
    structured = [l.split() for l in structured_lines(memory, expand(memory, program, shape, params=params,
                                                                     values=True), "attn")]
    gemvs = [_args(l) for l in structured if "PIM_GEMV" in l]
    assert gemvs and all(a["k"] == 8 for a in gemvs) and "src" in gemvs[0]
    text = "".join(timed_chunks(memory, placed(memory, program, shape, params=params, args=True), "attn"))
    unrolled = [_args(l.split()) for l in text.splitlines() if " PIM_GEMV " in l]
    assert [a["k"] for a in unrolled] == [c.timing_arg for c in timed]
    assert [a["src"] for a in unrolled[:3]] == [0, 8, 16]          # src = j * steps, j the column
    header = [l.split() for l in text.splitlines() if " PIM_HEADER " in l]
    assert all(_args(l)["estimate"] > 0 for l in header)           # the announced work, not `-`


def test_effect_arguments_print_their_values(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["compile", GEMV, "-o", str(out), "--set", "gemv.out=64", "--set", "gemv.in=128", "--unroll"]) == 0
    macs = [l.split() for l in (out / "prefill" / "commands.txt").read_text().splitlines() if " mac " in l]
    assert macs and all(" -" not in " ".join(l[9:-2]) for l in macs)
    assert {tuple(sorted(_args(l))) for l in macs} == {("acc", "src")}
    assert sorted({_args(l)["acc"] for l in macs}) == list(range(8))     # the GRF_B lane each MAC adds into


def test_unrolled_traces_list_each_refresh_with_its_cycle():
    """A GEMV longer than tREFI: as many REF lines as the run counts refreshes, each at the cycle the
    timer took it, between the commands it came between."""
    spec_memory, program, shape, params = _neupims("attn_score", seq=2048, heads=16, dim=128)
    text = "".join(timed_chunks(spec_memory, placed(spec_memory, program, shape, params=params, args=True), "attn"))
    lines = [l.split() for l in text.splitlines()]
    refs = [i for i, l in enumerate(lines) if l[8] == "REF"]
    pim = time_pim(spec_memory, expand(spec_memory, program, shape, params=params), fast=False)
    assert pim.refreshes > 0 and len(refs) == pim.refreshes
    timer = CommandTimer(spec_memory, spec_memory.pim.commands, spec_memory.pim.rules, spec_memory.pim.windows,
                         refresh=refresh_policy(spec_memory), record_refreshes=True)
    timer.run(unroll(expand(spec_memory, program, shape, params=params)))
    assert [int(lines[i][0]) for i in refs] == [at for _, _, at in timer.refresh_log]
    for i in refs:                     # in cycle order with its neighbours
        assert int(lines[i - 1][0]) <= int(lines[i][0]) <= int(lines[i + 1][0])
        assert lines[i][9].startswith("unit=") and lines[i][10] == "refresh"


def test_the_structured_trace_says_what_it_omits(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["compile", GEMV, "-o", str(out), "--set", "gemv.out=64", "--set", "gemv.in=128"]) == 0
    text = (out / "prefill" / "commands.txt").read_text()
    assert "Not in this listing: issue cycles and refreshes" in text
    assert "# channel scope rank bank_group bank row column command arguments kind op" in text
    body = [l.split() for l in text.splitlines() if l.strip() and not l.startswith("#")]
    assert body and all(l[0] != "-" for l in body)          # no `-` standing for a cycle


def test_prefill_and_decode_request_traces_differ_and_say_they_are_capped(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["compile", PHONE, "-o", str(out), "--set", "llama3_2_1b.layers=2", "--max-requests", "5000"]) == 0
    printed = capsys.readouterr().out
    prefill = (out / "prefill" / "requests.trace").read_text().splitlines()
    decode = (out / "decode" / "requests.trace").read_text().splitlines()
    assert len(prefill) == len(decode) == 5000 and prefill != decode
    assert "prefill/requests.trace: 5,000 of the step's" in printed and "decode/requests.trace: 5,000 of" in printed
    import json
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert steps["prefill"]["requests_written"] == 5000 < steps["prefill"]["requests_total"]


def test_request_lines_give_every_burst_or_each_kernels_share():
    from types import SimpleNamespace as NS
    memory = NS(organization=NS(access_bytes=32), peak_bandwidth_bytes_per_s=32e9, part=NS(tck_s=1e-9))
    allocs = [NS(offset_bytes=0, size_bytes=320), NS(offset_bytes=4096, size_bytes=64), NS(offset_bytes=8192, size_bytes=32)]
    every = list(request_lines(memory, allocs, 100))
    assert [int(l.split()[0], 16) for l in every] == [32 * i for i in range(10)] + [4096, 4128, 8192]
    assert [int(l.split()[2]) for l in every] == list(range(13))       # one burst a cycle at the peak rate
    capped = [int(l.split()[0], 16) for l in request_lines(memory, allocs, 6)]
    # shares by bytes: 10/13, 2/13, 1/13 of 6 -> 4, 0, 0 rounded down, the 2 left to the first kernels
    assert capped == [0, 32, 64, 96, 128, 4096]


def test_ops_of_one_shape_share_their_cycles_but_print_their_own_names():
    memory, program, shape, _ = _neupims("attn_score", seq=2048, heads=16, dim=128)
    key = ("test", "attn_score", 2048)
    texts = ["".join(timed_chunks(memory, placed(memory, program, shape, args=True), op, key)) for op in ("a", "b")]
    first, second = ([l.split() for l in t.splitlines()] for t in texts)
    assert [l[:-1] for l in first] == [l[:-1] for l in second]
    assert {l[-1] for l in second} == {"b"} and any(l[8] == "REF" for l in second)
