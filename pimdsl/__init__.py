"""pimdsl: a declarative language and compiler for processing-in-memory systems running LLMs.

The public surface: load a `.pim` file into checked IR, and the diagnostics that explain why not.
Its names are imported when first used, so that `pimc --help` or a trace replay does not load the
whole front end.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["load_spec", "Spec", "Diagnostics", "Diagnostic", "Span", "__version__"]

_HOMES = {"load_spec": ".frontend.pipeline", "Spec": ".ir.workload", "Diagnostics": ".frontend.diagnostics",
          "Diagnostic": ".frontend.diagnostics", "Span": ".frontend.diagnostics"}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name], __name__), name)
    raise AttributeError(f"module 'pimdsl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
