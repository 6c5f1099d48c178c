"""pimdsl: a declarative language and compiler for processing-in-memory systems running LLMs.

The public surface: load a `.pim` file into checked IR, and the diagnostics that explain why not.
"""
from .frontend.diagnostics import Diagnostic, Diagnostics, Span
from .frontend.pipeline import load_spec
from .ir.workload import Spec

__version__ = "0.1.0"
__all__ = ["load_spec", "Spec", "Diagnostics", "Diagnostic", "Span", "__version__"]
