"""Embedders for vector retrieval: litellm's ``embedding`` or a deterministic offline one.

An embedder has ``name`` (stored with each vector so a model change re-embeds),
``batch_size`` and ``embed(texts) -> list[list[float]]``.

* :class:`LiteLLMEmbedder` calls ``litellm.embedding(model=..., input=[...])``
  (any provider: ``openai/text-embedding-3-small``, ``ollama/nomic-embed-text``,
  ...); litellm is imported on first use; failures become :class:`EmbeddingError`
  naming the model.
* :class:`HashingEmbedder` needs no network: words and character trigrams are
  hashed (blake2b, so the same text gives the same vector in every process)
  into a fixed number of signed buckets. It captures lexical overlap,
  including partial words, which is what tests and offline notebooks need.

:func:`make_embedder` maps the connector option ``embedding_model`` onto one:
``"offline/hashing"`` (or ``"offline/hashing-<dims>"``) gives the offline one.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
from typing import Any, Sequence

__all__ = ["HashingEmbedder", "LiteLLMEmbedder", "EmbeddingError", "make_embedder", "OFFLINE_EMBEDDER"]

OFFLINE_EMBEDDER = "offline/hashing"
"""``embedding_model`` value selecting :class:`HashingEmbedder`."""
HASHING_DIMS = 512
"""Buckets of the offline embedder: few collisions for a vocabulary of a few thousand words."""
EMBED_BATCH = 64
"""Texts per ``litellm.embedding`` request (providers cap batch sizes; 64 is accepted widely)."""
EMBED_TEXT_MAX_CHARS = 8_000
"""Each text is cut here before embedding (providers cap input tokens at ~8k)."""
EMBED_TIMEOUT_S = 60
"""Per request: an embedding call that takes longer is a stuck connection."""

HASH_CACHE_FEATURES = 200_000
"""Feature hashes memoised (words and trigrams repeat: a vocabulary's worth fits)."""

_WORD_RE = re.compile(r"[a-z0-9]+")


class EmbeddingError(RuntimeError):
    """An embedding request failed (the message names the model)."""


@functools.lru_cache(maxsize=HASH_CACHE_FEATURES)
def _bucket(feature: str, dims: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dims, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic bag of hashed words and character trigrams."""

    batch_size = 256

    def __init__(self, dims: int = HASHING_DIMS) -> None:
        if not isinstance(dims, int) or not 16 <= dims <= 8192:
            raise ValueError(f"dims must be an integer from 16 to 8192, got {dims!r}")
        self.dims = dims
        self.name = f"{OFFLINE_EMBEDDER}-{dims}"

    def _bucket(self, feature: str) -> tuple[int, float]:
        return _bucket(feature, self.dims)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dims
            words = _WORD_RE.findall(text.lower()[:EMBED_TEXT_MAX_CHARS])
            for word in words:
                stem = word[:-1] if len(word) > 3 and word.endswith("s") else word
                index, sign = self._bucket("w:" + stem)
                vec[index] += sign
                padded = f"^{stem}$"
                for i in range(len(padded) - 2):
                    index, sign = self._bucket("t:" + padded[i : i + 3])
                    vec[index] += 0.3 * sign
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out


class LiteLLMEmbedder:
    """Embeddings from any litellm provider."""

    batch_size = EMBED_BATCH

    def __init__(self, model: str, **options: Any) -> None:
        if not isinstance(model, str) or "/" not in model:
            raise ValueError(f"embedding_model {model!r} must be a litellm model id such as "
                             "'openai/text-embedding-3-small' (or 'offline/hashing' for the offline embedder)")
        self.name = model
        self.options = options

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        try:
            response = litellm.embedding(model=self.name, input=[t[:EMBED_TEXT_MAX_CHARS] for t in texts],
                                         timeout=EMBED_TIMEOUT_S, **self.options)
        # broad: litellm and the embedding server raise many unrelated types; each becomes one EmbeddingError
        except Exception as exc:
            raise EmbeddingError(f"embedding with {self.name!r} failed: {type(exc).__name__}: {exc}") from exc
        data = response["data"] if isinstance(response, dict) else response.data
        vectors = [item["embedding"] if isinstance(item, dict) else item.embedding for item in data]
        if len(vectors) != len(texts):
            raise EmbeddingError(f"embedding with {self.name!r} returned {len(vectors)} vectors for {len(texts)} texts")
        return [list(map(float, v)) for v in vectors]


def make_embedder(model: str | None, **options: Any) -> Any | None:
    """The embedder an ``embedding_model`` option names (None for keyword-only retrieval)."""
    if model is None:
        return None
    if model == OFFLINE_EMBEDDER:
        return HashingEmbedder()
    match = re.fullmatch(re.escape(OFFLINE_EMBEDDER) + r"-(\d+)", model or "")
    if match:
        return HashingEmbedder(int(match.group(1)))
    return LiteLLMEmbedder(model, **options)
