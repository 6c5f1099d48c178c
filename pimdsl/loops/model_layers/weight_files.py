"""Layer weights on disk: one safetensors file per blob, synthetic and seeded, written once.

Latency and memory depend on the shapes, not on the values, so seeded random weights at the model's
shapes stand in for trained ones. Files are written with the `safetensors` package; a blob is read
back with one `readinto` into a fresh buffer (the tensors are views of it), which releases the GIL so
loader threads overlap with numpy compute, and freeing the dict frees the whole layer.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import json
import math
import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path

import numpy as np

from ...cache_home import cache_folder, drop
from .layer_blobs import Blob

NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16}
SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16}
SAFETENSORS_NAMES = {"fp32": "F32", "fp16": "F16"}


def cache_root() -> Path:
    """The user's weight cache, or a folder of this run's own when the cache may not be used."""
    return cache_folder("weights") or _run_folder()


@functools.lru_cache(maxsize=1)
def _run_folder() -> Path:
    path = Path(tempfile.mkdtemp(prefix="pimdsl-weights-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def folder_for(model_name: str, blobs: tuple[Blob, ...], seed: int, root: Path | None = None) -> Path:
    shapes = json.dumps([(b.name, b.tensors, b.dtype) for b in blobs]).encode()
    return (root or cache_root()) / f"{model_name}-{hashlib.sha256(shapes).hexdigest()[:12]}-seed{seed}"


def _values(rng: np.random.Generator, name: str, shape, dtype) -> np.ndarray:
    if name.endswith("_g"):                        # norm gains
        return np.ones(shape, dtype)
    scale = 0.02 if len(shape) > 1 else 0.01       # GPT-2's initialiser scale for matrices
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)


def ensure(model_name: str, blobs: tuple[Blob, ...], seed: int = 0, root: Path | None = None) -> Path:
    """The folder holding every blob's file, writing the missing ones (atomically)."""
    from safetensors.numpy import save_file
    folder = folder_for(model_name, blobs, seed, root)
    folder.mkdir(parents=True, exist_ok=True)
    for index, blob in enumerate(blobs):
        path = folder / f"{blob.name}.safetensors"
        if os.path.lexists(path):
            why = damage(path, blob)
            if why is None:
                continue
            drop(path, why)
        rng = np.random.default_rng([seed, index])
        dtype = NUMPY_DTYPES[blob.dtype]
        tensors = {name: _values(rng, name, shape, dtype) for name, shape in blob.tensors}
        tmp = folder / f".{blob.name}.{os.getpid()}.tmp"
        save_file(tensors, str(tmp))
        os.replace(tmp, path)
    return folder


def damage(path: Path, blob: Blob) -> str | None:
    """Why the file at `path` is not `blob`'s whole safetensors file (None: it is). Reads the header
    only: the tensors' names, dtypes and shapes, and their offsets against the file's size."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        with open(path, "rb") as f:
            head = f.read(8)
            (header_len,) = struct.unpack("<Q", head) if len(head) == 8 else (-1,)
            if not 0 < header_len <= min(info.st_size - 8, 1 << 20):
                return "a bad header length"
            header = json.loads(f.read(header_len))
        expected = {name: (SAFETENSORS_NAMES[blob.dtype], list(shape)) for name, shape in blob.tensors}
        got = {k: (v.get("dtype"), v.get("shape")) for k, v in header.items() if k != "__metadata__"}
        if got != expected:
            return "other tensors than the model's"
        tensors = [v for k, v in header.items() if k != "__metadata__"]
        if any(e - b != np.dtype(SAFETENSORS_DTYPES[v["dtype"]]).itemsize * math.prod(v["shape"])
               for v in tensors for b, e in [v["data_offsets"]]):
            return "tensor sizes that do not match their shapes"
        ranges, end = sorted(tuple(v["data_offsets"]) for v in tensors), 0
        for b, e in ranges:                       # the tensors tile the data, which fills the file
            if b != end:
                return "tensors that overlap or leave gaps"
            end = e
        if end != info.st_size - 8 - header_len:
            return "a size that does not match its header"
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return "an unreadable header"
    return None


def read(path: Path) -> dict[str, np.ndarray]:
    """One safetensors file as {name: array}, all views of one buffer read with `readinto`."""
    with open(path, "rb", buffering=0) as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        size = os.fstat(f.fileno()).st_size - 8 - header_len
        buf = np.empty(size, np.uint8)
        view, got = memoryview(buf), 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise OSError(f"{path}: file ended early")
            got += n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        start, end = info["data_offsets"]
        out[name] = buf[start:end].view(dtype).reshape(info["shape"])
    return out


def evict(folder: Path) -> None:
    """Drop the files from the page cache, so the next read comes from the disk (a cold load)."""
    for path in folder.glob("*.safetensors"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
