"""Every construct of LANGUAGE.md: each ```pim example elaborates, and its IR matches a golden file.

Regenerate the golden files after an intended change with UPDATE_GOLDEN=1.
"""
import json
import os
import re

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


def test_language_md_has_examples():
    assert len(EXAMPLES) >= 10


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
