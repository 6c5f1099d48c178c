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
time. Each kernel module ends with `bind(globals(), __file__)`, which puts an `Ahead` in place of each of
its entry points while the build is current. Neither the stamp nor the loading imports numba (jit_cache's
kernels load numba only when first called). PIMDSL_AOT=off ignores the extensions.

Arguments must match the signatures exactly (dtype, dimensions, C order): an extension does not convert.
The compiler is numba's `numba.pycc`, pending deprecation since numba 0.57 and still in the pinned 0.68;
should a numba drop it, the build fails and every kernel compiles through numba as before.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from .jit_cache import PACKAGE, stamp

FOLDER = PACKAGE / "_aot"

_I, _F = "int64[::1]", "float64[::1]"
_I2, _I3 = "int64[:, ::1]", "int64[:, :, ::1]"
_T = f"UniTuple({_I}, 4)"                    # the flat rule tables (dram/core.build_tables)

# kernel module (relative to the package) -> its kernels called from Python -> signature (numba's types;
# arrays C-ordered: `[::1]`, `[:, ::1]`, ...). A kernel they call is compiled into the same extension.
KERNELS: dict[str, dict[str, str]] = {
    "interpreter/dram/core.py": {
        # status, accepted, done, first command, issued, last done, records, their count
        "replay_core": f"Tuple((int64, {_I}, {_I}, int8[::1], {_I2}, {_I}, {_I2}, int64))"
                       f"({_T}, {_I}, {_I2}, {_I}, {_I}, boolean[::1], {_I}, {_I}, int64, int64, {_I}, {_I3})",
    },
    "interpreter/dram/trace_scan.py": {
        # count, arrival, is_write, channel, bank, row, column
        "scan_dramsim3": f"Tuple((int64, {_I}, boolean[::1], {_I}, {_I}, {_I}, {_I}))"
                         f"(uint8[::1], int64, uint64[::1], {_I2}, {_I})",
    },
    "interpreter/dram/stream_core.py": {
        "issue_run": f"Tuple((int64, int64, int64, int64, {_I2}))({_T}, {_I}, {_I2}, {_I2}, {_I}, {_I}, {_I}, {_I}, "
                     f"{_I}, {_I2}, {_I}, {_I}, {_I2}, {_I3}, {_I3}, {_I}, {_I2}, {_I2}, {_I})",
        "_earliest": f"int64({_I}, {_I}, int64, int64, int64, int64)",    # (core.checks(T))
    },
    "sparsity/activations.py": {
        "_interp_uniform": f"none(float32[::1], {_F}, {_F}, {_F}, float64, {_F})",
        "_chain_step": "none(float32[::1], float32[::1], float32, float32, float32, float32, uint16[::1], "
                       f"uint16[::1], {_I}, float32[::1], float32[::1], boolean[::1])",
    },
    "sparsity/activation_predictor.py": {
        "_predict_update": "none(uint8[::1], uint8[::1], boolean[::1], boolean[:, ::1], uint8[::1], uint8[::1], "
                           f"boolean[::1], boolean[::1], {_I2})",
    },
    "sparsity/window_remap.py": {
        "_loads": f"{_F}(int16[::1], uint8[::1], int64)",
        "_histogram": f"{_I2}(boolean[::1], int16[::1], uint8[::1], int64)",
        "_histogram_loads": f"{_F}({_I2})",
        "_pair_moves": f"{_I2}(boolean[::1], int16[::1], uint8[::1], {_I2}, {_F})",
        "_remap_window": f"none(boolean[::1], int16[::1], uint8[::1], {_I}, int64, boolean, {_F}, {_F}, {_I2})",
    },
    "loops/hot_cold_offload/decode_token.py": {
        "token_pass": "int64(int64, boolean, float32[::1], float32[::1], float32, float32, float32, float32, uint16[::1], "
                      f"uint16[::1], {_I}, float32[::1], float32[::1], boolean[::1], uint8[::1], boolean[:, ::1], "
                      f"uint8[::1], uint8[::1], float64, boolean[::1], int16[::1], uint8[::1], {_I2}, {_I2}, {_I3}, "
                      "boolean[::1])",
        "adjust_compiled": "int64(uint8[::1], float64, boolean[::1])",
        "tally": "UniTuple(int64, 5)(boolean[::1], boolean[::1], boolean[::1], int16[::1], uint8[::1], int64[::1])",
        "token_time": f"float64(float64, {_I2}, {_I2}, {_F}, {_F}, float64, float64, float64, float64, float64, {_F}, "
                      f"{_F}, boolean, {_F}, {_I}, {_F}, float64[:, ::1], float64[:, ::1])",
    },
}


def extension_name(module: str) -> str:
    """The extension of a kernel module: `interpreter/dram/core.py` -> `interpreter__dram__core`."""
    return module.removesuffix(".py").replace("/", "__")


def entry(source: str | os.PathLike, name: str):
    """The ahead-of-time compiled `name` of kernel module `source` (a path), or None when there is no
    current build of it. It takes exactly its signature's types (`Ahead` checks them)."""
    module = Path(source).resolve().relative_to(PACKAGE).as_posix()
    loaded = _load(module)
    return getattr(loaded, name, None) if loaded is not None else None


def bind(namespace: dict, source: str) -> None:
    """In a kernel module's namespace (its `globals()`), each kernel of KERNELS as an `Ahead`: its
    extension's function when the build is current and the arguments are of its signature, else the
    kernel through numba."""
    module = Path(source).resolve().relative_to(PACKAGE).as_posix()
    for name, signature in KERNELS.get(module, {}).items():
        built = entry(source, name)
        if built is not None:
            namespace[name] = Ahead(built, _argument_checks(signature), namespace[name])


class Ahead:
    """A kernel called through its ahead-of-time build when its arguments have the signature's types
    exactly (an extension does not convert: another dtype would be read as raw memory), else through
    numba (`fallback`), which compiles the kernel for those types."""

    def __init__(self, built, checks, fallback):
        self.built, self.checks, self.fallback = built, checks, fallback

    def __call__(self, *args):
        if len(args) == len(self.checks) and all(map(_fits, self.checks, args)):
            return self.built(*args)
        return self.fallback(*args)

    @property
    def _numba_type_(self):              # a kernel numba compiles (the fallback) may call this one
        return self.fallback._numba_type_

    def __getattr__(self, name):         # the numba kernel's own attributes (py_func, its cache, ...)
        if name.startswith("__") or name in ("built", "checks", "fallback"):
            raise AttributeError(name)
        return getattr(self.fallback, name)


_SCALARS = {"int64": (int, np.int64), "float64": (float, np.float64), "float32": (np.float32,),
            "boolean": (bool, np.bool_)}


def _fits(check, value) -> bool:
    kind, what = check
    if kind == "array":
        dtype, ndim = what
        return isinstance(value, np.ndarray) and value.dtype == dtype and value.ndim == ndim and value.flags.c_contiguous
    if kind == "tuple":
        inner, n = what
        return isinstance(value, tuple) and len(value) == n and all(_fits(inner, v) for v in value)
    return type(value) in what and not (what[0] is int and type(value) is bool)


def _argument_checks(signature: str) -> list:
    """The argument types of a signature in KERNELS, as (kind, detail) pairs for `_fits`."""
    return [_check(a) for a in _arguments(signature)]


def _arguments(signature: str) -> list[str]:
    """The top-level arguments of `ret(args)`: the last parenthesized group."""
    depth, start = 0, None
    for i in range(len(signature) - 1, -1, -1):
        ch = signature[i]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            depth -= 1
            if depth == 0 and ch == "(":
                start = i
                break
    return _split(signature[start + 1:-1])


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "([" and 1 or (ch in ")]" and -1 or 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return parts + [current.strip()] if current.strip() else parts


def _check(arg: str):
    if arg.startswith("UniTuple("):
        inner, n = _split(arg[len("UniTuple("):-1])
        return "tuple", (_check(inner), int(n))
    if arg.endswith("]"):
        dtype = arg[:arg.index("[")]
        return "array", (np.dtype("bool" if dtype == "boolean" else dtype), arg.count(",") + 1)
    return "scalar", _SCALARS[arg]


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
    modules that failed, each reported on stderr (their kernels then compile through numba when used).
    An extension is compiled beside and then moved in (a new file: a running process may have the old
    one mapped), with its stamp removed meanwhile and written last."""
    import warnings
    with warnings.catch_warnings():     # pycc's pending deprecation (said once, in this module's docstring)
        warnings.simplefilter("ignore")
        from numba.pycc import CC

    from .jit_cache import _numba_njit
    _numba_njit()                           # kernels imported from here on are numba's dispatchers
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    for module, entries in KERNELS.items():
        if modules is not None and module not in modules:
            continue
        name = extension_name(module)
        part = folder / f".{name}.part"
        try:
            source_stamp = stamp(PACKAGE / module)          # of the source compiled below
            kernels = importlib.import_module(f"{__package__}.{module.removesuffix('.py').replace('/', '.')}")
            cc = CC(name)
            cc.output_dir = str(part)
            cc.verbose = False
            for fn, signature in entries.items():
                kernel = getattr(kernels, fn)
                cc.export(fn, signature)(getattr(kernel, "fallback", kernel).py_func)
            cc.compile()
            (folder / f"{name}.stamp").unlink(missing_ok=True)
            for path in part.iterdir():
                os.replace(path, folder / path.name)
            (folder / f"{name}.stamp").write_text(source_stamp + "\n")
        except Exception as exc:            # no compiler, a kernel numba cannot compile ahead of time, ...
            print(f"pimdsl: not compiling {module} ahead of time ({type(exc).__name__}: {exc}); "
                  "its kernels compile when first used", file=sys.stderr)
            failed.append(module)
        finally:
            shutil.rmtree(part, ignore_errors=True)
    return failed


if __name__ == "__main__":
    sys.exit(1 if build(modules=sys.argv[1:] or None) else 0)
