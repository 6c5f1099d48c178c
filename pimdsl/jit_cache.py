"""numba's cache of compiled kernels in the user's pimdsl cache folder, shared by every clone and install.

numba keeps a kernel's compiled code beside its source (`__pycache__`) or, under NUMBA_CACHE_DIR, in a
folder named by the source's absolute path, so a fresh clone or a new virtualenv compiles everything again
(the DRAM core alone is about 20 s of CPU). What makes an entry valid is already in numba's index: a hash
of the source file's content and numba's version stamp the index, and entries are keyed by signature and
CPU. This locator names the folder by content instead: a kernel of `pimdsl/<dir>/<file>.py` is cached in
`$PIMDSL_CACHE/numba/<dir>/<stamp>` (default `~/.cache/pimdsl/numba`), the stamp hashing the file and the
package modules it imports from (numba freezes a global such as an imported constant into the code, which
numba's own stamp misses). An identical source anywhere finds the entries; an edited one gets a folder
of its own, so two versions compiling at once never write the same index and data files (about 1.6 MB
per version of the DRAM core; deleting the folder is always safe). NUMBA_CACHE_DIR, when set, still wins;
an unwritable folder falls back to numba's own places.

Kernel modules take `njit` from here, so the locator is registered before their decorators run.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
from pathlib import Path

from .cache_home import cache_folder

PACKAGE = Path(__file__).resolve().parent

__all__ = ["njit", "folder_for", "is_cached", "announce_compile"]


def __getattr__(name: str):
    """`njit`, imported with numba on first use: asking whether a kernel is cached (`is_cached`)
    does not load numba (about 0.7 s)."""
    if name == "njit":
        return _numba_njit()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=None)
def _numba_njit():
    """numba's njit, with the locator below registered before any kernel's decorator runs."""
    from numba import njit
    from numba.core import caching, config

    class PackageCacheLocator(caching.InTreeCacheLocator):
        def __init__(self, py_func, py_file):
            super().__init__(py_func, py_file)
            self._cache_path = str(folder_for(py_file))

        def get_source_stamp(self):
            return stamp(Path(self._py_file).resolve())

        @classmethod
        def from_function(cls, py_func, py_file):
            if config.CACHE_DIR or not Path(py_file).resolve().is_relative_to(PACKAGE):
                return None
            return super().from_function(py_func, py_file)     # None when the folder is not writable

    caching.CacheImpl._locator_classes.insert(0, PackageCacheLocator)
    return njit


def folder_for(source: str | os.PathLike) -> Path:
    """The cache folder of the kernels of `source`, a file inside the pimdsl package, as it is now."""
    source = Path(source).resolve()
    return cache_folder("numba") / source.parent.relative_to(PACKAGE) / stamp(source)[:16]


def is_cached(source: str | os.PathLike, kernel: str) -> bool:
    """Has the cache got the compiled `kernel` (a function name) of `source`? If not, its first call
    compiles it (seconds). NUMBA_CACHE_DIR set: numba's own places, unknown here (False)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return False
    return any(folder_for(source).glob(f"{Path(source).stem}.{kernel}-*.nbi"))


_ANNOUNCED: set[str] = set()


def announce_compile(source: str | os.PathLike, kernel: str, what: str, seconds: float) -> None:
    """Say on stderr, once a process, that `what` is about to be compiled (about `seconds` of CPU)
    because the cache has not got it: a run that waits knows why, and that it waits once."""
    if what in _ANNOUNCED or is_cached(source, kernel):
        return
    _ANNOUNCED.add(what)
    print(f"pimc: compiling {what} once (about {seconds:.0f} s; cached in {cache_folder('numba')} for later runs)",
          file=sys.stderr)


def stamp(source: Path) -> str:
    """A hash of `source` and of the package files it imports from."""
    h = hashlib.sha256()
    for path in (source, *_imported_files(source)):
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _imported_files(source: Path) -> tuple[Path, ...]:
    """The package's source files that `source` imports from (relative imports, one level)."""
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = source.parents[node.level - 1].joinpath(*(node.module or "").split(".") if node.module else ())
            for stem in [base] + [base / a.name for a in node.names]:
                found += [f for f in (stem.with_suffix(".py"), stem / "__init__.py") if f.is_file()]
    return tuple(sorted(set(found)))
