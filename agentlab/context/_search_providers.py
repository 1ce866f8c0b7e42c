"""Search providers: context blocks whose keyed entries the model finds with ``search_context``.

* :class:`VectorSearchProvider`: entries found by meaning (MiniLM or any embedder, FAISS over DuckDB).
* :class:`FullTextSearchProvider`: entries found by BM25 with SQLite FTS5's tokens and scores.
* :class:`HybridSearchProvider`: both, fused with reciprocal rank fusion (:mod:`agentlab.search._fusion`).

All three store their entries in the agent's DuckDB file and support ``set`` (insert or update) and ``delete``.

Invariants: ``get`` never writes; every write is one transaction; ``search`` returns ``None`` when nothing
matches (never ``""``), and otherwise shows each hit's key and score.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab._checks import check_amount, check_count
from agentlab.context._providers import _Labelled, _store_of
from agentlab.errors import InvalidArgumentError, InvalidSearchError
from agentlab.search import fuse_keyed
from agentlab.store import Store

if TYPE_CHECKING:
    from agentlab.search import Embedder, VectorStore

__all__ = ["EntryHit", "FullTextSearchProvider", "HybridSearchProvider", "VectorSearchProvider", "format_hits"]


# -- search ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryHit:
    """One search result: the entry's key, its score (higher is better), text and metadata."""

    key: str
    score: float
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


def format_hits(hits: Sequence[EntryHit]) -> str | None:
    """The ``search_context`` text: ``[key] (score s)`` then the content, per hit, separated by blank lines.

    Upstream writes ``[key]\\ncontent``; the score is added so the model (and a researcher reading the transcript)
    can tell a strong match from a weak one.
    """
    if not hits:
        return None
    return "\n\n".join(f"[{h.key}] (score {h.score:.4f})\n{h.content}" for h in hits)


def _entry_count_text(n: int) -> str | None:
    return f"{n} entries indexed." if n else None  # upstream's wording, "1 entries" included


class _SearchBase(_Labelled):
    """What the three search providers share: label handling, ``get``, ``search`` and argument checks."""

    limit: int

    def __repr__(self) -> str:
        return f"{type(self).__name__}(label={self.label!r})"

    @property
    def namespace(self) -> str:
        """The name under which this block's entries are stored (``"context:<label>"``)."""
        return f"context:{self._label()}"

    def get(self) -> str | None:
        """``"N entries indexed."``, or None when the block is empty."""
        return _entry_count_text(self.count())

    def search(self, query: str) -> str | None:
        """The best ``limit`` entries for ``query`` as text (see :func:`format_hits`), or None."""
        return format_hits(self.hits(query))

    def set(self, key: str, content: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Insert the entry ``key``, or update it in place."""
        self.set_many([(key, content, metadata)])

    def count(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def hits(self, query: str, limit: int | None = None) -> list[EntryHit]:  # pragma: no cover - overridden
        raise NotImplementedError

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:  # pragma: no cover
        raise NotImplementedError


def _check_items(items: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, dict[str, Any] | None]]:
    out = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise TypeError(f"Each entry must be (key, content) or (key, content, metadata), got {item!r}.")
        key, content, metadata = item if len(item) == 3 else (*item, None)
        if not isinstance(key, str) or not key:
            raise ValueError(f"Entry keys must be non-empty strings, got {key!r}.")
        if not isinstance(content, str):
            raise TypeError(f"Content of entry {key!r} must be a string, not {type(content).__name__}.")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"Metadata of entry {key!r} must be a dict or None, not {type(metadata).__name__}.")
        out.append((key, content, None if metadata is None else dict(metadata)))
    return out


class VectorSearchProvider(_SearchBase):
    """Entries found by meaning: embeddings in DuckDB, searched through a FAISS cache (:class:`VectorStore`).

    Each content is embedded once per model (unchanged content is never re-embedded); a bad embedder output raises
    :class:`~agentlab.errors.EmbedderError` and stores nothing.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        embedder: Any :class:`~agentlab.search.Embedder`; default all-MiniLM-L6-v2 (loaded on first use).
        label: Storage label; when None, the block's label.
        limit: Hits returned by :meth:`search`.
    """

    def __init__(self, agent: Any, embedder: Embedder | None = None, *, label: str | None = None,
                 limit: int = 10) -> None:
        self._agent = agent
        self._embedder = embedder
        self.label = label
        self.limit = check_count("limit", limit)
        self._vectors: VectorStore | None = None
        self._seen_entries = False

    @property
    def embedder(self) -> Embedder:
        """The embedder (created on first access when none was given)."""
        if self._embedder is None:
            from agentlab.search import MiniLMEmbedder

            self._embedder = MiniLMEmbedder()
        return self._embedder

    @property
    def vectors(self) -> VectorStore:
        """The underlying :class:`~agentlab.search.VectorStore` (namespace ``"context:<label>"``)."""
        store = _store_of(self._agent)
        if self._vectors is None or self._vectors.store is not store or self._vectors.namespace != self.namespace:
            from agentlab.search import VectorStore

            self._vectors = VectorStore(store, self.namespace, self.embedder)
        return self._vectors

    def count(self) -> int:
        """Number of entries."""
        return self.vectors.count()

    def keys(self) -> list[str]:
        """Every key, in order of first insertion."""
        return self.vectors.keys()

    def _has_entries(self) -> bool:
        # LIMIT 1 stops at the first row; count(*) would scan the namespace on every search.
        return bool(_store_of(self._agent).execute(
            "SELECT 1 FROM vector_entries WHERE namespace = ? LIMIT 1", [self.namespace]
        ).fetchall())

    def entry(self, key: str) -> EntryHit | None:
        """The stored entry ``key`` (score 0), or None."""
        found = self.vectors.get(key)
        return None if found is None else EntryHit(found.key, 0.0, found.content, found.metadata)

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries in one transaction; returns how many changed.

        Raises:
            EmbedderError: Wrong dimension, NaN or infinite vectors; nothing is stored.
        """
        return self.vectors.add_many(_check_items(items), progress=progress)

    def delete(self, key: str) -> bool:
        """Delete the entry ``key``; returns whether there was one."""
        return self.vectors.delete(key) > 0

    def hits(self, query: str, limit: int | None = None) -> list[EntryHit]:
        """The entries closest in meaning to ``query`` (cosine for normalised embedders), best first."""
        if not query or not query.strip():
            return []
        if not self._seen_entries:
            # An empty block answers without loading the model. Once entries were seen the check is skipped
            # (a block emptied later still answers [] from the empty index, after embedding the query).
            if not self._has_entries():
                return []
            self._seen_entries = True
        found = self.vectors.search(query, self.limit if limit is None else limit)
        return [EntryHit(h.key, h.score, h.content, h.metadata) for h in found]


def _fulltext(store: Store, namespace: str) -> Any:
    from agentlab.search import FullTextIndex

    return FullTextIndex(store, namespace)


def _metadata_text(metadata: dict[str, Any] | None) -> str | None:
    return json.dumps(metadata, ensure_ascii=False, allow_nan=False) if metadata else None


_UPSERT_ENTRIES = """
INSERT INTO context_entries (label, key, content, metadata)
SELECT ?, key, content, metadata FROM _agentlab_context_batch
ON CONFLICT (label, key) DO UPDATE SET content = excluded.content, metadata = excluded.metadata, updated_at = now()
"""


class FullTextSearchProvider(_SearchBase):
    """Entries found by words: BM25 over a porter-stemmed index (upstream ``AgentSearchProvider``).

    Entries live in ``context_entries``; the index (:class:`agentlab.search.FullTextIndex`, namespace
    ``"context:<label>"``) is updated in the same transaction, so a search right after ``set`` finds the entry.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        label: Storage label; when None, the block's label.
        limit: Hits returned by :meth:`search` (upstream: 10).
        mode: ``"all"`` (every word, upstream), ``"any"`` (ranked OR) or ``"phrase"``.
    """

    def __init__(self, agent: Any, *, label: str | None = None, limit: int = 10, mode: str = "all") -> None:
        from agentlab.search import MODES

        if mode not in MODES:
            raise InvalidSearchError(f"Unknown search mode {mode!r}; use one of {', '.join(MODES)}.")
        self._agent = agent
        self.label = label
        self.limit = check_count("limit", limit)
        self.mode = mode

    @property
    def index(self) -> Any:
        """The full-text index of this block's entries."""
        return _fulltext(_store_of(self._agent), self.namespace)

    def count(self) -> int:
        """Number of entries."""
        rows = _store_of(self._agent).execute(
            "SELECT count(*) FROM context_entries WHERE label = ?", [self._label()]
        ).fetchall()
        return int(rows[0][0])

    def keys(self) -> list[str]:
        """Every key, oldest first."""
        rows = _store_of(self._agent).execute(
            "SELECT key FROM context_entries WHERE label = ? ORDER BY created_at, key", [self._label()]
        ).fetchall()
        return [r[0] for r in rows]

    def entry(self, key: str) -> EntryHit | None:
        """The stored entry ``key`` (score 0), or None."""
        found = self._entries([key])
        return found.get(key)

    def _entries(self, keys: list[str]) -> dict[str, EntryHit]:
        rows = _store_of(self._agent).execute(
            "SELECT key, content, metadata FROM context_entries "
            "WHERE label = ? AND key IN (SELECT unnest(?::VARCHAR[]))",
            [self._label(), keys],
        ).fetchall()
        return {k: EntryHit(k, 0.0, c, json.loads(m) if m else {}) for k, c, m in rows}

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries in one transaction; returns how many were written."""
        import pyarrow as pa

        batch = {key: (content, _metadata_text(meta)) for key, content, meta in _check_items(items)}
        if not batch:
            return 0
        store = _store_of(self._agent)
        table = pa.table({"key": list(batch), "content": [v[0] for v in batch.values()],
                          "metadata": pa.array([v[1] for v in batch.values()], pa.string())})
        with store.transaction() as conn:
            # Bulk rows go through Arrow: DuckDB takes ~1,000 single-row inserts/s but ~400,000 rows/s this way.
            conn.register("_agentlab_context_batch", table)
            try:
                store.execute(_UPSERT_ENTRIES, [self._label()])
            finally:
                conn.unregister("_agentlab_context_batch")
            self.index.index_many([(key, content, "") for key, (content, _) in batch.items()])
        return len(batch)

    def delete(self, key: str) -> bool:
        """Delete the entry ``key``; returns whether there was one."""
        store = _store_of(self._agent)
        with store.transaction():
            rows = store.execute(
                "DELETE FROM context_entries WHERE label = ? AND key = ? RETURNING key", [self._label(), key]
            ).fetchall()
            if rows:
                self.index.remove([key])
        return bool(rows)

    def hits(self, query: str, limit: int | None = None) -> list[EntryHit]:
        """The best entries for ``query`` by BM25 (higher is better), best first."""
        if not query or not query.strip():
            return []
        found = self.index.search(query, mode=self.mode, limit=self.limit if limit is None else limit)
        entries = self._entries([h.doc_id for h in found])
        return [_with_score(entries[h.doc_id], h.score) for h in found if h.doc_id in entries]


def _with_score(hit: EntryHit, score: float) -> EntryHit:
    """``hit`` with another score."""
    return EntryHit(hit.key, float(score), hit.content, hit.metadata)


class HybridSearchProvider(_SearchBase):
    """Entries found by meaning and by words, fused by :mod:`agentlab.search._fusion` (reciprocal rank by default).

    Each side returns its best ``candidates``. With ``fusion="rrf"`` an entry scores ``sum(w / (rrf_k + rank))``
    over the lists it is in (rank 1 = best), so agreement between the two rankings wins and raw scores never need
    comparing; ``"minmax"`` or ``"zscore"`` put each side's scores on one scale first and add them (an entry
    missing from a side gets that side's lowest value). The evaluation harness's ``Hybrid`` strategy fuses with the
    same functions. Entries are stored once (in the vector store); the word index follows them in the same
    transaction.

    Args:
        agent: The :class:`~agentlab.agent.Agent` (or a :class:`~agentlab.store.Store`).
        embedder: As :class:`VectorSearchProvider` (default all-MiniLM-L6-v2).
        label: Storage label; when None, the block's label.
        rrf_k: The fusion constant; larger values flatten the difference between ranks (60 is the usual choice).
        limit: Hits returned by :meth:`search`.
        candidates: How deep each side's list is before fusion.
        fusion: ``"rrf"``, ``"minmax"`` or ``"zscore"``.
        weights: ``(meaning, words)`` weights (default equal).
    """

    def __init__(self, agent: Any, embedder: Embedder | None = None, *, label: str | None = None, rrf_k: float = 60,
                 limit: int = 10, candidates: int = 50, fusion: str = "rrf",
                 weights: tuple[float, float] = (1.0, 1.0)) -> None:
        from agentlab.search import FUSION_METHODS

        self._agent = agent
        self.label = label
        self.rrf_k = check_amount("rrf_k", rrf_k)  # NaN would make every fused score NaN
        self.limit = check_count("limit", limit)
        self.candidates = check_count("candidates", candidates)
        if fusion not in FUSION_METHODS:
            raise InvalidArgumentError(f"fusion must be one of {', '.join(FUSION_METHODS)}, not {fusion!r}.")
        self.fusion = fusion
        self.weights = tuple(check_amount("weight", w) for w in weights)
        if len(self.weights) != 2:
            raise InvalidArgumentError(f"Give two weights (meaning, words), not {len(self.weights)}.")
        self.vector = VectorSearchProvider(agent, embedder, label=label, limit=candidates)

    def init(self, label: str) -> None:
        """Adopt the block's label (for both sides) unless one was given."""
        super().init(label)
        self.vector.init(self.label or label)

    @property
    def index(self) -> Any:
        """The full-text side's index."""
        return _fulltext(_store_of(self._agent), self.namespace)

    def count(self) -> int:
        """Number of entries."""
        return self.vector.count()

    def keys(self) -> list[str]:
        """Every key, in order of first insertion."""
        return self.vector.keys()

    def entry(self, key: str) -> EntryHit | None:
        """The stored entry ``key`` (score 0), or None."""
        return self.vector.entry(key)

    def set_many(self, items: Iterable[tuple[Any, ...]], *, progress: bool = False) -> int:
        """Insert or update many entries (vectors and words) in one transaction.

        Raises:
            EmbedderError: Bad embedder output; nothing is stored on either side.
        """
        checked = _check_items(items)
        store = _store_of(self._agent)
        with store.transaction():
            changed = self.vector.set_many(checked, progress=progress)
            self.index.index_many([(key, content, "") for key, content, _ in checked])
        return changed

    def delete(self, key: str) -> bool:
        """Delete the entry ``key`` from both sides; returns whether there was one."""
        store = _store_of(self._agent)
        with store.transaction():
            deleted = self.vector.delete(key)
            self.index.remove([key])
        return deleted

    def hits(self, query: str, limit: int | None = None) -> list[EntryHit]:
        """The fused ranking, best first; ``score`` is the fused score (the RRF sum by default)."""
        if not query or not query.strip():
            return []
        by_meaning = self.vector.hits(query, self.candidates)
        by_words = self.index.search(query, mode="any", limit=self.candidates)
        fused = fuse_keyed([[(h.key, h.score) for h in by_meaning], [(h.doc_id, h.score) for h in by_words]],
                           method=self.fusion, weights=self.weights, k=self.rrf_k)
        best = fused[: self.limit if limit is None else limit]
        known = {h.key: h for h in by_meaning}
        known.update(self._entries([key for key, _ in best if key not in known]))
        return [_with_score(known[key], score) for key, score in best if key in known]

    def _entries(self, keys: list[str]) -> dict[str, EntryHit]:
        # One query for the entries found by words only (the vector side already returned its own texts).
        if not keys:
            return {}
        rows = _store_of(self._agent).execute(
            "SELECT key, content, metadata FROM vector_entries "
            "WHERE namespace = ? AND key IN (SELECT unnest(?::VARCHAR[]))",
            [self.vector.namespace, keys],
        ).fetchall()
        return {k: EntryHit(k, 0.0, c, json.loads(m) if m else {}) for k, c, m in rows}
