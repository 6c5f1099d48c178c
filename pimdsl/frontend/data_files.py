"""Data files a spec names (a requests CSV, a HuggingFace config, a layer profile): resolved like
imports, and kept inside the spec's tree.

A spec may come from someone else, so the files it makes pimc read are the ones it declares and
nothing more: a name is taken relative to the file that gives it (then the library path, where the
field says so), must end in the expected suffix, must resolve (symbolic links followed) into the
spec's tree (the folders of the spec and of every file it imports, the library path, and their
subfolders) unless the user passes `--allow-outside`, and must be a regular file. Refusals quote the name the spec gave
and what was expected, never anything read from the file. `pimc check` lists what a spec reads.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..ir.files import InputFileError

OUTSIDE_HINT = "keep data files beside the spec (or below its folder), or pass --allow-outside to read it"


@dataclass
class DataTree:
    """The folders a spec may read data from, and the data files it was resolved to read."""
    roots: tuple[Path, ...]
    allow_outside: bool = False
    read: list[tuple[str, Path]] = field(default_factory=list)     # (what, resolved path), in order

    def resolve(self, name: str, here: Path, what: str, suffix: str, search: tuple[Path, ...] = ()) -> Path:
        """The regular file `name` (given by a spec file in folder `here`) resolves to; InputFileError
        with a message that names only `name` and what was expected."""
        if not name.strip():
            raise InputFileError(f"an empty path where a {what} ({suffix} file) was expected")
        if Path(name).suffix.lower() != suffix:
            raise InputFileError(f"'{name}' is not a {suffix} file; a {what} was expected here",
                                 f"name a {what} ending in {suffix}")
        candidates = [here / name, *(folder / name for folder in search)]
        path = next((c for c in candidates if os.path.lexists(c)), candidates[0])
        real = path.resolve()
        if not self.allow_outside and not any(real.is_relative_to(root) for root in self.roots):
            raise InputFileError(f"'{name}' is outside the spec's folders; a spec reads data files "
                                 "from its own folder and the folders of the files it imports", OUTSIDE_HINT)
        try:
            mode = os.stat(real).st_mode
        except OSError as exc:
            raise InputFileError(f"cannot read the {what} '{name}': {exc.strerror or 'not found'}",
                                 f"a {what} is found relative to the file that names it") from None
        if not stat.S_ISREG(mode):
            raise InputFileError(f"'{name}' is not a regular file (a folder, device, FIFO or socket); "
                                 f"a {what} was expected")
        if (what, real) not in self.read:
            self.read.append((what, real))
        return real
