"""One driver for `pimc run` and `pimc sweep` (pimdsl/driver.py): on every bundled system a sweep
point gives exactly the metrics `pimc run --json` gives, or fails with the same first error."""
from __future__ import annotations

import csv
import json

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT, flatten

# the phone systems rerun the workload for their host-only baseline (about 10 s each), the larger Hermes
# NDP systems build their placement program and activation generator over every layer (5-10 s each), the
# NeuPIMs systems beyond 7B run 7B's serving loop over more layers and devices (4-8 s each): CI's slow step
HEAVY = ("pim_sherpa", "hermes_ndp", "neupims_gpt3_13b", "neupims_gpt3_30b", "neupims_gpt3_175b")
SYSTEMS = [pytest.param(spec, marks=pytest.mark.slow) if any(h in spec for h in HEAVY) else spec
           for spec in sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "specs" / "systems").glob("*.pim"))]
# keep each run to a second or two: few tokens; the serving systems at a small batch
SMALL = {"neupims": ["workload.batch=4"], "pim_sherpa": ["workload.input_len=8"], "l3_": ["workload.requests=20"]}


@pytest.mark.parametrize("spec", SYSTEMS)
def test_sweep_gives_what_run_gives(spec, tmp_path, capsys):
    fixed = [s for key, sets in SMALL.items() if key in spec for s in sets]
    sets = [arg for s in fixed for arg in ("--set", s)]
    status = main(["run", str(ROOT / spec), *sets, "--set", "workload.output_len=2", "--json"])
    run_out = capsys.readouterr()
    out = tmp_path / "sweep.csv"
    main(["sweep", str(ROOT / spec), *sets, "--grid", "workload.output_len=2", "-o", str(out), "-j", "1"])
    capsys.readouterr()
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    if status != 0:                               # a system that does not run yet fails the same way
        first = next(line for line in run_out.err.splitlines() if "error:" in line)
        assert row["ok"] == "false" and row["error"] == first.strip()
        return
    assert row["ok"] == "true", row["error"]
    for key, value in flatten(json.loads(run_out.out)):
        if isinstance(value, bool) or value is None or isinstance(value, (list, str)):
            continue
        assert float(row[key]) == value, key
