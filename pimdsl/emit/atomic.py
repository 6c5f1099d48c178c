"""Writing outputs atomically: a file or a folder is whole and new, or untouched.

Everything is built beside its target under a hidden name that carries the writer's process id
(`.NAME.pimc-tmp-PID-XXXX`) and renamed over the target at the end. A failure or Ctrl-C removes
the temporary; a run killed outright leaves it, and the next write beside the same target removes
every such temporary whose process is gone. A folder is swapped by two renames (the old one aside,
the new one in); a run killed between the two leaves the old folder aside, and the next write
puts it back before anything else.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

_TAG = ".pimc-tmp-"


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


@contextmanager
def atomic_folder(path):
    """`with atomic_folder(d) as tmp: write into tmp`: at the end tmp replaces d as a whole (no
    file of the old d survives). An existing d is replaced only if it is empty or a pimc output
    (it has `summary.json`), so that `-o ~` never deletes a home folder."""
    target = Path(os.path.abspath(path))
    clean_stale(target)
    if target.exists() and not is_replaceable(target):
        raise FileExistsError(f"{path} exists and is not an output folder of pimc (no summary.json); "
                              "choose another folder or remove it")
    target.parent.mkdir(parents=True, exist_ok=True)
    # named before it exists, made inside the try: a signal that lands as it is made still removes it
    tmp = target.parent / f"{_prefix(target)}{os.getpid()}-{os.urandom(6).hex()}"
    old = None
    try:
        tmp.mkdir(mode=0o700)
        yield str(tmp)
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
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def is_replaceable(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and (
        (folder / "summary.json").is_file() or not any(folder.iterdir()))
