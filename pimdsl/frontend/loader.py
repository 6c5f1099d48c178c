"""Loading: a root spec file and everything it imports, in order.

`import "x.pim";` is resolved relative to the importing file, then against the
library path: the folders of PIMDSL_PATH, then, for a file inside a pimdsl checkout (a folder
with `grammar/pim.lark` and `specs/`), that checkout's `specs/`, then the bundled `specs/` folder.
So a user who edits `specs/` in the repository after `pip install .` runs what they edited, not
the installed copy (`pimc --version` names the bundled folder). Import cycles and missing files
are diagnostics. Each file is read once.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import Diagnostics, SpecError, Span, did_you_mean
from .resources import specs_dir
from .syntax import Block, Import, parse_source, read_source


SPEC_SUFFIX = ".pim"
NEAR_LIMIT = 20_000          # entries looked at per folder for a did-you-mean


@dataclass(frozen=True)
class Module:
    path: Path
    shown: str
    statements: tuple


def library_path(here: Path | None = None) -> list[Path]:
    """Where imports of a file in folder `here` are looked for after `here` (module docstring)."""
    extra = [Path(p) for p in os.environ.get("PIMDSL_PATH", "").split(os.pathsep) if p]
    checkout = checkout_specs(here.resolve()) if here is not None else None
    bundled = specs_dir()
    return extra + ([checkout] if checkout is not None and checkout != bundled else []) + [bundled]


@functools.lru_cache(maxsize=256)
def checkout_specs(folder: Path) -> Path | None:
    """The `specs/` folder of the pimdsl checkout `folder` lies in, if any."""
    for above in (folder, *folder.parents):
        if (above / "grammar" / "pim.lark").is_file() and (above / "specs").is_dir():
            return (above / "specs").resolve()
    return None


def display_path(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


class Loader:
    def __init__(self, diags: Diagnostics):
        self.diags = diags
        self.modules: dict[Path, Module] = {}
        self._stack: list[Path] = []

    def load(self, path: Path, at: Span | None = None) -> Module | None:
        path = path.resolve()
        if path in self._stack:
            cycle = " -> ".join(display_path(p) for p in self._stack[self._stack.index(path):] + [path])
            self.diags.error(f"import cycle: {cycle}", at or Span(display_path(path), 1, 1),
                             "remove one of the imports; a file may not import itself, even indirectly")
            return None
        if path in self.modules:
            return self.modules[path]
        shown = display_path(path)
        if path.suffix != SPEC_SUFFIX:          # never parse (and so never echo) a file that is not a spec
            self.diags.error(f"'{shown}' is not a {SPEC_SUFFIX} spec file", at or Span(shown, 1, 1),
                             f"pimc reads and imports {SPEC_SUFFIX} files only")
            return None
        try:
            text = read_source(path, shown, self.diags, at)
            statements = parse_source(text, shown, self.diags)
        except SpecError:
            return None
        self._stack.append(path)
        try:
            for stmt in statements:
                if isinstance(stmt, Import):
                    target = self.resolve_import(stmt, path.parent)
                    if target is not None:
                        self.load(target, stmt.span)
        finally:
            self._stack.pop()
        module = Module(path, shown, statements)
        self.modules[path] = module
        return module

    def resolve_import(self, stmt: Import, here: Path) -> Path | None:
        if not stmt.path.endswith(SPEC_SUFFIX):
            self.diags.error(f"imports name {SPEC_SUFFIX} spec files only, not \"{stmt.path}\"", stmt.span,
                             f"write e.g. `import \"dram/ddr4{SPEC_SUFFIX}\";`")
            return None
        for folder in [here] + library_path(here):
            candidate = folder / stmt.path
            if candidate.exists():              # a folder or a FIFO too: reading it says what it is
                return candidate
        near = []
        for folder in [here] + library_path(here):
            if folder.is_dir():
                near += _specs_under(folder)
        self.diags.error(f"cannot find the imported file \"{stmt.path}\"", stmt.span,
                         did_you_mean(stmt.path, near, "files") +
                         " (imports are relative to this file, then the bundled specs/)")
        return None

    def top_level_blocks(self) -> list[Block]:
        return [s for m in self.modules.values() for s in m.statements if isinstance(s, Block)]


def _specs_under(folder: Path) -> list[str]:
    """The .pim files under `folder`, for a did-you-mean; bounded by the entries looked at, since a
    spec may sit in a home folder or in /."""
    found, seen = [], 0
    for root, dirs, files in os.walk(folder):
        seen += len(dirs) + len(files)
        found += [os.path.relpath(os.path.join(root, f), folder) for f in files if f.endswith(SPEC_SUFFIX)]
        if seen > NEAR_LIMIT:
            break
    return found
