"""Bad input found by trying (issue 20): each case ends within seconds in a located diagnostic and
exit 1 (2 for usage, 0 when there is nothing to do), never a hang, a traceback or an internal error.

Every case runs `pimc` in this process under a per-case alarm, so a hang fails the test instead
of stalling the suite.
"""
from __future__ import annotations

import os
import re

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT, deadline, pimc as run_pimc

SHERPA = str(ROOT / "specs/systems/pim_sherpa_llama3_2_1b.pim")
NEUPIMS = str(ROOT / "specs/systems/neupims_gpt3_7b.pim")
PIPELOAD = str(ROOT / "specs/systems/pipeload_gpt_j_6b.pim")
DRAM = ["dram", str(ROOT / "specs/reference/dram.pim"), "--memory", "ddr4_3200"]


def pimc(*argv):
    """(exit code, stderr) of `pimc argv` in this process, under a 20 s alarm."""
    done = run_pimc(*argv, seconds=20)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done.returncode, done.stderr


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Writes a file under tmp_path (text or bytes) and returns its name, relative to the cwd."""
    monkeypatch.chdir(tmp_path)

    def write(name: str, content) -> str:
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return name
    return write


# ---- imports: .pim files only; a file that is not a spec is never echoed ---------------------------

@pytest.mark.parametrize("target", ["/etc/shadow", "../../../../../../../etc/passwd", "/etc/hostname"])
def test_import_of_a_non_spec_file_is_refused_without_echoing_it(files, target):
    spec = files("s.pim", f'import "{target}";\n')
    code, err = pimc("check", spec)
    assert code == 1
    assert re.search(r"^s\.pim:1:1: error: imports name \.pim spec files only", err, re.M), err
    assert "root:" not in err and "/bin/" not in err      # nothing of the target's text


def test_a_root_file_that_is_not_a_spec_is_not_parsed():
    code, err = pimc("check", "/etc/passwd")
    assert code == 1
    assert "/etc/passwd:1:1: error: '/etc/passwd' is not a .pim spec file" in err
    assert "root:" not in err


# ---- files of the wrong kind or size: checked before reading ---------------------------------------

def test_device_and_fifo_as_spec_or_trace(files, tmp_path):
    os.mkfifo(tmp_path / "fifo.pim")
    os.mkfifo(tmp_path / "fifo.trace")
    os.symlink("/dev/zero", tmp_path / "zero.pim")
    code, err = pimc("check", "fifo.pim")
    assert code == 1 and "fifo.pim:1:1: error: this is not a regular file (a device, FIFO or socket)" in err
    code, err = pimc("check", "zero.pim")       # resolves to /dev/zero: not a .pim file
    assert code == 1 and re.search(r"/dev/zero:1:1: error: .*not a \.pim spec file", err), err
    for trace in ("/dev/zero", "fifo.trace"):
        code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3")
        assert code == 1 and f"{trace}:1:1: error: this is not a regular file" in err, err


def test_a_huge_file_is_refused_by_its_size(files, monkeypatch):
    from pimdsl.frontend import syntax
    from pimdsl.interpreter.dram import traces
    monkeypatch.setattr(traces, "TRACE_LIMIT_BYTES", 64)
    trace = files("big.trace", "0x40 READ 0\n" * 10)
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3")
    assert code == 1 and "big.trace:1:1: error: this file is larger than 64 B, too large for a trace" in err, err
    monkeypatch.setattr(syntax, "SPEC_LIMIT_BYTES", 64)
    spec = files("big.pim", "workload w { batch = 2; }\n" * 10)
    code, err = pimc("check", spec)
    assert code == 1 and "big.pim:1:1: error: this file is larger than 64 B, too large for a spec file" in err, err


# ---- huge values through --set: ranges at elaboration, work estimated before building ----------------

@pytest.mark.parametrize("override, located, message", [
    ("workload.output_len=1e300", "--set workload.output_len=1e300:1:21", "past the largest count"),
    ("workload.batch=2^64", "--set workload.batch=2^64:1:16", "past the largest count"),
    ("memory.s24_lpddr5x.channels=1e300", "--set memory.s24_lpddr5x.channels=1e300:1:29", "past the largest count"),
    ("workload.output_len=1e999", "--set workload.output_len=1e999:1:21", "too large"),
])
def test_values_out_of_range_are_located_diagnostics(override, located, message):
    code, err = pimc("run", SHERPA, "--set", override)
    assert code == 1
    assert f"{located}: error: " in err and message in err, err


@pytest.mark.parametrize("override, factor", [
    ("workload.output_len=10^9", "1.00e+09 step(s)"),
    ("model.layers=1000000", "1.60e+07 ops"),
    ("workload.batch=1000000000", "1.00e+09 request(s)"),
])
def test_runs_past_the_work_limit_are_refused_with_the_estimate(override, factor):
    code, err = pimc("run", SHERPA, "--set", override)
    assert code == 1
    assert re.search(r"error: this run would take about [\d.e+]+ units of work \(.*\) and about [\d.]+ [kMGT]?B "
                     r"of memory, past the limit of 1\.00e\+08", err), err
    assert factor in err and f"hint: lower {override.split('=')[0]} or raise the limit with --max-work" in err


def test_max_work_raises_the_limit_and_is_a_usage_error_when_not_positive():
    code, err = pimc("run", PIPELOAD, "--max-work", "10")
    assert code == 1 and "past the limit of 10" in err
    code, err = pimc("run", PIPELOAD, "--max-work", "-1")
    assert code == 2 and "'-1' is not a positive number" in err


# ---- values a model divides by ---------------------------------------------------------------------

@pytest.mark.parametrize("spec, override, located", [
    (NEUPIMS, "neupims_icnt.bandwidth=0 GB/s", "--set neupims_icnt.bandwidth=0 GB/s:1:24"),
    (SHERPA, "s24_cpu.memory_bandwidth=0 GB/s", "--set s24_cpu.memory_bandwidth=0 GB/s:1:26"),
    (SHERPA, "s24_cpu.peak.bf16=-1 GFLOPS", "--set s24_cpu.peak.bf16=-1 GFLOPS:1:19"),
])
def test_a_zero_rate_is_a_diagnostic_at_the_field(spec, override, located):
    code, err = pimc("run", spec, "--set", override)
    assert code == 1 and f"{located}: error: " in err and "must be positive" in err, err


def test_a_string_where_a_number_belongs():
    code, err = pimc("run", NEUPIMS, "--set", 'neupims_icnt.bandwidth="fast"')
    assert code == 1 and "error: a bandwidth was expected for 'bandwidth', this is a string" in err, err


# ---- DRAM traces ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, content, where, message", [
    ("dramsim3", "-0x40 READ 0\n", "t.trace:1:1", "address -0x40 is negative"),
    ("dramsim3", "0x10000000000000000 READ 0\n", "t.trace:1:1", "address 0x10000000000000000 is beyond memory 'ddr4_3200'"),
    ("dramsim3", "0x0 READ 0\n0x400000000 READ 1\n", "t.trace:2:1", "address 0x400000000 is beyond memory 'ddr4_3200'"),
    ("dramsim3", b"0x40 READ 0\n0x80 \xffREAD 1\n", "t.trace:2:6", "byte 0xff is not UTF-8 text"),
    ("dramsim3", "0x40 READ 10\n0x80 READ 5\n", "t.trace:2:11", "arrival cycle 5 goes backwards"),
    ("dramsim3", "0x40 READ -3\n", "t.trace:1:11", "arrival cycle -3 is negative"),
    ("dramsim3", "0x80 READ 1000000000000000000\n", "t.trace:1:11",
     "replaying the trace up to here would take about"),
    ("ramulator", "R 0,0,0,0,0,0\n# comment\nR 0,0,0\n", "t.trace:3:3", "an address vector needs 6 values"),
    ("ramulator", "R 0,0,0,0,0,0\nR 0,0,0,0,99999999,0\n", "t.trace:2:3", "row 99999999 is out of range"),
    ("ramulator", "LD 0x40\nLD -5\n", "t.trace:2:4", "address -5 is negative"),
    ("ramulator", "LD 0x40\nR 0,0,0,0,0,0\n", "t.trace:2:1", "the trace mixes LD/ST addresses and R/W"),
])
def test_bad_traces_get_trace_line_col_diagnostics(files, fmt, content, where, message):
    trace = files("t.trace", content)
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", fmt)
    assert code == 1
    assert f"{where}: error: {message}" in err, err


def test_an_absurd_arrival_fits_when_max_work_allows_it(files):
    trace = files("t.trace", "0x40 READ 0\n0x80 READ 2000000\n")
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3", "--max-work", "1000")
    assert code == 1 and "t.trace:2:11: error: replaying the trace up to here" in err
    code, _ = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3", "--json")
    assert code == 0


# ---- sweep grids, empty inputs --------------------------------------------------------------------

def test_a_huge_sweep_grid_is_refused_before_expanding(tmp_path):
    code, err = pimc("sweep", SHERPA, "--grid", "workload.batch=1:1000000000:1", "-o", tmp_path / "s.csv")
    assert code == 2 and "--grid workload.batch would have 1,000,000,000 points, past the limit of 10,000" in err
    code, err = pimc("sweep", SHERPA, "--grid", "workload.batch=1:200:1", "--grid",
                     "workload.input_len=1:200:1", "-o", tmp_path / "s.csv")
    assert code == 2 and "the grid would have 40,000 points" in err
    assert not (tmp_path / "s.csv").exists()


def test_an_empty_spec_is_nothing_to_show(files):
    spec = files("empty.pim", "// nothing here yet\n")
    code, err = pimc("show", spec)
    assert code == 0 and "empty.pim: nothing to do: the file declares nothing" in err, err


@pytest.mark.parametrize("command, message", [
    (["run", "--json"], "the file declares nothing to run"), (["compile", "-o", "out"], "the file declares nothing to run"),
    (["sweep", "--grid", "workload.batch=1,2", "-o", "s.csv"], "the file declares nothing to run"),
    (["execute", "--json"], "the file declares nothing to run"),
    (["dram", "--memory", "m", "--trace", "t.trace", "--trace-format", "dramsim3"], "the file declares no memory")])
@pytest.mark.parametrize("text", ["", "// nothing here yet\n"])
def test_an_empty_spec_is_an_error_where_an_output_is_promised(files, command, message, text):
    """issue 31: a script that checks the exit status must not believe an empty run succeeded."""
    spec = files("empty.pim", text)
    files("t.trace", "0x40 READ 0\n")
    code, err = pimc(command[0], spec, *command[1:])
    assert code == 1 and f"empty.pim:1:1: error: {message}" in err, err
    assert not os.path.exists("out") and not os.path.exists("s.csv")


def test_check_says_an_empty_spec_has_nothing_to_check(capsys, files):
    spec = files("empty.pim", "")
    with deadline():
        assert main(["check", spec]) == 0
    assert "empty.pim: ok (nothing to check: the file declares nothing)" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["dramsim3", "ramulator"])
@pytest.mark.parametrize("text", ["", "# no requests\n\n"])
def test_an_empty_trace_is_an_error(files, fmt, text):
    trace = files("t.trace", text)
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", fmt, "--json")
    assert code == 1 and "t.trace:1:1: error: the trace has no requests" in err


# ---- other files a spec names: a requests CSV, a HuggingFace config ----------------------------------

@pytest.mark.parametrize("csv, where, message", [
    ("/dev/zero", ":1:23", "'/dev/zero' is not a .csv file"),
    ("fifo.csv", ":1:23", "is not a regular file (a folder, device, FIFO or socket)"),
    ("missing.csv", ":1:23", "cannot read the requests CSV"),
    ("bad.csv", "/bad.csv:2:1", "output_len 'x' is not a whole number of tokens"),
])
def test_a_bad_requests_csv_is_a_located_diagnostic(files, csv, where, message):
    files("bad.csv", "input_len,output_len\n5,x\n")
    os.mkfifo("fifo.csv")
    csv = os.path.abspath(csv)                     # a relative path is taken from the spec's folder
    code, err = pimc("run", NEUPIMS, "--allow-outside", "--set", "gpt3_7b.layers=1",
                     "--set", f'workload.requests_csv="{csv}"')
    assert code == 1 and f"{where}: error: " in err and message in err, err


@pytest.mark.parametrize("target, message", [("/etc/passwd", "'/etc/passwd' is not a .json file"),
                                             ("fifo.json", "'fifo.json' is not a regular file")])
def test_hf_config_must_be_a_regular_json_file(files, tmp_path, target, message):
    os.mkfifo(tmp_path / "fifo.json")
    spec = files("m.pim", f'model m {{ hf_config = "{target}"; }}\n')
    code, err = pimc("check", spec)
    assert code == 1 and re.search(r"^m\.pim:1:23: error: " + re.escape(message), err, re.M), err
    assert "root:" not in err


# ---- found by setting each rate, width and count of the bundled systems to 0 or a string -------------

@pytest.mark.parametrize("override, located, message", [
    ("s24_lp5x_pim.simd_width=0 B", "--set s24_lp5x_pim.simd_width=0 B:1:25", "must be a positive width"),
    ("LPDDR5X_8533.organization.bus_width=0 B", "--set LPDDR5X_8533.organization.bus_width=0 B:1:37",
     "must be a positive width"),
    ("s24_cpu.threads.copy=0", "--set s24_cpu.threads.copy=0:1:22", "'copy' must be at least 1"),
    ("pim_sherpa_mapping.params.smc_noncacheable_slowdown=0",
     "--set pim_sherpa_mapping.params.smc_noncacheable_slowdown=0:1:53", "a plain number > 0 was expected, not 0"),
    ('pim_sherpa_mapping.params.noncacheable_read_bandwidth="x"',
     '--set pim_sherpa_mapping.params.noncacheable_read_bandwidth="x":1:55', "a bandwidth > 0 was expected, not the name 'x'"),
])
def test_values_a_model_divides_by_are_checked_at_the_field(override, located, message):
    code, err = pimc("run", SHERPA, "--set", "mapping.strategy=ddb", "--set", "llama3_2_1b.layers=1",
                     "--set", "workload.output_len=1", "--set", override)
    assert code == 1 and f"{located}: error: " in err and message in err, err


def test_a_bad_parallelism_parameter_points_at_its_field():
    code, err = pimc("run", NEUPIMS, "--set", 'mapping.params.tp="x"')
    assert code == 1 and "--set mapping.params.tp=\"x\":1:19: error: mapping param 'tp': a whole number >= 1" in err, err


def test_a_trace_error_points_at_its_own_field(files):
    trace = files("t.trace", "0x0 READ 5\n0x0 READ 0\n")          # the cycle, not the 0 inside 0x0
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3")
    assert code == 1 and "t.trace:2:10: error: arrival cycle 0 goes backwards" in err, err


@pytest.mark.parametrize("digits", [30, 400])
def test_an_arrival_cycle_beyond_the_engines_range_is_located(files, digits):
    trace = files("t.trace", "0x40 READ 0\n0x80 READ " + "9" * digits + "\n")
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3", "--json", "--max-work", "1e308")
    assert code == 1 and f"t.trace:2:11: error: arrival cycle of {digits} digits is beyond the engine's range" in err


def test_a_folder_as_trace_is_located(files):
    os.mkdir("d.trace")
    code, err = pimc(*DRAM, "--trace", "d.trace", "--trace-format", "dramsim3", "--json")
    assert code == 1 and "d.trace:1:1: error: this is a directory, not a trace" in err


@pytest.mark.parametrize("op", ["-1", "0xffffffffffffffff", "12"])
def test_a_number_where_the_op_goes_is_located(files, op):
    """issue 31 (fuzz seed 17): a shifted or damaged line was read as a request."""
    trace = files("t.trace", f"0x40 READ 0\n0x80 {op} 10\n")
    code, err = pimc(*DRAM, "--trace", trace, "--trace-format", "dramsim3", "--json")
    assert code == 1 and f"t.trace:2:6: error: '{op}' is not an operation" in err, err
