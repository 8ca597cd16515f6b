"""Document snippets for reading: the heading trail once, as a breadcrumb, not again as ``##`` markup.

A docs chunk's text starts with its own heading line (``## Pitfalls``) and its
title is the heading trail (``Partner share > Pitfalls``). Shown together, the
heading reads twice, once as raw Markdown. :func:`snippet_line` cleans a
one-line search snippet, :func:`section_text` a whole section's text; both only
remove markup and headings the trail already shows, never other words.
"""

from __future__ import annotations

import re
from typing import Sequence

__all__ = ["snippet_line", "section_text"]

_LEADING_MARK = re.compile(r"#{1,6}[ \t]+")
"""An ATX heading marker at the start of a (flattened) snippet."""
_INNER_MARK = re.compile(r"(?:(?<=\s)|^)#{1,6}(?=\s)")
"""A heading marker inside flattened text: ``#`` to ``######`` standing alone (``#42`` and ``C#`` are not)."""
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
"""A Markdown ATX heading line; group 1 is its text."""


def _strip_trail_prefix(text: str, trail: Sequence[str]) -> str | None:
    """``text`` without a leading item of ``trail`` (a whole-word match), or None when it does not start with one."""
    for item in sorted((t for t in trail if t), key=len, reverse=True):
        if text.startswith(item) and (len(text) == len(item) or text[len(item)].isspace()):
            return text[len(item):].lstrip()
    return None


def snippet_line(snippet: str, trail: Sequence[str]) -> str:
    """A one-line snippet without heading markup: a leading heading that repeats ``trail`` is dropped whole,
    any other heading keeps its words and loses its ``#`` marks."""
    text = snippet.strip()
    while (mark := _LEADING_MARK.match(text)) is not None:
        rest = text[mark.end():]
        shorter = _strip_trail_prefix(rest, trail)
        text = shorter if shorter is not None else rest
    text = _INNER_MARK.sub("", text)
    return " ".join(text.split())


def section_text(text: str, trail: Sequence[str]) -> str:
    """A section's text without its leading heading lines that repeat ``trail`` (the rest stays Markdown)."""
    lines = text.splitlines()
    start = 0
    while start < len(lines):
        line = lines[start]
        match = _HEADING_LINE.match(line)
        if not line.strip():
            start += 1
        elif match is not None and (match.group(1) or "").strip() in trail:
            start += 1
        else:
            break
    return "\n".join(lines[start:]) if start < len(lines) else text
