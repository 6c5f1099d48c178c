"""jinja2 rendering of everything pimdsl writes (templates live in codegen/)."""
from __future__ import annotations

from functools import lru_cache

import jinja2

from ..frontend.resources import codegen_dir


@lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    # StrictUndefined: a template that names a missing field fails loudly (STYLE.md, 11).
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(codegen_dir())),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


def write_atomic(path, template: str, **context) -> None:
    """Stream a template into `path` through a temporary file, so that a failure or an
    interruption leaves no half-written file (ARCHITECTURE.md, pimc compile contract)."""
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".pimc-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            for chunk in environment().get_template(template).generate(**context):
                out.write(chunk)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)          # mkstemp creates 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
