"""Loading a spec for a `pimc` command: diagnostics go to stderr, None means exit 1."""
from __future__ import annotations

import sys

from ..frontend.pipeline import load_spec


def load_reported(path: str, overrides=()):
    spec, diags = load_spec(path, list(overrides))
    if diags.items:
        print(diags.render_all(), file=sys.stderr)
    return spec
