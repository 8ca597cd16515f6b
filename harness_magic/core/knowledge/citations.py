"""Citation ids, the per-run ledger of retrieved sources, the answer check and rendering.

Ids look like ``[doc:runbooks/refunds.md#partner-share]``, ``[term:net_revenue]``,
``[owner:finance-data]`` and ``[dbt:metric.shop.revenue]`` (a dbt project's entry). Knowledge tools call :func:`record_retrieval`
with what they returned; the ledger is kept on the harness (``harness.citations``), and a source counts as
retrieved while the tool result that returned it is in the conversation (a
continued conversation keeps its sources; ``--new`` forgets them). Each retrieval is written to the run log as an ``event``
record (``name="retrieval"``, ids and bounded snippets), so exports and
replays can show what a citation points at without re-reading the documents.

:func:`check_answer` is the source-required assertion: every id the answer
cites must have been retrieved in the run, and a retrieved metric definition
restated in the answer must not contradict its formula (a definitional
sentence about the metric that leaves out a formula component). It decides
what to flag to the user; it is not a security boundary.

:func:`citations_markdown` / :func:`citations_html` render an answer (Markdown) with its
citations as links to a "Sources" list whose entries expand to the snippet; a
citation can only link to its own entry (the model's links, titles, code and raw
HTML cannot make a citation point elsewhere).
"""

from __future__ import annotations

import dataclasses
import html
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence, cast

from harness_magic.core.transcript.messages import Message, ToolUseBlock

__all__ = ["Source", "Ledger", "retrieved_sources", "CITATION_RE", "parse_citations", "record_retrieval", "ledger_for", "LedgerHost",
           "check_answer", "citations_markdown", "citations_html", "sources_from_log", "sources_from_run_file", "SNIPPET_MAX_CHARS"]

SNIPPET_MAX_CHARS = 400
"""Snippet kept per source in the ledger and the log: enough to check a claim, bounded for the log."""
CITATION_RE = re.compile(r"\[((?:doc|term|owner|dbt):[^\[\]\s]{1,300})\]")
"""A citation in text: ``[kind:id]`` with no spaces or brackets inside."""
_DEFINITION_CUE_RE = re.compile(
    r"\b(means|equals|defined as|calculated as|computed as|refers to|minus|plus|less|divided by|"
    r"net of|after deducting|the sum of|the difference)\b|\s[=+/\u2212-]\s", re.IGNORECASE)
"""What makes a sentence state a definition (a bare "is" does not: "net revenue is $1.2M" is a value)."""
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD_RE = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Source:
    """One retrieved source."""

    source_id: str
    """Without brackets: ``doc:runbooks/refunds.md#partner-share``."""
    title: str = ""
    snippet: str = ""
    names: tuple[str, ...] = ()
    """For a metric definition: its name and synonyms (how an answer may mention it)."""
    components: tuple[tuple[str, ...], ...] = ()
    """For a metric with a formula: per component, the phrasings that count as mentioning it."""


@dataclass
class Ledger:
    """Sources retrieved through a harness, each with the tool call that returned it."""

    entries: dict[str, tuple[Source, str | None]] = field(default_factory=dict)

    def visible(self, messages: Sequence[Any] | None) -> dict[str, Source]:
        """Sources whose tool result is still in ``messages`` (the transcript the model saw)."""
        if messages is None:
            return {sid: src for sid, (src, _) in self.entries.items()}
        answered = {getattr(b, "tool_use_id", None) for m in messages for b in getattr(m, "content", ())
                    if getattr(b, "type", "") == "tool_result"}
        return {sid: src for sid, (src, use_id) in self.entries.items() if use_id is None or use_id in answered}


class RetrievalRun(Protocol):
    """What recording a retrieval reads of the run in progress (:class:`~harness_magic.core.agent.run.Run` is one)."""

    @property
    def current_tool_use(self) -> ToolUseBlock | None:
        """The tool call running now (its id ties a source to the call that retrieved it)."""
        ...


class SnippetMasker(Protocol):
    """The masking step a harness passes tool results through (``Harness.masker``)."""

    def mask(self, text: str) -> tuple[str, dict[str, int]]: ...


class LedgerHost(Protocol):
    """What the ledger functions need of a harness (:class:`~harness_magic.core.agent.loop.Harness` is one)."""

    @property
    def citations(self) -> Ledger:
        """The harness's own ledger: it lives and dies with the harness."""
        ...

    @property
    def messages(self) -> list[Message]:
        """The conversation: a source counts as retrieved once its tool result is in it."""
        ...

    @property
    def current_run(self) -> RetrievalRun | None: ...
    @property
    def masker(self) -> SnippetMasker | None: ...
    def log_event(self, name: str, **fields: Any) -> None: ...


def parse_citations(text: str) -> list[str]:
    """Cited ids in order of first appearance, without brackets."""
    return list(dict.fromkeys(m.group(1) for m in CITATION_RE.finditer(text or "")))


def ledger_for(harness: LedgerHost) -> Ledger:
    """The ledger of ``harness`` (``harness.citations``)."""
    return harness.citations


def retrieved_sources(harness: LedgerHost) -> dict[str, Source]:
    """Sources retrieved by tool calls whose results are in the harness's conversation."""
    return ledger_for(harness).visible(harness.messages)


def ledger_host(harness: object | None) -> LedgerHost | None:
    """The harness a connector tool runs in (``ToolContext.harness``), as the citation ledger's host.

    The agent :class:`~harness_magic.core.agent.loop.Harness` is the one host that installs connectors, and it
    keeps both the ledger and the messages; a tool called outside a harness has None.
    """
    return cast("LedgerHost | None", harness)


def record_retrieval(harness: LedgerHost | None, tool: str, sources: Sequence[Source]) -> None:
    """Add ``sources`` to the run's ledger and log them (ids and bounded snippets)."""
    if harness is None or not sources:
        return
    ledger = ledger_for(harness)
    run = harness.current_run
    use = run.current_tool_use if run is not None else None
    use_id = use.id if use is not None else None
    masker = harness.masker
    if masker is not None:  # the ledger feeds citations in the live view and exports: what the model saw
        sources = [dataclasses.replace(s, snippet=masker.mask(s.snippet)[0], title=masker.mask(s.title)[0])
                   for s in sources]
    for source in sources:
        ledger.entries[source.source_id] = (source, use_id)
    harness.log_event("retrieval", tool=tool, sources=[{"id": s.source_id, "title": s.title[:200],
                                                        "snippet": s.snippet[:SNIPPET_MAX_CHARS]} for s in sources])


def _words(text: str) -> list[str]:
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in _WORD_RE.findall(text.lower())]


def _mentions(sentence_words: list[str], phrase: str) -> bool:
    target = _words(phrase)
    if not target:
        return False
    n = len(target)
    return any(sentence_words[i : i + n] == target for i in range(len(sentence_words) - n + 1))


def _first_mention(words: list[str], phrases: Iterable[str]) -> int | None:
    found = None
    for phrase in phrases:
        target = _words(phrase)
        n = len(target)
        for i in range(len(words) - n + 1):
            if n and words[i : i + n] == target:
                found = i if found is None else min(found, i)
                break
    return found


@dataclass(frozen=True)
class Finding:
    rule: str
    ok: bool
    detail: str = ""


def check_answer(text: str, sources: dict[str, Source]) -> list[Finding]:
    """Findings for an answer: cited ids retrieved, retrieved definitions not contradicted.

    Nothing is returned for an answer that cites nothing and restates no
    retrieved definition (the check does not apply).
    """
    findings: list[Finding] = []
    for cited in parse_citations(text):
        if cited in sources:
            findings.append(Finding("cited_source_retrieved", True, f"[{cited}]"))
        else:
            findings.append(Finding("cited_source_retrieved", False,
                                    f"[{cited}] was cited but no tool returned it in this run"))
    defined = [s for s in sources.values() if s.components and s.names]
    for sentence in _SENTENCE_RE.split(text or "") if defined else ():
        plain = CITATION_RE.sub(" ", sentence)
        cue = _DEFINITION_CUE_RE.search(plain)
        if cue is None:
            continue
        words = _words(plain)
        cue_at = len(_words(plain[: cue.start()]))
        # The sentence defines its subject: the first retrieved metric it mentions, before the cue.
        subject = min(((at, s) for s in defined if (at := _first_mention(words, s.names)) is not None),
                      default=None, key=lambda pair: pair[0])
        if subject is None or subject[0] >= max(cue_at, 1):
            continue
        source = subject[1]
        cites_it = f"[{source.source_id}]" in sentence
        missing = [c[0] for c in source.components if not any(_mentions(words, p) for p in c)]
        short = " ".join(sentence.split())[:200]
        if missing:
            findings.append(Finding(
                "definition_consistent", False,
                f"the answer defines {source.names[0]} as {short!r}, which leaves out "
                f"{', '.join(missing)} from the retrieved definition [{source.source_id}]"
                + ("" if cites_it else " (and does not cite it)")))
        else:
            findings.append(Finding("definition_consistent", True, f"[{source.source_id}]"))
    return findings


# --------------------------------------------------------------------------- rendering


def _anchor(index: int) -> str:
    from harness_magic.core.text.safe_markdown import snippet_anchor

    return snippet_anchor(index)


def _numbered(text: str) -> dict[str, int]:
    return {sid: i for i, sid in enumerate(parse_citations(text), 1)}


def _sources_markdown(numbers: dict[str, int], sources: dict[str, Source]) -> str:
    from harness_magic.core.text.safe_markdown import escape_markdown_html

    lines = ["", "", "**Sources**", ""]
    for sid, number in numbers.items():
        source = sources.get(sid)
        if source is None:
            lines.append(f"{number}. <a id=\"{_anchor(number)}\"></a>`[{sid}]` — not retrieved in this run")
            continue
        title = f" {escape_markdown_html(' '.join(source.title.split()), links=False)}" if source.title else ""
        lines.append(f"{number}. <a id=\"{_anchor(number)}\"></a>`[{sid}]`{title}")
        for snippet_line in escape_markdown_html(source.snippet, links=False).splitlines() or [""]:
            lines.append(f"   > {snippet_line}")
    return "\n".join(lines)


_AUTOLINK_RUN = re.compile(r"[:@]|www\.", re.IGNORECASE)
"""In the run of text glued before a citation, what a GitHub-flavoured viewer may turn into a bare-URL or e-mail
autolink that would swallow the citation's link."""


def _linked_body(text: str, numbers: dict[str, int], *, links: bool) -> str | None:
    """``text`` escaped (:func:`escape_markdown_html`) with each citation in running text linked to its anchor;
    None when a model link's text holds a citation (with ``links``) or a link in the result shows a citation
    or a cited id and leads anywhere but that citation's own anchor."""
    import secrets

    from harness_magic.core.text.safe_markdown import escape_markdown_html, markdown_links, text_runs

    escaped = escape_markdown_html(text, links=links)
    nonce = secrets.token_hex(6)
    marks: dict[str, re.Match[str]] = {}

    def mark(match: re.Match[str]) -> str:
        backslashes = len(match.string[: match.start()]) - len(match.string[: match.start()].rstrip("\\"))
        if match.group(1) not in numbers or backslashes % 2:  # an escaped bracket is text, not a citation
            return match.group(0)
        key = f"hmcite{nonce}x{len(marks)}x"
        marks[key] = match
        return key

    marked = CITATION_RE.sub(mark, escaped)
    linkable: set[str] = set()
    inside_link = False
    mark_re = re.compile(rf"hmcite{nonce}x\d+x")
    for kind, content, in_link in text_runs(marked):
        found = mark_re.findall(content)
        if in_link:
            inside_link = inside_link or bool(found)
        elif kind == "text":
            linkable.update(found)
    if inside_link and links:
        return None

    def link(key_match: re.Match[str]) -> str:
        match = marks[key_match.group(0)]
        if key_match.group(0) not in linkable:
            return match.group(0)
        glued = re.split(r"\s", escaped[: match.start()])[-1]
        space = " " if glued and _AUTOLINK_RUN.search(glued) else ""
        return f"{space}[\\[{match.group(1)}\\]](#{_anchor(numbers[match.group(1)])})"

    body = mark_re.sub(link, marked)
    for href, shown in markdown_links(body):  # the check: what a CommonMark reader makes of the result
        cited = CITATION_RE.search(shown)
        if cited is None:
            if any(sid in shown for sid in numbers):
                return None
            continue
        sid = cited.group(1)
        if shown != f"[{sid}]" or sid not in numbers or href != f"#{_anchor(numbers[sid])}":
            return None
    return body


def citations_markdown(text: str, sources: dict[str, Source]) -> str:
    """Model Markdown ``text`` for the ``.md`` export: raw HTML and images made literal
    (:func:`~harness_magic.core.text.safe_markdown.escape_markdown_html`), each citation in running text linked to
    its own entry of a "Sources" list that quotes the snippet.

    A citation links to its own snippet and nowhere else: a model link whose text holds a citation turns every
    model link of the answer into literal text; citations in code, link titles and URLs stay text; the result is
    parsed again and, should a link that shows a citation lead anywhere but that citation's entry, the answer is
    written with no links at all. Titles and snippets are document text: raw HTML and link syntax are escaped.
    """
    from harness_magic.core.text.safe_markdown import escape_markdown_html

    numbers = _numbered(text)
    if not numbers:
        return escape_markdown_html(text)
    body = _linked_body(text, numbers, links=True)
    if body is None:
        body = _linked_body(text, numbers, links=False)
    if body is None:
        body = escape_markdown_html(text, links=False)
    return body + _sources_markdown(numbers, sources)


def _sources_html(numbers: dict[str, int], sources: dict[str, Source]) -> str:
    items = []
    for sid, number in numbers.items():
        source = sources.get(sid)
        if source is None:
            items.append(f'<li id="{_anchor(number)}"><code>[{html.escape(sid)}]</code> '
                         "<em>not retrieved in this run</em></li>")
            continue
        items.append(f'<li id="{_anchor(number)}"><details><summary><code>[{html.escape(sid)}]</code> '
                     f"{html.escape(source.title)}</summary><blockquote>{html.escape(source.snippet)}"
                     "</blockquote></details></li>")
    return '<div class="hm-sources"><strong>Sources</strong><ol>' + "".join(items) + "</ol></div>"


def citations_html(text: str, sources: dict[str, Source]) -> str:
    """Model Markdown ``text`` as sanitised HTML, each citation a link to its own snippet, plus a Sources list.

    Citations are linked while the Markdown is parsed (running text only: not in code, link titles, URLs or
    image text; a model link whose text holds a citation loses its link and shows its URL as text), and the
    sanitiser then sees the final HTML, Sources list included
    (:func:`~harness_magic.core.text.safe_markdown.markdown_to_html`). Ids, titles and snippets are escaped.
    """
    from harness_magic.core.text.safe_markdown import CitationLink, markdown_to_html

    numbers = _numbered(text)
    if not numbers:
        return markdown_to_html(text)
    links = {sid: CitationLink(_anchor(n), sources[sid].snippet[:200] if sid in sources else "not retrieved",
                               missing=sid not in sources) for sid, n in numbers.items()}
    return markdown_to_html(text, citations=(CITATION_RE, links), after_html=_sources_html(numbers, sources))


LOG_SCAN_MAX_BYTES = 64 * 1024 * 1024
"""A run log is scanned for retrieval records up to here (logs hold metadata; this bounds a render)."""
_RUN_FILE_SOURCES: dict[tuple[str, int, int], dict[str, Source]] = {}


def sources_from_run_file(path: str | None) -> dict[str, Source]:
    """Sources a run retrieved, read from its log file (missing file: none); memoised per file version."""
    import json
    import os

    if not path:
        return {}
    try:
        stat = os.stat(path)
    except OSError:
        return {}
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    cached = _RUN_FILE_SOURCES.get(key)
    if cached is not None:
        return cached
    records = []
    read = 0
    with open(path, "rb") as handle:
        for line in handle:
            read += len(line)
            if read > LOG_SCAN_MAX_BYTES:
                break
            if b'"retrieval"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    sources = sources_from_log(records)
    if len(_RUN_FILE_SOURCES) > 64:
        _RUN_FILE_SOURCES.clear()
    _RUN_FILE_SOURCES[key] = sources
    return sources


def sources_from_log(records: Iterable[dict[str, Any]]) -> dict[str, Source]:
    """Sources a run retrieved, from its JSONL records (``retrieval`` events)."""
    sources: dict[str, Source] = {}
    for record in records:
        if record.get("type") != "event" or record.get("name") != "retrieval":
            continue
        for item in record.get("sources") or []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                sources.setdefault(item["id"], Source(item["id"], str(item.get("title", ""))[:200],
                                                      str(item.get("snippet", ""))[:SNIPPET_MAX_CHARS]))
    return sources
