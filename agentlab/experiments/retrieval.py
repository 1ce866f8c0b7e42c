"""Question-time retrieval for memory designs: one swappable choice of ranking, applied to what a design stored.

A memory design keeps documents (:class:`Doc`): the conversation's stored turns, or the facts and passages it
wrote. At question time it ranks them for the question and puts the best ``k`` in the prompt. :class:`Retrieval`
names how, and every design takes one, so a better ranking can be swapped in without touching the designs:

* ``"bm25"``: BM25 over the words of the question (FTS5 ``any``). Over stored turns this is the session's own
  search (``session.search(question, mode="any")``); over a design's entries, a
  :class:`~agentlab.context.FullTextSearchProvider` block.
* ``"dense"``: MiniLM embeddings in the agent's vector store (:class:`~agentlab.context.VectorSearchProvider`).
* ``"hybrid"``: both, fused by reciprocal rank (:class:`~agentlab.context.HybridSearchProvider`, equal weights,
  ``rrf_k`` 60: its defaults, chosen from principle, not on any dataset).
* ``"eval:NAME"``: any strategy of the evaluation harness by name (``"eval:default"``, ``"eval:bm25"`` ...,
  :func:`agentlab.eval.make_strategy`), or a strategy object itself (anything with ``rank(query, k)`` and
  ``fit(conversation)``): it is fitted on a :class:`~agentlab.eval.Conversation` built from the
  documents (their speakers, dates and dataset sessions), so a strategy improved in the harness works here as it is.

``neighbours`` adds, around each stored turn found, that many turns on each side from the same dataset session (a
reply read without the turn it answers is often unreadable). Provider-backed indexes are context blocks of the
session: the model's prompt lists them like any search block, and their entries live in the agent's DuckDB file.

Invariants: a ranking never returns an id twice, nor one that was removed; documents added after a ranking are
seen by the next one (strategies are refitted when their documents changed); embeddings of one text are computed
once per :class:`Shared` (a replay shares one across its policies and conversations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentlab.errors import InvalidArgumentError

__all__ = ["METHODS", "CachedEmbedder", "Doc", "Index", "Retrieval", "Shared", "make_index"]

METHODS = ("bm25", "dense", "hybrid")
"""Rankings built from agentlab's own search parts; ``"eval:NAME"`` names a strategy of the evaluation harness."""


@dataclass(frozen=True)
class Doc:
    """One retrievable document: a stored turn (``id`` is its message id) or an entry a design wrote.

    ``sources`` are the message ids of the turns it was derived from (a stored turn: itself).
    """

    id: str
    text: str
    speaker: str | None = None
    date: str | None = None
    session_id: str | None = None
    sources: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def key_text(self) -> str:
        """What gets indexed: ``"[date] Speaker: text"`` (date and speaker when known)."""
        text = f"{self.speaker}: {self.text}" if self.speaker else self.text
        return f"[{self.date}] {text}" if self.date else text


@dataclass(frozen=True)
class Retrieval:
    """How a design ranks its documents at question time (see the module docstring).

    Attributes:
        method: ``"bm25"``, ``"dense"``, ``"hybrid"``, ``"eval:<strategy name>"``, or a strategy object.
        k: How many documents go into the prompt.
        neighbours: For stored turns, turns added on each side of each one found (same dataset session).
    """

    method: Any = "hybrid"
    k: int = 10
    neighbours: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InvalidArgumentError(f"Retrieval k must be a whole number of 1 or more, not {self.k!r}.")
        if isinstance(self.neighbours, bool) or not isinstance(self.neighbours, int) or self.neighbours < 0:
            raise InvalidArgumentError(f"Retrieval neighbours must be 0 or more, not {self.neighbours!r}.")
        if isinstance(self.method, str):
            if self.method.startswith("eval:"):
                _strategy_factory(self.method[5:])  # an unknown harness strategy fails here, not mid-replay
            elif self.method not in METHODS:
                raise InvalidArgumentError(f"Retrieval method must be one of {METHODS}, 'eval:<strategy>' (e.g. "
                                           f"'eval:default') or a strategy object, not {self.method!r}.")
        elif not (callable(getattr(self.method, "rank", None)) and callable(getattr(self.method, "fit", None))):
            raise InvalidArgumentError(f"A retrieval strategy object needs rank(query, k) and fit(conversation), as "
                                       f"the evaluation harness's strategies have; {self.method!r} lacks one.")

    def describe(self) -> str:
        """A short label: ``"hybrid k10"``, ``"eval:default k10 +1"`` (``+n``: neighbours)."""
        method = self.method
        if not isinstance(method, str):
            method = getattr(method, "name", type(method).__name__)
        return f"{method} k{self.k}" + (f" +{self.neighbours}" if self.neighbours else "")


def _strategy_factory(name: str) -> Callable[[], Any]:
    from agentlab.eval import make_strategy

    try:
        make_strategy(name)  # builds nothing heavy: models load on first use
    except ValueError as exc:
        raise InvalidArgumentError(f"Retrieval {('eval:' + name)!r}: {exc}") from None
    return lambda: make_strategy(name)


class CachedEmbedder:
    """An embedder that asks its inner embedder only for texts its :class:`~agentlab.eval.EmbeddingCache` has not
    seen (each distinct text once per replay; with a cache file, once per machine).

    Args:
        inner: The embedder doing the work (default all-MiniLM-L6-v2).
        cache: The embedding cache (default: one kept in memory).
    """

    def __init__(self, inner: Any = None, cache: Any = None) -> None:
        if inner is None:
            from agentlab.search import MiniLMEmbedder

            inner = MiniLMEmbedder()
        if cache is None:
            from agentlab.eval import EmbeddingCache

            cache = EmbeddingCache(None)
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.dimension = inner.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, in order."""
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return np.ascontiguousarray(self.cache.encode(self.inner, texts), dtype=np.float32)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, {self.cache!r})"


class Shared:
    """What the designs of one replay share: one embedding cache and the embedder that uses it.

    Args:
        embeddings: Where embeddings are kept: ``"default"`` (the embedding cache file of the evaluation harness,
            ``$AGENTLAB_HOME/cache/embeddings.duckdb``: derived data, keyed by model and text), a path, an
            :class:`~agentlab.eval.EmbeddingCache`, or None (in memory, for this replay only).
        embedder: The embedder (default all-MiniLM-L6-v2, loaded when first needed).
    """

    def __init__(self, embeddings: Any = None, embedder: Any = None) -> None:
        from agentlab.eval import EmbeddingCache

        self.embedding_cache = embeddings if isinstance(embeddings, EmbeddingCache) else EmbeddingCache(embeddings)
        self._inner = embedder
        self._embedder: Any = None

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = CachedEmbedder(self._inner, self.embedding_cache)
        return self._embedder


class Index:
    """Documents ranked for a query by one :class:`Retrieval` (build with :func:`make_index`)."""

    def __init__(self, retrieval: Retrieval) -> None:
        self.retrieval = retrieval
        self.docs: dict[str, Doc] = {}

    def add(self, docs: Iterable[Doc]) -> None:
        """Add or replace documents (by id)."""
        docs = list(docs)
        self.docs.update((d.id, d) for d in docs)
        if docs:
            self._add(docs)

    def remove(self, ids: Iterable[str]) -> None:
        """Remove documents; unknown ids are ignored."""
        gone = [i for i in ids if self.docs.pop(i, None) is not None]
        if gone:
            self._remove(gone)

    def reset(self) -> None:
        """Forget every document, including entries an earlier run left in a kept agent file."""
        self.remove(list(self.docs))

    def prepare(self, queries: Sequence[str]) -> None:
        """The queries to come (the questions of a conversation), so their embeddings are computed in one batch:
        an embedding model is many times faster on a batch than one text at a time."""

    def rank(self, query: str, k: int | None = None) -> list[str]:
        """Ids of the best ``k`` documents (default the retrieval's ``k``), best first."""
        k = self.retrieval.k if k is None else k
        if not self.docs or not query.strip():
            return []
        ranked = [i for i in dict.fromkeys(self._rank(query, k)) if i in self.docs]
        return ranked[:k]

    def _add(self, docs: list[Doc]) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _remove(self, ids: list[str]) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _rank(self, query: str, k: int) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError


class _SessionSearch(Index):
    """Stored turns ranked by the session's own BM25 search: the session indexes its messages itself."""

    def __init__(self, retrieval: Retrieval, session: Any) -> None:
        super().__init__(retrieval)
        self.session = session

    def _add(self, docs: list[Doc]) -> None:
        pass

    def _remove(self, ids: list[str]) -> None:
        raise InvalidArgumentError("Stored turns cannot be removed from the session's search.")

    def _rank(self, query: str, k: int) -> list[str]:
        return [h.id for h in self.session.search(query, mode="any", limit=k)]


class _ProviderIndex(Index):
    """Documents as entries of a search block (FTS5 BM25, vectors, or both fused) in the agent's DuckDB file."""

    def __init__(self, retrieval: Retrieval, provider: Any, embedder: Any = None) -> None:
        super().__init__(retrieval)
        self.provider = provider
        self.embedder = embedder

    def prepare(self, queries: Sequence[str]) -> None:
        if self.embedder is not None and queries:
            self.embedder.encode([q for q in queries if q.strip()])  # remembered: each search then embeds nothing

    def _add(self, docs: list[Doc]) -> None:
        self.provider.set_many([(d.id, d.key_text, None) for d in docs])

    def _remove(self, ids: list[str]) -> None:
        for i in ids:
            self.provider.delete(i)

    def reset(self) -> None:
        self.docs.clear()
        keys = self.provider.keys()
        if keys:
            self._remove(keys)

    def _rank(self, query: str, k: int) -> list[str]:
        return [h.key for h in self.provider.hits(query, k)]


class _StrategyIndex(Index):
    """Documents ranked by an evaluation-harness strategy, refitted on a Conversation of them when they changed."""

    def __init__(self, retrieval: Retrieval, strategy: Any, shared: Shared) -> None:
        super().__init__(retrieval)
        self.strategy = strategy
        if hasattr(strategy, "use_cache"):
            strategy.use_cache(shared.embedding_cache)
        self._owner: dict[str, list[str]] | None = None
        self._conversation: Any = None
        self._queries: list[str] = []

    def prepare(self, queries: Sequence[str]) -> None:
        self._queries = list(queries)
        if hasattr(self.strategy, "prepare"):
            self.strategy.prepare(self._queries)

    def _add(self, docs: list[Doc]) -> None:
        self._owner = None

    def _remove(self, ids: list[str]) -> None:
        self._owner = None

    def _fit(self) -> dict[str, list[str]]:
        from agentlab.eval import load_records

        rows = [{"conversation_id": "memory", "session_id": d.session_id or "all", "turn_id": d.id,
                 "speaker": d.speaker or "", "text": d.text, "session_date": d.date} for d in self.docs.values()]
        self._conversation = load_records(rows, name="memory").conversations[0]
        units = self.strategy.fit(self._conversation)
        return {u.id: list(getattr(u, "turn_ids", (u.id,))) for u in units}

    def _rank(self, query: str, k: int) -> list[str]:
        if self._owner is None:
            self._owner = self._fit()
            if hasattr(self.strategy, "prepare_conversation"):
                self.strategy.prepare_conversation(self._conversation, [*self._queries, query])
        out: list[str] = []
        for unit in self.strategy.rank(query, k):
            out.extend(self._owner.get(unit, [unit]))
        return out


def make_index(retrieval: Retrieval, session: Any, *, label: str, description: str, shared: Shared,
               turns: bool) -> Index:
    """An index for one design run; provider-backed ones are added to ``session`` as search block ``label``.

    Args:
        retrieval: The ranking.
        session: The run's session (its agent's file holds provider entries; ``"bm25"`` over turns searches it).
        label, description: The search block's label and prompt description.
        shared: The replay's shared embedder and caches.
        turns: Whether the documents are the session's stored turns (``"bm25"`` then uses ``session.search``).
    """
    method = retrieval.method
    if isinstance(method, str) and method in METHODS:
        if method == "bm25" and turns:
            return _SessionSearch(retrieval, session)
        from agentlab.context import FullTextSearchProvider, HybridSearchProvider, VectorSearchProvider

        target = session.agent if session.agent is not None else session.store
        provider: Any
        if method == "bm25":
            provider = FullTextSearchProvider(target, label=label, mode="any", limit=retrieval.k)
        elif method == "dense":
            provider = VectorSearchProvider(target, shared.embedder, label=label, limit=retrieval.k)
        else:
            provider = HybridSearchProvider(target, shared.embedder, label=label, limit=retrieval.k)
        session.with_context(label, provider=provider, description=description)
        return _ProviderIndex(retrieval, provider, None if method == "bm25" else shared.embedder)
    strategy = _strategy_factory(method[5:])() if isinstance(method, str) else method
    return _StrategyIndex(retrieval, strategy, shared)
