"""The repository stands on its own: nothing it ships names a build machine or a folder beside it.

Two checks (issue 20): every tracked file is free of absolute paths of a build machine, of
references to a team folder next to the checkout and of the team's opaque paper file names
(sources are cited by the keys of specs/REFERENCES.md); and a fresh `git clone` with nothing
beside it runs a DRAM validation test against its own validation/reference/, with the current
interpreter and nothing installed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT

# The patterns are assembled from pieces so that this file does not match them itself.
_TEAM = "sha" + "red"
FORBIDDEN = {
    "absolute path of a build machine": re.compile(
        r"(?<![\w.~$%{}-])/(?:" + "|".join(["wo" + "rk", "ro" + "ot", "ho" + "me", "Us" + "ers", "mn" + "t",
                                              "scr" + "atch", "t" + "mp", "workspace"]) + r")/"),
    "folder beside the checkout": re.compile(
        r"\.\./" + _TEAM + r"\b|\b" + _TEAM + r"/(?:reference|seeds|targets|design)\b"
        r"|[\"']" + _TEAM + r"[\"']\s*/\s*[\"'](?:reference|seeds|targets|design)[\"']"),
    "paper file name of the team folder": re.compile(r"\b\d{3}_(?:[0-9a-f]{16}\b|\.\.\.|\*\.txt)"),
}


def _git(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def _tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = _git("ls-files", "-z")
    assert out.returncode == 0, out.stderr
    return [f for f in out.stdout.split("\0") if f]


def offences(text: str) -> list[tuple[str, str]]:
    """(what, matched text) for every forbidden reference in `text`."""
    return [(what, m.group(0)) for what, rx in FORBIDDEN.items() for m in rx.finditer(text)]


@pytest.mark.parametrize("text, what", [
    ("see " + "/wo" + "rk/" + _TEAM + "/reference/dram/README.md", "absolute path of a build machine"),
    ("cfg = '/ho" + "me/alice/pimdsl/specs'", "absolute path of a build machine"),
    ("from `../" + _TEAM + "/reference/pim/`", "folder beside the checkout"),
    ("ROOT.parent / \"" + _TEAM + "\" / \"reference\"", "folder beside the checkout"),
    ("(" + "004_" + "f517316e854733a9" + ".txt, section 5.2)", "paper file name of the team folder"),
    ("(" + "001_" + "...txt, Sec. V-A.3)", "paper file name of the team folder"),
])
def test_the_patterns_catch_what_they_are_for(text, what):
    assert what in {w for w, _ in offences(text)}


@pytest.mark.parametrize("text", [
    "#!/usr/bin/env python3",
    "[NEUPIMS] Sec. 6.3; [REFDATA] dram README Sec. 2; validation/reference/dram/traces",
    "cache LLC { size = 12 MiB; shared = true; }",
    "spec_file(tmp_path / \"a.pim\"); workload shared_wl { batch = 2; }",
    "trace_sha256 3f1c2d9a8b7e6f5a4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918",
])
def test_the_patterns_leave_ordinary_text_alone(text):
    assert offences(text) == []


def test_no_tracked_file_names_a_build_machine_or_the_team_folder():
    found = []
    for name in _tracked_files():
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue                      # binary (plots): no text to cite from
        for line_no, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{line_no}: {what}: {hit!r}" for what, hit in offences(line)]
    assert not found, "cite by the keys of specs/REFERENCES.md instead:\n" + "\n".join(found)


# One reference case with a small stored trace, so that nothing is regenerated.
CLONE_CASE = ("ddr4_3200", "idle_random")
_DRIVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import pytest
    clone = Path(sys.argv[1]).resolve()
    import pimdsl
    from pimdsl.validation import dram_reference as V
    assert Path(pimdsl.__file__).resolve().is_relative_to(clone), pimdsl.__file__
    assert V.reference_dir().resolve().is_relative_to(clone), V.reference_dir()
    case = (sys.argv[2], sys.argv[3])

    class OneCase:
        # the module-scoped fixture replays CASES: only this one
        def pytest_collection_modifyitems(self, items):
            for item in items:
                assert Path(item.module.__file__).resolve().is_relative_to(clone), item.module.__file__
                item.module.CASES = [case]

    test = "tests/test_dram_validation.py::test_no_regression_against_the_references[%s-%s]" % case
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-n", "0", test], plugins=[OneCase()]))   # one test: no workers
""")


def test_a_fresh_clone_runs_a_dram_validation_test_on_its_own(tmp_path):
    _tracked_files()                      # skips outside a git checkout
    head = _git("rev-parse", "HEAD").stdout.strip()
    clone = tmp_path / "pimdsl"           # alone in its folder: nothing beside it
    out = _git("clone", "-q", "--no-checkout", str(ROOT), str(clone), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = _git("checkout", "-q", head, cwd=clone)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pimdsl"]

    env = {k: v for k, v in os.environ.items() if k not in ("PIMDSL_REFERENCE", "PYTHONPATH")}
    env["PYTHONPATH"] = str(clone)
    run = subprocess.run([sys.executable, "-c", _DRIVER, str(clone), *CLONE_CASE], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout, run.stdout[-3000:]


NOT_CITATIONS = {"CLS"}                   # BERT/ViT's [CLS] token, named in a comment


def test_every_key_a_spec_cites_is_in_the_bibliography():
    keys = NOT_CITATIONS | set(re.findall(r"^\| `\[([A-Z][A-Z0-9_-]*)\]`", (ROOT / "specs" / "REFERENCES.md").read_text(), re.M))
    assert {"PIM_SHERPA", "HERMES_NDP", "L3", "PIPELOAD", "NEUPIMS", "REFDATA"} <= keys
    unknown = []
    for spec in sorted((ROOT / "specs").rglob("*.pim")):
        for line_no, line in enumerate(spec.read_text().splitlines(), 1):
            comment = line.partition("//")[2]
            unknown += [f"{spec.relative_to(ROOT)}:{line_no}: [{k}]"
                        for k in re.findall(r"\[([A-Z][A-Z0-9_-]*)\]", comment) if k not in keys]
    assert not unknown, "add these to specs/REFERENCES.md:\n" + "\n".join(unknown)
