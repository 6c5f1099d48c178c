"""The field reference of LANGUAGE.md, read off the elaborator itself.

The builders ask a `Reader` for every field they understand (its docstring: the names asked *are*
the block's schema), so the reference is what they ask while elaborating a set of spec files: for
each block kind (nested kinds as `memory > region`) each field, the kind of value it takes, and its
default. A field read only by a construct no given file uses is missing; the bundled specs and the
test fixtures use every construct. `python -m pimdsl.frontend.field_reference` prints the Markdown
that LANGUAGE.md's "Field reference" holds (a test keeps the two in sync); `--update` rewrites it there.
"""
from __future__ import annotations

import functools
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from ..ir import units as U
from . import reader as R
from .pipeline import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _value(method: str, args: tuple) -> str:
    """What a getter call takes, in words, from its arguments."""
    if method == "quantity":
        dims, what = args[0], (args[2] if len(args) > 2 else None)
        allowed = dims if isinstance(dims, list) else [dims]
        return what or " or ".join(U.dimension_name(d) for d in allowed)
    if method == "choice":
        return "one of " + " ".join(f"`{c}`" for c in args[0])
    if method == "symbols":
        return "list of names" + (" from " + " ".join(f"`{c}`" for c in args[0]) if args and args[0] else "")
    if method in ("ref", "refs"):
        kinds = "/".join(args[0])
        return f"name of a {kinds}" if method == "ref" else f"list of {kinds} names"
    return {"integer": "a whole number", "number": "a plain number", "bits": "a width in bits",
            "bytes": "a size", "flag": "`true` or `false`", "string": "a string in quotes"}[method]


def _default(method: str, args: tuple, kwargs: dict) -> str:
    position = {"quantity": 1, "choice": 1, "symbols": 1, "ref": 1, "refs": 1}.get(method, 0)
    default = kwargs.get("default", args[position] if len(args) > position else R.MISSING)
    if default is R.MISSING:
        return "required"
    if default is None or default in ((), [], ""):
        return "none"
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, (tuple, list)):
        return "[" + ", ".join(map(str, default)) + "]"
    return str(default)


def _one(noted: set, index: int) -> str:
    """A field's value or default as one text; where it depends on the spec (the choices of a name
    are the processors a mapping's system has, a strategy the names its loop knows), says so."""
    texts = {n[index] for n in noted}
    if len(texts) == 1:
        return texts.pop()
    if index == 1 and len(texts) == 2 and "from `hf_config`" in texts:
        return (texts - {"from `hf_config`"}).pop() + ", or from `hf_config`"
    return "a name (which names: see the block's section)" if index == 0 else "worked out from the block"


GETTERS = ("quantity", "integer", "number", "bits", "bytes", "flag", "string", "choice", "symbols", "ref", "refs")


@contextmanager
def recording():
    """Within it, every field a Reader is asked for is noted: {block kind: {field: {(value, default)}}};
    a getter called by another getter (an integer is a quantity) is noted once, as the outer one."""
    seen: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    depth = [0]
    originals = {name: getattr(R.Reader, name) for name in GETTERS}

    def wrap(name, method):
        @functools.wraps(method)
        def noted(self, field, *args, **kwargs):
            if depth[0] == 0:
                kinds, node = [], self.node
                while node is not None:
                    kinds.append(node.kind)
                    node = node.parent
                default = _default(name, args, kwargs)
                if "hf_config" in self.node.fields and field != "hf_config" and default != "required":
                    default = "from `hf_config`"        # a model's defaults are its HuggingFace config's
                seen[" > ".join(reversed(kinds))][field].add((_value(name, args), default))
            depth[0] += 1
            try:
                return method(self, field, *args, **kwargs)
            finally:
                depth[0] -= 1
        return noted

    for name, method in originals.items():
        setattr(R.Reader, name, wrap(name, method))
    try:
        yield seen
    finally:
        for name, method in originals.items():
            setattr(R.Reader, name, method)


def spec_files() -> list[Path]:
    return sorted((ROOT / "specs").rglob("*.pim")) + sorted((ROOT / "tests" / "pim").rglob("*.pim"))


def reference(files=None) -> str:
    """The Markdown of the field reference: one table per block kind, fields in sorted order."""
    with recording() as seen:
        for path in files or spec_files():
            load_spec(path)
    out = []
    for kind in sorted(seen):
        out += [f"**`{kind}`**", "", "| field | value | default |", "|---|---|---|"]
        out += [f"| `{f}` | {_one(seen[kind][f], 0)} | {_one(seen[kind][f], 1)} |" for f in sorted(seen[kind])]
        out.append("")
    return "\n".join(out)


BEGIN, END = "<!-- field reference: generated, do not edit by hand -->\n", "<!-- end of field reference -->"


def kept(text: str) -> str:
    """The reference as a Markdown text holds it, between its two markers."""
    start = text.index(BEGIN) + len(BEGIN)
    return text[start:text.index(END, start)]


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--update"]:
        doc = ROOT / "LANGUAGE.md"
        text = doc.read_text()
        doc.write_text(text.replace(BEGIN + kept(text) + END, BEGIN + reference() + END))
    else:
        print(reference(), end="")
