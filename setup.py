"""Copies the top-level grammar/, specs/ and codegen/ into the wheel (as pimdsl/_data/), so that an
installed `pimc` works outside the checkout, and compiles the kernels ahead of time (pimdsl/aot.py) into
pimdsl/_aot/ (of the wheel, and of the checkout it is built from). A failed compile warns and the install goes on:
the kernels then compile through numba when first used. Metadata is in pyproject.toml."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("grammar", "specs", "codegen")
ROOT = Path(__file__).resolve().parent


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "pimdsl" / "_data" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(ROOT / name, target)
        if getattr(self, "editable_mode", False):
            self.compile_kernels(ROOT)
        else:
            self.compile_kernels(Path(self.build_lib))
            self.copy_kernels(Path(self.build_lib) / "pimdsl" / "_aot", ROOT / "pimdsl" / "_aot")

    @staticmethod
    def copy_kernels(built: Path, checkout: Path) -> None:
        """The builds also into the checkout (pip builds in it), for code run from there: the tests, and
        `python -m pimdsl...` in the checkout, import its pimdsl, not the installed copy (the same files,
        so the same stamps)."""
        try:
            checkout.mkdir(exist_ok=True)
            if not built.is_dir():
                return
            for stamp in built.glob("*.stamp"):        # no stamp beside an extension being replaced
                (checkout / stamp.name).unlink(missing_ok=True)
            # extensions first, then their stamps; each a new file, not rewritten in place (a running
            # process may have the old one mapped)
            for path in sorted(built.iterdir(), key=lambda p: p.suffix == ".stamp"):
                part = checkout / f".{path.name}.part"
                shutil.copy2(path, part)
                os.replace(part, checkout / path.name)
        except OSError as exc:
            print(f"pimdsl: kernels built ahead of time not copied into the checkout ({exc})", file=sys.stderr)

    @staticmethod
    def compile_kernels(root: Path) -> None:
        """pimdsl.aot.build on the package under `root`, in a process of its own."""
        # the package under root first, then the build's own environment (pip's isolation)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        code = "import sys; from pimdsl.aot import build; sys.exit(1 if build() else 0)"
        print("pimdsl: compiling the kernels ahead of time (about a minute)", file=sys.stderr)
        try:
            done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, timeout=1800)
        except (OSError, subprocess.SubprocessError) as exc:
            done = exc
        if getattr(done, "returncode", 1) != 0:
            print(f"warning: pimdsl: kernels not compiled ahead of time ({done}); they compile through "
                  "numba when first used (`python -m pimdsl.aot` retries)", file=sys.stderr)


class WithKernels(Distribution):
    def has_ext_modules(self):          # the wheel holds compiled extensions: tag it for this platform
        return True


setup(cmdclass={"build_py": BuildPyWithData}, distclass=WithKernels)
