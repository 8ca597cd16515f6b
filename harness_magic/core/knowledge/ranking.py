"""Search results and how rankings become one: hits, reciprocal-rank fusion, snippets, doc ids.

Contract: pure functions over :class:`Hit` lists and chunk text; no I/O.
:func:`fuse` scores each source id by the sum over rankings of
``1 / (RRF_K + rank)`` (ties by source id) and keeps the first ranking's
snippet; :func:`snippet` picks the window of ``text`` holding the most query
words; :func:`normalize_doc_id` accepts ``[doc:p#s]``, ``doc:p#s`` and ``p#s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness_magic.core.knowledge.extract import Chunk

__all__ = ["Hit", "fuse", "snippet", "lead", "normalize_doc_id", "RRF_K", "SNIPPET_TOKENS", "SNIPPET_PREFIX"]

RRF_K = 60
"""Reciprocal-rank-fusion constant from Cormack et al. (2009): 1 / (k + rank)."""
SNIPPET_TOKENS = 32
"""Words in a hit's snippet."""
SNIPPET_PREFIX = 5
"""Letters compared when finding query words in a snippet (a poor man's stemmer, for display only)."""


@dataclass(frozen=True)
class Hit:
    """One search result."""

    chunk: Chunk
    score: float
    """Higher is better: -bm25 for keyword search, the fused RRF score for hybrid search."""
    snippet: str

    @property
    def source_id(self) -> str:
        return self.chunk.source_id



def fuse(rankings: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
    """Reciprocal-rank fusion: score = sum over rankings of 1 / (RRF_K + rank); keyword snippets win."""
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, 1):
            scores[hit.source_id] = scores.get(hit.source_id, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(hit.source_id, hit)
    order = sorted(scores, key=lambda sid: (-scores[sid], sid))[:k]
    return [Hit(first[sid].chunk, round(scores[sid], 6), first[sid].snippet) for sid in order]


def snippet(text: str, terms: Sequence[str], size: int = SNIPPET_TOKENS) -> str:
    """The ``size``-word window of ``text`` holding the most query terms (matched on their first
    SNIPPET_PREFIX letters, so "refunded" finds "refunds"), with "…" where text was cut."""
    words = text.split()
    if len(words) <= size:
        return " ".join(words)
    keys = {t[:SNIPPET_PREFIX] for t in terms if t}
    marks = [1 if w.lower().strip(".,;:()[]`*#\"'")[:SNIPPET_PREFIX] in keys else 0 for w in words]
    best, best_at, window = -1, 0, sum(marks[:size])
    for start in range(0, len(words) - size + 1):
        if start:
            window += marks[start + size - 1] - marks[start - 1]
        if window > best:
            best, best_at = window, start
    head = "… " if best_at else ""
    tail = " …" if best_at + size < len(words) else ""
    return head + " ".join(words[best_at : best_at + size]) + tail


def lead(text: str, limit: int = 240) -> str:
    """The start of ``text`` on one line, cut to ``limit`` characters with "…"."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def normalize_doc_id(source_id: str) -> str:
    """``"[doc:a/b.md#s]"`` / ``"doc:a/b.md#s"`` / ``"a/b.md#s"`` -> ``"a/b.md#s"``."""
    text = source_id.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    if text.startswith("doc:"):
        text = text[4:]
    return text
