"""Kernels compiled ahead of time: numba's kernels built into CPython extensions at install, loaded without numba.

Loading numba and a kernel from its cache costs about 1.2 s per process (importing numba, which pulls in
scipy, then numba's registries), more than a replay of 200,000 DRAM requests. `KERNELS` names, per kernel
module of the package, its entry points and their explicit signatures; `build` compiles each module's
entry points (and the kernels they call) with numba's ahead-of-time compiler into one extension in
`pimdsl/_aot/`, beside a file holding the source stamp of the module (jit_cache.stamp: its content and the
package modules it imports from). The install builds them (setup.py); `python -m pimdsl.aot` rebuilds them
in place for a checkout. `entry(source, name)` is the extension's function when the extension is there and
its stamp is the module's as it is now, else None and the caller uses the kernel through numba (an edited
kernel in an editable install, no compiler at install): the same code either way, only compiled at another
time. Neither the stamp nor the loading imports numba. PIMDSL_AOT=off ignores the extensions.

Arguments must match the signatures exactly (dtype, dimensions, C order): an extension does not convert.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

from .jit_cache import PACKAGE, stamp

FOLDER = PACKAGE / "_aot"

_ROW = "int64[::1]"
# the replay's results: status, accepted, done, first command, issued, last done, records, count
_REPLAY_OUT = f"Tuple((int64, {_ROW}, {_ROW}, int8[::1], int64[:, ::1], {_ROW}, int64[:, ::1], int64))"

# kernel module (relative to the package) -> entry point -> signature
KERNELS: dict[str, dict[str, str]] = {
    "interpreter/dram/core.py": {
        "replay_core": f"{_REPLAY_OUT}(UniTuple({_ROW}, 14), {_ROW}, float64[::1], int64[:, ::1], {_ROW}, {_ROW}, "
                       f"boolean[::1], {_ROW}, {_ROW}, int64, int64, {_ROW}, int64[:, :, ::1])",
    },
}


def extension_name(module: str) -> str:
    """The extension of a kernel module: `interpreter/dram/core.py` -> `interpreter__dram__core`."""
    return module.removesuffix(".py").replace("/", "__")


def entry(source: str | os.PathLike, name: str):
    """The ahead-of-time compiled `name` of kernel module `source` (a path), or None when there is no
    current build of it."""
    module = Path(source).resolve().relative_to(PACKAGE).as_posix()
    loaded = _load(module)
    return getattr(loaded, name, None) if loaded is not None else None


@functools.lru_cache(maxsize=None)
def _load(module: str):
    if os.environ.get("PIMDSL_AOT") == "off" or module not in KERNELS:
        return None
    name = extension_name(module)
    try:
        built = (FOLDER / f"{name}.stamp").read_text().strip()
    except OSError:
        return None
    if built != stamp(PACKAGE / module):
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = FOLDER / f"{name}{suffix}"
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"{__package__}._aot.{name}", path)
            try:
                loaded = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(loaded)
            except ImportError:             # built for another interpreter or platform
                return None
            return loaded
    return None


def build(folder: Path = FOLDER, modules=None) -> list[str]:
    """Compile the entry points of `modules` (default: every kernel module) into `folder`; returns the
    modules that failed, each reported on stderr (their kernels then compile through numba when used)."""
    import numba  # noqa: F401  (kernels defined from here on are numba's dispatchers)
    from numba.pycc import CC
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    for module, entries in KERNELS.items():
        if modules is not None and module not in modules:
            continue
        name = extension_name(module)
        try:
            kernels = importlib.import_module(f"{__package__}.{module.removesuffix('.py').replace('/', '.')}")
            cc = CC(name)
            cc.output_dir = str(folder)
            cc.verbose = False
            for fn, signature in entries.items():
                cc.export(fn, signature)(getattr(kernels, fn).py_func)
            (folder / f"{name}.stamp").unlink(missing_ok=True)
            cc.compile()
            (folder / f"{name}.stamp").write_text(stamp(PACKAGE / module) + "\n")
        except Exception as exc:            # no compiler, a kernel numba cannot compile ahead of time, ...
            print(f"pimdsl: not compiling {module} ahead of time ({type(exc).__name__}: {exc}); "
                  "its kernels compile when first used", file=sys.stderr)
            failed.append(module)
    return failed


if __name__ == "__main__":
    sys.exit(1 if build(modules=sys.argv[1:] or None) else 0)
