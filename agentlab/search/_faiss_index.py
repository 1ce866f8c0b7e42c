"""The FAISS side of vector search: an exact inner-product index with its own ids, searched one way.

:class:`VectorIndex` is the one FAISS index of agentlab: the vector store keeps one per namespace (derived from the
DuckDB file), and the evaluation harness's dense strategy builds one per conversation, so an evaluation measures
the search the agent ships.

Invariants: a vector store's index is a cache of one namespace at one generation; :mod:`agentlab.search._vectors`
rebuilds it whenever the namespace's generation in the file differs, and drops every index after SQL from outside.
Stored vectors are read straight from Arrow buffers, never through pandas. :meth:`VectorIndex.search` returns hits
best first, equal scores in ascending id order, whatever order FAISS found them in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from agentlab.errors import EmbedderError
from agentlab.store import Store

__all__ = ["Row", "VectorIndex", "array_view", "single_threaded", "vector_indexes", "vector_matrix"]

Row = tuple[str, str, "str | None"]  # key, content, metadata JSON


class VectorIndex:
    """An exact inner-product FAISS index with int64 ids, and the rows its ids point to, as of one generation.

    Args:
        dimension: the vectors' length.
        generation: what the index was built from (the vector store's namespace generation; 0 elsewhere).
    """

    def __init__(self, dimension: int, generation: int = 0) -> None:
        import faiss

        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
        self.rows: dict[int, Row] = {}  # in memory so a search needs no DuckDB round trip per hit
        self.generation = generation

    def add(self, vectors: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Add float32 rows under ``ids`` (default: their positions 0, 1, ... after those already held)."""
        matrix = np.ascontiguousarray(vectors, dtype=np.float32)
        if ids is None:
            ids = np.arange(self.index.ntotal, self.index.ntotal + len(matrix), dtype=np.int64)
        if len(matrix):
            self.index.add_with_ids(matrix, np.asarray(ids, dtype=np.int64))

    def search(self, query: np.ndarray, k: int, *, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best ids for one query vector: ``(scores, ids)``, best first, equal scores by ascending id.

        Runs single-threaded (see :func:`single_threaded`); ``params`` are FAISS search parameters (a filter).
        """
        import faiss

        limit = min(int(k), self.index.ntotal)
        if limit <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        with single_threaded(faiss):
            scores, ids = self.index.search(np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1), limit,
                                            params=params)
        keep = ids[0] >= 0
        scores, ids = scores[0][keep], ids[0][keep]
        order = np.lexsort((ids, -scores))
        return scores[order], ids[order]


def vector_indexes(store: Store) -> dict[str, VectorIndex]:
    """Caches per namespace, shared by every VectorStore on ``store``; they go with the store, and are
    dropped after SQL from outside (rebuilt from DuckDB on the next search)."""
    return store.derived("vector_caches", dict, reset=dict.clear)


def array_view(array: Any, dtype: Any) -> np.ndarray:
    # Read the Arrow buffer directly: Array.to_numpy() imports pandas, seconds in a cold process.
    if array.null_count:
        raise EmbedderError("A stored vector contains NULL values; drop_namespace() and add the entries again.")
    values = np.frombuffer(array.buffers()[1], dtype=dtype) if len(array) else np.empty(0, dtype)
    return values[array.offset : array.offset + len(array)]


def vector_matrix(column: Any, dimension: int) -> np.ndarray:
    """A FLOAT[] Arrow array as an (n, dimension) float32 array (a view of its buffer)."""
    flat = column.flatten()
    if len(flat) != len(column) * dimension:
        raise EmbedderError(
            f"Stored vectors are not all {dimension}-dimensional (was the file edited by hand?); "
            "call drop_namespace() and add the entries again."
        )
    return array_view(flat, np.float32).reshape(len(column), dimension)


@contextmanager
def single_threaded(faiss: Any) -> Iterator[None]:
    # One query over a flat index is memory-bound; on this project's 2 shared cores a second OpenMP
    # thread made p50 4x slower (60-85 ms against 15-35 ms at 100k x 384). The setting is per thread.
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)
