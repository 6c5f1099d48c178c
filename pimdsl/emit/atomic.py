"""Writing outputs atomically: a file or a folder is whole and new, or untouched.

Everything is built beside its target under a hidden name that carries the writer's process id
(`.NAME.pimc-tmp-PID-XXXX`) and renamed over the target at the end. A failure or Ctrl-C removes
the temporary; a run killed outright leaves it, and the next write beside the same target removes
every such temporary whose process is gone. A folder is swapped by two renames (the old one aside,
the new one in); a run killed between the two leaves the old folder aside, and the next write
puts it back before anything else.

An output never replaces what it must not: a file is refused where the target is a folder, a device,
FIFO or socket (a rename would swap a regular file over the node) or one of the run's inputs; a
folder is replaced only when it is empty or holds exactly what a previous write listed in its
manifest (`MANIFEST`), so that `-o ~` or a folder that merely has a `summary.json` is never deleted.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..ir.errors import PimdslError
from ..ir.files import is_input

_TAG = ".pimc-tmp-"
MANIFEST = ".pimc-manifest"


class OutputRefused(OSError, PimdslError):
    """An output path pimc will not write; `strerror` says why (callers print `cannot write X: why`).
    An OSError, so that every writer's `except OSError` reports it like a full disk."""

    def __init__(self, why: str):
        OSError.__init__(self, errno.EEXIST, why)
        self.message, self.span, self.hint, self.others = why, None, None, ()


def refusal(path) -> str | None:
    """Why a file output may not be written at `path` (None: it may)."""
    try:
        info = os.stat(path)
    except OSError:
        return None                       # absent (or unreachable: the write itself says why)
    if stat.S_ISDIR(info.st_mode):
        return "it is a folder; give a file name"
    if not stat.S_ISREG(info.st_mode):
        return "it is a device, FIFO or socket, which pimc never replaces; give a file name"
    if is_input(path):
        return "it is an input of this run (the spec, an imported file, a trace or a data file); give another name"
    return None


def _prefix(target: Path) -> str:
    return f".{target.name}{_TAG}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(target: Path) -> None:
    """Remove the temporaries that killed runs left beside `target`."""
    prefix = _prefix(target)
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return
    for path in siblings:
        if not path.name.startswith(prefix):
            continue
        pid, _, rest = path.name[len(prefix):].partition("-")
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if rest.startswith("old-") and not target.exists():
            os.rename(path, target)            # killed between the two renames of a swap: the old output is back
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def _usual_mode(path: str, mode: int) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)                  # mkstemp/mkdtemp create 0600/0700


@contextmanager
def atomic_file(path, mode: str = "w", **open_args):
    """`with atomic_file(p) as out: out.write(...)`: p is replaced only when the block succeeds."""
    target = Path(os.path.abspath(path))
    why = refusal(target)
    if why:
        raise OutputRefused(why)
    clean_stale(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f"{_prefix(target)}{os.getpid()}-")
    try:
        with os.fdopen(fd, mode, **open_args) as out:
            yield out
        _usual_mode(tmp, 0o666)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def check_folder(path) -> None:
    """OutputRefused unless `path` may become an output folder (absent, empty or a previous output)."""
    target = Path(os.path.abspath(path))
    if (target.exists() or target.is_symlink()) and not is_replaceable(target):
        raise OutputRefused(f"it exists and is not an output folder of pimc (no {MANIFEST} listing "
                            "every file in it); choose another folder or remove it")


@contextmanager
def atomic_folder(path):
    """`with atomic_folder(d) as tmp: write into tmp`: at the end tmp replaces d as a whole (no
    file of the old d survives). An existing d is replaced only if it is empty or holds exactly the
    files its manifest lists (`is_replaceable`), so that `-o ~` never deletes a home folder."""
    target = Path(os.path.abspath(path))
    clean_stale(target)
    check_folder(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # named before it exists, made inside the try: a signal that lands as it is made still removes it
    tmp = target.parent / f"{_prefix(target)}{os.getpid()}-{os.urandom(6).hex()}"
    old = None
    try:
        tmp.mkdir(mode=0o700)
        yield str(tmp)
        _write_manifest(tmp)
        _usual_mode(str(tmp), 0o777)
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f"{_prefix(target)}{os.getpid()}-old-"))
            os.replace(target, old)                # an empty folder is replaced by a rename
        try:
            os.rename(tmp, target)
        except BaseException:
            if old is not None:
                os.replace(old, target)
                old = None
            raise
    finally:
        _remove(tmp)
        if old is not None:
            _remove(old)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())


def _write_manifest(folder: Path) -> None:
    files = [f for f in _files(folder) if f != MANIFEST]
    (folder / MANIFEST).write_text("# written by pimc: the files of this output folder, which the next\n"
                                   "# write to it replaces as a whole\n" + "".join(f"{f}\n" for f in files))


def is_replaceable(folder: Path) -> bool:
    """Empty, or holding only the files its manifest lists (and the manifest)."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    try:
        found = _files(folder)
        if not found and not any(folder.iterdir()):
            return True
        listed = (folder / MANIFEST).read_text().splitlines() if (folder / MANIFEST).is_file() else None
    except OSError:
        return False
    if listed is None:
        return False
    return set(found) <= {*(l for l in listed if l and not l.startswith("#")), MANIFEST}


def _remove(folder: Path) -> None:
    """Remove a temporary or replaced folder, read-only parts included (a previous output may be)."""
    def writable_again(func, path, _):
        os.chmod(os.path.dirname(path), 0o700)
        func(path)
    try:
        shutil.rmtree(folder, onerror=writable_again)
    except OSError:
        pass
