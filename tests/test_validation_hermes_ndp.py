"""validation/hermes_ndp.json: the cheap runs (no activation trace) and the table regenerate exactly;
one sparse run and the stated trends hold."""
import json

import pytest

from pimdsl.validation import hermes_ndp as V
from tests.conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "hermes_ndp.json").read_text())


@pytest.mark.parametrize("strategy", V.CHEAP)
def test_cheap_runs_regenerate(strategy):
    for model in V.MODELS:
        ours = V.run(model, strategy, 1)
        committed = COMMITTED["runs"][V.key(model, strategy, 1)]
        assert ours["tokens_per_s"] == pytest.approx(committed["tokens_per_s"], rel=1e-9)
        assert ours["ttft_s"] == pytest.approx(committed["ttft_s"], rel=1e-9)


def test_table_regenerates_from_the_runs():
    assert V.rows(COMMITTED["runs"]) == COMMITTED["rows"]


def test_state_table_row_is_exact():
    row = next(r for r in COMMITTED["rows"] if r["id"] == "N14")
    assert row["ours"] == 232.0 and row["error"] == 0.0


def test_stated_trends():
    rows = {r["id"]: r for r in COMMITTED["rows"]}
    assert rows["S1"]["ours"] == 4                             # Falcon-40B needs four DIMMs
    assert rows["B4"]["ours"] > 0.8                            # Hermes-base: > 80% of the FC on the DIMMs
    assert rows["E7"]["ours"] > 1 and rows["E4a"]["ours"] > rows["E4b"]["ours"] > 1
    assert rows["S5"]["ours"] > rows["S4"]["ours"]             # more multipliers help at batch 16, not at 1
    assert rows["S6b"]["ours"] < rows["S6a"]["ours"] < 1       # the 5 x A100 server pulls ahead with the batch


@pytest.mark.slow
def test_a_sparse_run_regenerates():
    ours = V.run("opt_13b", "hermes", 1)
    committed = COMMITTED["runs"][V.key("opt_13b", "hermes", 1)]
    assert ours["tokens_per_s"] == pytest.approx(committed["tokens_per_s"], rel=1e-9)
    assert ours["predictor"] == committed["predictor"]


@pytest.mark.parametrize("batch", [1, 16])
def test_tensor_parallel_runs_regenerate(batch):
    # S6: the GPU-only server of [HERMES_NDP] Sec. V-F (no activation trace: a fraction of a second)
    ours = V.run("llama2_70b", "tensor_parallel", batch)
    committed = COMMITTED["runs"][V.key("llama2_70b", "tensor_parallel", batch)]
    assert ours["tokens_per_s"] == pytest.approx(committed["tokens_per_s"], rel=1e-9)
    assert ours["ttft_s"] == pytest.approx(committed["ttft_s"], rel=1e-9)


def test_the_committed_sweeps_agree_with_the_table_runs():
    # validation/plot_hermes_ndp.py's `pimc sweep` points are the same runs as the table's
    import csv
    sweeps = ROOT / "validation" / "hermes_ndp"
    rows = list(csv.DictReader((sweeps / "fig9_10_opt_66b.csv").open()))
    by = {r["mapping.strategy"]: r for r in rows}
    for strategy in ("hermes", "hermes_base", "deja_vu", "accelerate"):
        committed = COMMITTED["runs"][V.key("opt_66b", strategy, 1)]
        assert float(by[strategy]["tokens_per_s"]) == pytest.approx(committed["tokens_per_s"], rel=1e-9)
    dimms = {r["memory.hermes_ndp_dimm.count"]: r["ok"] for r in csv.DictReader((sweeps / "fig14_falcon_40b.csv").open())}
    assert dimms == {"2": "false", "4": "true", "8": "true", "16": "true"}      # S1: four DIMMs at least
    batch = {(r["pim_unit.hermes_ndp_core.simd_width"], r["workload.batch"]): float(r["tokens_per_s"])
             for r in csv.DictReader((sweeps / "fig16_opt_13b.csv").open())}
    assert batch[("65536 bit", "16")] / batch[("4096 bit", "16")] == pytest.approx(
        next(r for r in COMMITTED["rows"] if r["id"] == "S5")["ours"], rel=1e-9)


def _plot_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("plot_hermes_ndp", ROOT / "validation" / "plot_hermes_ndp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plot_script_judges_fig14s_failed_points_as_expected(tmp_path):
    """validation/plot_hermes_ndp.py exits 0 when a figure's points fail exactly where it expects (too few
    NDP-DIMMs for the weights), and names the points that differ otherwise."""
    plot = _plot_script()
    axis = "memory.hermes_ndp_dimm.count"
    for name in ("fig14_falcon_40b", "fig14_llama2_70b"):
        assert plot.unexpected(name, axis, plot.OUT / f"{name}.csv") is None, name
    rows = (plot.OUT / "fig14_falcon_40b.csv").read_text().splitlines()
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join([rows[0], rows[1].replace(",false,", ",true,", 1),
                                 rows[2].replace(",true,", ",false,", 1), *rows[3:]]) + "\n")
    assert plot.unexpected("fig14_falcon_40b", axis, broken) == (
        f"fig14_falcon_40b: {axis} = 4 failed unexpectedly; 2 ran but should have failed")
    assert plot.unexpected("fig9_10_opt_13b", "mapping.strategy", plot.OUT / "fig9_10_opt_13b.csv") is None


def test_the_committed_fig14_errors_cite_the_specs_current_line():
    """A failed point's error names file:line of the memory whose DIMMs are too few; a committed CSV
    citing another line is stale (rerun `python validation/plot_hermes_ndp.py fig14_falcon_40b fig14_llama2_70b`)."""
    import csv
    for name in ("fig14_falcon_40b", "fig14_llama2_70b"):
        for row in csv.DictReader((ROOT / "validation" / "hermes_ndp" / f"{name}.csv").open()):
            if row["ok"] == "false":
                path, line, _ = row["error"].split(":", 2)
                assert (ROOT / path).read_text().splitlines()[int(line) - 1].startswith("memory hermes_ndp_dimm"), name
