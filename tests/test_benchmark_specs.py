"""The benchmark specs (benchmarks/specs/) stay valid, and a system on a registered run loop does not
load the step compiler's imports (networkx) that it never uses."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pimdsl import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "benchmarks" / "specs").glob("*.pim"))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_benchmark_spec_loads_without_diagnostics(path):
    spec, diags = load_spec(str(path), [])
    assert spec is not None and not diags.errors and not diags.warnings, [d.message for d in (*diags.errors, *diags.warnings)]
    assert path.stem in spec.systems                     # run_speed.py selects the system by the file's name


def test_seven_b_decode_runs_its_fcs_on_pim():
    spec, _ = load_spec(str(ROOT / "benchmarks" / "specs" / "hbm_pim_gpt3_7b.pim"), [])
    system = spec.systems["hbm_pim_gpt3_7b"]
    assert system.model.name == "gpt3_7b" and (system.workload.batch, system.workload.input_len,
                                                system.workload.output_len) == (1, 128, 128)
    assert system.mapping.placement["decode"]["fc"] == "pim"
    assert system.memories[0].pim is not None and system.memories[0].pim.program("gemv") is not None


def test_registered_loop_does_not_import_networkx():
    code = ("import sys; import pimdsl.cli.main, pimdsl.unread, pimdsl.driver; from pimdsl import loops; "
            "loops.get('hot_cold_offload'); print('networkx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
