"""Where the grammar, templates and bundled specs live, installed or in a checkout."""
from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    # Installed wheels carry the folders inside the package (pimdsl/_data/NAME);
    # a checkout has them at the top level beside pimdsl/.
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pimdsl data folder '{name}' is missing from the installation")


def grammar_path() -> Path:
    return _data_dir("grammar") / "pim.lark"


def specs_dir() -> Path:
    return _data_dir("specs")


def codegen_dir() -> Path:
    return _data_dir("codegen")
