"""Shared test helpers: write a spec snippet to a file and elaborate it."""
from __future__ import annotations

import gc
import io
import os
import signal
import subprocess
from functools import cache
import tempfile
import textwrap
from contextlib import chdir, contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

# One BLAS thread in every process of the test run (the workers, one per core, and the `pimc`
# subprocesses they start, which inherit this): OpenBLAS's own threads only contend with the other
# worker, spin between the tests' small products, and starting them is a third of a `pimc`
# process's start-up CPU. Set before numpy loads OpenBLAS, which reads it once.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from pimdsl.frontend.pipeline import load_spec  # noqa: E402
from pimdsl.interpreter.dram import state as dram_state  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# PIM op timings kept across runs (interpreter/timing_cache.py) go to a folder of this test run,
# never the user's: every run starts cold, and its processes share what they time.
os.environ.setdefault("PIMDSL_TIMING_CACHE", tempfile.mkdtemp(prefix="pimdsl-timing-"))

# The test run's processes (xdist workers, the `pimc` subprocesses of CLI tests) keep the bytecode
# they compile, even where the environment turns that off (PYTHONDONTWRITEBYTECODE): otherwise each
# of them compiles every module of pimdsl again (a tenth of the run's CPU on such a machine).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


# The cyclic collector runs every 700 new container objects by default: in the test processes, which
# build thousands of IR nodes, commands and report dicts per test and hold few cycles, that was a
# tenth to a fifth of the CPU (bundled compiles, explain, the L3 loop). Collect every 100,000 instead
# (tens of MB more at most); the product's own gc calls (pipelined_executor.run) still collect in full.
gc.set_threshold(100_000, 50, 1000)


def pytest_collection_finish(session):
    """What collection left alive (every test module, its module-level specs and tables, the items)
    lives until the process ends: moved out of the cyclic collector's sight, so that every full
    collection (pipelined_executor.run takes one before each measured run) does not walk it again."""
    gc.freeze()


def bundled_spec(path) -> object:
    """A spec file elaborated once per test process, for module-level tables that only read it (the
    IR is frozen): several test files tabulate the same bundled hardware specs while collecting."""
    return _elaborated(str(path))


@cache
def _elaborated(path: str):
    spec, diags = load_spec(path)
    assert spec is not None, diags.render_all()
    return spec


class Hang(BaseException):
    """Not an Exception: pimc's internal-error handler must not swallow it."""


@contextmanager
def deadline(seconds: int = 20):
    """Raises Hang in this process after `seconds` (the default is generous on a loaded machine for a
    bad-input case, each well under 2 s alone): a hang fails the test instead of stalling the run."""
    def expired(*_):
        raise Hang(f"pimc did not finish within {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pimc(*args, cwd=None, seconds: int = 120) -> subprocess.CompletedProcess:
    """`pimc args` through its entry point in this process, as a subprocess would report it: the exit
    code (usage errors exit through SystemExit), stdout and stderr. A subprocess would cost about
    0.3 s of CPU in start-up and imports each; the few tests of what only a process shows (the
    installed console script, a whole process's output, signals, imports) start one themselves."""
    from pimdsl.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with chdir(cwd or os.getcwd()), redirect_stdout(out), redirect_stderr(err), deadline(seconds):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["pimc", *map(str, args)], code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def dram_traces(tmp_path_factory):
    """One folder of regenerated DRAM reference traces for the whole run, shared by the xdist workers
    (their temporary folders sit side by side in the run's): a trace two test files replay is generated
    once (validation/dram_reference.ensure_traces writes each whole, checked by sha256)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = shared / "dram-traces"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def spec_file(tmp_path, monkeypatch):
    """Returns a function that writes `spec.pim` (dedented) and returns its path."""
    monkeypatch.chdir(tmp_path)

    def write(text: str, name: str = "spec.pim") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"))
        return path
    return write


@pytest.fixture
def elaborate(spec_file):
    """Elaborates a snippet; returns (spec, diagnostics)."""
    def run(text: str, overrides=()):
        path = spec_file(text)
        return load_spec(path.name, list(overrides))
    return run


@pytest.fixture
def errors(elaborate):
    """The rendered error diagnostics of a snippet, in source order."""
    def run(text: str, overrides=()):
        spec, diags = elaborate(text, overrides)
        return [diags.render(d) for d in sorted(diags.errors, key=lambda d: (d.span.line, d.span.col))]
    return run


@contextmanager
def issued_commands(monkeypatch):
    """Every (cycle, command index, node, tables) the DRAM engine records while inside, in order."""
    log = []
    original = dram_state.DeviceState.issue

    def logged(self, cmd, k, t):
        log.append((t, cmd, k, self.tables))
        return original(self, cmd, k, t)

    with monkeypatch.context() as patch:
        patch.setattr(dram_state.DeviceState, "issue", logged)
        patch.setenv("PIMDSL_DRAM_ENGINE", "python")      # replays through DeviceState, not the compiled core
        patch.setenv("PIMDSL_TIMING_CACHE", "0")          # every PIM op timed here, none read back
        yield log


def flatten(report, prefix=""):
    """(dotted key, value) of every leaf of a nested report."""
    for key, value in report.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
