"""Outputs are atomic and reproducible (issue 20): `compile -o DIR` replaces DIR as a whole, no
temporary survives a run (or a killed run, at the next one), identical compiles give identical
folders, and bad output options are usage errors."""
from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path

import pytest

from pimdsl.cli.main import main
from pimdsl.emit.atomic import atomic_file, atomic_folder

from .conftest import ROOT

PHONE = str(ROOT / "specs/systems/pim_sherpa_llama3_2_1b.pim")
SMALL = ["--set", "llama3_2_1b.layers=1", "--set", "llama3_2_1b.vocab=1024", "--set", "workload.input_len=4",
         "--set", "workload.output_len=1", "--max-requests", "50"]


def compile_to(out: Path, *extra) -> int:
    return main(["compile", PHONE, *SMALL, "-o", str(out), *extra])


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".pimc-tmp-" in p.name]


def test_compile_replaces_an_earlier_output_whole(tmp_path, capsys):
    out = tmp_path / "out"
    assert compile_to(out) == 0
    first = tree(out)
    assert {"summary.json", "decode/commands.txt", "decode/requests.trace", ".pimc-manifest"} <= first
    assert compile_to(out, "--graph") == 0          # a smaller output: the graph files only
    second = tree(out)
    assert "decode/commands.txt" not in second and "prefill/graph.json" in second
    listed = (out / ".pimc-manifest").read_text().splitlines()
    assert sorted(l for l in listed if not l.startswith("#")) == sorted(
        f for f in second if (out / f).is_file() and f != ".pimc-manifest")
    assert leftovers(tmp_path) == []


def test_two_identical_compiles_give_byte_identical_folders(tmp_path, capsys):
    assert compile_to(tmp_path / "a", "--time-passes") == 0
    assert "pass total" in capsys.readouterr().err             # pass times go to stderr only
    assert compile_to(tmp_path / "b") == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert "pass_times_s" not in summary
    files = sorted(tree(tmp_path / "a"))
    assert files == sorted(tree(tmp_path / "b"))
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b",
                                               [f for f in files if (tmp_path / "a" / f).is_file()], shallow=False)
    assert mismatch == [] and errors == [] and len(match) > 5


def test_compile_never_replaces_a_folder_that_is_not_a_pimc_output(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("keep me")
    assert compile_to(home) == 1
    assert "exists and is not an output folder of pimc" in capsys.readouterr().err
    assert (home / "notes.txt").read_text() == "keep me" and leftovers(tmp_path) == []


def test_a_failed_compile_leaves_the_folder_as_it_was(tmp_path, capsys):
    out = tmp_path / "out"
    assert compile_to(out) == 0
    before = {f: (out / f).read_bytes() for f in tree(out) if (out / f).is_file()}
    assert main(["compile", PHONE, "--set", "workload.batch=0", "-o", str(out)]) == 1
    assert {f: (out / f).read_bytes() for f in tree(out) if (out / f).is_file()} == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("value", ["-5", "x", "1.5"])
def test_max_requests_must_be_a_count(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exc:
        compile_to(tmp_path / "out", "--max-requests", value)
    assert exc.value.code == 2
    assert f"argument --max-requests: '{value}' is not a count" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_timeline_leaves_no_temporary(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["run", PHONE, *SMALL[:-2], "--timeline", str(path)]) == 0
    assert json.loads(path.read_text())["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_an_interrupted_write_leaves_nothing_and_a_killed_ones_temporaries_are_cleaned(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(target) as out:
            out.write("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and leftovers(tmp_path) == []
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(tmp_path / "out") as folder:
            Path(folder, "summary.json").write_text("{}")
            raise KeyboardInterrupt
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    # what `kill -9` leaves: temporaries of a process that is gone (above the largest pid Linux allows, 2**22)
    dead = 2**22 + 1
    (tmp_path / f".t.json.pimc-tmp-{dead}-abc").write_text("x")
    (tmp_path / f".out.pimc-tmp-{dead}-def").mkdir()
    live = tmp_path / f".out.pimc-tmp-{os.getppid()}-ghi"          # a running process's: kept
    live.mkdir()
    with atomic_file(target) as out:
        out.write("new")
    with atomic_folder(tmp_path / "out") as folder:
        Path(folder, "summary.json").write_text("{}")
    assert target.read_text() == "new" and (tmp_path / "out" / "summary.json").exists()
    assert leftovers(tmp_path) == [live.name]
    # killed between moving the old output aside and moving the new one in: the old one comes back
    os.rename(tmp_path / "out", tmp_path / f".out.pimc-tmp-{dead}-old-xyz")
    with atomic_file(tmp_path / "out.txt"):
        pass                                                          # a write elsewhere: not this target
    assert not (tmp_path / "out").exists()
    with pytest.raises(KeyboardInterrupt):
        with atomic_folder(tmp_path / "out"):
            raise KeyboardInterrupt
    assert (tmp_path / "out" / "summary.json").exists() and leftovers(tmp_path) == [live.name]


@pytest.mark.parametrize("option", ["--timeline", "--command-trace", "-o"])
def test_an_output_path_that_cannot_be_written_is_a_usage_error_before_any_work(tmp_path, capsys, option):
    command = {"--timeline": ["run", PHONE], "-o": ["sweep", PHONE, "--grid", "workload.batch=1,2"],
               "--command-trace": ["dram", str(ROOT / "specs/reference/dram.pim"), "--memory", "ddr4_3200",
                                   "--trace", "t.trace", "--trace-format", "dramsim3"]}[option]
    for target, message in ((tmp_path / "missing" / "x.out", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(SystemExit) as exc:
            main([*command, option, str(target)])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_terminated_compile_leaves_no_temporary(tmp_path):
    """SIGTERM while the output is being written: the temporary folder is removed, DIR never appears."""
    import subprocess
    import sys
    import time
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pimdsl.cli.main", "compile", PHONE, "--unroll", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(tmp_path), "the compile never started writing"
        proc.terminate()
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130 and "pimc: interrupted" in err
    assert leftovers(tmp_path) == [] and not out.exists()


@pytest.fixture(scope="module")
def unrolled(tmp_path_factory):
    """The one-layer phone compiled with --unroll, once for the tests that only read it."""
    out = tmp_path_factory.mktemp("unrolled") / "u"
    assert compile_to(out, "--unroll") == 0
    return out


def test_gzip_writes_the_same_lines_compressed_and_reproducibly(unrolled, tmp_path, capsys):
    import gzip
    assert compile_to(tmp_path / "z1", "--unroll", "--gzip") == 0
    for name in ("decode/commands.txt", "decode/requests.trace"):
        plain = (unrolled / name).read_bytes()
        zipped = (tmp_path / "z1" / f"{name}.gz").read_bytes()
        assert gzip.decompress(zipped) == plain and len(zipped) < len(plain)
        # reproducible: the gzip header holds no timestamp (bytes 4-7) and no file name (flag 0x08);
        # the deflate body depends on the bytes alone
        assert zipped[4:8] == bytes(4) and not zipped[3] & 0x08
        assert not (tmp_path / "z1" / name).exists()


def test_the_unrolled_trace_keeps_its_bytes(unrolled):
    """The one-layer phone's every-command trace (81,150 timed commands and 78 REF lines, 5.8 MB) is
    byte for byte what it was when the arguments got their values and refreshes their lines (issue 32;
    its cycles and places are those of the trace before, sha256 943b00ba..., checked line by line then)."""
    import hashlib
    text = (unrolled / "decode" / "commands.txt").read_bytes()
    assert hashlib.sha256(text).hexdigest() == "ab254096a0ec5a6cc09d28e8e36f3f636edec91fdcbc3b2bc2cf12e89dd43c55"
    assert text.count(b" REF unit=") == 78
