"""Every mapping param is typed (issue 31): a loop declares each with a dimension or kind, a range and
a meaning, and a value of the wrong kind is a located error at `pimc check` and before any run."""
from __future__ import annotations

import math

import pytest

from pimdsl.cli.main import main
from pimdsl.ir import units as U
from pimdsl.ir.params import FILE, NAME, WHOLE, Param

from .conftest import ROOT

HERMES = [str(ROOT / "specs/systems/hermes_ndp_llama2_70b.pim"), "--set", "workload.output_len=4",
          "--set", "workload.input_len=16"]
GPTJ = [str(ROOT / "specs/systems/pipeload_gpt_j_6b.pim")]
SHERPA = [str(ROOT / "specs/systems/pim_sherpa_llama3_2_1b.pim"), "--set", "workload.output_len=2"]


@pytest.mark.parametrize("spec, setting, message", [
    (HERMES, "gpu_reserved=4 cycles", "a size (bytes) >= 0 was expected, this is a cycle count"),
    (HERMES, "gpu_reserved=4 GB/s", "a size (bytes) >= 0 was expected, this is a bandwidth"),
    (HERMES, "accelerate_bandwidth=3.92 s", "a bandwidth > 0 was expected, this is a time"),
    (HERMES, "ilp_time_limit=60 GT/s", "a time > 0 was expected, this is a data rate"),
    (HERMES, "ilp_groups=inf", "a whole number 1..4096 was expected"),
    (HERMES, "ilp_groups=0", "a whole number 1..4096 was expected, not 0"),
    (HERMES, "ilp_groups=-3", "a whole number 1..4096 was expected, not -3"),
    (HERMES, "ilp_groups=2.5", "a whole number 1..4096 was expected, not 2.5"),
    # a weight of the previous block's latents: sqrt(1 - coupling^2) must exist (fuzzed 1e12 crashed)
    (HERMES, "layer_coupling=1_000_000_000_000", "a plain number 0..1 was expected"),
    (GPTJ, "agent_load_bandwidth=1.2 GB", "a bandwidth > 0 was expected, this is a size"),
    (GPTJ, "agent_load_bandwidth=1.2 GHz", "a bandwidth > 0 was expected, this is a frequency"),
    (GPTJ, "agent_load_bandwidth=1.2 s", "a bandwidth > 0 was expected, this is a time"),
    (GPTJ, "agent_load_bandwidth=1.2", "a bandwidth > 0 was expected, this is a plain number"),
    (GPTJ, "loading_agents=1e9", "a whole number 1..1024 or auto was expected"),
    (SHERPA, "noncacheable_read_bandwidth=1 ns", "a bandwidth > 0 was expected, this is a time"),
])
def test_a_param_of_the_wrong_kind_is_a_located_error(capsys, spec, setting, message):
    code = main(["run", "--json", *spec, "--set", f"mapping.params.{setting}"])
    out, err = capsys.readouterr()
    name = setting.partition("=")[0]
    assert code == 1 and out == "" and "internal error" not in err
    assert f"--set mapping.params.{setting}:1:" in err and f"error: mapping param '{name}': {message}" in err, err


def test_check_reports_a_param_in_a_spec_file(capsys, tmp_path):
    text = (ROOT / "specs/systems/pipeload_gpt_j_6b.pim").read_text().replace('import "../', f'import "{ROOT}/specs/')
    assert "agent_load_bandwidth = 8 * 11535 MB / 76494.6 ms;" in text
    spec = tmp_path / "s.pim"
    spec.write_text(text.replace("agent_load_bandwidth = 8 * 11535 MB / 76494.6 ms;",
                                 "agent_load_bandwidth = 8 * 11535 s / 76494.6 ms;"))
    assert main(["check", str(spec)]) == 1
    err = capsys.readouterr().err
    assert "s.pim:42:28: error: mapping param 'agent_load_bandwidth': a bandwidth > 0 was expected, this is a plain number" in err, err


@pytest.mark.parametrize("param, value, dims, ok", [
    (Param(U.BANDWIDTH, "> 0"), 1e9, U.BANDWIDTH, True),
    (Param(U.BANDWIDTH, "> 0"), 0.0, U.BANDWIDTH, False),
    (Param(U.BANDWIDTH, "> 0"), math.nan, U.BANDWIDTH, False),
    (Param(U.BANDWIDTH, "> 0"), 1.0, U.TIME, False),
    (Param(WHOLE, ">= 1", words=("auto",)), "auto", None, True),
    (Param(WHOLE, ">= 1", words=("auto",)), "many", None, False),
    (Param(WHOLE, ">= 1"), 3.0, U.NONE, True),
    (Param(WHOLE, ">= 1"), 3.0, U.BYTES, False),
    (Param(WHOLE, "0..1"), 2.0, U.NONE, False),
    (Param(U.NONE, "0..1"), 0.5, U.NONE, True),
    (Param(U.NONE, "0..1"), True, None, False),
    (Param(NAME), "ring", None, True),
    (Param(NAME, words=("ring",)), "tree", None, False),
    (Param(FILE), "p.json", None, True),
    (Param(FILE), 3.0, U.NONE, False),
])
def test_param_problem(param, value, dims, ok):
    assert (param.problem(value, dims) is None) == ok
