"""Every validation doc states how many of its rows are predictions and how many of those are
within 10% (pimdsl/validation/scoring.py); the counts follow the committed numbers."""
from __future__ import annotations

import json
import re

import pytest

from pimdsl.validation import pim_sherpa
from pimdsl.validation.scoring import prediction_count, within

from .conftest import ROOT

DOCS = sorted((ROOT / "validation").glob("*.md"))
COUNT = re.compile(r"(\d+) (?:of the (\d+) )?(?:rows )?(?:are predictions|give a number to compare).{0,200}?"
                   r"(\d+) of them (?:are )?within 10%")


def test_the_helper_counts():
    assert within([0.1, -0.1, 0.1000001, -0.5, 0.0]) == 3
    assert prediction_count([0.05, -0.2], "the paper") == "2 rows are predictions; 1 of them are within 10% of the paper."
    assert prediction_count([], "X", "None here.") == "0 rows are predictions; 0 of them are within 10% of X. None here."


@pytest.mark.parametrize("doc", DOCS, ids=[d.stem for d in DOCS])
def test_every_doc_states_its_counts(doc):
    found = COUNT.search(doc.read_text())
    assert found, f"{doc.name} does not say how many rows are predictions and how many are within 10%"
    assert int(found.group(3)) <= int(found.group(1))


def test_pim_sherpa_states_the_counts_of_its_json():
    rows = json.loads((ROOT / "validation" / "pim_sherpa.json").read_text())["rows"]
    assert pim_sherpa.counts(rows) in (ROOT / "validation" / "pim_sherpa.md").read_text()


def test_dram_counts_follow_its_json():
    entries = [e for e in json.loads((ROOT / "validation" / "dram.json").read_text()) if e.get("references")]
    errors = [e["cycle_error_pct"] / 100 for e in entries]
    assert f"{len(errors)} rows are predictions; {within(errors)} of them are within 10%" in \
        (ROOT / "validation" / "dram.md").read_text()
