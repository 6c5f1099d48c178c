"""The NeuPIMs reproduction table stays what validation/neupims.json committed.

Recomputes two grid points (7B, the smallest batch, seconds each) and fails when one drifts; the
rows must follow from the committed grid, and the markdown must show every row and explain every
gap over 10%. Regenerate with `python validation/run_neupims.py` after a deliberate change and
update the explanations in validation/neupims.md.
"""
from __future__ import annotations

import json

import pytest

from pimdsl.validation import neupims_serving as V

from .conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "neupims.json").read_text())
MD = (ROOT / "validation" / "neupims.md").read_text()


@pytest.mark.parametrize("strategy", ["npu_pim", "neupims"])
def test_grid_point_has_not_drifted(strategy):
    point = ("7b", "alpaca", 64, strategy)
    k, ours = V._point(point)
    committed = COMMITTED["grid"][k]
    assert ours["tokens_per_s"] == pytest.approx(committed["tokens_per_s"], rel=1e-6)
    for resource, value in committed["utilization"].items():
        assert ours["utilization"][resource] == pytest.approx(value, rel=1e-6, abs=1e-12), resource


def test_the_grid_covers_the_papers_evaluation():
    assert set(COMMITTED["grid"]) == {V.key(*p) for p in V.points()}


def test_rows_follow_from_the_committed_grid():
    assert json.loads(json.dumps(V.all_rows(COMMITTED["grid"]))) == COMMITTED["rows"]


def test_the_markdown_shows_every_row_and_explains_the_gaps():
    for r in COMMITTED["rows"]:
        assert f"| {r['quantity']} |" in MD, f"row missing from neupims.md: {r['quantity']}"
    explained = MD.split("## Where we differ, and why", 1)[1]
    for r in COMMITTED["rows"]:
        if r["error"] is not None and abs(r["error"]) > 0.10:
            # each large gap is named in the explanations by its figure and quantity's subject
            assert r["figure"] in explained, r["quantity"]
