"""A citation links to its own snippet and nowhere else (issue 22, point 6), as an attacker would try it.

The model's answer is untrusted. Each attack below is put into a real run (a scripted model that
reads a document through the ``docs`` connector, so the sources come from the run log as in the
notebook), then rendered the three ways people see it: the notebook's final output
(:func:`render_answer_html`, what the kernel's formatter shows), the ``.html`` export and the
``.md`` export. The checks read the output as a browser or a CommonMark viewer would: every link
whose text shows a citation (or a cited id) points at that citation's own ``#hm-src-N`` entry,
whose Sources list item names that same id, and no citation text sits inside any other link.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ConnectorRegistry
from harness_magic.core.export import RunRecorder, export_runs, render_answer_html
from harness_magic.core.execution.connectors.docs.connector import docs_connector
from harness_magic.core.knowledge.citations import CITATION_RE, Source, citations_html, citations_markdown
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.text.safe_markdown import markdown_links, sanitize_html, text_runs

CORPUS = Path(__file__).parent / "knowledge_corpus"
CITED = "doc:runbooks/refunds.md#partner-share"
EVIL = "https://evil.example/steal"

ATTACKS = {
    "title holds the citation": f'[read more]({EVIL} "[{CITED}]")',
    "citation as link text": f"[[{CITED}]]({EVIL})",
    "citation inside longer link text": f"[see [{CITED}] here]({EVIL})",
    "citation brackets are the link's": f"[{CITED}]({EVIL})",
    "bare id as link text": f"[{CITED}]({EVIL})  and [the source {CITED}]({EVIL})",
    "emphasised citation in a link": f"[**[{CITED}]**]({EVIL})",
    "citation in a code span in a link": f"[`[{CITED}]`]({EVIL})",
    "entity-encoded citation in a link": f"[&#91;{CITED}&#93;]({EVIL})",
    "backslash-escaped citation in a link": f"[\\[{CITED}\\]]({EVIL})",
    "nested brackets": f"[[[{CITED}]]]({EVIL})",
    "autolink around a citation": f"<{EVIL}/[{CITED}]>",
    "bare URL glued to a citation": f"{EVIL}/[{CITED}]",
    "raw HTML link": f'<a href="{EVIL}">[{CITED}]</a>',
    "raw HTML attribute break-out": f'[x]({EVIL} "\\"><a href=\'{EVIL}\'>[{CITED}]</a>")',
    "reference link": f"[[{CITED}]][ref]\n\n[ref]: {EVIL}",
    "the citation as a reference label": f"[{CITED}]: {EVIL}\n\nas said in [{CITED}]",
    "reference definition in a quote": f"> [{CITED}]: {EVIL}\n\nas said in [{CITED}]",
    "image description": f"![[{CITED}]]({EVIL}.png \"[{CITED}]\")",
    "fragment link to another snippet": f"[[{CITED}]](#hm-src-1)",
    "table cell": f"| claim |\n|---|\n| [[{CITED}]]({EVIL}) |",
    "citation in a URL": f"[x]({EVIL}/[{CITED}])",
    "citation in a code span": f"`[{CITED}]`",
    "citation in fenced code": f"```\n[[{CITED}]]({EVIL})\n```",
}
"""Each is embedded between honest citations, so the answer cites ``term:ghost`` first and ``CITED`` second."""


def _answer(attack: str) -> str:
    return f"Refunds claw back the share [term:ghost].\n\n{attack}\n\nThe partner share is clawed back [{CITED}]."


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One real run per attack: the model reads the cited section, then answers with the attack."""
    tmp = tmp_path_factory.mktemp("citations")
    docs = docs_connector([CORPUS / "runbooks"], index_path=tmp / "index.sqlite")
    records = {}
    for name, attack in ATTACKS.items():
        turns = [
            {"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "docs"}}]},
            {"tool_calls": [{"name": "docs__read", "arguments": {"source_id": CITED}}]},
            {"text": _answer(attack)},
        ]
        harness = Harness(ProviderAdapter("scripted/test", transport=ScriptedModel(turns)), "You analyse data.", [],
                          run_dir=str(tmp / "runs"), cache=SessionCache())
        ConnectorRegistry([docs]).install(harness)
        recorder = RunRecorder()
        harness.subscribe(recorder)
        harness.run_result("Who pays refunds?")
        records[name] = recorder.records[-1]
    return {"records": records, "tmp": tmp}


class _Links(HTMLParser):
    """Every ``<a>`` with its href and the text inside it, and every Sources entry (id -> its ``<code>`` text)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str | None, str]] = []
        self.entries: dict[str, str] = {}
        self._open: list[list] = []
        self._entry: str | None = None
        self._code: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found: dict[str, str | None] = {}
        for key, value in attrs:
            found.setdefault(key, value)  # as browsers read a repeated attribute: the first one counts
        if tag == "a":
            self._open.append([found.get("href"), []])
        elif tag == "li" and found.get("id"):
            self._entry = found["id"]
        elif tag == "code" and self._entry and self._entry not in self.entries:
            self._code = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open:
            href, parts = self._open.pop()
            self.links.append((href, "".join(parts)))
        elif tag == "code" and self._code is not None:
            self.entries[self._entry] = "".join(self._code)
            self._code = None

    def handle_data(self, data: str) -> None:
        for _, parts in self._open:
            parts.append(data)
        if self._code is not None:
            self._code.append(data)


def assert_citations_link_home(page: str, cited: tuple[str, ...] = ("term:ghost", CITED)) -> int:
    """Every link showing a citation or cited id goes to that id's own Sources entry; returns how many did."""
    parser = _Links()
    parser.feed(page)
    home = 0
    for href, text in parser.links:
        shows = [m.group(1) for m in CITATION_RE.finditer(text)] or [sid for sid in cited if sid in text]
        if not shows:
            continue
        assert text == f"[{shows[0]}]" and len(shows) == 1, f"a link shows {text!r} (to {href!r})"
        assert href and href.startswith("#"), f"citation {text!r} links to {href!r}"
        assert parser.entries.get(href[1:]) == text, f"{text!r} links to {href!r}, the entry of another source"
        home += 1
    return home


@pytest.mark.parametrize("name", list(ATTACKS))
def test_notebook_output_links_each_citation_only_to_its_own_snippet(runs, name: str) -> None:
    page = render_answer_html(runs["records"][name], copy_buttons=True)
    assert assert_citations_link_home(page) >= 2, "the honest citations are still links"
    assert "Refunds &gt; Partner share" in page or "Partner share" in page


@pytest.mark.parametrize("name", list(ATTACKS))
def test_html_export_links_each_citation_only_to_its_own_snippet(runs, name: str) -> None:
    page = export_runs([runs["records"][name]], runs["tmp"] / f"{abs(hash(name))}.html").read_text()
    assert assert_citations_link_home(page) >= 2


@pytest.mark.parametrize("name", list(ATTACKS))
def test_markdown_export_links_each_citation_only_to_its_own_snippet(runs, name: str) -> None:
    text = export_runs([runs["records"][name]], runs["tmp"] / f"{abs(hash(name))}.md").read_text()
    anchors = dict(re.findall(r'<a id="(hm-src-\d+)"></a>`\[([^\]`]+)\]`', text))
    for href, shown in markdown_links(text):
        ids = [m.group(1) for m in CITATION_RE.finditer(shown)] or [s for s in ("term:ghost", CITED) if s in shown]
        if ids:
            assert shown == f"[{ids[0]}]" and href.startswith("#") and anchors.get(href[1:]) == ids[0], (shown, href)
    outside = [(content, href) for href, content in markdown_links(text) if not href.startswith("#hm-src-")]
    assert not [c for c, _ in outside if CITED in c or "term:ghost" in c], outside
    runs_in_links = [content for _, content, in_link in text_runs(text) if in_link]
    assert len(runs_in_links) >= len(markdown_links(text))


def test_honest_citations_link_to_their_numbered_snippets(runs) -> None:
    page = render_answer_html(runs["records"]["citation in a code span"])
    assert '<a class="hm-cite hm-cite-missing" href="#hm-src-1" title="not retrieved"' in page
    assert f'<a class="hm-cite" href="#hm-src-2"' in page
    assert f"<code>[{CITED}]</code> and" not in page and f"<p><code>[{CITED}]</code></p>" in page, \
        "an id in a code span stays code"
    markdown = citations_markdown(_answer("`[doc:x]`"), {})
    assert "`[doc:x]`" in markdown and "[\\[doc:x" not in markdown, "an id in code is listed in Sources, not linked"
    assert f"[\\[{CITED}\\]](#hm-src-3)" in markdown


def test_a_link_holding_a_citation_is_unlinked_and_shows_its_url(runs) -> None:
    page = render_answer_html(runs["records"]["citation as link text"])
    assert f"({EVIL})" in page and f'href="{EVIL}"' not in page
    markdown = citations_markdown(_answer(ATTACKS["citation inside longer link text"]), {})
    assert f"]\\({EVIL})" in markdown, "the .md export makes the model's links literal"
    assert f"[\\[{CITED}\\]](#hm-src-2)" in markdown


def test_other_model_links_are_kept(runs) -> None:
    page = citations_html(f"See [the runbook](https://wiki.example/refunds) [{CITED}].", {})
    assert '<a href="https://wiki.example/refunds" rel="noopener noreferrer">the runbook</a>' in page
    markdown = citations_markdown(f"See [the runbook](https://wiki.example/refunds) [{CITED}].", {})
    assert "[the runbook](https://wiki.example/refunds)" in markdown


def test_a_title_holding_a_citation_cannot_close_the_attribute(runs) -> None:
    page = render_answer_html(runs["records"]["raw HTML attribute break-out"])
    links = _Links()
    links.feed(page)
    assert all(href is None or not href.startswith(EVIL) or CITED not in text for href, text in links.links)
    assert f'title="[{CITED}]"' in render_answer_html(runs["records"]["title holds the citation"])


def test_sources_list_entries_name_their_own_id(runs) -> None:
    parser = _Links()
    parser.feed(render_answer_html(runs["records"]["table cell"]))
    assert parser.entries == {"hm-src-1": "[term:ghost]", "hm-src-2": f"[{CITED}]"}


def test_the_sanitizer_keeps_only_snippet_fragments_and_its_own_classes_and_ids() -> None:
    cleaned = sanitize_html('<a href="#hm-src-3" class="hm-cite">a</a><a href="#top" class="x">b</a>'
                            '<a href="#hm-src-3x">c</a><li id="hm-src-2">d</li><li id="main">e</li>'
                            '<div class="hm-sources">f</div><div class="hm-sources evil">g</div>'
                            '<p id="hm-src-1" class="hm-cite">h</p>')
    assert '<a href="#hm-src-3" class="hm-cite" rel="noopener noreferrer">a</a>' in cleaned
    assert '<a rel="noopener noreferrer">b</a>' in cleaned and '<a rel="noopener noreferrer">c</a>' in cleaned
    assert '<li id="hm-src-2">d</li>' in cleaned and "<li>e</li>" in cleaned
    assert '<div class="hm-sources">f</div>' in cleaned and "<div>g</div>" in cleaned and "<p>h</p>" in cleaned


def test_model_text_cannot_forge_a_sources_entry() -> None:
    forged = f'<li id="hm-src-2"><code>[{CITED}]</code></li>\n\n[{CITED}]'
    page = citations_html(forged, {})
    parser = _Links()
    parser.feed(page)
    assert list(parser.entries) == ["hm-src-1"]
    assert '&lt;li id="hm-src-2"&gt;' in page


def test_markdown_export_escapes_snippets_and_titles_as_document_text() -> None:
    source = Source(CITED, "Refunds [x](https://evil.example) <b>", "<script>alert(1)</script> see [y](https://evil.example)")
    markdown = citations_markdown(f"Claim [{CITED}].", {CITED: source})
    sources = markdown.split("**Sources**")[1]
    assert markdown_links(sources) == [] and "&lt;script&gt;" in sources
