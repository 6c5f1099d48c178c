"""Nothing silently ignored (issue 15 part 3): a strategy name, op class, param or link that no run
loop reads is a located warning with a did-you-mean hint, and an error under `pimc check --strict`."""
from __future__ import annotations

import pytest

from pimdsl import loops
from pimdsl.cli.main import main
from pimdsl.loops import step
from pimdsl.loops import iteration_serving
from pimdsl.ir.params import Param

SYSTEM = """
cpu c { cores = 4; clock = 2 GHz; peak { fp16 = 1 TFLOPS; } memory = 8 GB; memory_bandwidth = 50 GB/s; }
link l { kind = pcie; bandwidth = 16 GB/s; latency = 1 us; }
model m { layers = 2; hidden = 64; heads = 4; ffn = 256; vocab = 1000; }
workload w { batch = 1; input_len = 4; output_len = 2; }
mapping p {
  strategies = [wd, ddbb];
  strategy = wd;
  prefill { fc = c; atention = c; }
  params { tp = 1; smc_bandwidth_fraction = 0.1; }
}
system s { processors = [c]; LINKS model = m; workload = w; mapping = p; }
"""


def check(tmp_path, capsys, text, *flags):
    path = tmp_path / "s.pim"
    path.write_text(text)
    status = main(["check", str(path), *flags])
    return status, capsys.readouterr().err, path


def test_each_unread_name_is_a_located_warning_with_a_hint(tmp_path, capsys):
    status, err, path = check(tmp_path, capsys, SYSTEM.replace("LINKS", "links = [l];"))
    assert status == 0
    lines = SYSTEM.replace("LINKS", "links = [l];").splitlines()
    expected = {  # message -> (the text the caret points at, the hint)
        "strategy 'ddbb' is read by no run loop": ("ddbb", "did you mean 'ddb'?"),
        "op class 'atention' matches no op": ("atention", "did you mean 'attention'"),
        "mapping param 'smc_bandwidth_fraction' is read by nothing": ("0.1", "did you mean 'smc_bandwidth_fraction_per_thread'?"),
        "link 'l' is read by nothing: the step loop times no link": ("link l", "remove it from the system's links"),
    }
    for message, (culprit, hint) in expected.items():
        line = next(i for i, text in enumerate(lines, 1) if culprit in text)
        col = lines[line - 1].index(culprit) + 1
        assert f"{path}:{line}:{col}: warning: {message}" in err, err
        assert hint in err
    assert err.count("warning:") == len(expected)


def test_strict_makes_them_errors(tmp_path, capsys):
    status, err, _ = check(tmp_path, capsys, SYSTEM.replace("LINKS", "links = [l];"), "--strict")
    assert status == 1
    assert "error: op class 'atention' matches no op" in err and "warning:" not in err


def test_a_clean_system_has_nothing_to_say(tmp_path, capsys):
    clean = (SYSTEM.replace("LINKS", "").replace("ddbb", "ddb").replace("atention", "attention")
             .replace("smc_bandwidth_fraction", "smc_bandwidth_fraction_per_thread"))
    status, err, _ = check(tmp_path, capsys, clean, "--strict")
    assert (status, err) == (0, "")


def test_check_runs_placement_and_reports_with_the_warnings(tmp_path, capsys):
    text = SYSTEM.replace("LINKS", "").replace("prefill { fc = c; atention = c; }",
                                               "prefill { fc = pim; atention = c; }")
    status, err, path = check(tmp_path, capsys, text)
    assert status == 1
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "fc = pim" in t)
    col = text.splitlines()[line - 1].index("fc = pim") + 1
    assert f"{path}:{line}:{col}: error: prefill step: op L0.q_proj is mapped to pim, but system 's' has no memory " \
           "with a PIM unit" in err
    assert "warning: op class 'atention'" in err


@pytest.mark.parametrize("module", [step, *(loops.get(n) for n in loops.LOOPS)],
                         ids=lambda m: m.__name__)
def test_every_loop_declares_what_it_reads(module):
    assert module.STRATEGIES and all(isinstance(s, str) for s in module.STRATEGIES)
    # every param typed (issue 31): a dimension or kind, a range and a meaning
    assert all(isinstance(k, str) and isinstance(v, Param) and v.meaning for k, v in dict(module.PARAMS).items())
    assert isinstance(module.OP_CLASSES, tuple)
    assert isinstance(getattr(module, "LINKS", 0), int) or callable(module.links_read)


def test_a_loop_that_places_by_strategy_says_which_entries_it_does_not_follow():
    from pimdsl import unread
    from pimdsl.frontend.pipeline import load_spec
    from .conftest import ROOT
    path = ROOT / "specs" / "systems" / "neupims_gpt3_7b.pim"
    for strategy, expected in (("neupims", []), ("npu_only", [("decode", "attention", "neupims_npu")])):
        spec, diags = load_spec(path, [f"mapping.strategy={strategy}"])
        system = spec.systems["neupims_gpt3_7b"]
        assert iteration_serving.placement_ignored(system) == expected
        unread.check(system, diags)
        assert [d.message for d in diags.warnings] == [
            f"the iteration serving loop does not read this placement: strategy '{strategy}' runs decode attention "
            "on neupims_npu" for _ in expected]


def test_a_counted_pim_memory_is_read_whole(tmp_path, capsys):
    # the step loop spreads PIM ops over every instance (passes/lowering.py): nothing to warn about
    text = """
import "hardware/galaxy_s24p.pim";
import "models/llama3_2_1b.pim";
memory pim4[COUNT] : s24_lpddr5x {}
mapping m { decode { fc = pim; } }
workload w { batch = 1; input_len = 1; output_len = 1; }
system s { processors = [s24_cpu]; memories = [pim4]; model = llama3_2_1b; mapping = m; workload = w; }
"""
    for count in ("4", "1"):
        assert check(tmp_path, capsys, text.replace("COUNT", count), "--strict")[:2] == (0, "")


@pytest.mark.parametrize("max_seq_len, warned", [(5, True), (6, False)])
def test_a_context_past_the_models_positions_is_a_warning(tmp_path, capsys, max_seq_len, warned):
    clean = (SYSTEM.replace("LINKS", "").replace("ddbb", "ddb").replace("atention", "attention")
             .replace("smc_bandwidth_fraction", "smc_bandwidth_fraction_per_thread")
             .replace("vocab = 1000;", f"vocab = 1000; max_seq_len = {max_seq_len};"))
    status, err, path = check(tmp_path, capsys, clean, "--strict")
    line = next(i for i, text in enumerate(clean.splitlines(), 1) if text.startswith("workload w"))
    if warned:
        assert status == 1
        assert (f"{path}:{line}:1: error: workload 'w' reaches 6 tokens (input_len + output_len), past model 'm''s "
                "max_seq_len of 5") in err
        assert "hint: shorten the workload to at most 5 tokens" in err
    else:
        assert (status, err) == (0, "")
