"""Loading a spec for a `pimc` command: diagnostics go to stderr, a None spec means exit 1."""
from __future__ import annotations

import dataclasses
import sys


def add_allow_outside(p) -> None:
    p.add_argument("--allow-outside", action="store_true",
                   help="let the spec read data files outside its own folders and those of its imports")


class NothingToDo(Exception):
    """The spec declares nothing: `pimc` says so and exits 0."""


def load_reported(path: str, overrides=(), allow_outside: bool = False):
    """(spec or None, diagnostics), the diagnostics printed; NothingToDo for an empty spec."""
    from ..frontend.pipeline import load_spec          # here: `pimc --help` does not load the front end
    spec, diags = load_spec(path, list(overrides), allow_outside=allow_outside)
    if diags.items:
        print(diags.render_all(), file=sys.stderr)
    if spec is not None and declares_nothing(spec):
        raise NothingToDo(f"{path}: nothing to do: the file declares nothing")
    return spec, diags


def declares_nothing(spec) -> bool:
    return not any(getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "root")
