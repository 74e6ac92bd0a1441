"""Every Python block in docs/ runs as a test, through Sybil: the configuration.

Each page is one Sybil document: its blocks run in order and share one
namespace, as a reader running them one after another would. A block that
needs a server, or a run too long for the suite, is preceded by
``<!-- skip: next "why" -->`` (the reason is required: see
``test_doc_blocks.py``). Set-up a page needs but does not show goes in an
``<!-- invisible-code-block: python ... -->`` comment, which the site does not
render.

``pyproject.toml`` sends pytest into ``tests/`` only, so it never walks
``docs/``; ``conftest.py`` beside this file hangs the pages under
``tests/docs`` instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.example import NotEvaluated
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def doc_pages() -> list[Path]:
    """Every Markdown page under docs/, in a stable order."""
    return sorted(DOCS.rglob("*.md"))


def _page_module(namespace: dict[str, Any]) -> str:
    """Make *namespace* importable, as a reader's script is as ``__main__``.

    Models name their agent classes and model functions by ``module:qualname``
    (so that worker processes can import them); a class defined in a bare
    ``exec`` namespace claims the module ``builtins``, which does not hold it.
    """
    name = f"simulacra_docs_page_{len(_PAGE_MODULES)}"
    module = types.ModuleType(name)

    def lookup(attribute: str) -> Any:
        try:
            return namespace[attribute]
        except KeyError:
            raise AttributeError(attribute) from None

    module.__getattr__ = lookup  # type: ignore[method-assign]
    sys.modules[name] = module
    _PAGE_MODULES.append(name)
    return name


_PAGE_MODULES: list[str] = []


def _setup(namespace: dict[str, Any]) -> None:
    """Run each page as a module of its own, in a fresh working directory.

    The pages are written for a reader at the root of a checkout: paths such as
    ``examples/bank.py`` resolve through a link to the repository's examples.
    """
    namespace["__name__"] = _page_module(namespace)
    namespace["__docs_cwd__"] = os.getcwd()
    namespace["__docs_tmp__"] = tmp = tempfile.mkdtemp(prefix="simulacra-docs-")
    (Path(tmp) / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    os.chdir(tmp)
    sys.path.insert(0, tmp)


def _teardown(namespace: dict[str, Any]) -> None:
    os.chdir(namespace["__docs_cwd__"])
    sys.path.remove(namespace["__docs_tmp__"])
    shutil.rmtree(namespace["__docs_tmp__"], ignore_errors=True)
    sys.modules.pop(namespace["__name__"], None)


class FileBlocks:
    """Blocks a page says to save as a file, tested as the reader uses them.

    ``<!-- save-as: NAME.py -->`` before a Python block: the block is a module
    the page imports (its functions must be importable by worker processes);
    it is written to NAME.py in the page's working directory, which is on
    ``sys.path``, and not run.

    ``<!-- run-as-script: NAME.py -->`` before a Python block: the block is a
    script (worker processes import it again, so it has an ``if __name__ ==
    "__main__":`` guard); it is written to NAME.py and run by this Python,
    which must exit 0.
    """

    timeout = 120.0

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer("save-as|run-as-script", arguments=r"\S+")
        self.pending: dict[Document, tuple[str, str]] = {}

    def __call__(self, document: Document) -> Any:
        for lexed in self.lexer(document):
            what = (lexed.lexemes["directive"], lexed.lexemes["arguments"])
            yield Region(lexed.start, lexed.end, what, self.arm)

    def arm(self, example: Example) -> None:
        self.pending[example.document] = example.parsed
        example.document.push_evaluator(self.take)

    def take(self, example: Example) -> None:
        if not isinstance(example.parsed, str):
            raise NotEvaluated
        document = example.document
        document.pop_evaluator(self.take)
        directive, name = self.pending.pop(document)
        Path(name).write_text(example.parsed, encoding="utf-8")
        if directive == "save-as":
            return
        done = subprocess.run(
            [sys.executable, name], capture_output=True, text=True, timeout=self.timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"python {name} exited {done.returncode}\n"
                f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
            )


SYBIL = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser(), FileBlocks()],
    path=str(DOCS),
    patterns=["*.md", "**/*.md"],
    setup=_setup,
    teardown=_teardown,
)
