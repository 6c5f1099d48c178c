"""Outputs never replace inputs or devices (issue 31): an output path that is (or resolves to) the
spec, an imported file, the trace or a data file of the run, or a device, FIFO or socket, is refused
and left untouched; `compile -o DIR` replaces only a folder its manifest describes whole."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import ROOT
from .test_bad_input import pimc

SMALL = ["--set", "llama3_2_1b.layers=1", "--set", "llama3_2_1b.vocab=1024", "--set", "workload.input_len=4",
         "--set", "workload.output_len=1"]
GPT2 = ["--set", "model.layers=1", "--set", "model.vocab=1024", "--strategy", "baseline"]


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """A private copy of the bundled specs (the tests try to overwrite them)."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    Path("in.trace").write_text("0x40 READ 0\n0x80 WRITE 10\n")
    return tmp_path / "specs"


def unchanged(path: Path, before: bytes) -> bool:
    return path.is_file() and not path.is_symlink() and path.read_bytes() == before


@pytest.mark.parametrize("case", ["timeline-spec", "timeline-import", "timeline-symlink", "sweep-spec",
                                  "trace-trace", "trace-spec", "profile-spec"])
def test_an_output_onto_an_input_is_refused(specs, case):
    phone, dram = specs / "systems/pim_sherpa_llama3_2_1b.pim", specs / "reference/dram.pim"
    gpt2 = specs / "systems/pipeload_gpt2_medium.pim"
    os.symlink(phone, "link.json")
    target, argv = {
        "timeline-spec": (phone, ["run", phone, *SMALL, "--timeline", phone]),
        "timeline-import": (specs / "models/llama3_2_1b.pim", ["run", phone, *SMALL, "--timeline", specs / "models/llama3_2_1b.pim"]),
        "timeline-symlink": (phone, ["run", phone, *SMALL, "--timeline", "link.json"]),
        "sweep-spec": (phone, ["sweep", phone, *SMALL, "--grid", "workload.batch=1,2", "-j", "1", "-o", phone]),
        "trace-trace": (Path("in.trace"), ["dram", dram, "--memory", "ddr4_3200", "--trace", "in.trace",
                                           "--trace-format", "dramsim3", "--command-trace", "in.trace"]),
        "trace-spec": (dram, ["dram", dram, "--memory", "ddr4_3200", "--trace", "in.trace",
                              "--trace-format", "dramsim3", "--command-trace", dram]),
        "profile-spec": (gpt2, ["execute", gpt2, *GPT2, "--cache", "wc", "--profile-out", gpt2]),
    }[case]
    before = target.read_bytes()
    code, err = pimc(*argv)
    assert code == 1 and "it is an input of this run" in err, err
    assert unchanged(target, before) and Path("link.json").is_symlink()
    assert not [p for p in Path(".").rglob("*pimc-tmp*")]


@pytest.mark.parametrize("node", ["fifo", "/dev/null", "socket"])
@pytest.mark.parametrize("option", ["--timeline", "--command-trace", "sweep"])
def test_an_output_onto_a_device_fifo_or_socket_is_a_usage_error(specs, node, option):
    if node == "fifo":
        os.mkfifo("node")
    elif node == "socket":
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind("node")
    path = node if node.startswith("/") else "node"
    kind = os.stat(path).st_mode
    argv = {"--timeline": ["run", specs / "systems/pim_sherpa_llama3_2_1b.pim", *SMALL, "--timeline", path],
            "--command-trace": ["dram", specs / "reference/dram.pim", "--memory", "ddr4_3200", "--trace", "in.trace",
                                "--trace-format", "dramsim3", "--command-trace", path],
            "sweep": ["sweep", specs / "systems/pim_sherpa_llama3_2_1b.pim", "--grid", "workload.batch=1,2", "-o", path]}[option]
    code, err = pimc(*argv)
    assert code == 2 and "is a device, FIFO or socket, which pimc never replaces" in err, err
    assert os.stat(path).st_mode == kind


def test_compile_never_deletes_a_folder_that_merely_has_a_summary(specs):
    phone = specs / "systems/pim_sherpa_llama3_2_1b.pim"
    proj = Path("proj")
    proj.mkdir()
    (proj / "summary.json").write_text("{}")
    (proj / "notes.txt").write_text("precious")
    code, err = pimc("compile", phone, *SMALL, "-o", proj)
    assert code == 1 and "is not an output folder of pimc (no .pimc-manifest" in err
    assert (proj / "notes.txt").read_text() == "precious"
    # a compile's own folder is replaced, but not once the user has put a file of theirs in it
    assert pimc("compile", phone, *SMALL, "-o", "out")[0] == 0
    assert pimc("compile", phone, *SMALL, "-o", "out", "--graph")[0] == 0
    Path("out/mine.txt").write_text("mine")
    code, err = pimc("compile", phone, *SMALL, "-o", "out")
    assert code == 1 and Path("out/mine.txt").read_text() == "mine"


def test_compile_into_the_specs_folder_is_refused_before_the_work(specs):
    phone = specs / "systems/pim_sherpa_llama3_2_1b.pim"
    code, err = pimc("compile", phone, "-o", specs / "systems")
    assert code == 1 and "cannot write" in err and phone.is_file()
    code, err = pimc("compile", phone, "-o", "")
    assert code == 2 and "-o needs a folder name" in err
    code, err = pimc("run", phone, "--timeline", "")
    assert code == 2 and "an empty file name" in err


@pytest.mark.parametrize("cache", ["afile", "afile/sub", ""])
def test_an_unusable_execute_cache_is_a_diagnostic(specs, cache):
    Path("afile").write_text("x")
    code, err = pimc("execute", specs / "systems/pipeload_gpt2_medium.pim", *GPT2, "--cache", cache)
    assert code == 1 and f"pimc execute: error: --cache {cache}: " in err, err
    assert Path("afile").read_text() == "x"
