"""An immutable segment of a full-text index: positional postings by term id, and a few columns per document.

A segment holds documents numbered 0 .. n - 1 (its *docnums*). For every term id it stores, in term-major order
(compressed sparse rows), the docnums that contain the term (ascending, ``post_doc``), how often each contains it
(``post_tf``) and the positions of those occurrences (``positions``, per document ascending, documents in
``post_doc`` order). ``term_start[t] : term_start[t + 1]`` is term ``t``'s range of ``post_doc`` and ``post_tf``,
``term_pos_start`` the same for ``positions``; a segment covers the term ids below its ``n_terms`` (terms added
to the :class:`~agentlab.search._lexicon.Lexicon` later have no postings in it).

Per document: ``doc_seq`` (the seq of the row it came from), ``doc_search_seq`` (the indexed version; ties in
ranking go to the smaller), ``doc_len`` (tokens), ``doc_group`` (an index into the segment's ``groups``),
``doc_hash`` (a hash of the row it was built from, as the caller computes it, to check the index against the
file), the document id and the row's stored content (UTF-8 with offsets): a hit is returned with its text
without a query to DuckDB, which has no fast way to fetch a few scattered rows of a large table (Lucene keeps
"stored fields" for the same reason).

A segment is the same object in memory (just built from a batch of rows) and on disk (a
:class:`~agentlab.search._sections.SectionFile`, memory-mapped); deletions are not part of it (see
:class:`~agentlab.search._searcher.SegmentPart`). Building is vectorised: one Arrow split and dictionary encoding
of the rows' token strings, one dict lookup per distinct term, one stable radix sort by term id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentlab.search._lexicon import Lexicon
from agentlab.search._postings import count_runs, numpy_ints
from agentlab.search._sections import SectionFile

__all__ = ["DOC_COLUMNS", "Segment", "build_segment", "gather_bytes", "phrase_starts", "stable_order", "utf8_buffers"]

DOC_COLUMNS = ("doc_seq", "doc_search_seq", "doc_len", "doc_group", "doc_hash")
_EMPTY_U32 = np.zeros(0, dtype=np.uint32)


def _narrow(values: np.ndarray) -> np.ndarray:
    """Positions and counts as uint16 when they fit (most documents are far shorter than 65,536 tokens)."""
    if not len(values) or int(values.max()) < 1 << 16:
        return values.astype(np.uint16)
    return values.astype(np.uint32)


class Segment:
    """Postings and document columns (see the module docstring), from arrays or a section file.

    Args:
        source: A :class:`SectionFile`, or a dict of arrays (a segment not written yet).
        meta: ``{"groups": [...], "n_terms": int}`` for a dict source (a file carries its own).
    """

    def __init__(self, source: SectionFile | dict[str, np.ndarray], meta: dict[str, Any] | None = None) -> None:
        self.file = source if isinstance(source, SectionFile) else None
        self._arrays = source
        info = source.meta if isinstance(source, SectionFile) else (meta or {})
        self.groups: list[str] = list(info["groups"])
        self.n_terms = int(info["n_terms"])
        self.has_content = "doc_content_bytes" in self._arrays
        self.n_docs = len(self._arrays["doc_seq"])
        self.total_length = int(info.get("total_length", -1))
        if self.total_length < 0:
            self.total_length = int(self.doc_len.sum(dtype=np.int64))
        self.group_code = {g: i for i, g in enumerate(self.groups)}

    # Per-document columns are checked in full the first time they are used (a search of a term needs only
    # doc_len and doc_search_seq of its documents, but the check is per 64 KiB block either way).
    @property
    def doc_seq(self) -> np.ndarray:
        return self._checked("doc_seq")

    @property
    def doc_search_seq(self) -> np.ndarray:
        return self._checked("doc_search_seq")

    @property
    def doc_len(self) -> np.ndarray:
        return self._checked("doc_len")

    @property
    def doc_group(self) -> np.ndarray:
        return self._checked("doc_group")

    @property
    def doc_hash(self) -> np.ndarray:
        return self._checked("doc_hash")

    def _starts(self, tid: int, positions: bool = False) -> tuple[int, int]:
        name = "term_pos_start" if positions else "term_start"
        pair = self._range(name, tid, tid + 2)
        return int(pair[0]), int(pair[1])

    def _checked(self, name: str) -> np.ndarray:
        if self.file is not None:
            return self.file.verified(name)
        return self._arrays[name]

    def _range(self, name: str, lo: int, hi: int) -> np.ndarray:
        if self.file is not None:
            return self.file.verified(name, lo, hi)
        return self._arrays[name][lo:hi]

    # -- reading -------------------------------------------------------------------------------

    def postings(self, tid: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Docnums (ascending) containing term ``tid`` and its count in each; dead documents included."""
        if tid is None or tid >= self.n_terms:
            return _EMPTY_U32, _EMPTY_U32
        lo, hi = self._starts(tid)
        return self._range("post_doc", lo, hi), self._range("post_tf", lo, hi)

    def occurrences(self, tid: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Docnum and position of every occurrence of ``tid``, sorted by (docnum, position)."""
        docs, tf = self.postings(tid)
        if not len(docs):
            return _EMPTY_U32, _EMPTY_U32
        lo, hi = self._starts(tid, positions=True)  # type: ignore[arg-type]
        return np.repeat(docs, tf), self._range("positions", lo, hi)

    def phrase(self, tids: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
        """Docnums containing the terms adjacent and in order, and how often; dead documents included."""
        if len(tids) == 1:
            docs, tf = self.postings(tids[0])
            return docs.astype(np.int64), tf.astype(np.int64)
        if any(t is None or t >= self.n_terms for t in tids):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # Candidates first: documents holding every term, so positions are expanded only where a match can be.
        common = self.postings(tids[0])[0]
        for tid in tids[1:]:
            other = self.postings(tid)[0]
            common = common[np.isin(common, other, assume_unique=True)] if len(common) else common
        if not len(common):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return phrase_starts([self.occurrences(t) for t in tids], common)

    def doc_ids(self, docnums: np.ndarray) -> list[str]:
        """The ids of these documents."""
        return self._strings("doc_id_offsets", "doc_id_bytes", docnums)

    def contents(self, docnums: np.ndarray) -> list[str | None]:
        """The stored contents of these documents (Nones for a segment written without contents)."""
        if not self.has_content:
            return [None] * len(docnums)
        return self._strings("doc_content_offsets", "doc_content_bytes", docnums)  # type: ignore[return-value]

    def _strings(self, offsets_name: str, bytes_name: str, docnums: np.ndarray) -> list[str]:
        offsets = self._checked(offsets_name)
        starts, ends = offsets[docnums].tolist(), offsets[docnums + 1].tolist()
        return [self._range(bytes_name, lo, hi).tobytes().decode("utf-8") for lo, hi in zip(starts, ends)]

    # -- writing -------------------------------------------------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything a section file needs (for a segment built in memory)."""
        names = [*DOC_COLUMNS, "doc_id_offsets", "doc_id_bytes", "term_start", "term_pos_start", "post_doc",
                 "post_tf", "positions"] + (["doc_content_offsets", "doc_content_bytes"] if self.has_content else [])
        return {name: (self.file.verified(name) if self.file is not None else self._arrays[name]) for name in names}

    def meta(self) -> dict[str, Any]:
        return {"groups": self.groups, "n_terms": self.n_terms, "total_length": self.total_length}


def phrase_starts(occurrences: list[tuple[np.ndarray, np.ndarray]], within: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Documents where the terms whose occurrences are given (docnums, positions, sorted) appear adjacent and in
    order, and how often; only documents in ``within`` (sorted) when given."""
    starts: np.ndarray | None = None
    for offset, (docs, positions) in enumerate(occurrences):
        keep = positions >= offset
        if within is not None:
            keep &= np.isin(docs, within)
        keys = (docs[keep].astype(np.int64) << 32) | (positions[keep].astype(np.int64) - offset)
        if starts is None:
            starts = keys
        elif len(keys):
            found = np.searchsorted(keys, starts)
            found[found == len(keys)] = 0
            starts = starts[keys[found] == starts]
        else:
            starts = starts[:0]
        if not len(starts):
            break
    if starts is None or not len(starts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return count_runs(starts >> 32)


def gather_bytes(offsets: np.ndarray, data: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, bytes]:
    """The kept documents' byte strings (``offsets`` into ``data``) as new offsets and bytes, copied run by run
    of consecutive kept documents (deletions are rare, so there are few runs)."""
    sizes = np.diff(offsets)[keep]
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    edges = np.flatnonzero(np.diff(np.r_[0, keep.astype(np.int8), 0]))
    chunks = [data[int(offsets[a]):int(offsets[b])].tobytes() for a, b in zip(edges[::2], edges[1::2])]
    return out, b"".join(chunks)


def utf8_buffers(ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes and offsets of an Arrow string column."""
    import pyarrow as pa

    column = ids.combine_chunks() if hasattr(ids, "combine_chunks") else ids
    column = column.cast(pa.large_string())
    offsets = numpy_ints(pa.Array.from_buffers(pa.int64(), len(column) + 1, [None, column.buffers()[1]],
                                               offset=column.offset))
    raw = np.frombuffer(column.buffers()[2], dtype=np.uint8) if column.buffers()[2] is not None else \
        np.zeros(0, dtype=np.uint8)
    start = int(offsets[0])
    return (offsets - start).astype(np.int64), raw[start:int(offsets[-1])].copy()


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for keys in ``[0, 2**32)``: two 16-bit radix passes, several times faster."""
    if not len(keys) or int(keys.max()) < 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((keys >> 16).astype(np.uint16)[order], kind="stable")]


def _term_ids(table: Any, lexicon: Lexicon, total: int) -> np.ndarray:
    """The lexicon id of every token of the table's documents, in order (new terms are added to ``lexicon``).

    Only the distinct terms meet the lexicon's dict: a batch tokenized by
    :func:`agentlab.search._token_arrays.token_array` carries its tokens dictionary-coded (``token_codes``, one
    dictionary per chunk); otherwise Arrow splits and dictionary-encodes the ``tokens`` strings in C++.
    """
    import pyarrow.compute as pc

    if "token_codes" in table.column_names:
        parts = []
        for chunk in table.column("token_codes").chunks:
            coded = chunk.flatten()
            if len(coded):
                parts.append(lexicon.ids_of(coded.dictionary.to_pylist())[numpy_ints(coded.indices)])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    flat = pc.list_flatten(pc.split_pattern(table.column("tokens"), " "))
    encoded = pc.dictionary_encode(flat.combine_chunks() if hasattr(flat, "combine_chunks") else flat)
    terms = encoded.dictionary.to_pylist()
    local = numpy_ints(encoded.indices) if len(encoded.indices) else np.zeros(0, dtype=np.int32)
    if len(local) == total:
        return lexicon.ids_of(terms)[local] if len(local) else np.zeros(0, dtype=np.int64)
    empty = terms.index("")  # "" is how a document without tokens is stored: not a token, nor a term
    ids = np.zeros(len(terms), dtype=np.int64)
    ids[np.arange(len(terms)) != empty] = lexicon.ids_of(terms[:empty] + terms[empty + 1:])
    return ids[local[local != empty]]


def build_segment(table: Any, lexicon: Lexicon, hashes: np.ndarray | None = None) -> Segment:
    """A segment of the rows of an Arrow table ``(doc_id, grp, seq, search_seq, length, tokens[, content,
    token_codes])``.

    ``tokens`` are stemmed tokens joined by single spaces ("" for a document without tokens); ``token_codes``, when
    present, the same tokens dictionary-coded (see :func:`_term_ids`). New terms are added
    to ``lexicon``. ``hashes`` are the rows' ``doc_hash`` values (zeros when not known yet).
    """
    import pyarrow.compute as pc

    n = table.num_rows
    lengths = numpy_ints(table.column("length")).astype(np.int64)
    tids = _term_ids(table, lexicon, int(lengths.sum()))
    n_terms = len(lexicon)
    docnums = np.repeat(np.arange(n, dtype=np.int64), lengths)
    positions = np.arange(len(tids), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    order = stable_order(tids)  # keeps (docnum, position) order inside a term
    tids, docnums, positions = tids[order], docnums[order], positions[order]
    heads = np.flatnonzero(np.r_[True, (tids[1:] != tids[:-1]) | (docnums[1:] != docnums[:-1])]) if len(tids) \
        else np.zeros(0, dtype=np.int64)
    pair_tids = tids[heads]
    tf = np.diff(np.r_[heads, len(tids)])
    term_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_tids, minlength=n_terms), out=term_start[1:])
    term_pos_start = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(tids, minlength=n_terms), out=term_pos_start[1:])
    groups = pc.dictionary_encode(table.column("grp").combine_chunks())
    id_offsets, id_bytes = utf8_buffers(table.column("doc_id"))
    if "content" in table.column_names:
        content_offsets, content_bytes = utf8_buffers(table.column("content"))
    arrays: dict[str, np.ndarray] = {
        "doc_seq": numpy_ints(table.column("seq")).astype(np.int64),
        "doc_search_seq": numpy_ints(table.column("search_seq")).astype(np.int64),
        "doc_len": lengths.astype(np.int32),
        "doc_group": numpy_ints(groups.indices).astype(np.int32) if n else np.zeros(0, dtype=np.int32),
        "doc_hash": np.zeros(n, dtype=np.uint64) if hashes is None else hashes.astype(np.uint64),
        "doc_id_offsets": id_offsets,
        "doc_id_bytes": id_bytes,
        "term_start": term_start,
        "term_pos_start": term_pos_start,
        "post_doc": docnums[heads].astype(np.uint32),
        "post_tf": _narrow(tf),
        "positions": _narrow(positions),
    }
    if "content" in table.column_names:
        arrays["doc_content_offsets"], arrays["doc_content_bytes"] = content_offsets, content_bytes
    return Segment(arrays, {"groups": groups.dictionary.to_pylist(), "n_terms": n_terms,
                            "total_length": int(lengths.sum())})
