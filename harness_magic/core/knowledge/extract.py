"""Text extraction and heading-split chunking for business documents.

:func:`extract_lines` turns one file into :class:`Line` s (source line number,
text, heading level or 0) by its suffix:

* ``.md`` / ``.markdown``: ATX headings (``#`` .. ``######``) outside fenced code;
* ``.txt``: no headings (paragraphs are chunked by size);
* ``.html`` / ``.htm``: ``<h1>``..``<h6>`` become headings, ``<script>``/``<style>``
  are dropped, line numbers are those of the HTML source (stdlib ``html.parser``);
* ``.pdf``: text of each page through pypdf; each page starts a "Page N" section,
  line numbers count lines of the extracted text.

:func:`chunk_lines` splits lines into :class:`Chunk` s at headings: each chunk
has the file's id path, the heading trail (``("Refunds", "Partner share")``), a
slug unique in the file (``partner-share``, ``partner-share-2``) and the first and
last source line. Sections longer than ``CHUNK_MAX_CHARS`` are cut at line
boundaries into ``<slug>``, ``<slug>-part-2``, ...

Extraction never executes content: HTML is parsed, not rendered; PDFs are read
with pypdf's text extractor only, bounded by ``PDF_MAX_PAGES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["Line", "Chunk", "extract_lines", "chunk_lines", "slugify", "SUFFIXES", "ExtractionError",
           "CHUNK_MAX_CHARS", "PDF_MAX_PAGES"]

SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".pdf")
"""File types the docs connector indexes; other files under a root are skipped."""
CHUNK_MAX_CHARS = 1_600
"""A section longer than this is cut into parts, so ``docs__read`` of one part stays inline (the
formatter inlines strings up to 2,000 characters; the header takes the rest)."""
PDF_MAX_PAGES = 500
"""Pages read from one PDF; a longer file is indexed up to here and reported as cut."""
SLUG_MAX_CHARS = 60
"""Slugs are cut here so citation ids stay short."""

_HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


class ExtractionError(ValueError):
    """A file could not be read as its type says (named with the reason)."""


@dataclass(frozen=True)
class Line:
    """One line of extracted text."""

    number: int
    """1-based line in the source (for PDFs: in the extracted text)."""
    text: str
    heading: int = 0
    """Heading level 1-6, or 0 for body text."""


@dataclass(frozen=True)
class Chunk:
    """A section of a document: the unit of retrieval and citation."""

    path: str
    """The file's id path (posix, ``runbooks/refunds.md``)."""
    slug: str
    """Unique within the file: the ``#fragment`` of the citation id."""
    trail: tuple[str, ...]
    """Headings from the top level down to this section."""
    start_line: int
    end_line: int
    text: str
    """The section's text, its heading line included."""

    @property
    def source_id(self) -> str:
        return f"doc:{self.path}#{self.slug}"

    @property
    def title(self) -> str:
        return " > ".join(self.trail) if self.trail else self.path


def slugify(text: str) -> str:
    """``"Partner share (EU)"`` -> ``"partner-share-eu"``; ``"section"`` when nothing is left."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:SLUG_MAX_CHARS].strip("-")
    return slug or "section"


# --------------------------------------------------------------------------- extraction


def extract_lines(path: Path, data: bytes) -> tuple[list[Line], str]:
    """(lines, note) for a file's bytes; the note says what was cut, if anything."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return _pdf_lines(path, data)
    text = data.decode("utf-8", errors="replace")
    if suffix in (".html", ".htm"):
        return _html_lines(text), ""
    lines = text.splitlines()
    if suffix in (".md", ".markdown"):
        return _markdown_lines(lines), ""
    return [Line(i, t) for i, t in enumerate(lines, 1)], ""


def _markdown_lines(lines: list[str]) -> list[Line]:
    out: list[Line] = []
    fenced = False
    for number, text in enumerate(lines, 1):
        if _FENCE_RE.match(text):
            fenced = not fenced
        match = None if fenced else _HEADING_RE.match(text)
        out.append(Line(number, text, len(match.group(1)) if match else 0))
    return out


_BLOCK_TAGS = {"p", "div", "li", "tr", "br", "table", "ul", "ol", "section", "article", "pre", "blockquote",
               "dt", "dd", "td", "th", "hr"}
_SKIP_TAGS = {"script", "style", "head", "template", "noscript"}


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[Line] = []
        self._buffer: list[str] = []
        self._start = 1
        self._heading = 0
        self._skip = 0

    def _flush(self) -> None:
        text = " ".join("".join(self._buffer).split())
        if text:
            self.lines.append(Line(self._start, ("#" * self._heading + " " + text) if self._heading else text,
                                   self._heading))
        self._buffer = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = int(tag[1])
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self._heading = 0
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if data.strip() and not "".join(self._buffer).strip():
            leading = data[: len(data) - len(data.lstrip())]
            self._start = self.getpos()[0] + leading.count("\n")
        self._buffer.append(data)


def _html_lines(text: str) -> list[Line]:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    parser._flush()
    return parser.lines


def _pdf_lines(path: Path, data: bytes) -> tuple[list[Line], str]:
    import io

    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError as exc:  # pragma: no cover - pypdf is a dependency
        raise ExtractionError(f"{path.name}: reading PDFs needs pypdf ({exc})") from exc
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = reader.pages
        count = len(pages)
        out: list[Line] = []
        number = 0
        for index in range(min(count, PDF_MAX_PAGES)):
            number += 1
            out.append(Line(number, f"Page {index + 1}", 1))
            for text in (pages[index].extract_text() or "").splitlines():
                number += 1
                out.append(Line(number, text))
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ExtractionError(f"{path.name}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    note = f"{path.name}: only the first {PDF_MAX_PAGES} of {count} pages indexed" if count > PDF_MAX_PAGES else ""
    return out, note


# --------------------------------------------------------------------------- chunking


def chunk_lines(path: str, lines: list[Line]) -> list[Chunk]:
    """Heading-split chunks of one file, in order; empty sections are dropped."""
    sections: list[tuple[tuple[str, ...], list[Line]]] = []
    trail: list[tuple[int, str]] = []
    current: list[Line] = []
    for line in lines:
        if line.heading:
            if current:
                sections.append((tuple(t for _, t in trail), current))
            title = _HEADING_RE.match(line.text)
            name = title.group(2) if title else line.text.strip()
            trail = [(lvl, t) for lvl, t in trail if lvl < line.heading] + [(line.heading, name)]
            current = [line]
        else:
            current.append(line)
    if current:
        sections.append((tuple(t for _, t in trail), current))
    chunks: list[Chunk] = []
    used: dict[str, int] = {}
    for section_trail, section in sections:
        if not any(l.text.strip() for l in section if not l.heading):
            continue  # a heading right above a subheading: the trail of the next chunk carries it
        base = slugify(section_trail[-1]) if section_trail else "top"
        for index, part in enumerate(_parts(section)):
            slug = base if index == 0 else f"{base}-part-{index + 1}"
            used[slug] = used.get(slug, 0) + 1
            if used[slug] > 1:
                slug = f"{slug}-{used[slug]}"
            filled = [l for l in part if l.text.strip()] or part
            text = "\n".join(l.text for l in part).strip()
            chunks.append(Chunk(path, slug, section_trail, filled[0].number, filled[-1].number, text))
    return chunks


def _parts(section: list[Line]) -> list[list[Line]]:
    parts: list[list[Line]] = [[]]
    size = 0
    for line in section:
        if parts[-1] and size + len(line.text) + 1 > CHUNK_MAX_CHARS:
            parts.append([])
            size = 0
        parts[-1].append(line)
        size += len(line.text) + 1
    return parts
