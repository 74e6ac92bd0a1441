"""An MkDocs hook: docstrings' Sphinx roles shown as code, not as ``:class:`X```.

The docstrings use reStructuredText roles (``:class:`~simulacra.SeedTree```,
``:meth:`run```), which help readers of the source and ``help()``; mkdocstrings
renders Google-style docstrings as Markdown, where a role is literal text. This
hook turns each rendered role into its code span, with ``~`` meaning "show the
last part of the dotted name" as Sphinx does. Registered in ``mkdocs.yml``.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):<code>(~?)([^<]*)</code>")


def _shown(match: re.Match[str]) -> str:
    short, name = match.group(1), match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, **_: Any) -> str:
    """The page's HTML with every rendered role as its code span."""
    return _ROLE.sub(_shown, html)
