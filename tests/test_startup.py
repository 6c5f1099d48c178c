"""Start-up: a command imports only what it uses, so that `pimc --help` and a short `pimc dram`
answer in a fraction of a second (the compiler, numba, networkx and the plotting and learning
libraries load only for commands that need them)."""
from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT

HEAVY = ("numpy", "lark", "jinja2", "numba", "networkx", "matplotlib", "sklearn", "scipy", "highspy", "ml_dtypes")
IDLE = ROOT / "validation" / "reference" / "dram" / "traces" / "ddr4_3200__idle_random.trace"


def imported(*argv: str) -> list[str]:
    """The HEAVY modules a `pimc` process with these arguments has imported when it ends."""
    code = ("import sys, json\nfrom pimdsl.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.__stderr__)")
    out = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return json.loads(out.stderr.strip().splitlines()[-1])


def test_help_loads_no_library():
    assert imported("--help") == []
    assert imported("dram", "--help") == []


def test_a_short_replay_loads_neither_numba_nor_the_compiler_s_graph_libraries():
    loaded = imported("dram", "specs/reference/dram.pim", "--memory", "ddr4_3200", "--trace", str(IDLE),
                      "--trace-format", "dramsim3", "--json")
    assert {"numpy", "lark"} <= set(loaded)             # the spec is parsed, the trace read into arrays
    assert not {"numba", "networkx", "matplotlib", "sklearn", "jinja2"} & set(loaded)


def test_a_small_run_loads_no_kernel_compiler_nor_plotting_or_learning_library():
    loaded = imported("run", "specs/reference/hbm_pim_gemv.pim", "--json")
    assert "networkx" in loaded                         # the op graph
    assert not {"numba", "matplotlib", "sklearn", "scipy", "highspy", "jinja2", "ml_dtypes"} & set(loaded)


def test_a_check_without_values_loads_no_values_executor():
    """ml_dtypes (the values executor's bf16) takes half a second to import: only `check --values` needs it."""
    assert "ml_dtypes" not in imported("check", "specs/reference/hbm_pim_gemv.pim")


def test_a_compile_is_announced_once_and_only_when_the_cache_lacks_the_kernel(tmp_path, monkeypatch, capsys):
    from pimdsl import jit_cache
    monkeypatch.setenv("PIMDSL_CACHE", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(jit_cache, "_ANNOUNCED", set())
    source = ROOT / "pimdsl" / "sparsity" / "window_remap.py"
    assert not jit_cache.is_cached(source, "_loads")
    jit_cache.announce_compile(source, "_loads", "the probe kernel", 3)
    jit_cache.announce_compile(source, "_loads", "the probe kernel", 3)
    assert capsys.readouterr().err.count("pimc: compiling the probe kernel once (about 3 s;") == 1
    folder = jit_cache.folder_for(source)
    folder.mkdir(parents=True)
    (folder / "window_remap._loads-22.py311.nbi").write_bytes(b"")         # numba's index of the kernel
    assert jit_cache.is_cached(source, "_loads") and not jit_cache.is_cached(source, "_pair_moves")
    jit_cache.announce_compile(source, "_loads", "another name", 3)
    assert capsys.readouterr().err == ""
