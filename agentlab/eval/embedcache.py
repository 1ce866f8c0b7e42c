"""A disk cache of embeddings for evaluation runs: one DuckDB file, keyed by model and content hash.

Embedding a benchmark's turns is the slow part of an evaluation (LoCoMo's 5,882 turns take about
25 s with MiniLM on two cores); everything else takes seconds. :class:`EmbeddingCache` stores each
vector under ``(model_id, sha256(text))`` so a second run, another strategy with the same key
text, or a notebook restart never calls the model for a text it has seen.

Invariants:

* A stored vector is exactly what the embedder returned for that text (after
  :func:`~agentlab.search._embedders.check_embeddings`), as float32; rows are never updated.
* :meth:`EmbeddingCache.encode` returns one row per input text, in input order, whatever was cached.
* The file is opened only for one read or write, or for one :meth:`EmbeddingCache.hold` block
  (an evaluation run), so several processes can take turns using it; when another process holds
  it, the cache is skipped with a warning and the texts are embedded anyway (a cache must never
  make a run fail).
* ``path=None`` means an in-memory cache that lasts as long as the object.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from agentlab.search import Embedder, content_hash, encode_batched

if TYPE_CHECKING:
    import duckdb

__all__ = ["EmbeddingCache", "default_cache_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model_id     VARCHAR NOT NULL,
    content_hash VARCHAR NOT NULL,
    vector       FLOAT[] NOT NULL,
    PRIMARY KEY (model_id, content_hash)
)
"""
_LOOKUP_SQL = """
SELECT e.content_hash, e.vector
FROM embedding_cache AS e JOIN _agentlab_wanted AS w USING (content_hash)
WHERE e.model_id = ?
"""


def default_cache_path() -> Path:
    """``$AGENTLAB_HOME/cache/embeddings.duckdb`` (``./agentlab-data/...`` when the variable is unset)."""
    from agentlab.store import resolve_root

    return resolve_root(None) / "cache" / "embeddings.duckdb"


class EmbeddingCache:
    """Embeddings stored per ``(model_id, content hash)`` in a DuckDB file.

    Args:
        path: The DuckDB file (created with its folder on first write), ``"default"`` for
            :func:`default_cache_path`, or ``None`` for a cache kept in memory only.

    Attributes:
        hits: Texts served from the cache since creation.
        misses: Texts that had to be embedded since creation.
    """

    def __init__(self, path: str | os.PathLike[str] | None = "default") -> None:
        if path == "default":
            path = default_cache_path()
        self.path = None if path is None else Path(path)
        self._memory: dict[tuple[str, str], np.ndarray] = {}
        self._held: duckdb.DuckDBPyConnection | None = None
        self._holding = False
        self.hits = 0
        self.misses = 0
        self.progress = False  # a run sets it: encode() then draws a bar while it embeds many texts

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path) if self.path else None!r})"

    @contextmanager
    def hold(self) -> Iterator[EmbeddingCache]:
        """Keep the file open for a block of many lookups (an evaluation run), then release it.

        Opening the file costs about 0.1 s; a run looks up each conversation's keys separately.
        """
        if self._holding or self.path is None:
            yield self
            return
        self._holding = True  # the first read or write opens the file and keeps it open
        try:
            yield self
        finally:
            conn, self._held, self._holding = self._held, None, False
            if conn is not None:
                conn.close()

    def _release(self, conn: duckdb.DuckDBPyConnection) -> None:
        if conn is not self._held:
            conn.close()

    def _connect(self) -> duckdb.DuckDBPyConnection | None:
        import duckdb

        assert self.path is not None
        if self._held is not None:
            return self._held
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            warnings.warn(
                f"The embedding cache {self.path} is held by another process ({exc}); embedding without it. "
                "Close the other process, or pass another cache path.", RuntimeWarning, stacklevel=3,
            )
            return None
        conn.execute(_SCHEMA)
        if self._holding:
            self._held = conn
        return conn

    def lookup(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors among ``hashes`` for ``model_id`` (absent hashes are left out)."""
        found = {h: self._memory[(model_id, h)] for h in hashes if (model_id, h) in self._memory}
        wanted = [h for h in dict.fromkeys(hashes) if h not in found]
        if not wanted or self.path is None or not self.path.exists():
            return found
        import pyarrow as pa

        conn = self._connect()
        if conn is None:
            return found
        try:
            conn.register("_agentlab_wanted", pa.table({"content_hash": wanted}))
            try:
                table = conn.sql(_LOOKUP_SQL, params=[model_id]).to_arrow_table()
            finally:
                conn.unregister("_agentlab_wanted")
        finally:
            self._release(conn)
        if table.num_rows:
            flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            matrix = np.ascontiguousarray(flat.reshape(table.num_rows, -1), dtype=np.float32)
            for h, row in zip(table.column("content_hash").to_pylist(), matrix):
                found[h] = self._memory[(model_id, h)] = row
        return found

    def store(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        """Save vectors by content hash; hashes already stored are left as they are."""
        if not vectors:
            return
        for h, v in vectors.items():
            self._memory[(model_id, h)] = v
        if self.path is None:
            return
        import pyarrow as pa

        matrix = np.stack(list(vectors.values())).astype(np.float32, copy=False)
        dimension = matrix.shape[1]
        column = pa.ListArray.from_arrays(
            pa.array(np.arange(0, matrix.size + 1, dimension, dtype=np.int32)), pa.array(matrix.reshape(-1))
        )
        batch = pa.table({"model_id": [model_id] * len(vectors), "content_hash": list(vectors), "vector": column})
        conn = self._connect()
        if conn is None:
            return
        try:
            conn.register("_agentlab_embedding_batch", batch)
            try:
                conn.execute(
                    "INSERT INTO embedding_cache SELECT * FROM _agentlab_embedding_batch ON CONFLICT DO NOTHING"
                )
            finally:
                conn.unregister("_agentlab_embedding_batch")
        finally:
            self._release(conn)

    def encode(self, embedder: Embedder, texts: Sequence[str], *, progress: bool = False,
               desc: str = "Embedding") -> np.ndarray:
        """Embed ``texts`` with ``embedder``, calling it only for texts this cache has not seen.

        Args:
            embedder: Any :class:`~agentlab.search.Embedder`; its ``model_id`` is part of the key.
            texts: The texts, in the order wanted back.
            progress: Show a ``tqdm.auto`` bar while embedding the missing texts (also when :attr:`progress` is set
                and more than 128 texts are missing).
            desc: The progress bar's label.

        Returns:
            A float32 array of shape ``(len(texts), embedder.dimension)`` in input order.
        """
        texts = list(texts)
        hashes = [content_hash(t) for t in texts]
        model_id = str(embedder.model_id)
        found = self.lookup(model_id, hashes)
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts):
            if h not in found and h not in missing:
                missing[h] = t
        self.hits += len(texts) - sum(1 for h in hashes if h in missing)
        self.misses += len(missing)
        if missing:
            ticking = progress or self.progress
            fresh = encode_batched(embedder, list(missing.values()), chunk_size=128 if ticking else 256,
                                   progress=ticking, desc=desc)
            new = dict(zip(missing, fresh))
            self.store(model_id, new)
            found.update(new)
        out = np.empty((len(texts), int(embedder.dimension)), dtype=np.float32)
        for i, h in enumerate(hashes):
            out[i] = found[h]
        return out

    def count(self, model_id: str | None = None) -> int:
        """Number of stored vectors (of one model, or of all)."""
        if self.path is None or not self.path.exists():
            return len({k for k in self._memory if model_id is None or k[0] == model_id})
        conn = self._connect()
        if conn is None:
            return 0
        try:
            if model_id is None:
                return int(conn.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0])
            query = "SELECT count(*) FROM embedding_cache WHERE model_id = ?"
            return int(conn.execute(query, [model_id]).fetchall()[0][0])
        finally:
            self._release(conn)

