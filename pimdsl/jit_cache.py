"""numba's cache of compiled kernels in the user's pimdsl cache folder, shared by every clone and install.

numba keeps a kernel's compiled code beside its source (`__pycache__`) or, under NUMBA_CACHE_DIR, in a
folder named by the source's absolute path, so a fresh clone or a new virtualenv compiles everything again
(the DRAM core alone is about 20 s of CPU). What makes an entry valid is already in numba's index: a hash
of the source file's content and numba's version stamp the index, and entries are keyed by signature and
CPU. This locator names the folder by content instead: a kernel of `pimdsl/<dir>/<file>.py` is cached in
`$PIMDSL_CACHE/numba/<dir>/<stamp>` (default `~/.cache/pimdsl/numba`), the stamp hashing the file and the
package modules it imports from (numba freezes a global such as an imported constant into the code, which
numba's own stamp misses). Its index and data files are pickles, so they are sealed like every entry
of the cache (cache_seal.py: `SealedCacheFile`), and a damaged or planted file is dropped and the
kernel compiled again. An identical source anywhere finds the entries; an edited one gets a folder
of its own, so two versions compiling at once never write the same index and data files (about 1.6 MB
per version of the DRAM core; deleting the folder is always safe). NUMBA_CACHE_DIR, when set, still wins;
an unwritable folder falls back to numba's own places.

Kernel modules take `njit` from here, so the locator is registered before numba compiles any of them;
numba itself is imported only when a kernel is first called (asking `is_cached` does not load it).
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import os
import pickle
import re
import shutil
import sys
import tempfile
from pathlib import Path

from .cache_home import cache_folder, drop
from .cache_seal import read_entry, write_entry

PACKAGE = Path(__file__).resolve().parent

__all__ = ["njit", "folder_for", "is_cached", "announce_compile"]


def njit(*args, **options):
    """numba's njit, deferred: until numba is loaded, a kernel is a `LazyKernel` and importing its module
    does not load numba (about 1.2 s with the cache's load); the first call of any kernel loads numba and
    turns every kernel of the package into numba's dispatcher, in its module and wherever it was imported
    (kernels calling kernels see dispatchers when numba types them). A kernel whose ahead-of-time build is
    current (aot.py) is called from its extension and never needs numba."""
    if args and callable(args[0]):
        return njit(**options)(args[0])

    def decorate(func):
        if _numba_njit.cache_info().currsize:
            _materialize()                  # kernels it imported from modules loaded before numba
            return _numba_njit()(**options)(func)
        kernel = LazyKernel(func, options)
        _LAZY.append(kernel)
        return kernel
    return decorate


_LAZY: list = []


class LazyKernel:
    """A kernel whose numba dispatcher is made on first use (`njit`)."""

    def __init__(self, func, options):
        self.py_func, self.options, self.dispatcher = func, options, None
        functools.update_wrapper(self, func)

    def __call__(self, *args):
        if self.dispatcher is None:
            _materialize()
        return self.dispatcher(*args)

    def __getattr__(self, name):         # the dispatcher's attributes (signatures, ...)
        if name.startswith("__") or name in ("py_func", "options", "dispatcher"):
            raise AttributeError(name)
        if self.dispatcher is None:
            _materialize()
        return getattr(self.dispatcher, name)


def _materialize() -> None:
    """numba's dispatchers for every lazy kernel, replacing them in the package's modules."""
    njit_ = _numba_njit()
    for kernel in _LAZY:
        if kernel.dispatcher is None:
            kernel.dispatcher = njit_(**kernel.options)(kernel.py_func)
    for name, module in list(sys.modules.items()):
        if name.startswith(__package__ + ".") and module is not None:
            names = vars(module)
            for key, value in list(names.items()):
                if isinstance(value, LazyKernel):
                    names[key] = value.dispatcher


def __getattr__(name: str):
    """`SealedCacheFile`: numba's cache file as sealed here (loads numba)."""
    if name == "SealedCacheFile":            # numba's cache file as pimdsl seals it (tests plant files in it)
        _numba_njit()
        return _SEALED[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SEALED: list = []


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


    class SealedCacheFile(caching.IndexDataCacheFile):
        """numba's index and data files, sealed (cache_seal.py) in pimdsl's folders: a file that does not
        carry this user's seal is dropped before numba unpickles it, and the kernel is compiled again."""

        def _ours(self) -> bool:
            return _is_ours(self._cache_path)

        def _load_index(self):
            if not self._ours():
                return super()._load_index()
            body = read_entry(Path(self._index_path))
            if body is None:
                return {}
            try:
                version, source_stamp, overloads = pickle.loads(body)
            except Exception:
                drop(Path(self._index_path), "an index numba cannot read")
                return {}
            return overloads if (version, source_stamp) == (self._version, self._source_stamp) else {}

        def _save_index(self, overloads):
            if not self._ours():
                return super()._save_index(overloads)
            write_entry(Path(self._index_path), self._dump((self._version, self._source_stamp, overloads)))

        def _load_data(self, name):
            if not self._ours():
                return super()._load_data(name)
            path = Path(self._data_path(name))
            body = read_entry(path)
            if body is None:
                raise OSError(f"no usable cache entry {path}")      # numba then compiles again
            try:
                return pickle.loads(body)
            except Exception:
                drop(path, "data numba cannot read")
                raise OSError(f"no usable cache entry {path}") from None

        def _save_data(self, name, data):
            if not self._ours():
                return super()._save_data(name, data)
            write_entry(Path(self._data_path(name)), self._dump(data))

    caching.CacheImpl._locator_classes.insert(0, PackageCacheLocator)
    caching.IndexDataCacheFile = SealedCacheFile       # numba's Cache builds its file by this module name
    _SEALED.append(SealedCacheFile)
    return njit


def folder_for(source: str | os.PathLike) -> Path:
    """The cache folder of the kernels of `source`, a file inside the pimdsl package, as it is now; a
    private folder of this process when the user's cache may not be used (cache_home.py)."""
    source = Path(source).resolve()
    root = cache_folder("numba")
    if root is None:
        return _private_folder() / source.parent.relative_to(PACKAGE) / stamp(source)[:16]
    return root / source.parent.relative_to(PACKAGE) / stamp(source)[:16]


@functools.lru_cache(maxsize=1)
def _private_folder() -> Path:
    """Where numba writes when the cache is refused: new, 0700 and removed at exit, so that numba's own
    fallbacks (beside the sources, or its user-wide folder) never load an unchecked pickle."""
    path = Path(tempfile.mkdtemp(prefix="pimdsl-numba-"))
    atexit.register(shutil.rmtree, path, True)
    return path


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


# `from .x import a, b` or `from .. import (a,\n b)`: a relative import, its names possibly over lines
_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.+)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


@functools.lru_cache(maxsize=None)
def _imported_files(source: Path) -> tuple[Path, ...]:
    """The package's source files that `source` imports from (relative imports, one level). A scan of
    the text, not a parse (every run checks its kernels' builds: ast.parse took 70 ms of `pimc dram`);
    an import statement inside a string counts too, which only makes a stamp stricter."""
    found = []
    for dots, module, names in _RELATIVE_IMPORT.findall(source.read_text()):
        base = source.parents[len(dots) - 1].joinpath(*module.split(".") if module else ())
        names = [n.split()[0] for n in names.strip("()").replace("\\\n", " ").split(",") if n.split()]
        for stem in [base] + [base / n for n in names if n.isidentifier()]:
            found += [f for f in (stem.with_suffix(".py"), stem / "__init__.py") if f.is_file()]
    return tuple(sorted(set(found)))


def _is_ours(folder: str) -> bool:
    roots = [r for r in (cache_folder("numba"),) if r is not None]
    if _private_folder.cache_info().currsize:
        roots.append(_private_folder())
    return any(Path(folder).is_relative_to(r) for r in roots)
