"""One error root (issue 15 part 4): every error pimdsl raises for bad input derives from
`PimdslError`, and one that escapes a command late is a located diagnostic with exit 1, never
"internal error"."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import pimdsl
from pimdsl import driver
from pimdsl.cli.main import main
from pimdsl.interpreter.host.models import ModelError
from pimdsl.ir.errors import PimdslError, Span

from .conftest import ROOT

# control flow inside one module, never shown to a user as an error (NothingToDo: exit 0)
INTERNAL = {"Aborted", "_Skip", "_Hang", "NothingToDo", "_Unbatched"}
GEMV = str(ROOT / "specs" / "reference" / "hbm_pim_gemv.pim")


def all_exception_classes():
    for info in pkgutil.walk_packages(pimdsl.__path__, "pimdsl."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException):
                yield cls


def test_every_error_derives_from_one_root():
    classes = list(all_exception_classes())
    assert len(classes) >= 10                     # the walk found the package's errors
    strays = [f"{c.__module__}.{c.__name__}" for c in classes
              if c.__name__ not in INTERNAL and not issubclass(c, PimdslError)]
    assert strays == []


def late(span):
    def fail(*args, **kwargs):                   # a spec problem found only while timing
        raise ModelError("link 'l' has a zero bandwidth", span, "give the link a bandwidth above zero")
    return fail


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_late_spec_error_is_a_located_diagnostic(command, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(driver, "run_loaded", late(Span(GEMV, 101, 3)))      # as run and sweep call it
    if command == "run":
        assert main(["run", GEMV]) == 1
        err = capsys.readouterr().err
    else:
        out = tmp_path / "s.csv"
        assert main(["sweep", GEMV, "--grid", "workload.batch=1", "-o", str(out), "-j", "1"]) in (0, 1)
        err = out.read_text()
    assert f"{GEMV}:101:3: error: link 'l' has a zero bandwidth" in err
    assert "internal error" not in err
    if command == "run":
        source = open(GEMV).read().splitlines()[100]
        assert source.strip() in err and "hint: give the link a bandwidth above zero" in err


def test_an_error_without_a_place_names_the_run(monkeypatch, capsys):
    monkeypatch.setattr(driver, "run_loaded", late(None))
    assert main(["run", GEMV]) == 1
    assert "pimc: error: link 'l' has a zero bandwidth" in capsys.readouterr().err
