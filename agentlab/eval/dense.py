"""The dense strategy: sentence embeddings searched through the vector store's FAISS index.

Invariants: the index is :class:`agentlab.search._faiss_index.VectorIndex`, the one the agent's vector store
searches, with unit positions as ids, so the order is the store's (best first, equal scores by position); every
vector goes through the run's :class:`~agentlab.eval.embedcache.EmbeddingCache`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.eval.units import BaseStrategy, Unit

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation
    from agentlab.eval.embedcache import EmbeddingCache
    from agentlab.search import Embedder

__all__ = ["Dense"]


class Dense(BaseStrategy):
    """Sentence embeddings (MiniLM by default) searched by inner product with FAISS.

    Embeddings of keys and queries go through an :class:`~agentlab.eval.embedcache.EmbeddingCache`,
    so repeated runs do not call the model again.

    The key defaults to ``"speaker"`` (``"Caroline: I went to ..."``), not the bare text: questions
    name the person they ask about, people never say their own name, and the *other* speaker
    addresses them by it ("Hey Caroline!"). On LoCoMo, 70% of MiniLM's top-5 turns for bare-text
    keys contain the asked-about name, against 3% of evidence turns, and 81% are spoken by the
    other person; with speaker keys recall@5 goes from 0.209 to 0.367, and dropping the names from the
    query (``query_rewrite="drop-speakers"``) helps more still (BENCHMARKS.md).

    Args:
        embedder: any :class:`~agentlab.search.Embedder`; default ``MiniLMEmbedder()``.
        cache: an embedding cache; default the runner's (or an in-memory one when used alone).
        **options: unit options and ``query_rewrite`` (see :class:`BaseStrategy`); ``key`` defaults to
            ``"speaker"``.
    """

    name = "dense"

    def __init__(self, embedder: Embedder | None = None, *, cache: EmbeddingCache | None = None,
                 **options: Any) -> None:
        options.setdefault("key", "speaker")
        super().__init__(**options)
        if embedder is None:
            from agentlab.search import MiniLMEmbedder

            embedder = MiniLMEmbedder()
        self.embedder = embedder
        self.cache = cache
        self._queries: dict[str, np.ndarray] = {}
        self.vectors = np.zeros((0, int(embedder.dimension)), dtype=np.float32)
        self._index: Any = None

    def use_cache(self, cache: EmbeddingCache) -> None:
        if self.cache is None:
            self.cache = cache

    def _cache(self) -> EmbeddingCache:
        if self.cache is None:
            from agentlab.eval.embedcache import EmbeddingCache

            self.cache = EmbeddingCache(None)
        return self.cache

    def _embed_queries(self, texts: Sequence[str], progress: bool = False) -> None:
        texts = [t for t in dict.fromkeys(texts) if t not in self._queries]
        if texts:
            vectors = self._cache().encode(self.embedder, texts, progress=progress, desc="Embedding queries")
            self._queries.update(zip(texts, vectors))

    def prepare(self, queries: Sequence[str]) -> None:
        if not self.rewrite_needs_speakers:  # otherwise the rewritten queries are known per conversation
            self._embed_queries([self.query_text(q) for q in queries], progress=len(queries) > 512)

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        self._embed_queries([self.query_text(q) for q in queries])

    def index(self, units: Sequence[Unit]) -> None:
        from agentlab.search import VectorIndex

        self.units = list(units)
        self.vectors = self._cache().encode(self.embedder, [u.text for u in self.units])
        self._index = VectorIndex(int(self.embedder.dimension))
        self._index.add(self.vectors)

    def query_vector(self, query: str) -> np.ndarray:
        """The embedding of the (rewritten) query."""
        text = self.query_text(query)
        if text not in self._queries:
            self._embed_queries([text])
        return self._queries[text]

    def scores(self, query: str) -> np.ndarray:
        """Inner product of the query with every indexed unit, in unit order."""
        if not self.units:
            return np.zeros(0)
        return (self.vectors @ self.query_vector(query)).astype(np.float64)

    def order(self, query: str, k: int | None = None) -> np.ndarray:
        """Unit positions by inner product with the query, best first (ties: the earlier unit)."""
        k = len(self.units) if k is None else min(k, len(self.units))
        if k <= 0 or self._index is None:
            return np.zeros(0, dtype=np.int64)
        return self._index.search(self.query_vector(query), k)[1]

    def rank(self, query: str, k: int) -> list[str]:
        return self._ids(self.order(query, k)) if self.units else []
