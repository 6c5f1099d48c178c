"""Copies the top-level grammar/, specs/ and codegen/ into the wheel (as pimdsl/_data/),
so that an installed `pimc` works outside the checkout. Metadata is in pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DATA_DIRS = ("grammar", "specs", "codegen")


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        root = Path(__file__).resolve().parent
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "pimdsl" / "_data" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(root / name, target)


setup(cmdclass={"build_py": BuildPyWithData})
