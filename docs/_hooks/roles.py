"""An MkDocs hook: docstrings' reStructuredText shown as Sphinx would show it.

The docstrings use reStructuredText roles (``:class:`~simulacra.SeedTree```,
``:meth:`run```) and literal-block markers (``Example::`` before an indented
block), which help readers of the source and ``help()``; mkdocstrings renders
Google-style docstrings as Markdown, where both are literal text. This hook
turns each rendered role into its code span, with ``~`` meaning "show the last
part of the dotted name", and a paragraph's closing ``::`` into ``:`` (a lone
``::`` goes), as Sphinx does. Registered in ``mkdocs.yml``.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):<code>(~?)([^<]*)</code>")


def _shown(match: re.Match[str]) -> str:
    short, name = match.group(1), match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


#: A paragraph that is only ``::``, and one that ends with it.
_LONE_MARKER = re.compile(r"<p>::</p>\n?")
_END_MARKER = re.compile(r"::</p>")


def on_page_content(html: str, **_: Any) -> str:
    """The page's HTML with every rendered role as its code span, and no ``::`` markers."""
    html = _LONE_MARKER.sub("", _ROLE.sub(_shown, html))
    return _END_MARKER.sub(":</p>", html)
