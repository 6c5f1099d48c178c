"""The cache cannot run code and heals (issue 31): every entry is sealed with a per-user key and
checked before it is unpickled or trusted, the folder is refused when others could write it, and a
damaged entry is dropped and rebuilt with one warning."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from pimdsl import cache_home, cache_seal
from pimdsl.cli.main import main
from pimdsl.frontend import syntax
from pimdsl.interpreter import timing_cache
from pimdsl.jit_cache import SealedCacheFile, folder_for
from pimdsl.loops.model_layers import weight_files
from pimdsl.loops.model_layers.layer_blobs import Blob


class Planted:
    """A pickle that, if ever loaded, creates the file `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("PIMDSL_CACHE", str(root))
    monkeypatch.delenv("PIMDSL_TIMING_CACHE", raising=False)
    monkeypatch.setattr(cache_home, "_warned", set())
    cache_seal._key.cache_clear()
    syntax._parser.cache_clear()
    yield root
    cache_seal._key.cache_clear()
    syntax._parser.cache_clear()


def plant(path, marker):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(Planted(marker)))


def test_the_folder_and_key_are_private(cache):
    assert cache_home.cache_folder("timing") == cache / "timing"
    assert cache_seal.key() is not None
    assert oct(cache.stat().st_mode & 0o777) == "0o700" and oct((cache / "key").stat().st_mode & 0o777) == "0o600"


def test_a_planted_parser_table_does_not_run(cache, tmp_path, capsys):
    syntax._parser("start")                                    # writes the sealed table
    [kept] = (cache / "lark").glob("start-*.sealed")
    marker = tmp_path / "ran"
    plant(kept, marker)
    syntax._parser.cache_clear()
    assert syntax._parser("start").parse("model m { layers = 1; }") is not None
    assert not marker.exists()
    assert "dropped a damaged cache entry" in capsys.readouterr().err
    assert cache_seal.unseal(kept.read_bytes()) is not None      # rebuilt, sealed again


def test_a_planted_numba_index_or_data_file_does_not_run(cache, tmp_path):
    folder = folder_for(weight_files.__file__.replace("model_layers/weight_files", "hot_cold_offload/neuron_split"))
    folder.mkdir(parents=True)
    entry = SealedCacheFile(str(folder), "f-1.py311", "stamp")
    entry.save(("sig", "cpu"), {"code": 1})
    assert entry.load(("sig", "cpu")) == {"code": 1}
    marker = tmp_path / "ran"
    for path in sorted(folder.iterdir()):                      # the index, then the data
        good = path.read_bytes()
        plant(path, marker)
        assert entry.load(("sig", "cpu")) is None and not marker.exists()
        assert not path.exists()                               # dropped
        path.write_bytes(good)
    assert entry.load(("sig", "cpu")) == {"code": 1}


@pytest.mark.parametrize("damage", ["pickle", "[]", "negated", "empty", "folder"])
def test_a_damaged_timing_entry_is_dropped_and_recomputed(cache, tmp_path, capsys, damage):
    timing_cache.store("e", {"seconds": 2.5e-6})
    path = cache / "timing" / "e.json"
    assert timing_cache.load("e") == {"seconds": 2.5e-6}
    sealed = path.read_bytes()
    if damage == "pickle":
        plant(path, tmp_path / "ran")
    elif damage == "[]":
        path.write_text("[]")
    elif damage == "negated":                                  # valid JSON with its old seal: values changed
        path.write_bytes(sealed.replace(b"2.5e-06", b"-2.5e-06"))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
        path.mkdir()
    assert timing_cache.load("e") is None
    assert "dropped a damaged cache entry" in capsys.readouterr().err
    assert not path.exists() and not (tmp_path / "ran").exists()
    timing_cache.store("e", {"seconds": 2.5e-6})
    assert timing_cache.load("e") == {"seconds": 2.5e-6}
    assert [p.name for p in (cache / "timing").iterdir()] == ["e.json"]       # no temporary left


def test_a_folder_others_can_write_is_refused(cache, capsys):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    assert cache_home.cache_folder("timing") is None and cache_seal.key() is None
    assert timing_cache.load("e") is None
    timing_cache.store("e", {"seconds": 1.0})
    assert not (cache / "timing").exists()
    err = capsys.readouterr().err
    assert err.count("not using the cache folder") == 1 and "writable by other users" in err


def test_a_folder_of_another_user_is_refused(cache, monkeypatch):
    cache.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(cache).st_uid + 1)
    assert cache_home.unsafe(cache) == "is owned by another user"
    assert cache_home.cache_folder("lark") is None


def test_a_key_others_can_read_is_refused(cache, capsys):
    assert cache_seal.key() is not None
    os.chmod(cache / "key", 0o644)
    cache_seal._key.cache_clear()
    assert cache_seal.seal(b"x") is None
    assert "must be a file of yours with mode 0600" in capsys.readouterr().err


def test_a_damaged_weight_file_is_rewritten(cache, capsys):
    blobs = (Blob("layer_00", "layer", (("w", (8, 4)), ("b", (4,))), "fp32"),)
    folder = weight_files.ensure("m", blobs)
    path = folder / "layer_00.safetensors"
    good = weight_files.read(path)
    for damage in (os.urandom(300), path.read_bytes()[:100], b""):
        path.write_bytes(damage)
        assert weight_files.damage(path, blobs[0]) is not None
        weight_files.ensure("m", blobs)
        assert weight_files.damage(path, blobs[0]) is None
        assert all(np.array_equal(good[k], v) for k, v in weight_files.read(path).items())
    assert "dropped a damaged cache entry" in capsys.readouterr().err


def test_cache_info_and_clear(cache, capsys):
    (cache / "mine").mkdir(parents=True)                       # a user's own folder under PIMDSL_CACHE stays
    timing_cache.store("e", {"seconds": 1.0})
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["usable"] and info["kinds"]["timing"]["entries"] == 1
    assert main(["cache", "clear"]) == 0
    assert sorted(p.name for p in cache.iterdir()) == ["mine"]
