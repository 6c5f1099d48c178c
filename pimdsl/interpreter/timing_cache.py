"""PIM op timings kept on disk across runs, sweep points and processes, keyed by content (and, by
`content_key`, other pure results that are slow to compute: a placement program's solution).

A PIM op's time is a pure function of the memory it runs on (organization,
timing rules, PIM unit, controller options), of its stream (the op's key:
family, program, shape) and of the timing mode, computed by this version of
pimdsl. The key hashes all of these: the memory as a canonical dump of its
declared records (every field, sets sorted, nothing process-dependent), and
pimdsl as a digest of its own source files, so editing a spec or the code
invalidates every entry it could affect. Entries are small sealed JSON files
(cache_seal.py: an entry whose bytes or values were changed fails its HMAC)
written atomically (temporary file, then rename), so parallel sweep workers
share the folder safely; a damaged or unreadable entry is dropped and recomputed.

Folder: `$PIMDSL_TIMING_CACHE` if set, else `$PIMDSL_CACHE/timing` (default
`~/.cache/pimdsl/timing`); `PIMDSL_TIMING_CACHE=0` turns the cache off.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from ..bounded_cache import BoundedCache
from ..cache_home import cache_folder, code_digest, drop, safe_folder
from ..cache_seal import read_entry, write_entry


def folder() -> Path | None:
    chosen = os.environ.get("PIMDSL_TIMING_CACHE")
    if chosen == "0":
        return None
    if chosen:
        return safe_folder(Path(chosen))
    return cache_folder("timing")


def canonical(value) -> object:
    """A JSON-able dump of declared records that is the same in every process."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, {f.name: canonical(getattr(value, f.name))
                                       for f in dataclasses.fields(value)}]
    if isinstance(value, dict):
        return {"dict": sorted(([canonical(k), canonical(v)] for k, v in value.items()), key=repr)}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted((canonical(v) for v in value), key=repr)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


_MEMORY_DIGESTS: dict[int, tuple[object, str]] = BoundedCache(256)    # id -> (memory, digest): the memory is kept alive


def _memory_digest(memory) -> str:
    entry = _MEMORY_DIGESTS.get(id(memory))
    if entry is None:
        digest = hashlib.sha256(json.dumps(canonical(memory), sort_keys=True).encode()).hexdigest()
        entry = _MEMORY_DIGESTS[id(memory)] = (memory, digest)
    return entry[1]


def content_key(*parts) -> str:
    """The entry name of another pure result of `parts` (declared records, numbers, strings) computed
    by this pimdsl, such as an optimisation program's solution."""
    body = json.dumps([code_digest(), *(canonical(p) for p in parts)], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def entry_key(memory, key: tuple, mode: str) -> str:
    body = json.dumps([code_digest(), _memory_digest(memory), canonical(key), mode], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def load(name: str) -> dict | None:
    """The entry `name`, or None: absent, or dropped (with a warning) because its seal, JSON or shape
    does not check out, so that it is computed and stored again."""
    root = folder()
    if root is None:
        return None
    path = root / f"{name}.json"
    body = read_entry(path)
    if body is None:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        drop(path, "not a JSON object")
        return None
    return value


def store(name: str, value: dict) -> None:
    root = folder()
    if root is None:
        return
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return                                 # a read-only or full disk: just do not cache
    write_entry(root / f"{name}.json", json.dumps(value).encode())


def kept(name: str, measure):
    """`measure()`, a pure result kept on disk under `name` (an `entry_key` or `content_key`): loaded
    when there, else measured and stored. JSON keeps floats exact."""
    stored = load(name)
    if stored is not None and "value" in stored:
        return stored["value"]
    value = measure()
    store(name, {"value": value})
    return value
