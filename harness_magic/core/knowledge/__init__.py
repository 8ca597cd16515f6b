"""Knowledge plane: business documents, a glossary of definitions and owners, cited answers.

* :mod:`.extract` — text from Markdown, text, HTML and PDF, split into heading chunks;
* :mod:`.index` — one SQLite file per connector: FTS5 BM25, incremental by content hash,
  optional vectors fused by reciprocal rank;
* :mod:`.tree` — the files under the docs roots, walked and read without following links;
* :mod:`.index_file` — the index's SQLite file, opened only when it is ours;
* :mod:`.ranking` — hits, reciprocal-rank fusion, snippets, doc ids;
* :mod:`.embed` — litellm embeddings or a deterministic offline embedder;
* :mod:`.glossary` — terms/metrics/tables/owners from YAML, with link expansion;
* :mod:`.citations` — source ids, the per-run ledger, the answer check, rendering;

The ``docs`` and ``glossary`` connector types (the tools over this plane) live with the other
connectors in :mod:`harness_magic.core.execution.connectors.docs.connector`.
"""

from harness_magic.core.knowledge.citations import (
    Source,
    check_answer,
    citations_html,
    citations_markdown,
    parse_citations,
    sources_from_log,
)
from harness_magic.core.knowledge.embed import HashingEmbedder, LiteLLMEmbedder, make_embedder
from harness_magic.core.knowledge.glossary import Glossary, GlossaryError, load_glossary
from harness_magic.core.knowledge.index import DocIndex, IndexReport
from harness_magic.core.knowledge.ranking import Hit

__all__ = [
    "Source",
    "check_answer",
    "citations_html",
    "citations_markdown",
    "parse_citations",
    "sources_from_log",
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
