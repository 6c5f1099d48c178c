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


def test_a_stamp_covers_the_package_files_a_kernel_imports_from(tmp_path):
    # the text scan finds one-line, aliased, parenthesised multi-line and parent-package imports,
    # a module imported by name from its package, and nothing that is not a package file
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/__init__.py", "sub/kernel.py", "sub/e.py"):
        (pkg / name).write_text("")
    kernel = pkg / "sub" / "kernel.py"
    kernel.write_text("import os\nfrom .e import f as g\nfrom ..a import (\n    x,\n    y,\n)\n"
                      "from .. import b, c as cc\nfrom ..missing import z\n\ndef k():\n    from ..d import w\n")
    jit_cache._imported_files.cache_clear()
    found = {p.relative_to(pkg).as_posix() for p in jit_cache._imported_files(kernel)}
    assert found == {"__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/e.py"}
    before = jit_cache.stamp(kernel)
    (pkg / "c.py").write_text("changed = 1\n")
    assert jit_cache.stamp(kernel) != before
