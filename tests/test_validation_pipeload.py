"""validation/pipeload.json: the predicted rows regenerate exactly; the trends the paper reports hold."""
import json

import pytest

from pimdsl.validation import pipeload as P
from tests.conftest import ROOT

COMMITTED = json.loads((ROOT / "validation" / "pipeload.json").read_text())


@pytest.mark.parametrize("model", sorted(P.MODELS))
def test_predicted_rows_regenerate(model):
    committed = COMMITTED["models"][model]
    prof = P.paper_profile(model)
    alpha = P.fit_contention(model, prof)
    assert alpha == pytest.approx(committed["contention_alpha"], rel=1e-6, abs=1e-9)
    ours = P.predicted(model, prof, alpha)
    for col, row in committed["predicted"].items():
        assert ours[col]["latency_ms"] == pytest.approx(row["latency_ms"], rel=1e-9)
        assert ours[col]["memory_mb"] == pytest.approx(row["memory_mb"], rel=1e-9)


@pytest.mark.parametrize("model", sorted(P.MODELS))
def test_predicted_trends(model):
    row = COMMITTED["models"][model]
    t = row["trends"]["predicted"]
    # speedup over PipeSwitch grows with the agents, as in the paper
    assert t["speedup_grows"] and row["trends"]["paper"]["speedup_grows"]
    # each added agent holds one more layer
    assert t["layers_per_added_agent"] == pytest.approx([1.0, 1.0], abs=0.01)
    # calibration columns match by construction; the fit column too
    for col in ("baseline", "pipeswitch", "6"):
        paper = row["paper"][col]["latency_ms"]
        assert abs(row["predicted"][col]["latency_ms"] / paper - 1) < (0.20 if model == "vit_large" else 0.01)
    # PipeSwitch never frees: its memory is the baseline's (Table III ratio 1.00-1.04)
    assert row["predicted"]["pipeswitch"]["memory_mb"] == pytest.approx(row["predicted"]["baseline"]["memory_mb"])


def test_memory_predictions_within_the_papers_spread():
    """Memory comes from the shapes alone: GPT-J and ViT within 10% of Table III at every agent count."""
    for model in ("gpt_j_6b", "vit_large"):
        row = COMMITTED["models"][model]
        for col in ("2", "4", "6"):
            assert abs(row["predicted"][col]["memory_mb"] / row["paper"][col]["memory_mb"] - 1) < 0.10


def test_measured_here_runs_equal_the_plain_forward_and_hold_m_layers():
    measured = COMMITTED["measured_here"]
    assert set(measured) == set(P.MODELS)
    for model, table in measured.items():
        for col in P.COLUMNS:
            assert table[str(col)]["output_equals_plain_forward"]
        per_agent = COMMITTED["models"][model]["trends"]["measured_here"]["layers_per_added_agent"]
        assert all(0.8 < x < 1.3 for x in per_agent), (model, per_agent)
