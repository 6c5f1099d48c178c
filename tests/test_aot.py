"""Kernels compiled ahead of time (pimdsl/aot.py): built at install, loaded without numba, used only
while current, and computing what the kernel computes through numba and the Python reference."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pimdsl import aot, jit_cache
from pimdsl.interpreter.dram import core
from pimdsl.sparsity import window_remap

from .conftest import ROOT

TRACE = ROOT / "validation" / "reference" / "dram" / "traces" / "ddr4_3200__idle_random.trace"
BUILD_HINT = "the replay core has no current ahead-of-time build: run `python -m pimdsl.aot` (or reinstall)"


def replay_in_a_process(*env: str) -> dict:
    """`pimc dram` on TRACE in a fresh process: its JSON report and whether numba was imported."""
    code = ("import io, json, sys, contextlib\nfrom pimdsl.cli.main import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n    main(sys.argv[1:])\n"
            "print(json.dumps({'report': json.loads(out.getvalue()), 'numba': 'numba' in sys.modules}))")
    args = ["dram", "specs/reference/dram.pim", "--memory", "ddr4_3200", "--trace", str(TRACE),
            "--trace-format", "dramsim3", "--json"]
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **dict(e.split("=", 1) for e in env)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_replay_core_is_built_ahead_and_replays_like_the_reference_without_numba():
    assert aot.entry(core.__file__, "replay_core") is not None, BUILD_HINT
    built = replay_in_a_process("PIMDSL_DRAM_ENGINE=compiled")
    reference = replay_in_a_process("PIMDSL_DRAM_ENGINE=python")
    assert not built["numba"] and not reference["numba"]
    assert built["report"] == reference["report"]
    assert built["report"]["requests"] > 0 and built["report"]["cycles"] > 0


@pytest.fixture()
def build_copy(tmp_path, monkeypatch):
    """The replay core's extension copied into a folder of its own, with its stamp file."""
    name = aot.extension_name("interpreter/dram/core.py")
    assert aot.entry(core.__file__, "replay_core") is not None, BUILD_HINT
    for path in aot.FOLDER.glob(f"{name}.*"):
        shutil.copy(path, tmp_path)
    monkeypatch.setattr(aot, "FOLDER", tmp_path)
    aot._load.cache_clear()
    yield tmp_path / f"{name}.stamp"
    aot._load.cache_clear()


def test_a_build_is_used_only_while_its_stamp_is_the_kernel_module_s(build_copy, monkeypatch):
    assert callable(aot.entry(core.__file__, "replay_core"))
    assert aot.entry(core.__file__, "no_such_kernel") is None
    aot._load.cache_clear()
    build_copy.write_text("0" * 64 + "\n")              # built from another version of the kernels
    assert aot.entry(core.__file__, "replay_core") is None
    namespace = {"replay_core": core.replay_core.fallback}
    aot.bind(namespace, core.__file__)
    assert namespace["replay_core"] is core.replay_core.fallback      # numba's kernel, not the build
    aot._load.cache_clear()
    build_copy.unlink()
    assert aot.entry(core.__file__, "replay_core") is None
    aot._load.cache_clear()
    build_copy.write_text(jit_cache.stamp(aot.PACKAGE / "interpreter/dram/core.py") + "\n")
    monkeypatch.setenv("PIMDSL_AOT", "off")
    assert aot.entry(core.__file__, "replay_core") is None
    monkeypatch.delenv("PIMDSL_AOT")
    aot._load.cache_clear()
    assert aot.entry(core.__file__, "replay_core") is not None
    aot.bind(namespace, core.__file__)
    assert isinstance(namespace["replay_core"], aot.Ahead)


def test_arguments_not_of_the_signature_go_to_numba_s_kernel_and_the_build_computes_what_python_does():
    assert isinstance(window_remap._loads, aot.Ahead), BUILD_HINT
    built = window_remap._loads
    ahead = aot.Ahead(built.built, built.checks, lambda *args: "numba")
    rng = np.random.default_rng(7)
    device = rng.integers(-1, 6, 500).astype(np.int16)
    activity = rng.integers(0, 200, 500).astype(np.uint8)
    python = built.fallback.py_func(device, activity, 6)
    assert np.array_equal(ahead(device, activity, 6), python) and python.sum() > 0
    assert np.array_equal(ahead(device, activity, np.int64(6)), python)
    # the extension would read these as raw memory: numba's kernel compiles for their types instead
    for args in [(device.astype(np.int32), activity, 6), (device[::2], activity[::2], 6), (device, activity, 6.0),
                 (device, activity, True), (device, activity), (device.reshape(5, 100), activity, 6)]:
        assert ahead(*args) == "numba"
    C = np.zeros(2, np.int64)           # core.checks of the tables
    checks = aot._argument_checks(aot.KERNELS["interpreter/dram/stream_core.py"]["_earliest"])
    assert all(map(aot._fits, checks, (C, np.zeros(3, np.int64), 0, 1, 2, 3)))
    assert not all(map(aot._fits, checks, ((C,), np.zeros(3, np.int64), 0, 1, 2, 3)))
    assert not all(map(aot._fits, checks, (C.astype(np.int32), np.zeros(3, np.int64), 0, 1, 2, 3)))
    assert not all(map(aot._fits, checks, (C, np.zeros(3, np.int64), 0, 1, 2, np.int32(3))))


def test_a_missing_extension_or_one_for_another_interpreter_falls_back(build_copy):
    for ext in build_copy.parent.glob("*.so"):
        ext.write_bytes(b"not an extension")
    assert aot.entry(core.__file__, "replay_core") is None
    aot._load.cache_clear()
    for ext in build_copy.parent.glob("*.so"):
        ext.unlink()
    assert aot.entry(core.__file__, "replay_core") is None


@pytest.mark.slow
def test_the_build_and_numba_s_kernel_replay_alike():
    built = replay_in_a_process("PIMDSL_DRAM_ENGINE=compiled")
    jitted = replay_in_a_process("PIMDSL_DRAM_ENGINE=compiled", "PIMDSL_AOT=off")
    assert jitted["numba"] and not built["numba"]
    assert built["report"] == jitted["report"]


def test_without_a_compiler_the_build_reports_the_module_and_leaves_no_extension(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setenv("LDSHARED", "/bin/false")
    assert aot.build(tmp_path, ["sparsity/window_remap.py"]) == ["sparsity/window_remap.py"]
    assert "not compiling sparsity/window_remap.py ahead of time" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
