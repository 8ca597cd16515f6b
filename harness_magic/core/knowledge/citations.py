"""Citation ids, the per-run ledger of retrieved sources, the answer check and rendering.

Ids look like ``[doc:runbooks/refunds.md#partner-share]``, ``[term:net_revenue]``
and ``[owner:finance-data]``. Knowledge tools call :func:`record_retrieval`
with what they returned; the ledger is kept per harness, and a source counts as
retrieved while the tool result that returned it is in the conversation (a
continued conversation keeps its sources; ``--new`` forgets them). Each retrieval is written to the run log as an ``event``
record (``name="retrieval"``, ids and bounded snippets), so exports and
replays can show what a citation points at without re-reading the documents.

:func:`check_answer` is the source-required assertion: every id the answer
cites must have been retrieved in the run, and a retrieved metric definition
restated in the answer must not contradict its formula (a definitional
sentence about the metric that leaves out a formula component). It decides
what to flag to the user; it is not a security boundary.

:func:`citations_markdown` / :func:`citations_html` render an answer's
citations as links to a "Sources" list whose entries expand to the snippet.
"""

from __future__ import annotations

import html
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

__all__ = ["Source", "Ledger", "retrieved_sources", "CITATION_RE", "parse_citations", "record_retrieval", "ledger_for",
           "check_answer", "citations_markdown", "citations_html", "sources_from_log", "sources_from_run_file", "SNIPPET_MAX_CHARS"]

SNIPPET_MAX_CHARS = 400
"""Snippet kept per source in the ledger and the log: enough to check a claim, bounded for the log."""
CITATION_RE = re.compile(r"\[((?:doc|term|owner):[^\[\]\s]{1,300})\]")
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


_LEDGERS: "weakref.WeakKeyDictionary[Any, Ledger]" = weakref.WeakKeyDictionary()


def parse_citations(text: str) -> list[str]:
    """Cited ids in order of first appearance, without brackets."""
    return list(dict.fromkeys(m.group(1) for m in CITATION_RE.finditer(text or "")))


def ledger_for(harness: Any) -> Ledger:
    """The ledger of ``harness`` (created on first use)."""
    ledger = _LEDGERS.get(harness)
    if ledger is None:
        ledger = Ledger()
        _LEDGERS[harness] = ledger
    return ledger


def retrieved_sources(harness: Any) -> dict[str, Source]:
    """Sources retrieved by tool calls whose results are in the harness's conversation."""
    return ledger_for(harness).visible(getattr(harness, "messages", None))


def record_retrieval(harness: Any, tool: str, sources: Sequence[Source]) -> None:
    """Add ``sources`` to the run's ledger and log them (ids and bounded snippets)."""
    if harness is None or not sources:
        return
    ledger = ledger_for(harness)
    run = getattr(harness, "current_run", None)
    use_id = getattr(getattr(run, "current_tool_use", None), "id", None)
    for source in sources:
        ledger.entries[source.source_id] = (source, use_id)
    log = getattr(harness, "log_event", None)
    if log is not None:
        log("retrieval", tool=tool, sources=[{"id": s.source_id, "title": s.title[:200],
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
        cited = f"[{source.source_id}]" in sentence
        missing = [c[0] for c in source.components if not any(_mentions(words, p) for p in c)]
        short = " ".join(sentence.split())[:200]
        if missing:
            findings.append(Finding(
                "definition_consistent", False,
                f"the answer defines {source.names[0]} as {short!r}, which leaves out "
                f"{', '.join(missing)} from the retrieved definition [{source.source_id}]"
                + ("" if cited else " (and does not cite it)")))
        else:
            findings.append(Finding("definition_consistent", True, f"[{source.source_id}]"))
    return findings


# --------------------------------------------------------------------------- rendering


def _anchor(index: int) -> str:
    return f"hm-src-{index}"


def citations_markdown(text: str, sources: dict[str, Source]) -> str:
    """``text`` with each citation linked to a "Sources" list that quotes the snippet.

    Titles and snippets are document text: their raw HTML is escaped (``escape_markdown_html``).
    """
    cited = parse_citations(text)
    if not cited:
        return text
    numbers = {sid: i for i, sid in enumerate(cited, 1)}

    def link(match: re.Match[str]) -> str:
        return f"[\\[{match.group(1)}\\]](#{_anchor(numbers[match.group(1)])})"

    from harness_magic.core.safe_markdown import escape_markdown_html

    body = CITATION_RE.sub(link, text)
    lines = ["", "", "**Sources**", ""]
    for sid in cited:
        source = sources.get(sid)
        if source is None:
            lines.append(f"{numbers[sid]}. <a id=\"{_anchor(numbers[sid])}\"></a>`[{sid}]` — not retrieved in this run")
            continue
        title = f" {escape_markdown_html(' '.join(source.title.split()))}" if source.title else ""
        lines.append(f"{numbers[sid]}. <a id=\"{_anchor(numbers[sid])}\"></a>`[{sid}]`{title}")
        for snippet_line in escape_markdown_html(source.snippet).splitlines() or [""]:
            lines.append(f"   > {snippet_line}")
    return body + "\n".join(lines)


def citations_html(answer_html: str, sources: dict[str, Source]) -> str:
    """Already-sanitised answer HTML with citations turned into links plus an expandable Sources list.

    Ids and snippets are HTML-escaped here; the caller's sanitiser has already run on ``answer_html``.
    """
    cited = [html.unescape(s) for s in parse_citations(html.unescape(answer_html))]
    if not cited:
        return answer_html
    numbers = {sid: i for i, sid in enumerate(cited, 1)}

    def link(match: re.Match[str]) -> str:
        sid = html.unescape(match.group(1))
        if sid not in numbers:
            return match.group(0)
        known = "" if sid in sources else " hm-cite-missing"
        return (f'<a class="hm-cite{known}" href="#{_anchor(numbers[sid])}" '
                f'title="{html.escape(sources[sid].snippet[:200]) if sid in sources else "not retrieved"}">'
                f"[{html.escape(sid)}]</a>")

    body = CITATION_RE.sub(link, answer_html)
    items = []
    for sid in cited:
        source = sources.get(sid)
        if source is None:
            items.append(f'<li id="{_anchor(numbers[sid])}"><code>[{html.escape(sid)}]</code> '
                         "<em>not retrieved in this run</em></li>")
            continue
        items.append(f'<li id="{_anchor(numbers[sid])}"><details><summary><code>[{html.escape(sid)}]</code> '
                     f"{html.escape(source.title)}</summary><blockquote>{html.escape(source.snippet)}"
                     "</blockquote></details></li>")
    return body + '<div class="hm-sources"><strong>Sources</strong><ol>' + "".join(items) + "</ol></div>"


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
