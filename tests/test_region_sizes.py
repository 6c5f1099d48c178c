"""Sizes that follow the hardware (issue 32 part 2): a region's size may name the memory's `capacity`
and its own `remaining` room, so a `--set` of a memory's channels (or its part's organization)
resizes the regions with it; a `--set` that still breaks a spec is reported at the argument too."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec

SPECS = Path(__file__).resolve().parent.parent / "specs"
SYSTEMS = sorted((SPECS / "systems").glob("*.pim"))

MEMORY = """
import "dram/lpddr5x.pim";
memory m {
  part = LPDDR5X_8533;
  channels = 8;
  CAPACITY
  address_map = [row, bank, bank_group, column, channel];
  region a { size = capacity / 4; holds = [weights]; }
  region b { size = remaining - 1 GiB; holds = [kv_cache]; }
  region c { size = remaining; holds = [buffers]; }
}
"""


def regions(spec, name="m"):
    memory = spec.memories[name]
    return memory.capacity_bytes, [(r.name, r.offset_bytes, r.size_bytes) for r in memory.regions]


@pytest.mark.parametrize("capacity", ["", "capacity = 16 GiB;"])
def test_capacity_and_remaining_size_regions_by_the_memory(elaborate, capacity):
    spec, diags = elaborate(MEMORY.replace("CAPACITY", capacity))
    assert not diags.errors, diags.render_all()
    total, got = regions(spec)
    assert total == 16 * 2**30
    quarter = 4 * 2**30
    assert got == [("a", 0, quarter), ("b", quarter, total - quarter - 2**30), ("c", total - 2**30, 2**30)]


def test_regions_follow_a_set_of_the_channels(elaborate):
    spec, diags = elaborate(MEMORY.replace("CAPACITY", ""), ["memory.m.channels=16"])
    assert not diags.errors, diags.render_all()
    total, got = regions(spec)
    assert total == 32 * 2**30 and got[0][2] == 8 * 2**30 and got[2] == ("c", total - 2**30, 2**30)


def test_a_set_that_breaks_a_declared_capacity_is_reported_at_the_argument(errors):
    shown = errors(MEMORY.replace("CAPACITY", "capacity = 16 GiB;"), ["memory.m.channels=16"])
    assert any(e.startswith("--set memory.m.channels=16:1:1: error: this gives memory 'm' 32 GiB, but its "
                            "capacity") for e in shown), shown
    assert any("^^^" in e and "memory.m.channels=16\n" in e for e in shown)
    assert any(":5:14: error: the organization gives" in e for e in shown)


def test_a_set_that_overflows_a_fixed_region_is_reported_at_the_argument(errors):
    text = MEMORY.replace("CAPACITY", "").replace("size = capacity / 4;", "size = 12 GiB;")
    shown = errors(text, ["memory.m.channels=4"])
    assert any(e.startswith("--set memory.m.channels=4:1:1: error: with this, region 'a' ends at 12 GiB, "
                            "past the memory's 8 GiB") for e in shown), shown


def test_remaining_is_only_a_region_name(errors):
    shown = errors(MEMORY.replace("CAPACITY", "").replace("size = capacity / 4;", "size = 1 GiB;")
                   + "workload w { batch = remaining; }\n")
    assert any("unknown name 'remaining'" in e for e in shown), shown


def _memories(spec) -> dict:
    return {m.name: m for system in spec.systems.values() for m in system.memories}


def _pim_memories(spec):
    """Every PIM memory of a system with the `--set` that halves it: its channels, or (one channel)
    its ranks."""
    for m in _memories(spec).values():
        if m.pim is not None:
            org = m.organization
            field, n = ("channels", org.channels) if org.channels > 1 else ("ranks", org.ranks)
            yield m, f"memory.{m.name}.{field}={n // 2}"


# the literal sizes the bundled specs wrote before their regions named `capacity` and `remaining`
BUNDLED_REGIONS = {
    "s24_lpddr5x": [7 * 2**30, 7 * 2**30, 128 * 2**20, 512 * 2**20],
    "neupims_hbm": [12 * 2**30, 18 * 2**30, 2 * 2**30],
    "l3_host_mem": [2 * 2**40 - 16 * 2**30, 16 * 2**30],
    "l3_hbm_pim": [64 * 2**30],
    "hermes_ndp_dimm": [24 * 2**30, 7 * 2**30, 2**30],
    "aimx_card": [16 * 2**30],
}


@pytest.mark.parametrize("path", SYSTEMS, ids=lambda p: p.stem)
def test_bundled_regions_keep_their_sizes_and_follow_half_the_pim_memory(path):
    spec, diags = load_spec(path)
    assert spec is not None, diags.render_all()
    if not path.stem.startswith(("pipeload", "tensor_parallel")):     # the others all have a PIM memory
        assert list(_pim_memories(spec))
    for memory, halve in _pim_memories(spec):
        assert [r.size_bytes for r in memory.regions] == BUNDLED_REGIONS[memory.name]
        halved, diags = load_spec(path, [halve])
        assert halved is not None and not diags.errors, (halve, diags.render_all())
        small = _memories(halved)[memory.name]
        if memory.name == "l3_host_mem":       # its capacity is declared (swept): the rows follow it
            assert small.capacity_bytes == memory.capacity_bytes
        else:
            assert small.capacity_bytes * 2 == memory.capacity_bytes
            assert [r.size_bytes * 2 for r in small.regions[:2]] == [r.size_bytes for r in memory.regions[:2]]


def test_the_phone_runs_with_twice_its_channels(capsys):
    path = SPECS / "systems" / "pim_sherpa_llama3_2_1b.pim"
    assert main(["run", str(path), "--set", "memory.s24_lpddr5x.channels=8", "--set", "workload.output_len=2",
                 "--json"]) == 0
    wide = json.loads(capsys.readouterr().out)
    assert main(["run", str(path), "--set", "workload.output_len=2", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert wide["memories"]["s24_lpddr5x"]["capacity_bytes"] == 2 * base["memories"]["s24_lpddr5x"]["capacity_bytes"]
    assert wide["tpot_s"] < base["tpot_s"]          # twice the channels: more PIM units, more bandwidth


def test_a_model_that_no_longer_fits_names_the_set(capsys):
    path = SPECS / "systems" / "pim_sherpa_llama3_2_3b.pim"
    assert main(["run", str(path), "--set", "memory.s24_lpddr5x.channels=2"]) == 1
    err = capsys.readouterr().err
    assert "--set memory.s24_lpddr5x.channels=2:1:1: error: this --set changed the room of region 'pim_weights' " \
           "of memory 's24_lpddr5x': weight L14.gate_proj (48.0 MiB) does not fit in pim_weights" in err
    assert "memory.s24_lpddr5x.channels=2\n    ^^^" in err
    assert "galaxy_s24p.pim:245:3: error: weight" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("path", SYSTEMS, ids=lambda p: p.stem)
def test_every_bundled_system_runs_on_half_its_pim_memory_or_names_the_set(path, capsys):
    spec, _ = load_spec(path)
    if not path.stem.startswith(("pipeload", "tensor_parallel")):
        assert list(_pim_memories(spec))
    for _, halve in _pim_memories(spec):
        status = main(["run", str(path), "--set", halve, "--json"])
        out, err = capsys.readouterr()
        if status == 0:
            assert json.loads(out)["system"]
        else:
            assert status == 1 and f"--set {halve}:1:1: error:" in err and "Traceback" not in err, err
