"""Start-up: a command imports only what it uses, so that `pimc --help` and a short `pimc dram`
answer in a fraction of a second (the compiler, numba, networkx and the plotting and learning
libraries load only for commands that need them)."""
from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT

HEAVY = ("numpy", "lark", "jinja2", "numba", "networkx", "matplotlib", "sklearn", "scipy", "highspy")
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
