"""`pimc sweep`: one CSV row per grid point in grid order, each equal to `pimc run --json` at that point;
ranges and units in grid values; failed points as rows; plots; usage errors; nothing half-written."""
from __future__ import annotations

import csv
import json

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT, flatten

GEMV = str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim")
PHONE = str(ROOT / "specs" / "systems" / "pim_sherpa_llama3_2_1b.pim")
ONE_LAYER = ["--set", "llama3_2_1b.layers=1", "--set", "llama3_2_1b.vocab=1024", "--set", "workload.output_len=1"]


def sweep(capsys, *argv):
    status = main(["sweep", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_rows_follow_the_grid_and_equal_pimc_run(tmp_path, capsys):
    out = tmp_path / "gemv.csv"
    status, stdout, err = sweep(capsys, GEMV, "--set", "gemv.out=2048", "--grid", "gemv.in=64,512",
                                "--grid", "AQUABOLT_XL.clock=1000 MHz,500 MHz", "-o", str(out), "-j", "2")
    assert status == 0, err
    assert "wrote" in stdout and "4 point(s), 4 ok, 0 failed" in stdout
    header, rows = read_csv(out)
    assert header[:4] == ["gemv.in", "AQUABOLT_XL.clock", "ok", "error"]
    assert [(r["gemv.in"], r["AQUABOLT_XL.clock"]) for r in rows] == [
        ("64", "1000 MHz"), ("64", "500 MHz"), ("512", "1000 MHz"), ("512", "500 MHz")]
    metrics = set()
    for row in rows:
        assert row["ok"] == "true" and row["error"] == ""
        assert main(["run", GEMV, "--set", "gemv.out=2048", "--set", f"gemv.in={row['gemv.in']}",
                     "--set", f"AQUABOLT_XL.clock={row['AQUABOLT_XL.clock']}", "--json"]) == 0
        report = dict(flatten(json.loads(capsys.readouterr().out)))
        metrics |= report.keys()
        for key, value in report.items():
            if isinstance(value, bool):
                assert row[key] == json.dumps(value), key     # true / false, as JSON writes them
            elif isinstance(value, (int, float)):
                assert float(row[key]) == value, key          # exact: floats are written in full
            else:
                assert row[key] == str(value), key
    assert set(header[4:]) == metrics
    # half the clock, twice the time: the grid values went through the unit-aware overrides
    assert float(rows[1]["op_s"]) == pytest.approx(2 * float(rows[0]["op_s"]))


def test_range_shorthand_includes_stop_and_one_worker_runs_in_process(tmp_path, capsys):
    out = tmp_path / "r.csv"
    status, _, err = sweep(capsys, GEMV, "--grid", "gemv.in=64:256:64,1024", "-o", str(out), "-j", "1")
    assert status == 0, err
    _, rows = read_csv(out)
    assert [r["gemv.in"] for r in rows] == ["64", "128", "192", "256", "1024"]
    # the whole rows the declared HBM-PIM layout takes (specs/pim/hbm_pim.pim): 2 rows per pair of
    # 128-input tiles plus the drain row, each row index 64 pCH x 16 banks x 1 KiB = 1 MiB
    assert [int(r["memory_bytes.weights"]) for r in rows] == [n * 2**20 for n in (3, 3, 3, 3, 9)]


def test_failed_points_are_rows_and_exit_1(tmp_path, capsys):
    """A shape of 0 fails to load; 10^7 outputs load but their layout leaves the memory's rows (a compile error)."""
    out = tmp_path / "f.csv"
    status, stdout, err = sweep(capsys, GEMV, "--grid", "gemv.out=1024,0,10000000,4096", "-o", str(out))
    assert status == 1
    header, rows = read_csv(out)
    assert [r["gemv.out"] for r in rows] == ["1024", "0", "10000000", "4096"]
    assert [r["ok"] for r in rows] == ["true", "false", "false", "true"]
    assert "error: a shape holds positive whole numbers" in rows[1]["error"]
    assert "the layout does not cover" in rows[2]["error"] and "outside 0..16383" in rows[2]["error"]
    assert "\n" not in rows[1]["error"]
    assert rows[1]["op_s"] == "" and float(rows[0]["op_s"]) > 0
    # 1024 and 4096 outputs are both one 64-output tile per pCH: the same padded rows
    assert int(rows[3]["memory_bytes.weights"]) == int(rows[0]["memory_bytes.weights"]) == 33 * 2**20
    assert "2 of 4 point(s) failed" in err
    assert "gemv.out=0: " in err and "gemv.out=10000000: " in err
    assert "pimc run" in err                      # how to see one failure in full
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"]


def test_plot_is_a_png_with_series_and_log_y(tmp_path, capsys):
    out, png = tmp_path / "p.csv", tmp_path / "p.png"
    status, stdout, err = sweep(capsys, PHONE, *ONE_LAYER, "--grid", "workload.input_len=4:8:4",
                                "--grid", "mapping.strategy=c_gemm,owr", "-o", str(out), "--plot", str(png),
                                "--x", "workload.input_len", "--y", "ttft_s,tpot_s", "--series", "mapping.strategy",
                                "--logy")
    assert status == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in stdout
    _, rows = read_csv(out)
    assert [(r["workload.input_len"], r["mapping.strategy"], r["strategy"]) for r in rows] == [
        ("4", "c_gemm", "c_gemm"), ("4", "owr", "owr"), ("8", "c_gemm", "c_gemm"), ("8", "owr", "owr")]
    assert "utilization.pim:s24_lpddr5x" in rows[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv", "p.png"]


def test_unknown_plot_column_exits_1_naming_the_columns_and_keeps_the_csv(tmp_path, capsys):
    out, png = tmp_path / "c.csv", tmp_path / "c.png"
    status, _, err = sweep(capsys, GEMV, "--grid", "gemv.in=64,128", "-o", str(out), "--plot", str(png),
                           "--x", "gemv.inn", "--y", "pim_cycles")
    assert status == 1
    assert "--x gemv.inn: no such column" in err
    assert "did you mean 'gemv.in'?" in err and "pim_cycles" in err
    assert out.exists() and not png.exists()
    assert len(read_csv(out)[1]) == 2


def test_an_invalid_base_spec_writes_nothing(tmp_path, capsys):
    out = tmp_path / "never.csv"
    status, _, err = sweep(capsys, GEMV, "--set", "gemv.in=0", "--grid", "gemv.out=64,128", "-o", str(out),
                           "--plot", str(tmp_path / "never.png"), "--x", "gemv.out", "--y", "pim_cycles")
    assert status == 1
    assert "error: a shape holds positive whole numbers" in err and "^" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: --grid"),
    (["--grid", "gemv.in"], "is not PATH=V1,V2,..."),
    (["--grid", "gemv.in=64,,128"], "has an empty value"),
    (["--grid", "gemv.in=256:64:64"], "range '256:64:64' of gemv.in is empty"),
    (["--grid", "gemv.in=64", "--grid", "gemv.in=128"], "--grid gemv.in is given twice"),
    (["--grid", "gemv.in=64", "--set", "gemv.in=128"], "gemv.in is both --set and --grid"),
    (["--grid", "gemv.in=64", "--x", "gemv.in"], "--x needs --plot"),
    (["--grid", "gemv.in=64", "--plot", "a.png", "--x", "gemv.in"], "--plot needs --x COL and --y"),
    (["--grid", "gemv.in=64", "--plot", "a.nope", "--x", "gemv.in", "--y", "op_s"], "cannot write 'nope' images"),
    (["--grid", "gemv.in=64", "-j", "0"], "-j needs at least 1 worker"),
])
def test_usage_errors_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", GEMV, "-o", "s.csv", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_bug_at_one_point_is_a_failed_row_not_a_lost_sweep(tmp_path, capsys, monkeypatch):
    calls = []

    def flaky(system, fast, **_):
        calls.append(fast)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return type("Result", (), {"report": {"ttft_s": 1.0, "shape": [1, 2], "exact": not fast}})()
    monkeypatch.setattr("pimdsl.driver.run_system", flaky)
    monkeypatch.delenv("PIMDSL_DEBUG", raising=False)
    out = tmp_path / "b.csv"
    status, _, err = sweep(capsys, GEMV, "--grid", "gemv.in=64,128,192", "-o", str(out), "-j", "1", "--exact")
    assert status == 1 and calls == [False, False, False]
    _, rows = read_csv(out)
    assert [r["ok"] for r in rows] == ["true", "false", "true"]
    assert rows[1]["error"] == "pimc: internal error: RuntimeError: boom"
    assert rows[0]["shape"] == "[1, 2]" and rows[0]["exact"] == "true"
