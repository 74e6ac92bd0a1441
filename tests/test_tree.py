"""``tests/`` mirrors ``src/simulacra/``: one folder per package, three for what crosses them.

The rule (CONTRIBUTING.md, "Tests"):

- ``tests/<package>/`` holds the tests of ``src/simulacra/<package>/``, the package whose
  behaviour they check, and the helper modules (``_*.py``) those tests share.
- Three folders hold what belongs to no one package: ``tests/examples/`` (tests whose
  subject is a shipped example), ``tests/integration/`` (end-to-end checks across
  packages, such as a fresh install) and ``tests/docs/`` (the docs' code blocks).
- The top of ``tests/`` holds ``conftest.py`` and the tests of the top of
  ``src/simulacra/``: its front door, its top-level modules and the tree as a whole.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGES = ROOT / "src" / "simulacra"

#: The folders of tests that cross packages, and what each holds.
CROSS_CUTTING = {
    "docs": "every Python block of docs/ and the API reference",
    "examples": "tests whose subject is a shipped example under examples/",
    "integration": "end-to-end checks across packages (a fresh install, the README)",
}

#: The files at the top of tests/, and the top of src/simulacra/ that each checks.
TOP_LEVEL = {
    "conftest.py": "fixtures every folder uses",
    "test_bad_input.py": "errors.py: the exception tree, and misuse raising from it",
    "test_install_hints.py": "_util.py: install_hint, and every hint that names an extra",
    "test_layers.py": "the tree as a whole: who may import whom",
    "test_public_api.py": "__init__.py: the front door",
    "test_tree.py": "the tree as a whole: tests/ mirrors src/simulacra/",
}


def _has_python(folder: Path) -> bool:
    """Whether *folder* holds a Python file (a folder left with only caches does not count)."""
    return any("__pycache__" not in path.parts for path in folder.rglob("*.py"))


def _packages() -> set[str]:
    return {p.name for p in PACKAGES.iterdir() if (p / "__init__.py").is_file()}


def _test_folders() -> set[str]:
    return {p.name for p in TESTS.iterdir()
            if p.is_dir() and not p.name.startswith((".", "__")) and _has_python(p)}


def test_every_test_folder_is_a_package_or_a_cross_cutting_folder() -> None:
    strays = _test_folders() - _packages() - set(CROSS_CUTTING)
    assert not strays, (
        f"tests/{sorted(strays)[0]}/ matches no package of src/simulacra/: move its tests to "
        f"the folder of the package each one checks, or to one of {sorted(CROSS_CUTTING)}")


def test_every_package_has_a_test_folder() -> None:
    missing = _packages() - _test_folders()
    assert not missing, f"no tests/<package>/ for {sorted(missing)}"


def test_the_top_of_tests_holds_only_the_tests_of_the_top_of_src() -> None:
    loose = {p.name for p in TESTS.glob("*.py")} - set(TOP_LEVEL)
    assert not loose, (
        f"tests/{sorted(loose)[0]} belongs in the folder of the package it tests, or in one "
        f"of {sorted(CROSS_CUTTING)}")


def test_the_packages_and_folders_named_here_exist() -> None:
    assert set(CROSS_CUTTING) <= _test_folders()
    assert set(TOP_LEVEL) <= {p.name for p in TESTS.glob("*.py")}
    assert not set(CROSS_CUTTING) & _packages()  # a package named like one would be hidden
