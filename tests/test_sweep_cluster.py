"""`pimc sweep` on a Dask cluster: a LocalCluster on loopback gives the same CSV as the local pool;
an unreachable scheduler or a bad cluster file is a diagnostic, not a traceback."""
from __future__ import annotations

import pytest

from pimdsl.cli import executors
from pimdsl.cli.main import main

from .conftest import ROOT

GEMV = str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim")
GRID = ["--set", "gemv.out=1024", "--grid", "gemv.in=64:320:64",
        "--grid", "AQUABOLT_XL.clock=1200 MHz,1000 MHz,800 MHz,500 MHz"]


@pytest.mark.slow                  # a LocalCluster start and twenty points, about 9 s: CI's slow step
def test_twenty_points_on_a_local_cluster_equal_the_local_pool(tmp_path, capsys):
    import distributed           # the cluster extra is part of the test extra (half a second to import: here only)
    local, remote = tmp_path / "local.csv", tmp_path / "remote.csv"
    assert main(["sweep", GEMV, *GRID, "-o", str(local), "-j", "2"]) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None, processes=True) as cluster:
        assert main(["sweep", GEMV, *GRID, "-o", str(remote), "--scheduler", cluster.scheduler_address]) == 0
    out = capsys.readouterr().out
    assert out.count("20 point(s), 20 ok, 0 failed") == 2
    assert remote.read_bytes() == local.read_bytes()


def test_an_unreachable_scheduler_is_a_diagnostic(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT_S", 0.5)      # nothing listens on port 9: refused at once
    status = main(["sweep", GEMV, "--grid", "gemv.in=64", "-o", str(tmp_path / "x.csv"),
                   "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert status == 1
    assert "pimc sweep: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("text, message", [
    ("jobqueue: kubernetes\njobs: 2\n", "'jobqueue' must be one of slurm, pbs"),
    ("jobqueue: slurm\njobs: 0\n", "'jobs' must be a positive integer"),
    ("- a list\n", "expected a mapping"),
    ("jobqueue: slurm\noptions: [1]\n", "'options' must be a mapping of SLURMCluster arguments"),
])
def test_a_bad_cluster_file_is_a_diagnostic(tmp_path, capsys, text, message):
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    status = main(["sweep", GEMV, "--grid", "gemv.in=64", "-o", str(tmp_path / "x.csv"), "--cluster", str(config)])
    assert status == 1
    assert message in capsys.readouterr().err


def test_scheduler_and_cluster_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", GEMV, "--grid", "gemv.in=64", "-o", str(tmp_path / "x.csv"),
              "--scheduler", "tcp://127.0.0.1:9", "--cluster", "c.yaml"])
    assert exit_.value.code == 2
