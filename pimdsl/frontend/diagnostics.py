"""Diagnostics: what a user sees when a spec is wrong.

A diagnostic reads `path:line:col: error: message`, then the source line, a
caret under the culprit and a hint. All errors of a run are collected in one
bag so that a user sees every mistake at once (STYLE.md, 6).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ..ir.errors import NOWHERE, PimdslError, Span  # noqa: F401  (Span, NOWHERE: re-exported)




@dataclass(frozen=True)
class Diagnostic:
    severity: str          # "error" or "warning"
    message: str
    span: Span
    hint: str | None = None


class SpecError(PimdslError):
    """Raised to abandon the current construct; the diagnostic is already recorded."""


@dataclass
class Diagnostics:
    """Collects diagnostics of one run and renders them with source context."""
    sources: dict[str, str] = field(default_factory=dict)
    items: list[Diagnostic] = field(default_factory=list)

    def error(self, message: str, span: Span, hint: str | None = None) -> SpecError:
        self._add(Diagnostic("error", message, span, hint))
        return SpecError(message)

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self._add(Diagnostic("warning", message, span, hint))

    def _add(self, diag: Diagnostic) -> None:
        if diag not in self.items:
            self.items.append(diag)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "warning"]

    def render(self, diag: Diagnostic) -> str:
        out = [f"{diag.span}: {diag.severity}: {diag.message}"]
        lines = self.sources.get(diag.span.path, "").splitlines()
        if 0 < diag.span.line <= len(lines):
            text = lines[diag.span.line - 1].replace("\t", " ")
            out.append(f"    {text}")
            width = max(1, (diag.span.end_col or diag.span.col + 1) - diag.span.col)
            out.append("    " + " " * (diag.span.col - 1) + "^" * width)
        if diag.hint:
            out.append(f"  hint: {diag.hint}")
        return "\n".join(out)

    def render_all(self) -> str:
        ordered = sorted(self.items, key=lambda d: (d.span.path, d.span.line, d.span.col))
        return "\n".join(self.render(d) for d in ordered)


def render_error(exc: PimdslError, what: str = "pimc") -> str:
    """An error that reached the command line: its own rendering (`render()`), else each problem
    at its span with the source line, or `what: error: message` when it has no span."""
    if hasattr(exc, "render"):
        return exc.render()
    diags, lines = Diagnostics(), []
    for one in exc.all():
        if one.span is None or one.span.line < 1:
            lines.append(f"{what}: error: {one.message}" + (f"\n  hint: {one.hint}" if one.hint else ""))
            continue
        if one.span.path.startswith("--set "):          # a command-line argument is its own source
            diags.sources[one.span.path] = one.span.path[len("--set "):]
        elif one.span.path not in diags.sources:
            try:
                with open(one.span.path, encoding="utf-8", errors="replace") as f:
                    diags.sources[one.span.path] = f.read()
            except OSError:
                diags.sources[one.span.path] = ""
        diags.error(one.message, one.span, one.hint)
    return "\n".join(filter(None, [diags.render_all(), *lines]))


def did_you_mean(name: str, candidates, what: str = "names") -> str:
    """A hint naming the closest candidates, or listing the valid ones."""
    candidates = sorted(set(candidates))
    same_letters = [c for c in candidates if c.lower() == name.lower()]
    close = same_letters + [c for c in difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
                            if c not in same_letters]
    close = close[:3]
    if not close:
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)]
    if close:
        return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    if not candidates:
        return f"there are no {what} here"
    shown = ", ".join(candidates[:12]) + (", ..." if len(candidates) > 12 else "")
    return f"valid {what}: {shown}"
