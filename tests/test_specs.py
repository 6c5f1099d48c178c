"""Every bundled spec checks cleanly, and every system spec elaborates to JSON."""
import json

import pytest

from pimdsl.cli.main import main
from pimdsl.cli.show import spec_to_json
from pimdsl.frontend.pipeline import load_spec

from .conftest import ROOT

SPECS = sorted((ROOT / "specs").rglob("*.pim"))
SYSTEMS = sorted((ROOT / "specs" / "systems").glob("*.pim"))
REQUIRED_SYSTEMS = ["pim_sherpa_llama3_2_1b", "pim_sherpa_llama3_2_3b", "neupims_gpt3_7b", "neupims_gpt3_13b",
                    "neupims_gpt3_30b", "neupims_gpt3_175b"]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT / "specs")))
def test_bundled_spec_checks_without_errors_or_warnings(path):
    spec, diags = load_spec(path)
    assert not diags.items, diags.render_all()


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT / "specs")))
def test_bundled_spec_passes_strict_check(path, capsys):
    """Nothing in a bundled spec is silently ignored: no warning from `pimc check` (issue 15 part 3)."""
    status = main(["check", "--strict", str(path)])
    assert status == 0, capsys.readouterr().err


def test_the_library_has_every_standard_and_system():
    names = {p.relative_to(ROOT / "specs").as_posix() for p in SPECS}
    for standard in ("ddr4", "ddr5", "lpddr4", "lpddr5", "lpddr5x", "hbm2", "hbm3"):
        assert f"dram/{standard}.pim" in names
    for system in REQUIRED_SYSTEMS:
        assert f"systems/{system}.pim" in names
    prefixes = {p.stem.split("_")[0] for p in SYSTEMS}
    assert {"pim", "neupims", "hermes", "l3", "pipeload"} <= prefixes


@pytest.mark.parametrize("path", SYSTEMS, ids=lambda p: p.stem)
def test_system_spec_shows_json_with_workload_and_strategy(path):
    spec, diags = load_spec(path, ["workload.batch=2"])
    assert spec is not None, diags.render_all()
    data = json.loads(json.dumps(spec_to_json(spec)))
    (system,) = data["systems"].values()
    assert system["workload"]["batch"] == 2
    assert system["mapping"]["strategy"] in system["mapping"]["strategies"]
    assert system["model"] is not None and system["processors"]
