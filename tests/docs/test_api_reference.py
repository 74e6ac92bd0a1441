"""The docs site covers the front door and every page: the API reference and the nav."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from docs_sybil import DOCS, REPO

import simulacra

ENTRY = re.compile(r"^::: simulacra\.(?P<name>\w+)\s*$", re.MULTILINE)


def api_entries() -> dict[str, list[str]]:
    """``{name: [pages]}`` of every ``::: simulacra.NAME`` entry under docs/api/."""
    found: dict[str, list[str]] = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        for match in ENTRY.finditer(page.read_text(encoding="utf-8")):
            found.setdefault(match["name"], []).append(page.name)
    return found


def test_every_public_name_has_an_api_entry() -> None:
    documented = api_entries()
    # __version__ is a string: the API index describes it in words.
    assert "`simulacra.__version__`" in (DOCS / "api" / "index.md").read_text(encoding="utf-8")
    missing = sorted(set(simulacra.__all__) - set(documented) - {"__version__"})
    assert not missing, f"in simulacra.__all__, without a '::: simulacra.NAME' entry: {missing}"


def test_api_entries_are_public_and_unique() -> None:
    documented = api_entries()
    unknown = sorted(set(documented) - set(simulacra.__all__))
    assert not unknown, f"API entries for names not in simulacra.__all__: {unknown}"
    twice = {name: pages for name, pages in documented.items() if len(pages) > 1}
    assert not twice, f"names documented more than once: {twice}"


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    pages = sorted(page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md"))
    assert sorted(set(pages) - set(nav)) == [], "pages of docs/ missing from mkdocs.yml's nav"
    assert sorted(set(nav) - set(pages)) == [], "nav entries with no page in docs/"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_api_pages_are_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = set(_nav_pages(config["nav"]))
    api = {f"api/{page.name}" for page in (DOCS / "api").glob("*.md")}
    assert api <= nav
    assert len(api) > 10


def test_entry_pattern_finds_entries(tmp_path: Path) -> None:
    """The parser the coverage test relies on reads what mkdocstrings reads."""
    text = "# Kernel\n\n::: simulacra.Sim\n\n::: simulacra.Event\n    options:\n      x: 1\n"
    assert [m["name"] for m in ENTRY.finditer(text)] == ["Sim", "Event"]
