"""numba's compiled kernels cached per source content, not per clone (pimdsl/jit_cache.py): a second
copy of the package elsewhere loads what the first compiled; an edited kernel file compiles again."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from pimdsl import jit_cache                                          # noqa: E402
from pimdsl.sparsity import window_remap                              # noqa: E402

from .conftest import ROOT                                           # noqa: E402

# one small kernel, then where it came from and its dispatcher's cache hits and misses in this process
PROBE = """
import numpy as np
from pimdsl.sparsity import window_remap as w
z = w.loads(np.array([0, 1, 1, -1], np.int16), np.array([2, 3, 4, 9], np.int32), 2)
assert list(z) == [2, 7], z
print(w.__file__, sum(w._loads.stats.cache_hits.values()), sum(w._loads.stats.cache_misses.values()))
"""


def test_kernels_are_cached_under_the_users_pimdsl_cache():
    assert window_remap._loads._cache._cache_path == str(jit_cache.folder_for(window_remap.__file__))
    assert jit_cache.folder_for(window_remap.__file__).parts[-3:-1] == ("numba", "sparsity")


def test_a_second_clone_loads_the_first_ones_kernels_and_an_edit_recompiles(tmp_path):
    clones = [tmp_path / name for name in ("a", "b", "edited")]
    for clone in clones:
        shutil.copytree(ROOT / "pimdsl", clone / "pimdsl", ignore=shutil.ignore_patterns("*.nbi", "*.nbc"))
    edited = clones[2] / "pimdsl" / "sparsity" / "window_remap.py"
    edited.write_text(edited.read_text() + "\n# an edit\n")
    env = {"PIMDSL_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin",
           # the run's one BLAS thread (conftest), which this clean environment would drop
           **{k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS")}}

    def stats(clone):
        done = subprocess.run([sys.executable, "-c", PROBE], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        where, hits, misses = done.stdout.split()
        assert where.startswith(str(clone))
        return int(hits), int(misses)

    assert stats(clones[0]) == (0, 1)          # compiled
    assert stats(clones[1]) == (1, 0)          # another path, same source: loaded
    assert stats(clones[2]) == (0, 1)          # edited: compiled again
