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
with pypdf's text extractor only, bounded by ``PDF_MAX_PAGES``. Every extractor
stops at ``max_chars`` of text (:class:`TextTooLong`). Markdown and text run here
in time linear in their size; HTML and PDF parsers are not linear by
construction (pypdf inflates streams), so the index runs them in the confined
worker of :mod:`.extract_worker` under a time and memory limit
(``CONFINED_SUFFIXES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable, TypeVar, overload

__all__ = ["Line", "Chunk", "extract_lines", "chunk_lines", "slugify", "SUFFIXES", "CONFINED_SUFFIXES",
           "ExtractionError", "ExtractionLimitError", "ExtractionTimeout", "TextTooLong", "ExtractionLimits",
           "CHUNK_MAX_CHARS", "PDF_MAX_PAGES", "TEXT_MAX_CHARS", "EXTRACT_TIMEOUT_S", "REFRESH_BUDGET_S",
           "EXTRACT_MEMORY_BYTES", "heading", "text_chunks", "MARKDOWN_SUFFIXES", "ChunkMaker"]

SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".pdf")
"""File types the docs connector indexes; other files under a root are skipped."""
CONFINED_SUFFIXES = (".html", ".htm", ".pdf")
"""Extracted only in the confined worker: their parsers' cost is not bounded by the file's size."""
MARKDOWN_SUFFIXES = (".md", ".markdown")
"""Files whose ATX headings split them into sections (other text files are one section)."""
TEXT_MAX_CHARS = 8 * 1024 * 1024
"""Text kept from one file (each line counts its length + 1); more is a skip, not a cut: a page of
business prose is ~3,000 characters, so 8 MiB is thousands of pages, or a decompression bomb."""
EXTRACT_TIMEOUT_S = 5.0
"""Wall-clock seconds for one file in the confined worker: a 100-page business PDF takes ~1 s here."""
REFRESH_BUDGET_S = 20.0
"""Seconds of HTML/PDF extraction (worker time) per refresh; such files past it wait for the next
refresh, so a tool call that re-checks the docs waits about this long on them at most."""
EXTRACT_MEMORY_BYTES = 1024 * 1024 * 1024
"""The worker's address space: Python and pypdf take ~150 MB of it; a stream inflating past the
rest raises MemoryError in the worker (the file is skipped), never in the kernel."""
EXTRACT_MEMORY_MIN_BYTES = 256 * 1024 * 1024
"""The least address space a worker may be given: below it the interpreter cannot start."""
CHUNK_MAX_CHARS = 1_600
"""A section longer than this is cut into parts, so ``docs__read`` of one part stays inline (the
formatter inlines strings up to 2,000 characters; the header takes the rest)."""
PDF_MAX_PAGES = 500
"""Pages read from one PDF; a longer file is indexed up to here and reported as cut."""
SLUG_MAX_CHARS = 60
"""Slugs are cut here so citation ids stay short."""

_HEADING_START_RE = re.compile(r"(#{1,6})\s+")
_FENCE_RE = re.compile(r"\s*(```|~~~)")
_SLUG_WORD_RE = re.compile(r"[a-z0-9]+")
_Made = TypeVar("_Made")
ChunkMaker = Callable[[str, str, tuple[str, ...], int, int, str], _Made]
"""What :func:`text_chunks` builds each chunk with: called as ``make(path, slug, trail, start_line,
end_line, text)`` (:class:`Chunk` itself, or a maker of the index's rows)."""


class ExtractionError(ValueError):
    """A file could not be read as its type says (named with the reason)."""


class ExtractionLimitError(ExtractionError):
    """Extraction was stopped by a limit (time, memory, text size); the message names the limit."""


class TextTooLong(ExtractionLimitError):
    """The file's text is over ``max_chars``."""

    def __init__(self, max_chars: int) -> None:
        super().__init__(f"text over {_size(max_chars)}")
        self.max_chars = max_chars


class ExtractionTimeout(ExtractionLimitError):
    """The file ran past ``seconds`` of wall-clock time in the worker (the worker was killed)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"extraction exceeded {seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True)
class ExtractionLimits:
    """Bounds on extracting files; the fields are the docs connector's options of the same names."""

    extract_timeout_s: float = EXTRACT_TIMEOUT_S
    """Wall-clock seconds per file in the worker."""
    refresh_budget_s: float = REFRESH_BUDGET_S
    """Worker seconds per refresh; later HTML/PDF files wait for the next refresh."""
    extract_memory_bytes: int = EXTRACT_MEMORY_BYTES
    """The worker's address-space limit."""
    text_max_chars: int = TEXT_MAX_CHARS
    """Text kept per file."""

    def __post_init__(self) -> None:
        for name in ("extract_timeout_s", "refresh_budget_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
                raise ValueError(f"{name} must be seconds in (0, 86400], got {value!r}")
        memory = self.extract_memory_bytes
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < EXTRACT_MEMORY_MIN_BYTES:
            raise ValueError(f"extract_memory_bytes must be an int of at least {EXTRACT_MEMORY_MIN_BYTES} "
                             f"(256 MiB: the interpreter and pypdf need ~150 MB), got {memory!r}")
        if isinstance(self.text_max_chars, bool) or not isinstance(self.text_max_chars, int) \
                or self.text_max_chars < 1:
            raise ValueError(f"text_max_chars must be a positive int, got {self.text_max_chars!r}")

    def key(self) -> str:
        """The limits as text: a file skipped under other limits is tried again."""
        return f"{self.extract_timeout_s:g}s/{self.extract_memory_bytes}B/{self.text_max_chars}c"


def _size(chars: int) -> str:
    mib = chars / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{chars:,} characters"


def heading(text: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line (``## Refunds ##`` -> (2, "Refunds")), else None.

    Written without a backtracking pattern over the title: ``^(#{1,6})\\s+(.+?)\\s*#*\\s*$``
    took 10 s on one 2 KB line of spaces (cubic backtracking).
    """
    match = _HEADING_START_RE.match(text)
    if match is None:
        return None
    rest = text[match.end():].rstrip()
    if not rest:
        return None
    title = rest.rstrip("#").rstrip()
    return len(match.group(1)), (title or rest)


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
    # the runs of [a-z0-9] joined by "-": what replacing the runs between them by "-" and stripping "-" gives,
    # in one findall (a third faster than sub, strip: one call a chunk)
    slug = "-".join(_SLUG_WORD_RE.findall(text.lower()))[:SLUG_MAX_CHARS].strip("-")
    return slug or "section"


# --------------------------------------------------------------------------- extraction


def extract_lines(path: Path, data: bytes, *, max_chars: int = TEXT_MAX_CHARS,
                  max_pages: int = PDF_MAX_PAGES) -> tuple[list[Line], str]:
    """(lines, note) for a file's bytes, in this process; the note says what was cut, if anything.

    Raises :class:`ExtractionError` for a file that is not what its suffix says and
    :class:`TextTooLong` when the text (each line's length + 1) passes ``max_chars``.
    HTML and PDF should go through :mod:`.extract_worker` (the index does that).
    """
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return _pdf_lines(path, data, max_chars, max_pages)
    if len(data) > 4 * max_chars + 4:  # UTF-8 needs at least one byte per character: over the cap for sure
        raise TextTooLong(max_chars)
    text = data.decode("utf-8", errors="replace")
    if suffix in (".html", ".htm"):
        lines = _html_lines(text)
    else:
        raw = text.splitlines()
        lines = _markdown_lines(raw) if suffix in MARKDOWN_SUFFIXES else [Line(i, t) for i, t in enumerate(raw, 1)]
    if sum(len(line.text) + 1 for line in lines) > max_chars:
        raise TextTooLong(max_chars)
    return lines, ""


def _markdown_lines(lines: list[str]) -> list[Line]:
    out: list[Line] = []
    fenced = False
    for number, text in enumerate(lines, 1):
        if ("`" in text or "~" in text) and _FENCE_RE.match(text):
            fenced = not fenced
        found = heading(text) if not fenced and "#" in text else None  # no "#": not a heading (cheap first check)
        out.append(Line(number, text, found[0] if found else 0))
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
        self._has_text = False

    def _flush(self) -> None:
        text = " ".join("".join(self._buffer).split())
        if text:
            self.lines.append(Line(self._start, ("#" * self._heading + " " + text) if self._heading else text,
                                   self._heading))
        self._buffer = []
        self._has_text = False

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
        if not self._has_text and data.strip():
            leading = data[: len(data) - len(data.lstrip())]
            self._start = self.getpos()[0] + leading.count("\n")
            self._has_text = True
        self._buffer.append(data)


def _html_lines(text: str) -> list[Line]:
    parser = _HTMLText()
    parser.feed(text)
    parser.close()
    parser._flush()
    return parser.lines


def _pdf_lines(path: Path, data: bytes, max_chars: int, max_pages: int) -> tuple[list[Line], str]:
    import io

    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError as exc:  # pragma: no cover - pypdf is a dependency
        raise ExtractionError(f"{path.name}: reading PDFs needs pypdf ({exc})") from exc
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = reader.pages
        count = len(pages)
        out: list[Line] = []
        number = 0
        size = 0
        for index in range(min(count, max_pages)):
            number += 1
            out.append(Line(number, f"Page {index + 1}", 1))
            text = pages[index].extract_text() or ""
            size += len(text) + 12
            if size > max_chars:
                raise TextTooLong(max_chars)
            for line in text.splitlines():
                number += 1
                out.append(Line(number, line))
    except TextTooLong:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, AttributeError, IndexError,
            RecursionError) as exc:
        raise ExtractionError(f"{path.name}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    note = f"{path.name}: only the first {max_pages} of {count} pages indexed" if count > max_pages else ""
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
            found = heading(line.text)
            name = found[1] if found else line.text.strip()
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


# --------------------------------------------------------------------------- Markdown and text in one pass


@overload
def text_chunks(path: str, suffix: str, data: bytes, *, max_chars: int = TEXT_MAX_CHARS) -> list[Chunk]: ...


@overload
def text_chunks(path: str, suffix: str, data: bytes, *, max_chars: int = TEXT_MAX_CHARS,
                make: ChunkMaker[_Made]) -> list[_Made]: ...


def text_chunks(path: str, suffix: str, data: bytes, *, max_chars: int = TEXT_MAX_CHARS,
                make: Callable[..., Any] = Chunk) -> list[Any]:
    """The chunks of a Markdown or text file's bytes: ``chunk_lines(path, extract_lines(...)[0])``, faster.

    Same chunks, slugs, trails, line numbers and :class:`TextTooLong` as the two-step path
    (``tests/test_knowledge_fast_index.py`` compares them on hostile files), without a
    :class:`Line` per line: headings are looked for only on lines starting with ``#``, the fence
    scan runs only when the text holds a backtick or tilde, and a section is joined in one go
    unless it is over ``CHUNK_MAX_CHARS``. ``suffix`` (lowercase, with its dot) picks Markdown
    (:data:`MARKDOWN_SUFFIXES`) or plain text; HTML and PDF go through :func:`extract_lines`.
    ``make`` builds each chunk from the same six values (:data:`ChunkMaker`): the index passes a
    maker of its table rows, so no :class:`Chunk` is built only to be taken apart.
    """
    if suffix in CONFINED_SUFFIXES:
        raise ValueError(f"text_chunks reads Markdown and text files, not {suffix!r} (use extract_lines)")
    if len(data) > 4 * max_chars + 4:  # UTF-8 needs at least one byte per character: over the cap for sure
        raise TextTooLong(max_chars)
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    if sum(map(len, lines)) + len(lines) > max_chars:
        raise TextTooLong(max_chars)
    marks = _heading_marks(lines, "`" in text or "~" in text) if suffix in MARKDOWN_SUFFIXES else []
    chunks: list[Any] = []
    used: dict[str, int] = {}
    starts = [index for index, _, _ in marks]
    if not starts or starts[0] > 0:  # text above the first heading: a section with no trail
        _section_chunks(chunks, used, make, path, (), lines, 0, starts[0] if starts else len(lines), False)
    levels: list[int] = []  # the trail's heading levels, strictly increasing, and its titles
    titles: list[str] = []
    for number, (start, level, title) in enumerate(marks):
        while levels and levels[-1] >= level:  # what chunk_lines keeps: the headings above this level
            levels.pop()
            titles.pop()
        levels.append(level)
        titles.append(title)
        end = marks[number + 1][0] if number + 1 < len(marks) else len(lines)
        _section_chunks(chunks, used, make, path, tuple(titles), lines, start, end, True)
    return chunks


def _heading_marks(lines: list[str], fences: bool) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each ATX heading outside fenced code, in order.

    ``fences``: whether the text holds a backtick or tilde (without one no line opens a fence).
    heading() needs "#" as the first character, so no other line is looked at.
    """
    if fences:
        candidates = []
        fenced = False
        for index, text in enumerate(lines):
            if ("`" in text or "~" in text) and _FENCE_RE.match(text):
                fenced = not fenced
            elif not fenced and text[:1] == "#":  # a fence line never starts with "#"
                candidates.append(index)
    else:
        candidates = [index for index, text in enumerate(lines) if text[:1] == "#"]
    marks = []
    for index in candidates:
        found = heading(lines[index])
        if found is not None:
            marks.append((index, found[0], found[1]))
    return marks


def _section_chunks(chunks: list[Any], used: dict[str, int], make: Callable[..., Any], path: str,
                    trail: tuple[str, ...], lines: list[str], start: int, end: int, headed: bool) -> None:
    """Append the chunks of ``lines[start:end]`` (a heading line first when ``headed``), as chunk_lines does."""
    whole = "\n".join(lines[start:end])  # joined once: the emptiness check, the size and (one part) the text
    if not (whole[len(lines[start]) + 1:] if headed else whole).strip():
        return  # a heading right above a subheading: the trail of the next chunk carries it
    base = slugify(trail[-1]) if trail else "top"
    single = len(whole) + 1 <= CHUNK_MAX_CHARS  # each line counts its length + 1
    parts = [(start, end)] if single else _part_bounds(lines, start, end)
    for index, (first, last) in enumerate(parts):
        slug = base if index == 0 else f"{base}-part-{index + 1}"
        used[slug] = used.get(slug, 0) + 1
        if used[slug] > 1:
            slug = f"{slug}-{used[slug]}"
        top, bottom = first, last - 1  # the first and last lines with text (the part's ends when none has)
        while top < last and not lines[top].strip():
            top += 1
        if top == last:
            top = first
        else:
            while not lines[bottom].strip():
                bottom -= 1
        text = whole.strip() if single else "\n".join(lines[first:last]).strip()
        chunks.append(make(path, slug, trail, top + 1, bottom + 1, text))


def _part_bounds(lines: list[str], start: int, end: int) -> list[tuple[int, int]]:
    """``lines[start:end]`` cut as :func:`_parts` cuts a section, as (first, end) index pairs."""
    bounds: list[tuple[int, int]] = []
    first, size = start, 0
    for index in range(start, end):
        length = len(lines[index]) + 1
        if index > first and size + length > CHUNK_MAX_CHARS:
            bounds.append((first, index))
            first, size = index, 0
        size += length
    bounds.append((first, end))
    return bounds
