"""The front end in one call: file -> loaded modules -> scope tree -> IR."""
from __future__ import annotations

from pathlib import Path

from ..ir.workload import Spec
from .data_files import DataTree
from .diagnostics import Diagnostics, SpecError, Span
from .elaborate import Elaborator
from .loader import Loader, library_path
from .nodes import ScopeBuilder, apply_override
from .syntax import Block, Import, parse_source


def parse_override(text: str, diags: Diagnostics):
    """`PATH=VALUE` from the command line -> (path, expression, span)."""
    path, sep, value = text.partition("=")
    shown = f"--set {text}"
    diags.sources[shown] = text
    if not sep or not path.strip() or not value.strip():
        raise diags.error(f"--set takes PATH=VALUE, got '{text}'", Span(shown, 1, 1),
                          "e.g. --set workload.batch=8 or --set memory.lp5x.channels=8")
    expr = parse_source(" " * (len(path) + 1) + value, shown, diags, start="expr")
    diags.sources[shown] = text
    return path.strip(), expr, Span(shown, 1, 1, len(path) + 1)


def load_spec(path: str | Path, overrides: list[str] = (), diags: Diagnostics | None = None,
              allow_outside: bool = False) -> tuple[Spec | None, Diagnostics]:
    """The elaborated spec of `path` (None after errors) and its diagnostics. The data files the spec
    names must lie in its folders (the root's and its imports'), unless `allow_outside`."""
    diags = diags or Diagnostics()
    loader = Loader(diags)
    root = loader.load(Path(path))
    if root is None:
        return None, diags
    builder = ScopeBuilder(loader.top_level_blocks(), diags)
    globals_ = builder.build_all()
    for module in loader.modules.values():
        for stmt in module.statements:
            if not isinstance(stmt, (Block, Import)):
                diags.error("only `import` and blocks may stand at the top level of a file", stmt.span,
                            "put values inside a block: `kind name { field = value; }`")
    root_names = [s.name for s in root.statements if isinstance(s, Block) and s.name]
    roots = [globals_[n] for n in root_names if n in globals_]
    for text in overrides:
        try:
            opath, expr, span = parse_override(text, diags)
            apply_override(globals_, opath, expr, span, diags, roots)
        except SpecError:
            pass
    folders = {m.path.parent for m in loader.modules.values()} | {p.resolve() for p in library_path()}
    tree = DataTree(tuple(sorted(folders)), allow_outside)
    elaborator = Elaborator(globals_, diags, tree)
    spec = elaborator.elaborate(root.shown, root_names)
    return (spec if not diags.errors else None), diags


def spec_nodes(path: str | Path, overrides: list[str] = ()) -> dict:
    """The scope tree of a valid spec (top-level name -> Node, overrides applied): where each field
    is written, for commands that point at spec lines (`pimc explain`)."""
    diags = Diagnostics()
    loader = Loader(diags)
    root = loader.load(Path(path))
    globals_ = ScopeBuilder(loader.top_level_blocks(), diags).build_all() if root is not None else {}
    roots = [globals_[s.name] for s in root.statements if isinstance(s, Block) and s.name in globals_] if root else []
    for text in overrides:
        try:
            apply_override(globals_, *parse_override(text, diags), diags, roots)
        except SpecError:
            pass
    return globals_
