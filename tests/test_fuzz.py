"""Property test: mutated specs never give a traceback, only diagnostics (exit 0 or 1)."""
import re
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.cli.main import main
from pimdsl.frontend.pipeline import load_spec

from .conftest import ROOT

TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9._]*|->|\S')
REPLACEMENTS = ["{", "}", ";", "=", ":", "[", "]", "(", ")", ",", "->", "1e999", "0", "-1", "ns", "GB/s",
                "rule", "window", "other", "import", "let", "x", '"', '"../x.pim"', "dram", "tRCD", "@", "^"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A copy of the bundled specs (so relative imports still resolve) plus LANGUAGE.md's examples."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(ROOT / "specs", root / "specs")
    files = sorted((root / "specs").rglob("*.pim"))
    for i, example in enumerate(re.findall(r"```pim\n(.*?)```", (ROOT / "LANGUAGE.md").read_text(), re.S)):
        path = root / "specs" / f"language_example_{i}.pim"
        path.write_text(example)
        files.append(path)
    return files


def mutate(text: str, data) -> str:
    lines = text.splitlines(keepends=True) or [""]
    kind = data.draw(st.sampled_from(["delete", "duplicate", "swap", "token", "truncate", "insert"]))
    i = data.draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        j = data.draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "truncate":
        return text[:data.draw(st.integers(0, len(text)))]
    else:
        tokens = list(TOKEN.finditer(lines[i]))
        replacement = data.draw(st.sampled_from(REPLACEMENTS))
        if tokens and kind == "token":
            m = data.draw(st.sampled_from(tokens))
            lines[i] = lines[i][:m.start()] + replacement + lines[i][m.end():]
        else:
            lines.insert(i, replacement + "\n")
    return "".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_specs_give_diagnostics_not_tracebacks(corpus, data, capsys):
    original = data.draw(st.sampled_from(corpus))
    text = original.read_text()
    mutated = mutate(text, data)
    target = original.with_name("mutant_" + original.name)
    target.write_text(mutated)
    try:
        load_spec(target)                      # any exception here is a bug: it fails the test
        code = main(["check", str(target)])
    finally:
        target.unlink()
    err = capsys.readouterr().err
    assert code in (0, 1), err
    assert "internal error" not in err
