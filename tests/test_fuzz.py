"""The seeded mutation fuzzer (pimdsl/fuzz.py) in the default suite: a few hundred mutated specs,
traces and `--set` overrides must each end in a located diagnostic or a result, within seconds.
A longer run: `python -m pimdsl.fuzz --cases 5000 [--seed N]`."""
import time

import pytest

from pimdsl import fuzz

CASES = 250                    # about 40 s on a loaded two-core machine


@pytest.mark.slow                  # about 15 s: CI's slow step
def test_fuzzed_inputs_give_located_diagnostics_not_tracebacks():
    failures = fuzz.fuzz(CASES, seed=20, timeout=15)
    assert not failures, "\n".join(map(str, failures))


def test_the_same_seed_gives_the_same_cases(monkeypatch):
    seen = []
    monkeypatch.setattr(fuzz, "judge", lambda argv, timeout, must_say=False: seen.append(argv[0]) or None)
    fuzz.fuzz(30, seed=3)
    first, seen[:] = list(seen), []
    fuzz.fuzz(30, seed=3)
    assert seen == first and {"check", "dram"} <= set(first)


def _raises(argv):
    raise ValueError("boom")


def _internal(argv):
    print("pimc: internal error: ZeroDivisionError", file=__import__("sys").stderr)
    return 3


def _unlocated(argv):
    print("spec.pim: error: something is wrong somewhere", file=__import__("sys").stderr)
    return 1


def _located(argv):
    print("spec.pim:3:7: error: 'batch' must be at least 1, not 0", file=__import__("sys").stderr)
    return 1


@pytest.mark.parametrize("fake, why", [(_raises, "traceback: ValueError: boom"), (_internal, "internal error (exit 3)"),
                                       (_unlocated, "diagnostic without a location"),
                                       (_located, None)])
def test_the_judge_catches_each_kind_of_failure(monkeypatch, fake, why):
    monkeypatch.setattr(fuzz, "pimc", fake)
    failure = fuzz.judge(["check", "spec.pim"], timeout=0.3)
    assert (failure.why if failure else None) == why


def test_the_judge_catches_a_hang_inside_pimc(monkeypatch):
    """The alarm must get through pimc's own `except Exception` (which turns bugs into exit 3)."""
    import pimdsl.cli.main as cli
    monkeypatch.setitem(cli.COMMANDS, "check", lambda args: time.sleep(5) or 0)
    failure = fuzz.judge(["check", "spec.pim"], timeout=0.3)
    assert failure is not None and failure.why == "hang (more than 0.3 s)"
