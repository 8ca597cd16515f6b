"""Knowledge plane: business documents, a glossary of definitions and owners, cited answers.

* :mod:`.extract` — text from Markdown, text, HTML and PDF, split into heading chunks;
* :mod:`.index` — one SQLite file per connector: FTS5 BM25, incremental by content hash,
  optional vectors fused by reciprocal rank;
* :mod:`.embed` — litellm embeddings or a deterministic offline embedder;
* :mod:`.glossary` — terms/metrics/tables/owners from YAML, with link expansion;
* :mod:`.citations` — source ids, the per-run ledger, the answer check, rendering;
* :mod:`.connectors` — the ``docs`` and ``glossary`` connector types.
"""

from harness_magic.core.knowledge.citations import (
    Source,
    check_answer,
    citations_html,
    citations_markdown,
    parse_citations,
    sources_from_log,
)
from harness_magic.core.knowledge.connectors import (
    DocsConnector,
    GlossaryConnector,
    docs_connector,
    glossary_connector,
)
from harness_magic.core.knowledge.embed import HashingEmbedder, LiteLLMEmbedder, make_embedder
from harness_magic.core.knowledge.glossary import Glossary, GlossaryError, load_glossary
from harness_magic.core.knowledge.index import DocIndex, Hit, IndexReport

__all__ = [
    "Source",
    "check_answer",
    "citations_html",
    "citations_markdown",
    "parse_citations",
    "sources_from_log",
    "DocsConnector",
    "GlossaryConnector",
    "docs_connector",
    "glossary_connector",
    "HashingEmbedder",
    "LiteLLMEmbedder",
    "make_embedder",
    "Glossary",
    "GlossaryError",
    "load_glossary",
    "DocIndex",
    "Hit",
    "IndexReport",
]
