"""Counts in words for people: ``1 chunk``, ``2 chunks``, ``1,204 rows``.

:func:`count` is the one way user-facing text states how many of something
there are, so a singular never reads as a plural ("1 chunks").
"""

from __future__ import annotations

__all__ = ["count", "plural"]

_IRREGULAR = {"entry": "entries", "query": "queries", "index": "indexes", "match": "matches",
              "analysis": "analyses", "process": "processes", "summary": "summaries"}
"""Plurals that adding ``s`` gets wrong, for the nouns the harness counts."""


def plural(noun: str, n: int | float) -> str:
    """``noun`` as the form that goes with ``n``: singular for exactly 1, plural otherwise (0 files, 2 files)."""
    if n == 1:
        return noun
    head, _, last = noun.rpartition(" ")
    word = _IRREGULAR.get(last, last + "s")
    return f"{head} {word}" if head else word


def count(n: int | float, noun: str, plural_form: str | None = None) -> str:
    """``n`` with thousands separators and ``noun`` agreeing with it: ``count(1, "chunk")`` is ``1 chunk``.

    ``plural_form`` overrides the plural for a noun :func:`plural` does not know.
    """
    number = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else str(n)
    word = noun if n == 1 else (plural_form if plural_form is not None else plural(noun, n))
    return f"{number} {word}"
