"""A durable vector store: keyed text entries with embeddings in DuckDB, searched through FAISS.

:class:`VectorStore` keeps ``(key, content, metadata)`` entries of one *namespace*. DuckDB is the
source of truth; the in-memory search cache (a FAISS index plus the rows it points to) is derived.

Invariants:

* Each ``(model_id, sha256(content))`` is embedded once and stored in ``vector_embeddings``. Re-adding
  unchanged content, or the same content under another key or namespace, never calls the embedder,
  in this process or after reopening the file.
* Embedder output is validated (:func:`~agentlab.search._embedders.check_embeddings`) before anything is
  written: a bad vector stores nothing.
* A namespace is pinned to the ``model_id`` and ``dimension`` of its first writer; a different
  embedder is refused with :class:`~agentlab.errors.EmbedderError`.
* The cache (``IndexIDMap2(IndexFlatIP)`` with ids = ``vector_entries.id``, and ``id -> row``) only
  ever holds committed data. It is built from DuckDB on first search, updated incrementally after each
  commit (``Store.after_commit``), and rebuilt whenever its generation differs from the namespace's
  ``generation`` column, which every write moves to a never-reused value.
* Scores are inner products, i.e. cosine similarities for normalised embedders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentlab._checks import check_count, metadata_json
from agentlab.errors import EmbedderError, InvalidArgumentError
from agentlab.search._embedders import Embedder, check_embeddings, encode_batched
from agentlab.search._faiss_index import Row, VectorIndex, array_view, vector_indexes, vector_matrix
from agentlab.store import Store

_NAMESPACE_SQL = "SELECT model_id, dimension, generation FROM vector_namespaces WHERE namespace = ?"
# The input of a cache rebuild, in two queries: carrying the texts through the join with the
# vectors made DuckDB build its hash table on the vectors, twice the CPU of this split at 100k.
_NAMESPACE_VECTORS_SQL = """
SELECT e.id, v.vector
FROM vector_entries AS e
JOIN vector_embeddings AS v
  ON v.model_id = ? AND v.content_hash = e.content_hash
WHERE e.namespace = ?
"""
_NAMESPACE_ROWS_SQL = "SELECT id, key, content, metadata FROM vector_entries WHERE namespace = ?"
_ENTRIES_BY_KEY_SQL = """
SELECT key, id, content_hash, metadata
FROM vector_entries
WHERE namespace = ? AND key IN (SELECT unnest(?::VARCHAR[]))
"""
_HASHES_SQL = """
SELECT content_hash{vector}
FROM vector_embeddings
WHERE model_id = ? AND content_hash IN (SELECT unnest(?::VARCHAR[]))
"""
# Several unnest() in one SELECT are zipped row by row: each list parameter is one column. Lists of
# strings bind fast, while rows as separate INSERTs would run at about 1,000 per second.
_BATCH_SQL = """
SELECT unnest(?::VARCHAR[]) AS key, unnest(?::VARCHAR[]) AS content,
       unnest(?::VARCHAR[]) AS content_hash, unnest(?::VARCHAR[]) AS metadata
"""
_INSERT_ENTRIES_SQL = f"""
INSERT INTO vector_entries (id, namespace, key, content, content_hash, metadata)
SELECT nextval('vector_entry_ids'), ?, key, content, content_hash, metadata
FROM ({_BATCH_SQL})
RETURNING key, id
"""
_UPDATE_ENTRIES_SQL = f"""
UPDATE vector_entries AS e
SET content = b.content, content_hash = b.content_hash, metadata = b.metadata, updated_at = now()
FROM ({_BATCH_SQL}) AS b
WHERE e.namespace = ? AND e.key = b.key
"""
_DELETE_SQL = """
DELETE FROM vector_entries
WHERE namespace = ? AND key IN (SELECT unnest(?::VARCHAR[]))
RETURNING id
"""
_BUMP_SQL = """
UPDATE vector_namespaces
SET generation = nextval('vector_generations')
WHERE namespace = ?
RETURNING generation
"""
_INSERT_EMBEDDINGS_SQL = """
INSERT INTO vector_embeddings (model_id, content_hash, vector)
SELECT ?, content_hash, vector FROM _agentlab_vector_batch
ON CONFLICT DO NOTHING
"""



@dataclass(frozen=True)
class VectorEntry:
    """One stored entry. ``metadata`` is ``{}`` when none was given."""

    key: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VectorHit:
    """One search result; ``score`` is the inner product with the query (higher is closer)."""

    key: str
    score: float
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


def content_hash(content: str) -> str:
    """The sha256 hex digest of ``content`` (UTF-8): the embedding table's key with ``model_id``."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _check_k(k: Any) -> int:
    # FAISS asserts (a bare AssertionError) on a NaN or fractional k.
    return check_count("k", k)


class VectorStore:
    """Keyed texts with embeddings in one namespace of an agent's DuckDB file, searchable by meaning.

    Args:
        store: The open :class:`~agentlab.store.Store`.
        namespace: Any non-empty name; entries of different namespaces never mix.
        embedder: An :class:`~agentlab.search.Embedder` (e.g. ``MiniLMEmbedder()``).
        chunk_size: Texts per ``encode`` call when adding many entries.

    Raises:
        EmbedderError: The namespace already holds vectors of another model or dimension.
    """

    def __init__(self, store: Store, namespace: str, embedder: Embedder, *, chunk_size: int = 1024) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty string, got {namespace!r}.")
        if check_count("chunk_size", chunk_size) < 1:
            raise InvalidArgumentError("chunk_size must be 1 or more (texts per encode call).")
        if not isinstance(embedder, Embedder):
            raise TypeError(f"{embedder!r} is not an embedder: it needs model_id, dimension and encode(texts).")
        if not isinstance(embedder.dimension, int) or embedder.dimension < 1:
            raise ValueError(f"The embedder's dimension must be a positive int, got {embedder.dimension!r}.")
        if not isinstance(embedder.model_id, str) or not embedder.model_id:
            raise ValueError(f"The embedder's model_id must be a non-empty string, got {embedder.model_id!r}.")
        self.store = store
        self.namespace = namespace
        self.embedder = embedder
        self.chunk_size = chunk_size
        self._check_space(self._namespace_row())

    def __repr__(self) -> str:
        return f"VectorStore({self.store.path!r}, namespace={self.namespace!r}, embedder={self.embedder!r})"

    # -- reading -------------------------------------------------------------------------------

    def count(self) -> int:
        """Number of entries in this namespace."""
        return int(self._only("SELECT count(*) FROM vector_entries WHERE namespace = ?", [self.namespace])[0])

    def keys(self) -> list[str]:
        """Every key in this namespace, in order of first insertion."""
        sql = "SELECT key FROM vector_entries WHERE namespace = ? ORDER BY id"
        return [row[0] for row in self.store.execute(sql, [self.namespace]).fetchall()]

    def get(self, key: str) -> VectorEntry | None:
        """The entry stored under ``key``, or ``None`` if there is none."""
        sql = "SELECT content, metadata FROM vector_entries WHERE namespace = ? AND key = ?"
        row = self._one(sql, [self.namespace, key])
        return None if row is None else VectorEntry(key, row[0], json.loads(row[1]) if row[1] else {})

    def search(self, query: str, k: int = 10, *, keys: Collection[str] | None = None) -> list[VectorHit]:
        """The ``k`` entries closest in meaning to ``query``, best first.

        Args:
            query: The text to embed and look up.
            k: How many hits at most: a whole number; 0 returns ``[]``.
            keys: Only consider entries with these keys (``None``: all entries).

        Raises:
            EmbedderError: The embedder returned a bad query vector.
            InvalidArgumentError: ``k`` is not a whole number of 0 or more (checked before the query is embedded).
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, not {type(query).__name__}.")
        _check_k(k)
        vector = check_embeddings(self.embedder.encode([query]), 1, self.embedder.dimension)
        return self.search_vector(vector[0], k, keys=keys)

    def search_vector(self, vector: Any, k: int = 10, *, keys: Collection[str] | None = None) -> list[VectorHit]:
        """Like :meth:`search`, with an already computed query vector of the namespace's dimension."""
        k = _check_k(k)
        array = np.asarray(vector)
        query = check_embeddings(array.reshape(1, -1) if array.ndim == 1 else array, 1, self.embedder.dimension)
        import faiss

        with self.store.lock:
            cache = self._current_cache()
            limit, params = min(k, cache.index.ntotal), None
            if keys is not None:
                ids = self._ids_for_keys(keys)
                selector = faiss.IDSelectorBatch(ids)  # kept alive in this frame during the search
                params = faiss.SearchParameters(sel=selector)  # type: ignore[call-arg]  # the stubs omit SWIG keywords
                limit = min(limit, len(ids))
            if limit == 0:
                return []
            scores, found = cache.search(query[0], limit, params=params)
            hits = [(cache.rows[int(i)], float(s)) for i, s in zip(found, scores)]
        return [VectorHit(key, s, content, json.loads(meta) if meta else {}) for (key, content, meta), s in hits]

    # -- writing -------------------------------------------------------------------------------

    def add(self, key: str, content: str, metadata: dict[str, Any] | None = None) -> bool:
        """Add or replace one entry; see :meth:`add_many`. Returns whether anything changed."""
        return self.add_many([(key, content, metadata)], progress=False) > 0

    def add_many(self, items: Iterable[tuple[str, str, dict[str, Any] | None]], *, progress: bool = True) -> int:
        """Add or replace entries in one transaction, embedding only content never embedded before.

        A key that exists is updated in place (same FAISS id). Later items win over earlier ones with
        the same key. Unchanged entries are not rewritten.

        Args:
            items: ``(key, content, metadata)`` tuples (``(key, content)`` also works).
            progress: Show a ``tqdm.auto`` bar when more than ``chunk_size`` texts need embedding.

        Returns:
            How many entries were inserted or changed.

        Raises:
            EmbedderError: Bad embedder output, or a namespace pinned to another model; nothing stored.
            ReadOnlyAgentError: The store is read-only.
        """
        batch = self._prepare(items)
        if not batch:
            return 0
        self.store.require_writable()
        with self.store.lock:
            missing = self._plan(batch)[1]
        # Embed without holding the store lock: the model may run for minutes, other threads go on.
        fresh = self._embed(missing, progress)
        with self.store.transaction():
            existing, missing = self._plan(batch)  # re-read: another thread may have written meanwhile
            fresh.update(self._embed({h: t for h, t in missing.items() if h not in fresh}, progress))
            return self._write(batch, existing, fresh)

    def delete(self, keys: str | Iterable[str]) -> int:
        """Delete entries by key (a single key or several); unknown keys are ignored.

        Returns:
            How many entries were deleted.
        """
        wanted = [keys] if isinstance(keys, str) else list(keys)
        if not wanted:
            return 0
        with self.store.transaction():
            ids = [row[0] for row in self.store.execute(_DELETE_SQL, [self.namespace, wanted]).fetchall()]
            if ids:
                self._bump_and_schedule(removed=ids, rows={}, hashes={}, fresh={})
        return len(ids)

    # -- internals -----------------------------------------------------------------------------

    def _one(self, sql: str, params: list[Any]) -> tuple | None:
        # fetchall, not fetchone: DuckDB 2 refuses register()/sql() while a result is left unread.
        rows = self.store.execute(sql, params).fetchall()
        return rows[0] if rows else None

    def _only(self, sql: str, params: list[Any]) -> tuple:
        """The one row of a query that always returns exactly one (an aggregate, an UPDATE ... RETURNING)."""
        rows = self.store.execute(sql, params).fetchall()
        return tuple(rows[0])

    def _arrow(self, sql: str, params: list[Any]) -> Any:
        conn = self.store.conn
        conn.complete()  # another caller may have left a result unread (Store.scalar uses fetchone)
        return conn.sql(sql, params=params).to_arrow_table()

    def _namespace_row(self) -> tuple[str, int, int] | None:
        return self._one(_NAMESPACE_SQL, [self.namespace])

    def _check_space(self, row: tuple[str, int, int] | None) -> None:
        if row is not None and (row[0], row[1]) != (self.embedder.model_id, self.embedder.dimension):
            raise EmbedderError(
                f"Namespace {self.namespace!r} holds {row[1]}-dimensional vectors of {row[0]!r}, but this "
                f"embedder is {self.embedder.model_id!r} with dimension {self.embedder.dimension}. Use the "
                f"same embedder, another namespace, or drop_namespace(store, {self.namespace!r}) to start over."
            )

    def _prepare(self, items: Iterable[Any]) -> dict[str, Row]:
        batch: dict[str, Row] = {}  # key -> (content, content hash, metadata JSON)
        for item in items:
            if not isinstance(item, tuple | list) or len(item) not in (2, 3):
                raise TypeError(f"Each item must be (key, content, metadata) or (key, content), got {item!r}.")
            key, content, metadata = item if len(item) == 3 else (*item, None)
            if not isinstance(key, str) or not key:
                raise ValueError(f"Keys must be non-empty strings, got {key!r}.")
            if not isinstance(content, str):
                raise TypeError(f"Content of {key!r} must be a string, not {type(content).__name__}.")
            batch[key] = (content, content_hash(content), metadata_json(metadata, key))
        return batch

    def _plan(self, batch: dict[str, Row]) -> tuple[dict[str, tuple], dict[str, str]]:
        """Existing rows of the batch's keys, and the contents (by hash) with no stored embedding."""
        rows = self.store.execute(_ENTRIES_BY_KEY_SQL, [self.namespace, list(batch)]).fetchall()
        existing = {row[0]: row[1:] for row in rows}  # key -> (id, content hash, metadata JSON)
        needed = {h: c for key, (c, h, _) in batch.items() if key not in existing or existing[key][1] != h}
        known = set()
        if needed:
            sql = _HASHES_SQL.format(vector="")
            known = {row[0] for row in self.store.execute(sql, [self.embedder.model_id, list(needed)]).fetchall()}
        return existing, {h: c for h, c in needed.items() if h not in known}

    def _embed(self, missing: dict[str, str], progress: bool) -> dict[str, np.ndarray]:
        if not missing:
            return {}
        vectors = encode_batched(
            self.embedder, list(missing.values()), chunk_size=self.chunk_size, progress=progress,
            desc=f"Embedding {self.namespace}",
        )
        return dict(zip(missing, vectors))

    def _write(self, batch: dict[str, Row], existing: dict[str, tuple], fresh: dict[str, np.ndarray]) -> int:
        row = self._namespace_row()
        self._check_space(row)
        if row is None:
            self.store.execute(
                "INSERT INTO vector_namespaces (namespace, model_id, dimension, generation) "
                "VALUES (?, ?, ?, nextval('vector_generations'))",
                [self.namespace, self.embedder.model_id, self.embedder.dimension],
            )
        new = [k for k in batch if k not in existing]
        moved = [k for k in batch if k in existing and existing[k][1] != batch[k][1]]
        touched = [k for k in batch if k in existing and k not in moved and existing[k][2] != batch[k][2]]
        needed = {batch[k][1] for k in new + moved}
        if fresh := {h: v for h, v in fresh.items() if h in needed}:
            self._insert_embeddings(list(fresh), np.stack(list(fresh.values())))

        def columns(keys: list[str]) -> list[list[Any]]:
            return [keys, *([batch[k][i] for k in keys] for i in range(3))]

        ids = {k: existing[k][0] for k in moved + touched}
        if new:
            ids.update(self.store.execute(_INSERT_ENTRIES_SQL, [self.namespace, *columns(new)]).fetchall())
        if moved or touched:
            self.store.execute(_UPDATE_ENTRIES_SQL, [*columns(moved + touched), self.namespace])
        if new or moved or touched:
            self._bump_and_schedule(
                removed=[ids[k] for k in moved],
                rows={ids[k]: (k, batch[k][0], batch[k][2]) for k in new + moved + touched},
                hashes={ids[k]: batch[k][1] for k in new + moved},
                fresh=fresh,
            )
        return len(new) + len(moved) + len(touched)

    def _insert_embeddings(self, hashes: list[str], matrix: np.ndarray) -> None:
        import pyarrow as pa

        # Arrow arrays are built from raw buffers: pa.array() would import pandas (seconds), and
        # a FLOAT[] column from one contiguous float32 buffer costs no per-value Python work.
        n, dimension = matrix.shape
        vector_offsets = np.arange(0, n * dimension + 1, dimension, dtype=np.int64)
        hash_offsets = np.arange(0, 64 * n + 1, 64, dtype=np.int32)  # sha256 hex: 64 ASCII chars
        values = np.ascontiguousarray(matrix, np.float32)
        table = pa.Table.from_arrays(
            [
                pa.Array.from_buffers(
                    pa.string(), n, [None, pa.py_buffer(hash_offsets), pa.py_buffer("".join(hashes).encode())]
                ),
                pa.LargeListArray.from_arrays(
                    pa.Array.from_buffers(pa.int64(), n + 1, [None, pa.py_buffer(vector_offsets)]),
                    pa.Array.from_buffers(pa.float32(), n * dimension, [None, pa.py_buffer(values)]),
                ),
            ],
            names=["content_hash", "vector"],
        )
        conn = self.store.conn
        conn.complete()  # see _arrow
        conn.register("_agentlab_vector_batch", table)
        try:
            self.store.execute(_INSERT_EMBEDDINGS_SQL, [self.embedder.model_id])
        finally:
            conn.unregister("_agentlab_vector_batch")

    def _bump_and_schedule(
        self, *, removed: list[int], rows: dict[int, Row], hashes: dict[int, str], fresh: dict[str, np.ndarray]
    ) -> None:
        """Move the namespace to a new generation; patch a live cache once this transaction commits.

        Args:
            removed: Ids to take out of the index (deleted, or re-added below with a new vector).
            rows: New or changed rows by id.
            hashes: Content hash of each id whose vector must be (re-)added.
            fresh: Vectors embedded by this write, by hash; others are read back after the commit.
        """
        old = self._only(_NAMESPACE_SQL, [self.namespace])[2]
        new = self._only(_BUMP_SQL, [self.namespace])[0]
        caches, namespace = vector_indexes(self.store), self.namespace
        if namespace not in caches:
            return  # nothing built yet: the first search builds from DuckDB

        def apply() -> None:
            import faiss

            cache = caches.get(namespace)
            if cache is None or cache.generation != old:
                caches.pop(namespace, None)  # stale anyway: rebuilt on the next search
                return
            try:
                if removed:
                    cache.index.remove_ids(faiss.IDSelectorBatch(np.asarray(removed, dtype=np.int64)))
                    for i in removed:
                        cache.rows.pop(i, None)
                if hashes:
                    vectors = dict(fresh)
                    if unknown := sorted(set(hashes.values()) - vectors.keys()):
                        sql = _HASHES_SQL.format(vector=", vector")
                        table = self._arrow(sql, [self.embedder.model_id, unknown])
                        matrix = vector_matrix(table.column("vector").combine_chunks(), self.embedder.dimension)
                        vectors.update(zip(table.column("content_hash").to_pylist(), matrix))
                    matrix = np.stack([vectors[h] for h in hashes.values()]).astype(np.float32, copy=False)
                    cache.index.add_with_ids(matrix, np.fromiter(hashes, dtype=np.int64, count=len(hashes)))
                cache.rows.update(rows)
                cache.generation = new
            except Exception:  # a cache must never break a committed write: rebuild it later
                caches.pop(namespace, None)

        self.store.after_commit(apply)

    def _current_cache(self) -> VectorIndex:
        row = self._namespace_row()
        self._check_space(row)
        generation = 0 if row is None else row[2]
        caches = vector_indexes(self.store)
        cache = caches.get(self.namespace)
        if cache is not None and cache.generation == generation:
            return cache
        with self._snapshot():  # generation, vectors and rows from one consistent read
            row = self._namespace_row()
            self._check_space(row)
            cache = VectorIndex(self.embedder.dimension, 0 if row is None else row[2])
            vectors = self._arrow(_NAMESPACE_VECTORS_SQL, [self.embedder.model_id, self.namespace])
            for batch in vectors.to_batches():  # batch by batch: no extra copy of all vectors
                if batch.num_rows:
                    ids = array_view(batch.column("id"), np.int64)
                    cache.index.add_with_ids(vector_matrix(batch.column("vector"), self.embedder.dimension), ids)
            rows = self._arrow(_NAMESPACE_ROWS_SQL, [self.namespace])
            columns = [rows.column(name).to_pylist() for name in ("id", "key", "content", "metadata")]
            cache.rows = dict(zip(columns[0], zip(*columns[1:])))
        # Inside a transaction the connection sees uncommitted rows: use, but never keep, that cache.
        if not self.store.in_transaction:
            caches[self.namespace] = cache
        return cache

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        # Another Store on the same file shares the DuckDB instance and may commit between two
        # queries; a read transaction (also fine on a read-only store) gives them one snapshot.
        if self.store.in_transaction:
            yield
            return
        if not self.store.read_only:
            self.store.flush()  # a new agent's held name sits in an open transaction: commit it first
        conn = self.store.conn
        conn.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _ids_for_keys(self, keys: Collection[str]) -> np.ndarray:
        wanted = [keys] if isinstance(keys, str) else list(keys)
        sql = "SELECT id FROM vector_entries WHERE namespace = ? AND key IN (SELECT unnest(?::VARCHAR[]))"
        rows = self.store.execute(sql, [self.namespace, wanted]).fetchall()
        return np.asarray([row[0] for row in rows], dtype=np.int64)


def drop_namespace(store: Store, namespace: str) -> int:
    """Delete every entry of ``namespace`` and unpin its model, so another embedder can use the name.

    Stored embeddings are kept: re-adding the same texts with the old model costs no model calls.

    Returns:
        How many entries were deleted.
    """
    with store.transaction():
        sql = "DELETE FROM vector_entries WHERE namespace = ? RETURNING id"
        deleted = store.execute(sql, [namespace]).fetchall()
        store.execute("DELETE FROM vector_namespaces WHERE namespace = ?", [namespace])
        caches = vector_indexes(store)
        store.after_commit(lambda: caches.pop(namespace, None))
    return len(deleted)
