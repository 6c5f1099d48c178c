"""Syntax: `.pim` text -> a small AST with source spans.

The Lark grammar (grammar/pim.lark, LALR) is generic over block kinds; this
module only builds the tree and turns Lark's exceptions into diagnostics.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import re
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer, v_args
from lark import __version__ as lark_version
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, VisitError

from ..cache_home import cache_folder, code_digest
from ..cache_seal import read_entry, write_entry
from ..ir.files import SPEC_LIMIT_BYTES, InputFileError, read_input
from .diagnostics import Diagnostics, SpecError, Span
from .resources import grammar_path


# ---- expressions ---------------------------------------------------------
@dataclass(frozen=True)
class Num:
    text: str
    unit: str | None
    span: Span


@dataclass(frozen=True)
class Ref:
    parts: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str
    left: object
    right: object
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: object
    span: Span


@dataclass(frozen=True)
class ListExpr:
    items: tuple
    span: Span


@dataclass(frozen=True)
class Str:
    value: str
    span: Span


@dataclass(frozen=True)
class Bool:
    value: bool
    span: Span


# ---- statements ----------------------------------------------------------
@dataclass(frozen=True)
class Import:
    path: str
    span: Span


@dataclass(frozen=True)
class Let:
    name: str
    expr: object
    span: Span


@dataclass(frozen=True)
class Assign:
    name: str
    expr: object
    span: Span


@dataclass(frozen=True)
class Rule:
    other: bool
    scope: str
    preceding: tuple[str, ...]
    following: tuple[str, ...]
    expr: object
    span: Span


@dataclass(frozen=True)
class Window:
    other: bool
    scope: str
    count: int
    commands: tuple[str, ...]
    expr: object
    span: Span


@dataclass(frozen=True)
class Issue:
    """`NAME(arg = expr, ...);` in a PIM program: one command issue (LANGUAGE.md, PIM programs)."""
    command: str
    args: tuple                  # ((name, expr, span), ...) in source order
    span: Span


@dataclass(frozen=True)
class Block:
    kind: str
    name: str | None
    count: object | None
    base: Ref | None
    body: tuple
    span: Span            # the block's header (kind and name)


_NUMBER_AND_UNIT = re.compile(r"(0x[0-9a-fA-F_]+|[0-9_.]+(?:[eE][+-]?[0-9]+)?)\s*(\S+)?$")


# ---- tree building -------------------------------------------------------
def _span(path: str, meta_or_token) -> Span:
    line = getattr(meta_or_token, "line", 0) or 0
    col = getattr(meta_or_token, "column", 0) or 0
    end_line = getattr(meta_or_token, "end_line", line)
    end_col = getattr(meta_or_token, "end_column", None)
    if end_line != line:
        end_col = None
    return Span(path, line, col, end_col)


class _Builder(Transformer):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _s(self, meta):
        return _span(self.path, meta)

    def start(self, items):
        return tuple(items)

    @v_args(meta=True)
    def import_stmt(self, meta, items):
        return Import(_unquote(items[0]), self._s(meta))

    @v_args(meta=True)
    def let_stmt(self, meta, items):
        return Let(str(items[0]), items[1], _span(self.path, items[0]))

    @v_args(meta=True)
    def assign(self, meta, items):
        return Assign(str(items[0]), items[1], _span(self.path, items[0]))

    @v_args(meta=True)
    def block(self, meta, items):
        kind, name, count, base, body = items
        header = _span(self.path, name if name is not None else kind)
        if name is not None:
            header = Span(self.path, kind.line, kind.column, name.end_column if name.line == kind.line else None)
        return Block(str(kind), str(name) if name is not None else None, count, base,
                     body if body is not None else (), header)

    def count(self, items):
        return items[0]

    def body(self, items):
        return tuple(items)

    @v_args(meta=True)
    def rule_stmt(self, meta, items):
        (other, scope), pre, fol, expr = items
        return Rule(other, scope, pre, fol, expr, self._s(meta))

    @v_args(meta=True)
    def window_stmt(self, meta, items):
        (other, scope), n, cmds, expr = items
        return Window(other, scope, int(n), cmds, expr, self._s(meta))

    @v_args(meta=True)
    def issue_stmt(self, meta, items):
        name, *args = items
        return Issue(str(name), tuple(a for a in args if a is not None), _span(self.path, name))

    def issue_arg(self, items):
        return (str(items[0]), items[1], _span(self.path, items[0]))

    def scope(self, items):
        return items[0] is not None, str(items[1])

    def names(self, items):
        return tuple(str(t) for t in items)

    @v_args(meta=True)
    def quantity(self, meta, items):
        number, unit = _NUMBER_AND_UNIT.match(str(items[0])).groups()
        return Num(number, unit, self._s(meta))

    @v_args(meta=True)
    def dotted(self, meta, items):
        return Ref(tuple(str(t) for t in items), self._s(meta))

    @v_args(meta=True)
    def call(self, meta, items):
        name, *args = items
        return Call(str(name), tuple(a for a in args if a is not None), self._s(meta))

    @v_args(meta=True)
    def list(self, meta, items):
        return ListExpr(tuple(i for i in items if i is not None), self._s(meta))

    @v_args(meta=True)
    def string(self, meta, items):
        return Str(_unquote(items[0]), self._s(meta))

    @v_args(meta=True)
    def true(self, meta, items):
        return Bool(True, self._s(meta))

    @v_args(meta=True)
    def false(self, meta, items):
        return Bool(False, self._s(meta))

    @v_args(meta=True)
    def neg(self, meta, items):
        return Neg(items[0], self._s(meta))

    def _bin(op):
        @v_args(meta=True)
        def f(self, meta, items):
            return BinOp(op, items[0], items[1], self._s(meta))
        return f

    add, sub, mul, div, pow = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("^")


def _unquote(token) -> str:
    return bytes(str(token)[1:-1], "utf-8").decode("unicode_escape", errors="replace")


_LARK_OPTIONS = dict(parser="lalr", propagate_positions=True, maybe_placeholders=True)


@lru_cache(maxsize=None)
def _parser(start: str) -> Lark:
    """The LALR parser of the grammar from `start`. Building its tables is about 80 ms, in every
    process that parses (each `pimc` run), so the built parser is kept in the user's pimdsl cache,
    named by a hash of everything that makes it (grammar, start, options, Lark's version), sealed and
    written whole (cache_seal.py); an unreadable, unsealed or unwritable entry just builds it."""
    grammar = grammar_path().read_text()
    key = hashlib.sha256(repr((grammar, start, sorted(_LARK_OPTIONS.items()), lark_version)).encode()).hexdigest()
    folder = cache_folder("lark")
    kept = folder / f"{start}-{key[:24]}.sealed" if folder is not None else None
    body = read_entry(kept) if kept is not None else None      # verified before Lark unpickles it
    if body is not None:
        try:
            return Lark.load(io.BytesIO(body))
        except Exception:                      # sealed by another Lark version: build it
            pass
    parser = Lark(grammar, start=start, **_LARK_OPTIONS)
    if kept is not None:
        saved = io.BytesIO()
        parser.save(saved)
        write_entry(kept, saved.getvalue())
    return parser


_TOKEN_WORDS = {
    "SEMICOLON": "';'", "LBRACE": "'{'", "RBRACE": "'}'", "EQUAL": "'='", "NAME": "a name",
    "NUMBER": "a number", "STRING": "a string", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
    "LSQB": "'['", "RSQB": "']'", "COLON": "':'", "UNIT": "a unit", "INT": "an integer",
    "__ANON_0": "'->'", "QUANTITY": "a number", "DOT": "'.'", "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'",
    "SLASH": "'/'", "CIRCUMFLEX": "'^'", "$END": "the end of the file", "OTHER": "'other'",
}


def _describe_expected(expected) -> str:
    words = sorted({_TOKEN_WORDS.get(e, e.lower().strip('"')) for e in expected})
    return ", ".join(words[:8]) + (", ..." if len(words) > 8 else "")


MAX_SOURCE_BYTES = 8 * 1024 * 1024
MAX_NESTING = 200
_COMMENT_OR_STRING = re.compile(r'"([^"\\\n]|\\.)*"|//[^\n]*|#[^\n]*|/\*(.|\n)*?\*/')


def _bracket_depth(text: str) -> int:
    """The deepest bracket nesting, so that pathological input gets a diagnostic, not a crash."""
    depth = deepest = 0
    for ch in _COMMENT_OR_STRING.sub("", text):
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest



# Parsed sources by (start rule, shown path, text): a process loads the same library files (the DRAM
# standards, PIM units, models) in every load_spec, and parsing them was most of a load (a sweep's
# points, the tests' many loads). The trees are frozen dataclasses in tuples, so sharing them is safe
# (a list would be handed out as a fresh list). Failed parses are not kept (their diagnostics go to
# each caller's Diagnostics).
_PARSED: OrderedDict[tuple[str, str, str], object] = OrderedDict()
_PARSED_LOCK = threading.Lock()
_PARSED_ENTRIES, _PARSED_MAX_BYTES = 256, 64 * 1024      # at most 16 MiB of kept text; specs are a few KiB


def parse_source(text: str, path: str, diags: Diagnostics, start: str = "start"):
    """Parse `.pim` text; on a syntax error record a diagnostic and raise SpecError."""
    diags.sources[path] = text
    key = (start, path, text)
    with _PARSED_LOCK:
        kept = _PARSED.get(key)
        if kept is not None:
            _PARSED.move_to_end(key)
    if kept is not None:
        return list(kept[1]) if kept[0] else kept[1]
    parsed = _parse_kept(text, path, diags, start)
    if len(text) <= _PARSED_MAX_BYTES:
        with _PARSED_LOCK:
            _PARSED[key] = (True, tuple(parsed)) if isinstance(parsed, list) else (False, parsed)
            while len(_PARSED) > _PARSED_ENTRIES:
                _PARSED.popitem(last=False)
    return parsed


def _parse_kept(text: str, path: str, diags: Diagnostics, start: str):
    """`_parse`, kept on disk across processes: parsing is most of a small command's start-up (about
    0.3 s for a system and its library files), unpickling its tree a few ms. The entry is named by
    everything the tree depends on (pimdsl's source, the start rule, the path its spans carry, the
    text), sealed like every entry; a failed parse is not kept (its diagnostics are the caller's), a damaged
    or planted entry is dropped and parsed again."""
    folder = cache_folder("parsed")
    if folder is None:                         # the cache may not be used (cache_home.py)
        return _parse(text, path, diags, start)
    entry = folder / (hashlib.sha256(repr((code_digest(), start, path, text)).encode()).hexdigest() + ".sealed")
    body = read_entry(entry)                   # verified before it is unpickled (cache_seal.py)
    if body is not None:
        try:
            return pickle.loads(body)
        except Exception:                      # from a different pimdsl's classes: parse
            pass
    parsed = _parse(text, path, diags, start)
    try:
        write_entry(entry, pickle.dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL))
    except RecursionError:                     # a deeply nested spec: parsed every time
        pass
    return parsed


def _parse(text: str, path: str, diags: Diagnostics, start: str):
    if len(text) > MAX_SOURCE_BYTES:
        raise diags.error("file too large for a spec (over 8 MiB)", Span(path, 1, 1),
                          "split the spec into files joined with `import`")
    if "\x00" in text:
        raise diags.error("this is not a text file (it holds NUL bytes)", Span(path, 1, 1),
                          "pimc reads .pim spec files written as UTF-8 text")
    depth = _bracket_depth(text)
    if depth > MAX_NESTING:
        raise diags.error(f"the spec nests brackets {depth} deep (at most {MAX_NESTING})",
                          Span(path, 1, 1), "flatten the deepest expression or block")
    try:
        tree = _parser(start).parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, path, diags) from None
    except RecursionError:
        raise diags.error("the spec is nested too deeply to parse", Span(path, 1, 1),
                          "flatten the deepest expression or block") from None
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(max(old, 10000))
        return _Builder(path).transform(tree)
    except (RecursionError, VisitError):
        raise diags.error("the spec is nested too deeply to read", Span(path, 1, 1),
                          "flatten the deepest expression or block") from None
    finally:
        sys.setrecursionlimit(old)


def _syntax_error(exc: UnexpectedInput, text: str, path: str, diags: Diagnostics) -> SpecError:
    line, col = max(exc.line, 1) if exc.line else 1, max(exc.column, 1) if exc.column else 1
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else "?"
        hint = "quote file paths (\"...\"); comments start with // or #"
        if ch == ";" or ch == "=":
            hint = "a statement is `name = value;` inside a block `kind name { ... }`"
        return diags.error(f"unexpected character {ch!r}", Span(path, line, col), hint)
    expected = getattr(exc, "expected", None) or getattr(exc, "accepts", None) or set()
    token = getattr(exc, "token", None)
    if token is None or token.type == "$END":
        return diags.error("unexpected end of file", Span(path, line, col),
                           f"expected {_describe_expected(expected)}; is a '}}' or ';' missing?")
    if "SEMICOLON" in expected and token.type in ("NAME", "RBRACE", "OTHER", "QUANTITY"):
        # The statement before the token is missing its terminator: point at its end.
        prev = _previous_token_end(text, token)
        return diags.error("missing ';' at the end of the statement", Span(path, prev[0], prev[1]),
                           "end every `name = value` with ';'")
    return diags.error(f"unexpected {_word(token)}", _span(path, token),
                       f"expected {_describe_expected(expected)}")


def _word(token: Token) -> str:
    if token.type in ("NAME", "QUANTITY", "INT", "STRING"):
        return f"{_TOKEN_WORDS.get(token.type, token.type)} '{token}'"
    return f"'{token}'"


def _previous_token_end(text: str, token: Token) -> tuple[int, int]:
    pos = token.start_pos - 1
    while pos > 0 and text[pos].isspace():
        pos -= 1
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 2
    return line, col


def read_source(path: Path, shown: str, diags: Diagnostics, at: Span | None = None) -> str:
    """Read a spec file as text, or record why it cannot be read."""
    where = at or Span(shown, 1, 1)
    try:
        data = read_input(path, "spec file", SPEC_LIMIT_BYTES)
    except InputFileError as exc:
        raise diags.error(exc.message, where, exc.hint or "imports are relative to the importing file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        diags.sources.setdefault(shown, "")
        raise diags.error(f"this is not a UTF-8 text file (bad byte at offset {exc.start})",
                          Span(shown, 1, 1), "pimc reads .pim spec files written as UTF-8 text") from None
