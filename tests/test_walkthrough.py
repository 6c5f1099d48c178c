"""LANGUAGE.md's walkthrough "Adding a PIM architecture": every `$ pimc ...` it shows is run and its
output compared with the text (a line as shown, or, where the text elides JSON with `...`, every
`"key": number` it shows found under that key at the shown precision); the two error outputs it
shows come from the edits it names.
"""
from __future__ import annotations

import json
import re
import shlex

import pytest

from pimdsl.cli.main import main

from .conftest import ROOT

TEXT = (ROOT / "LANGUAGE.md").read_text()
SECTION = TEXT[TEXT.index("## Adding a PIM architecture"):]
SECTION = SECTION[:SECTION.index("\n## ", 1)] if "\n## " in SECTION[1:] else SECTION
EXAMPLES = {  # the walkthrough's complete examples, by the file name its commands give them
    "aim_card.pim": next(e for e in re.findall(r"```pim\n(.*?)```", SECTION, re.S) if "demo_aim_card" in e),
    "aim_gemv.pim": next(e for e in re.findall(r"```pim\n(.*?)```", SECTION, re.S) if "demo_aim_gemv_system" in e),
}


def _commands():
    """(command, the output lines shown under it) of every console block of the walkthrough."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", SECTION, re.S):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *shown = chunk.rstrip("\n").split("\n")
            out.append((command, shown))
    return out


COMMANDS = _commands()


def _found(value, key: str, shown: str) -> bool:
    """Whether `value` (a parsed JSON document) holds `key` at the number `shown` (to its last digit)."""
    text = shown.rstrip(".")
    mantissa = text.lower().split("e")[0]
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    unit = 10.0 ** (-digits + (int(text.lower().split("e")[1]) if "e" in text.lower() else 0))
    if isinstance(value, dict):
        return any((k == key and isinstance(v, (int, float)) and abs(v - float(text)) <= unit)
                   or _found(v, key, shown) for k, v in value.items())
    if isinstance(value, list):
        return any(_found(v, key, shown) for v in value)
    return False


def _block_after(marker: str) -> list[str]:
    """The lines of the first console block after `marker` in the walkthrough."""
    block = SECTION[SECTION.index(marker):]
    block = block[block.index("```console\n") + len("```console\n"):]
    return block[:block.index("```")].rstrip("\n").split("\n")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder with the bundled specs and the walkthrough's example files, as a reader's checkout."""
    (tmp_path / "specs").symlink_to(ROOT / "specs")
    for name, text in EXAMPLES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_walkthrough_shows_its_commands():
    assert [c.split()[:2] for c, _ in COMMANDS] == [["pimc", "check"]] * 3 + [["pimc", "run"], ["pimc", "check"],
                                                                            ["pimc", "run"], ["pimc", "compile"]]


@pytest.mark.parametrize("command,shown", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_every_command_prints_what_the_walkthrough_shows(workdir, capsys, command, shown):
    assert main(shlex.split(command)[1:]) == 0
    out = capsys.readouterr().out
    text = "\n".join(shown)
    if text.startswith("{"):                      # elided JSON: every shown number under its key
        document = json.loads(out)
        pairs = re.findall(r'"([^"]+)": (-?[0-9][0-9.e+-]*(?:\.\.\.)?)', text)
        assert pairs
        missing = [(k, v) for k, v in pairs if not _found(document, k, v)]
        assert missing == [], f"{command}: shown but not printed: {missing}"
        for key, value in re.findall(r'"([^"]+)": "([^"]+)"', text):
            assert f'"{key}": "{value}"' in out
    else:
        lines = out.splitlines()
        assert [line for line in shown if line not in lines] == [], out


def test_the_covers_error_is_what_the_walkthrough_shows(workdir, capsys):
    """Step 3's error: the unit with `covers = [softmax];`."""
    shown = _block_after("anything else is an error that says so")
    unit = (ROOT / "specs" / "pim" / "aim.pim").read_text()
    (workdir / "aim.pim").write_text(unit.replace("covers = [activation];", "covers = [softmax];"))
    assert main(["check", "aim.pim"]) == 1
    assert capsys.readouterr().err.splitlines()[:len(shown)] == shown


def test_the_values_mismatch_is_what_the_walkthrough_shows(workdir, capsys):
    """Step 4's mismatch: `MAC_ABK(..., src = 0, ...)` in the unit the card imports."""
    shown = _block_after("A program that computes something else")
    (workdir / "pim").mkdir()
    (workdir / "dram").symlink_to(ROOT / "specs" / "dram")
    unit = (ROOT / "specs" / "pim" / "aim.pim").read_text()
    (workdir / "pim" / "aim.pim").write_text(unit.replace("src = w, acc = 0); }", "src = 0, acc = 0); }"))
    assert main(["check", "--values", "aim_card.pim"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.replace("pim/aim.pim:", "aim.pim:") for line in err[:len(shown)]] == shown
