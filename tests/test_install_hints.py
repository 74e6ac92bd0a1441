"""Every hint that names an extra says how README.md installs it: from a clone.

simulacra is not on the package index, so ``pip install 'simulacra[report]'``
asks the index for a package that is not there. The hints say
``python -m pip install '.[report]'`` instead, through one function,
``simulacra._util.install_hint``; the examples (which do not import private
modules) write the same text by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulacra._util import install_hint

ROOT = Path(__file__).resolve().parents[1]
#: The package index's spelling of an extra: ``simulacra[report]``.
INDEX_FORM = re.compile(r"simulacra\[")
#: A hint the examples write by hand: the command and what follows it.
HAND_HINT = re.compile(r"python -m pip install '\.\[(\w+(?:,\w+)*)\]'( in a clone of simulacra)?")


def _sources() -> list[Path]:
    """The files whose messages and docstrings name extras."""
    files = [*(ROOT / "src" / "simulacra").rglob("*.py"), *(ROOT / "examples").rglob("*.py"),
             *(ROOT / "examples").rglob("*.md"), *(ROOT / "docs").glob("*.md"),
             ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    return sorted(files)


def test_the_hint_is_the_readme_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python -m pip install '.[llm]'" in readme
    assert install_hint("llm") == "python -m pip install '.[llm]' in a clone of simulacra"
    assert install_hint("parallel,plot").startswith("python -m pip install '.[parallel,plot]'")
    assert "\n" not in install_hint("report")


def test_no_message_names_the_package_index_form() -> None:
    """No `pip install 'simulacra[X]'` (nor `simulacra[X]` alone) is left anywhere."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in _sources()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if INDEX_FORM.search(line)]
    assert found == []


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_the_examples_hints_are_install_hint_by_hand(path: Path) -> None:
    """A hint in a string literal (not a ``docstring`` mention) is install_hint's text."""
    text = path.read_text(encoding="utf-8")
    for match in HAND_HINT.finditer(text):
        if text[match.end():match.end() + 2] == "``":  # a docstring's mention of the command
            continue
        assert match.group(0) == install_hint(match.group(1)), (path, match.group(0))


def test_the_guard_sees_the_old_form() -> None:
    assert INDEX_FORM.search("installed: pip install 'simulacra[report]'")
    assert INDEX_FORM.search("needs simulacra[view]")
    assert not INDEX_FORM.search(install_hint("report"))
