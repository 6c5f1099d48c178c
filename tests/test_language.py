"""Every construct of LANGUAGE.md: each ```pim example elaborates, and its IR matches a golden file.

Regenerate the golden files after an intended change with UPDATE_GOLDEN=1.
"""
import json
import os
import re
import shutil

import pytest

from pimdsl.cli.show import spec_to_json
from pimdsl.frontend.pipeline import load_spec

from .conftest import ROOT

EXAMPLES = re.findall(r"```pim\n(.*?)```", (ROOT / "LANGUAGE.md").read_text(), re.S)
GOLDEN = ROOT / "tests" / "golden" / "language"


def _strip_sources(value):
    if isinstance(value, dict):
        return {k: _strip_sources(v) for k, v in value.items() if k not in ("source", "root")}
    if isinstance(value, list):
        return [_strip_sources(v) for v in value]
    return value


COMPLETE = "// example: complete\n"


def test_language_md_has_examples():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_complete_examples_pass_check_strict_and_fragments_parse(index, spec_file, capsys):
    """LANGUAGE.md's convention: a ```pim block whose first line is `// example: complete` is a whole
    file that passes `pimc check --strict`; any other is a fragment that must at least parse."""
    from pimdsl.cli.main import main
    from pimdsl.frontend.diagnostics import Diagnostics
    from pimdsl.frontend.syntax import parse_source
    text = EXAMPLES[index]
    if not text.startswith(COMPLETE):
        diags = Diagnostics()
        parse_source(text, "fragment.pim", diags)
        assert not diags.errors, diags.render_all()
        return
    path = spec_file(text)
    status = main(["check", "--strict", str(path)])
    assert status == 0, capsys.readouterr().err


def test_the_expressions_example_runs_and_without_a_bandwidth_fails_at_its_cpu(spec_file, capsys):
    """`pimc run` on the Expressions example works; without the cpu's memory_bandwidth it stops with a
    located diagnostic at the cpu's declaration, not an unlocated message."""
    from pimdsl.cli.main import main
    (text,) = [e for e in EXAMPLES if "demo_system" in e and "let tokens" in e]
    path = spec_file(text)
    assert main(["run", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "demo_system"
    path.write_text(text.replace(" memory_bandwidth = 25.6 GB/s;", ""))
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t.startswith("cpu demo_host"))
    assert f"spec.pim:{line}:1: error: cpu 'demo_host' has no memory_bandwidth" in err
    assert "cpu demo_host {" in err and "^" in err and "hint: give the cpu its memory bandwidth" in err


def test_the_field_reference_is_the_elaborators(capsys):
    """LANGUAGE.md's field reference is what the builders ask a Reader for over the bundled specs and
    fixtures (regenerate with `python -m pimdsl.frontend.field_reference --update`)."""
    from pimdsl.frontend.field_reference import kept, reference
    generated = reference()
    assert kept((ROOT / "LANGUAGE.md").read_text()) == generated, \
        "run python -m pimdsl.frontend.field_reference --update"
    for kind, field in [("memory > region", "cacheable"), ("workload", "batch"), ("cpu", "memory_bandwidth"),
                        ("memory > controller", "page_policy"), ("dram > organization", "bus_width")]:
        table = generated.split(f"**`{kind}`**")[1].split("**`")[0]
        assert f"| `{field}` |" in table, (kind, field)
    assert "| `memory_bandwidth` | a bandwidth | 0 | DRAM bandwidth of the device, the roofline's memory roof |" in generated
    unexplained = [row for row in generated.splitlines() if row.startswith("| `") and row.endswith("|  |")]
    assert unexplained == [], "give each field a meaning in field_reference.MEANINGS"


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_elaborates_to_golden_ir(index, spec_file):
    path = spec_file(EXAMPLES[index])
    spec, diags = load_spec(path.name)
    assert not diags.errors, diags.render_all()
    assert not diags.warnings, diags.render_all()
    ir = _strip_sources(spec_to_json(spec))
    golden = GOLDEN / f"example_{index:02d}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(json.dumps(ir, indent=1, sort_keys=True) + "\n")
    assert golden.exists(), f"no golden file {golden.name}; run with UPDATE_GOLDEN=1"
    assert ir == json.loads(golden.read_text())


def test_a_parsed_source_is_reused_and_an_edit_or_an_error_parses_again():
    """frontend/syntax.py keeps parsed sources by (rule, path, text): a second load of the same text
    gets the same frozen statements, an edited text its own, and a bad text its diagnostic every time."""
    from pimdsl.frontend.diagnostics import Diagnostics, SpecError
    from pimdsl.frontend.syntax import parse_source
    text = "workload w { batch = 1; input_len = 5; }\n"
    first, d = parse_source(text, "kept.pim", Diagnostics()), Diagnostics()
    again = parse_source(text, "kept.pim", d)
    assert again == first and all(a is b for a, b in zip(again, first)) and d.sources["kept.pim"] == text
    edited = parse_source(text.replace("= 5", "= 6"), "kept.pim", Diagnostics())
    assert edited != first and edited[0].body[1].expr.text == "6"
    elsewhere = parse_source(text, "other.pim", Diagnostics())
    assert elsewhere[0].span.path == "other.pim" and first[0].span.path == "kept.pim"
    for _ in range(2):
        d = Diagnostics()
        with pytest.raises(SpecError):
            parse_source("workload w { batch = ; }\n", "bad.pim", d)
        assert len(d.errors) == 1 and "bad.pim:1:" in d.render(d.errors[0])


def test_parsed_trees_are_kept_on_disk_by_content(tmp_path, monkeypatch):
    """frontend/syntax.py keeps each parsed tree under $PIMDSL_CACHE/parsed: a later process unpickles
    the same tree without parsing; another text or path is parsed; a damaged entry is parsed again."""
    from pimdsl.frontend import syntax
    from pimdsl.frontend.diagnostics import Diagnostics
    monkeypatch.setenv("PIMDSL_CACHE", str(tmp_path))
    text = "dram D { timing { tRCD = 22 cycles; tRC = tRCD + 4; } }\n"
    syntax._PARSED.clear()
    first = syntax.parse_source(text, "a.pim", Diagnostics())
    (entry,) = (tmp_path / "parsed").iterdir()
    parse = syntax._parse
    monkeypatch.setattr(syntax, "_parse", lambda *a: (_ for _ in ()).throw(AssertionError("parsed again")))
    syntax._PARSED.clear()
    assert syntax.parse_source(text, "a.pim", Diagnostics()) == first
    monkeypatch.setattr(syntax, "_parse", parse)
    syntax._PARSED.clear()
    other = syntax.parse_source(text, "b.pim", Diagnostics())
    assert other != first and len(list((tmp_path / "parsed").iterdir())) == 2      # spans name their file
    entry.write_bytes(b"damaged")
    syntax._PARSED.clear()
    assert syntax.parse_source(text, "a.pim", Diagnostics()) == first
    syntax._PARSED.clear()


def test_the_built_parser_is_kept_in_the_cache_and_a_damaged_one_rebuilt(tmp_path, monkeypatch):
    """frontend/syntax.py keeps the LALR parser it builds under $PIMDSL_CACHE/lark: a later process
    loads it and parses the same trees and errors; a damaged file is built again, never an error."""
    from pimdsl.frontend import syntax
    from pimdsl.frontend.diagnostics import Diagnostics, SpecError
    monkeypatch.setenv("PIMDSL_CACHE", str(tmp_path))
    text = "dram D { timing { tRCD = 22 cycles; tRC = tRCD + 4; } }\n"

    def fresh(source, path):
        syntax._parser.cache_clear()
        syntax._PARSED.clear()
        shutil.rmtree(tmp_path / "parsed", ignore_errors=True)     # the kept trees: parse with the parser
        diags = Diagnostics()
        try:
            return syntax.parse_source(source, path, diags)
        except SpecError:
            return [diags.render(d) for d in diags.errors]
    try:
        built = [fresh(text, "a.pim"), fresh("dram D { tRCD = ; }\n", "b.pim")]
        kept = sorted((tmp_path / "lark").glob("start-*.sealed"))
        assert len(kept) == 1 and kept[0].stat().st_size > 1000
        assert [fresh(text, "a.pim"), fresh("dram D { tRCD = ; }\n", "b.pim")] == built
        kept[0].write_bytes(b"damaged")
        assert fresh(text, "a.pim") == built[0] and kept[0].stat().st_size > 1000     # rebuilt, saved again
    finally:
        syntax._parser.cache_clear()
