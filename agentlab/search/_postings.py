"""A positional inverted index in memory: the engine under full-text search and BM25 ranking.

Documents are numbered 0, 1, 2, ... in the order they are added (their *docnum*); a replaced
document is removed and added again, so docnum order is always insertion order, which is what
search uses to break ties. For every term the index keeps two numpy arrays, the docnums and token
positions of its occurrences, sorted by (docnum, position).

Invariants:

* Occurrence arrays stay sorted: new documents get larger docnums, so appending keeps the order.
  Single additions go to small Python lists first and are merged into the arrays when the term
  is next read, which keeps one addition to a few microseconds.
* Removal only clears ``alive``; readers filter dead docnums out. Owners rebuild the index when the
  dead share grows (see :meth:`Postings.mostly_dead`).
* Statistics (:attr:`n_alive`, :attr:`total_length`) cover live documents only, like an FTS5 table's
  row count and token total.

:class:`DocTable` adds each document's id, group and seq, which is everything
:class:`agentlab.search.FullTextIndex` keeps in memory; it is filled from Arrow tables (the
rows of ``fulltext_docs``) without going through pandas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int32)


class _Column:
    """A numpy array that grows by doubling, so appending one value is O(1) amortised."""

    def __init__(self, dtype: Any) -> None:
        self._data = np.zeros(16, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end > len(self._data):
            grown = np.zeros(max(end, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : end] = values
        self.size = end

    def append(self, value: Any) -> None:
        """Add one value (no temporary array: a single append is on the path of every message write)."""
        if self.size == len(self._data):
            grown = np.zeros(2 * len(self._data), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size] = value
        self.size += 1

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.size]


class Postings:
    """Term -> (docnums, positions) for a growing set of tokenized documents."""

    def __init__(self) -> None:
        self.term_ids: dict[str, int] = {}
        self._docs: list[np.ndarray] = []
        self._positions: list[np.ndarray] = []
        self._pending: dict[int, tuple[list[int], list[int]]] = {}
        self.lengths = _Column(np.int64)
        self.alive = _Column(np.bool_)
        self.n_alive = 0
        self.total_length = 0

    @property
    def size(self) -> int:
        """Number of docnums handed out (live and dead)."""
        return self.lengths.size

    # -- writing -------------------------------------------------------------------------------

    def _term_id(self, term: str) -> int:
        tid = self.term_ids.get(term)
        if tid is None:
            tid = self.term_ids[term] = len(self._docs)
            self._docs.append(_EMPTY)
            self._positions.append(_EMPTY)
        return tid

    def add(self, tokens: Sequence[str]) -> int:
        """Add one document; returns its docnum."""
        docnum = self.size
        for position, token in enumerate(tokens):
            tid = self._term_id(token)
            pending = self._pending.get(tid)
            if pending is None:
                pending = self._pending[tid] = ([], [])
            pending[0].append(docnum)
            pending[1].append(position)
        self.lengths.append(len(tokens))
        self.alive.append(True)
        self.n_alive += 1
        self.total_length += len(tokens)
        return docnum

    def add_many(self, terms: Sequence[str], term_index: np.ndarray, lengths: np.ndarray) -> int:
        """Add documents in bulk, vectorised; returns the docnum of the first.

        Args:
            terms: Distinct terms (a dictionary).
            term_index: For every token of every document, in order, its index in ``terms``.
            lengths: Tokens per document, in order.
        """
        first = self.size
        lengths = np.asarray(lengths, dtype=np.int64)
        n_tokens = int(lengths.sum())
        if n_tokens:
            mapping = np.fromiter((self._term_id(t) for t in terms), dtype=np.int64, count=len(terms))
            tids = mapping[np.asarray(term_index, dtype=np.int64)]
            docnums = np.repeat(np.arange(first, first + len(lengths), dtype=np.int32), lengths)
            starts = np.cumsum(lengths) - lengths
            positions = (np.arange(n_tokens, dtype=np.int64) - np.repeat(starts, lengths)).astype(np.int32)
            # Stable keeps (docnum, position) order within a term; on 16-bit keys numpy radix-sorts.
            keys = tids.astype(np.uint16) if len(self._docs) <= 1 << 16 else tids
            order = np.argsort(keys, kind="stable")
            tids, docnums, positions = tids[order], docnums[order], positions[order]
            cuts = np.flatnonzero(np.diff(tids)) + 1
            for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(tids)].tolist()):
                self._append(int(tids[lo]), docnums[lo:hi], positions[lo:hi])
        self.lengths.extend(lengths)
        self.alive.extend(np.ones(len(lengths), dtype=np.bool_))
        self.n_alive += len(lengths)
        self.total_length += n_tokens
        return first

    def _append(self, tid: int, docs: np.ndarray, positions: np.ndarray) -> None:
        self._flush(tid)
        if len(self._docs[tid]):
            self._docs[tid] = np.concatenate([self._docs[tid], docs])
            self._positions[tid] = np.concatenate([self._positions[tid], positions])
        else:
            self._docs[tid], self._positions[tid] = docs, positions

    def _flush(self, tid: int) -> None:
        pending = self._pending.pop(tid, None)
        if pending is not None:
            self._docs[tid] = np.concatenate([self._docs[tid], np.array(pending[0], dtype=np.int32)])
            self._positions[tid] = np.concatenate([self._positions[tid], np.array(pending[1], dtype=np.int32)])

    def remove(self, docnum: int) -> None:
        """Mark a document dead (its occurrences stay until the owner rebuilds)."""
        if self.alive.values[docnum]:
            self.alive.values[docnum] = False
            self.n_alive -= 1
            self.total_length -= int(self.lengths.values[docnum])

    def mostly_dead(self) -> bool:
        """True when dead documents are over half the docnums (and there are many): time to rebuild."""
        dead = self.size - self.n_alive
        return dead > 1000 and dead * 2 > self.size

    # -- reading -------------------------------------------------------------------------------

    def occurrences(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """Docnums and positions of a term's occurrences in live documents, sorted."""
        tid = self.term_ids.get(term)
        if tid is None:
            return _EMPTY, _EMPTY
        self._flush(tid)
        docs, positions = self._docs[tid], self._positions[tid]
        if self.n_alive < self.size:
            keep = self.alive.values[docs]
            docs, positions = docs[keep], positions[keep]
        return docs, positions

    def phrase(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Live documents containing the tokens adjacent and in order, with occurrence counts.

        Returns:
            (docnums ascending, occurrences per document). A one-token phrase is just the term.
        """
        docs, positions = self.occurrences(tokens[0])
        if len(tokens) > 1:
            # A phrase occurrence is identified by (docnum, start position): intersect those keys.
            starts = (docs.astype(np.int64) << 32) | positions
            for offset, token in enumerate(tokens[1:], start=1):
                if not len(starts):
                    break
                d, p = self.occurrences(token)
                valid = p >= offset
                keys = (d[valid].astype(np.int64) << 32) | (p[valid] - offset)
                found = np.searchsorted(keys, starts)
                found[found == len(keys)] = 0
                starts = starts[keys[found] == starts] if len(keys) else starts[:0]
            docs = (starts >> 32).astype(np.int32)
        return count_runs(docs)


def count_runs(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a sorted array and how often each occurs."""
    if not len(sorted_values):
        return sorted_values, np.zeros(0, dtype=np.int64)
    heads = np.r_[0, np.flatnonzero(sorted_values[1:] != sorted_values[:-1]) + 1]
    return sorted_values[heads], np.diff(np.r_[heads, len(sorted_values)])


# -- Arrow without pandas ----------------------------------------------------------------------
# pyarrow imports pandas (seconds) the first time it converts to or from numpy or Python lists with
# pa.array / to_numpy. These build and read plain arrays through their buffers instead.


def arrow_strings(values: list[str]) -> Any:
    """A ``large_string`` Arrow array of Python strings (no nulls)."""
    import pyarrow as pa

    data = "".join(values)
    if data.isascii():  # one character is one byte: no per-string encoding needed
        sizes, raw = np.fromiter(map(len, values), dtype=np.int64, count=len(values)), data.encode("ascii")
    else:
        encoded = [v.encode("utf-8") for v in values]
        sizes, raw = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), b"".join(encoded)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def arrow_optional_strings(values: Sequence[str | None]) -> Any:
    """A ``large_string`` Arrow array of strings where ``None`` is null (no pandas, like :func:`arrow_strings`)."""
    import pyarrow as pa

    valid = np.fromiter((v is not None for v in values), dtype=np.bool_, count=len(values))
    if valid.all():
        return arrow_strings(list(values))  # type: ignore[arg-type]
    dense = arrow_strings([v if v is not None else "" for v in values])
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.large_string(), len(values), [bitmap, *dense.buffers()[1:]],
                                 null_count=int(len(values) - valid.sum()))


def arrow_ints(values: np.ndarray) -> Any:
    """An Arrow int32/int64 array sharing a numpy array's memory."""
    import pyarrow as pa

    kind = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64()}[values.dtype]
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def numpy_ints(array: Any) -> np.ndarray:
    """A null-free Arrow integer array (or chunked array) as a numpy array."""
    if hasattr(array, "combine_chunks"):
        array = array.combine_chunks()
    dtype = np.dtype(f"int{array.type.bit_width}")
    if not len(array):
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset : array.offset + len(array)]


# -- a namespace's documents --------------------------------------------------------------------


class DocTable:
    """Postings plus each document's id, group and seq, by docnum: what a full-text search reads."""

    def __init__(self) -> None:
        self.postings = Postings()
        self.doc_num: dict[str, int] = {}
        self.doc_ids: list[str | None] = []
        self.seqs = _Column(np.int64)
        self.group_of = _Column(np.int32)
        self.group_code: dict[str, int] = {}
        self.groups: list[str] = []

    def _code(self, group: str) -> int:
        code = self.group_code.get(group)
        if code is None:
            code = self.group_code[group] = len(self.groups)
            self.groups.append(group)
        return code

    def drop(self, doc_id: str) -> None:
        num = self.doc_num.pop(doc_id, None)
        if num is not None:
            self.postings.remove(num)
            self.doc_ids[num] = None

    def add(self, doc_id: str, group: str, seq: int, tokens: list[str]) -> None:
        num = self.doc_num.get(doc_id)
        if num is not None and self.seqs.values[num] >= seq:
            return  # already there (a rebuild saw the committed row first)
        self.drop(doc_id)
        self.doc_num[doc_id] = self.postings.add(tokens)
        self.doc_ids.append(doc_id)
        self.seqs.append(seq)
        self.group_of.append(self._code(group))

    def add_table(self, table: Any) -> None:
        """Add rows (doc_id, grp, seq, length, tokens) from an Arrow table, vectorised."""
        import pyarrow.compute as pc

        ids = table.column("doc_id").to_pylist()
        for doc_id in ids:
            self.drop(doc_id)
        lengths = numpy_ints(table.column("length")).astype(np.int64)
        flat = pc.list_flatten(pc.split_pattern(table.column("tokens"), " ")).combine_chunks()
        encoded = pc.dictionary_encode(flat)
        terms, term_index = encoded.dictionary.to_pylist(), numpy_ints(encoded.indices)
        if len(term_index) != lengths.sum():  # "" is how an empty document is stored: not a token
            term_index = term_index[term_index != terms.index("")]
        first = self.postings.add_many(terms, term_index, lengths)
        self.doc_num.update(zip(ids, range(first, first + len(ids))))
        self.doc_ids.extend(ids)
        self.seqs.extend(numpy_ints(table.column("seq")))
        groups = pc.dictionary_encode(table.column("grp").combine_chunks())
        codes = np.array([self._code(g) for g in groups.dictionary.to_pylist()], dtype=np.int32)
        self.group_of.extend(codes[numpy_ints(groups.indices)] if len(ids) else codes[:0])

    def clear_group(self, group: str) -> None:
        code = self.group_code.get(group)
        if code is None:
            return
        live = self.postings.alive.values
        for num in np.flatnonzero((self.group_of.values == code) & live).tolist():
            self.drop(self.doc_ids[num])  # type: ignore[arg-type]
