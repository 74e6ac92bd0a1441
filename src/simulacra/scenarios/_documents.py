r"""Source documents and their passages, with ids that say exactly what was cited.

A document is a text or Markdown file (or a PDF, with the ``pdf`` extra) read
as UTF-8 with its newlines made ``\\n``. It is split into passages on blank
lines and Markdown headings; a heading travels with the paragraph after it.
A passage's id is ``FILE#START-END:SHA256PREFIX``: its file (relative to the
documents' base directory, with ``/``), its character offsets into the
document's text (``text[START:END]``), and the first 12 hex digits of the
SHA-256 of that text. The split is a pure function of the text, so the same
document gives the same ids on every machine; an id whose file, offsets or
hash no longer match the document names a passage that has changed.

A quote checks against a passage when it appears in it verbatim, whitespace
aside (runs of spaces and newlines count as one space in both).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from simulacra._util import install_hint
from simulacra.errors import ScenarioError

__all__ = ["DOCUMENT_SUFFIXES", "Document", "Passage", "normalize_space", "parse_passage_id",
           "read_documents", "split_passages"]

#: The files a directory of documents contributes (any file named on its own is read).
DOCUMENT_SUFFIXES: Final = (".md", ".markdown", ".txt", ".text", ".pdf")

_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_ID = re.compile(r"^(?P<file>.+)#(?P<start>\d+)-(?P<end>\d+):(?P<hash>[0-9a-f]{12})$")
#: The form of a passage id, as messages spell it.
PASSAGE_ID_HINT: Final = "FILE#START-END:SHA256PREFIX"


def normalize_space(text: str) -> str:
    """*text* with each run of whitespace made one space, and none at either end."""
    return " ".join(text.split())


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Passage:
    """A span of a document: ``text == document.text[start:end]``.

    Attributes:
        file: The document's name relative to the documents' base, with ``/``.
        start: The offset of the first character.
        end: The offset after the last character.
        text: The passage's text.
    """

    file: str
    start: int
    end: int
    text: str

    @property
    def sha256(self) -> str:
        """The SHA-256 of the text (UTF-8), in hex."""
        return _sha256(self.text)

    @property
    def id(self) -> str:
        """``FILE#START-END:SHA256PREFIX``, the first 12 hex digits of :attr:`sha256`."""
        return f"{self.file}#{self.start}-{self.end}:{self.sha256[:12]}"

    def quotes(self, quote: str) -> bool:
        """Whether *quote* appears in the text verbatim, whitespace aside."""
        wanted = normalize_space(quote)
        return bool(wanted) and wanted in normalize_space(self.text)


def parse_passage_id(passage_id: str) -> tuple[str, int, int, str]:
    """``(file, start, end, sha256 prefix)`` of a passage id.

    Raises:
        ScenarioError: *passage_id* is not of the form ``FILE#START-END:SHA256PREFIX``.
    """
    found = _ID.match(str(passage_id))
    if found is None or int(found["start"]) > int(found["end"]):
        raise ScenarioError(f"passage id {passage_id!r} is not of the form {PASSAGE_ID_HINT} "
                            "(e.g. 'spec.md#120-385:0123456789ab')")
    return found["file"], int(found["start"]), int(found["end"]), found["hash"]


@dataclass(frozen=True, slots=True)
class Document:
    r"""A document's text, read once.

    Attributes:
        file: Its name relative to the documents' base, with ``/`` (what passage ids say).
        path: Where it was read from.
        text: Its text (UTF-8, newlines ``\\n``; a PDF's pages joined by a blank line).
    """

    file: str
    path: Path
    text: str

    @property
    def sha256(self) -> str:
        """The SHA-256 of the text (UTF-8), in hex."""
        return _sha256(self.text)

    def passages(self) -> list[Passage]:
        """The document split into passages (see :func:`split_passages`)."""
        return split_passages(self.text, self.file)

    def passage(self, start: int, end: int) -> Passage:
        """The passage at ``text[start:end]`` (whatever it holds now)."""
        return Passage(self.file, start, end, self.text[start:end])


def split_passages(text: str, file: str) -> list[Passage]:
    """Split *text* into passages on blank lines and Markdown headings.

    A block of non-blank lines is a passage; a heading line (``#`` to
    ``######``) starts a new one; a block of headings alone is joined to the
    block after it, so that a section's heading travels with its first
    paragraph. Leading and trailing whitespace is left out of each passage.
    """
    blocks: list[list[int]] = []  # [start, end, heading-only (1 or 0)]
    current: list[int] | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        begin = offset + len(line) - len(line.lstrip())
        finish = offset + len(line.rstrip())
        offset += len(line)
        if not stripped:
            current = None
            continue
        heading = bool(_HEADING.match(line))
        if current is None or (heading and not current[2]):
            current = [begin, finish, 1 if heading else 0]
            blocks.append(current)
        else:
            current[1] = finish
            current[2] = current[2] and (1 if heading else 0)
    merged: list[list[int]] = []
    pending: int | None = None  # the start of headings waiting for their paragraph
    for start, end, heading_only in blocks:
        if heading_only:
            pending = start if pending is None else pending
            continue
        merged.append([start if pending is None else pending, end])
        pending = None
    if pending is not None:  # headings at the very end: a passage of their own
        merged.append([pending, blocks[-1][1]])
    return [Passage(file, start, end, text[start:end]) for start, end in merged]


# -- reading ----------------------------------------------------------------------------


def _expand(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], Path]:
    """The files *paths* name (directories searched), and the base their names are relative to."""
    given = [Path(p) for p in paths]
    if not given:
        raise ScenarioError("no documents given: name text, Markdown or PDF files, or "
                            "directories holding them")
    files: list[Path] = []
    anchors: list[str] = []
    for path in given:
        if path.is_dir():
            found = sorted(
                (p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in
                 DOCUMENT_SUFFIXES and not any(part.startswith(".") for part in
                                                p.relative_to(path).parts)),
                key=lambda p: p.relative_to(path).as_posix())
            if not found:
                raise ScenarioError(f"{str(path)!r}: the directory holds no document "
                                    f"({', '.join(DOCUMENT_SUFFIXES)})")
            files.extend(found)
            anchors.append(os.path.abspath(path))
        elif path.exists():
            files.append(path)
            anchors.append(os.path.abspath(path.parent))
        else:
            raise ScenarioError(f"{str(path)!r}: cannot read the document (no such file or "
                                "directory); expected a text, Markdown or PDF file")
    base = Path(os.path.commonpath(anchors))
    unique: dict[str, Path] = {}
    for file in files:
        unique.setdefault(Path(os.path.abspath(file)).relative_to(base).as_posix(), file)
    return [unique[name] for name in sorted(unique)], base


def _pdf_text(path: Path) -> str:
    try:
        import pypdf  # noqa: PLC0415  (an optional extra, imported when a PDF is read)
    except ImportError:
        raise ScenarioError(f"{str(path)!r}: reading a PDF needs the pypdf package, which is "
                            f"not installed: {install_hint('pdf')}") from None
    try:
        reader = pypdf.PdfReader(str(path))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many kinds for a damaged file
        raise ScenarioError(f"{str(path)!r}: cannot read the PDF ({type(exc).__name__}: "
                            f"{exc}); expected a PDF with a text layer") from exc
    return "\n\n".join(page.strip() for page in pages)


def _read(path: Path) -> str:
    if path.suffix.lower() == ".pdf":
        return _pdf_text(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{str(path)!r}: cannot read the document "
                            f"({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{str(path)!r}: cannot read the document: byte {exc.start} is not "
                            "UTF-8; expected a UTF-8 text or Markdown file, or a PDF "
                            "(.pdf)") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def read_documents(paths: Sequence[str | os.PathLike[str]]) -> list[Document]:
    """Read the documents *paths* name: files, and directories searched for documents.

    Names are relative to the deepest directory that holds them all (a
    directory given counts as itself, a file as its parent), so
    ``read_documents(["docs"])`` and ``read_documents(sorted(Path("docs").glob("*.md")))``
    give the same names. Documents are sorted by name; a file named twice is read once.

    Raises:
        ScenarioError: A file cannot be read, is not UTF-8 (or not a readable
            PDF), holds no text, or a directory holds no document; the message
            names the file and what was expected.
    """
    files, base = _expand(paths)
    documents = []
    for path in files:
        name = Path(os.path.abspath(path)).relative_to(base).as_posix()
        text = _read(path)
        if not text.strip():
            raise ScenarioError(f"{str(path)!r}: the document holds no text to cite; expected "
                                "a text, Markdown or PDF file with words in it")
        documents.append(Document(name, path, text))
    return documents
