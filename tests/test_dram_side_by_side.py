"""`benchmarks/dram_speed.py --side-by-side` with stand-ins for the reference simulators (the real
ones are built outside the repository): the stand-ins check what they are given, and the table
holds the ratio of their median seconds to pimdsl's."""
from __future__ import annotations

import json
import stat
import sys

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import dram_speed                                                                   # noqa: E402

# DRAMsim3's stock runner: `dramsim3main.out CONFIG.ini -c CYCLES -t TRACE -o DIR`; it checks the
# configuration the benchmark derived and records its arguments
FAKE_DRAMSIM3 = """#!/bin/sh
grep -q '^address_mapping = robabgracoch$' "$1" || exit 7
test "$2" = -c && test "$4" = -t && test -s "$5" && test -d "$7" || exit 8
echo "$3" >> "{log}"
"""
FAKE_RAMULATOR = """#!/bin/sh
test "$1" = ddr4_3200 && grep -q '^LD 0x' "$2" || exit 9
"""


def executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_side_by_side_writes_the_ratio_table(tmp_path):
    (tmp_path / "dramsim3" / "configs").mkdir(parents=True)
    (tmp_path / "dramsim3" / "configs" / "DDR4_8Gb_x8_3200.ini").write_text(
        "[system]\naddress_mapping = rochrababgco\nqueue_structure = PER_BANK\n")
    log = tmp_path / "cycles.log"
    ds3 = executable(tmp_path / "dramsim3" / "dramsim3main.out", FAKE_DRAMSIM3.format(log=log))
    ram = executable(tmp_path / "ramulator_runner", FAKE_RAMULATOR)
    out = tmp_path / "side.json"
    assert dram_speed.main(["--side-by-side", "--dramsim3", str(ds3), "--ramulator2", str(ram), "--sizes", "300",
                            "--runs", "2", "--only", "ddr4 random", "--traces", str(tmp_path / "traces"),
                            "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["requests"] == 300 and set(row["wall_s"]) == {"pimdsl", "DRAMsim3", "Ramulator2"}
    assert all(len(v) == 2 for v in row["wall_s"].values())
    # DRAMsim3's stock runner ran for the cycles pimdsl reported, twice
    assert log.read_text().split() == [str(row["cycles"])] * 2 and row["cycles"] > 300
    median = row["wall_s_median"]
    assert row["ratio_wall_s"]["DRAMsim3"] == round(median["DRAMsim3"] / median["pimdsl"], 2)
    table = out.with_suffix(".md").read_text()
    assert "| 300 requests: / DRAMsim3 | 300 requests: / Ramulator2 |" in table
    assert f"| ddr4 random | {row['ratio_wall_s']['DRAMsim3']:.2f} (" in table
    assert result["machine"]["cpus"] >= 1 and "cpu" in result["machine"]
