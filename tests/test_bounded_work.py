"""Bounded work (issue 31): the paths the fuzzing found to hang or exhaust memory are refused up front
with the estimate and how to raise the limit, and a killed sweep takes its workers with it."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT

SHERPA = str(ROOT / "specs/systems/pim_sherpa_llama3_2_1b.pim")
L3 = str(ROOT / "specs/systems/l3_gpt3_175b.pim")


@pytest.mark.parametrize("argv, message", [
    (["run", SHERPA, "--set", "workload.output_len=2", "--set", "workload.batch=1000000"],
     "1.00e+06 request(s)) and about 257 MB of memory, past the limit of 1.00e+08"),
    (["run", SHERPA, "--set", "workload.output_len=2", "--set", "model.layers=1000000"],
     "of memory this process may use"),
    (["run", L3, "--set", "workload.requests=1e6"], "1000000 request(s) of about"),
    (["run", SHERPA, "--set", "workload.output_len=2", "--set", "S24_LPDDR5X.timing.tWTR_L=1e15 ns"],
     "'tWTR_L' is longer than 64 ms, the DRAM refresh window"),
    (["compile", SHERPA, "--set", "workload.output_len=4", "--max-requests", "1000000000000", "-o", "OUT"],
     "the request traces would hold about 1.14e+08 lines"),
])
def test_runs_past_the_limit_are_refused_quickly(capsys, tmp_path, argv, message):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    start = time.monotonic()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "hint: " in err, err
    assert time.monotonic() - start < 60 and not (tmp_path / "out").exists()


def test_a_killed_sweeps_workers_die_with_it(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys, time
        from pimdsl.cli.executors import open_executor
        with open_executor(2) as pool:
            futures = [pool.submit(time.sleep, 600) for _ in range(2)]
            time.sleep(1)
            print(*[p.pid for p in pool._processes.values()], flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
    finally:
        parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
