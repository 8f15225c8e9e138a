"""The wheel's packages, found rather than listed: one import package, ``monobuild``, whose
subpackages are the repository's top-level folders (``PACKAGE_DIR``); every folder with an
``__init__.py`` below one of them is a subpackage the wheel must hold. The rest of the metadata
is in pyproject.toml."""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = {"monobuild": "monobuild", "monobuild.compiler": "compiler", "monobuild.runtime": "runtime",
               "monobuild.integrations": "integrations",
               "monobuild.cli": "cli", "monobuild.bench": "bench", "monobuild.recipes": "recipes",
               "monobuild.schedules": "schedules"}


def packages() -> list[str]:
    found = set()
    for package, folder in PACKAGE_DIR.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join((package, *init.parent.relative_to(ROOT / folder).parts)))
    return sorted(found)


setup(package_dir=PACKAGE_DIR, packages=packages())
