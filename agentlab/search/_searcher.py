"""BM25 search over the parts of an index (segments and the recent-documents buffer), in time of the postings read.

An index is a list of *parts*, each numbering its own documents: persisted and in-memory
:class:`~agentlab.search._segment.Segment` s (:class:`SegmentPart`, with a mask of deleted documents) and the
buffer of single appends (:class:`BufferPart`, over :class:`~agentlab.search._postings.DocTable`). A document is
alive in exactly one part.

Scores are FTS5's ``bm25()`` over the whole index, as :mod:`agentlab.search._bm25` defines them: N, the phrase's
document frequency and the average length are sums over the parts' live documents, and each document's score
adds its phrases' terms in query order, from 0.0, with the same float operations. Ties go to the smaller
``search_seq`` (the version indexed first), as FTS5's rowid order does.

Cost: reading each query term's postings in each part, plus work proportional to them; nothing is done per
document of the index (a candidate set larger than a sixteenth of a part is marked in a dense array, which is
cheaper than sorting that many postings and still proportional to them).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from agentlab.search._bm25 import BM25Params, bm25_term, fts5_idf, top_k
from agentlab.search._lexicon import Lexicon
from agentlab.search._postings import DocTable
from agentlab.search._segment import Segment

__all__ = ["BufferPart", "SegmentPart", "search_parts"]

_EMPTY = np.zeros(0, dtype=np.int64)


class SegmentPart:
    """A segment and which of its documents are still alive."""

    def __init__(self, segment: Segment, live: np.ndarray | None = None) -> None:
        self.segment = segment
        self.live = live  # None: every document alive
        self.n_live = segment.n_docs if live is None else int(live.sum())
        self.live_length = segment.total_length if live is None else int(segment.doc_len[live].sum(dtype=np.int64))

    @property
    def n_deleted(self) -> int:
        return self.segment.n_docs - self.n_live

    def kill(self, docnums: np.ndarray) -> int:
        """Mark documents deleted; returns how many were alive."""
        if not len(docnums):
            return 0
        if self.live is None:
            self.live = np.ones(self.segment.n_docs, dtype=np.bool_)
        docnums = docnums[self.live[docnums]]
        if len(docnums):
            self.live[docnums] = False
            self.n_live -= len(docnums)
            self.live_length -= int(self.segment.doc_len[docnums].sum(dtype=np.int64))
        return len(docnums)

    def kill_where(self, mask: np.ndarray) -> int:
        return self.kill(np.flatnonzero(mask))

    def phrase(self, tids: list[int | None]) -> tuple[np.ndarray, np.ndarray]:
        docs, counts = self.segment.phrase(tids)
        if self.live is not None and len(docs):
            keep = self.live[docs]
            docs, counts = docs[keep], counts[keep]
        return docs.astype(np.int64, copy=False), counts

    def doc_len(self, docs: np.ndarray) -> np.ndarray:
        return self.segment.doc_len[docs]

    def search_seq(self, docs: np.ndarray) -> np.ndarray:
        return self.segment.doc_search_seq[docs]

    def doc_seq(self, docs: np.ndarray) -> np.ndarray:
        return self.segment.doc_seq[docs]

    def group_codes(self, groups: Collection[str]) -> list[int]:
        return [self.segment.group_code[g] for g in groups if g in self.segment.group_code]

    def doc_group(self, docs: np.ndarray) -> np.ndarray:
        return self.segment.doc_group[docs]

    def hits(self, docs: list[int]) -> list[tuple[str, str, str | None, int]]:
        """(document id, group, stored content or None, row seq) of each document."""
        seg = self.segment
        chosen = np.array(docs, dtype=np.int64)
        ids = seg.doc_ids(chosen)
        contents = seg.contents(chosen)
        groups = [seg.groups[g] for g in seg.doc_group[chosen].tolist()]
        return list(zip(ids, groups, contents, seg.doc_seq[chosen].tolist()))


class BufferPart:
    """The documents appended one at a time since the last flush: a :class:`DocTable` plus each row's seq."""

    def __init__(self) -> None:
        self.table = DocTable()
        self.row_seq: list[int] = []
        self.rows: list[tuple[str, str, int, int, list[str], str | None]] = []  # id, group, seq, version, tokens,
        # content

    @property
    def n_live(self) -> int:
        return self.table.postings.n_alive

    @property
    def live_length(self) -> int:
        return self.table.postings.total_length

    def add(self, doc_id: str, group: str, seq: int, search_seq: int, tokens: list[str],
            content: str | None = None) -> None:
        before = self.table.postings.size
        self.table.add(doc_id, group, search_seq, tokens)
        if self.table.postings.size > before:
            self.row_seq.append(seq)
            self.rows.append((doc_id, group, seq, search_seq, tokens, content))

    def kill(self, doc_ids: Collection[str]) -> None:
        for doc_id in doc_ids:
            self.table.drop(doc_id)

    def live_rows(self) -> list[tuple[str, str, int, int, list[str], str | None]]:
        alive = self.table.postings.alive.values
        return [row for row, keep in zip(self.rows, alive.tolist()) if keep]

    def phrase(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        docs, counts = self.table.postings.phrase(tokens)
        return docs.astype(np.int64, copy=False), counts

    def doc_len(self, docs: np.ndarray) -> np.ndarray:
        return self.table.postings.lengths.values[docs]

    def search_seq(self, docs: np.ndarray) -> np.ndarray:
        return self.table.seqs.values[docs]

    def doc_seq(self, docs: np.ndarray) -> np.ndarray:
        return np.asarray(self.row_seq, dtype=np.int64)[docs]

    def group_codes(self, groups: Collection[str]) -> list[int]:
        return [self.table.group_code[g] for g in groups if g in self.table.group_code]

    def doc_group(self, docs: np.ndarray) -> np.ndarray:
        return self.table.group_of.values[docs]

    def hits(self, docs: list[int]) -> list[tuple[str, str, str | None, int]]:
        table = self.table
        out = []
        for doc in docs:
            doc_id = table.doc_ids[doc]
            assert doc_id is not None
            out.append((doc_id, table.groups[int(table.group_of.values[doc])], self.rows[doc][5], self.row_seq[doc]))
        return out


Part = SegmentPart | BufferPart


def _union(lists: list[np.ndarray], size: int) -> np.ndarray:
    total = sum(len(x) for x in lists)
    if total * 16 > size:  # dense marking: proportional to the postings, as they are a large share of the part
        mark = np.zeros(size, dtype=np.bool_)
        for docs in lists:
            mark[docs] = True
        return np.flatnonzero(mark)
    return np.unique(np.concatenate(lists)) if lists else _EMPTY


def _intersection(lists: list[np.ndarray]) -> np.ndarray:
    ordered = sorted(lists, key=len)
    found = ordered[0]
    for docs in ordered[1:]:
        if not len(found):
            break
        at = np.searchsorted(docs, found)
        at[at == len(docs)] = 0
        found = found[docs[at] == found] if len(docs) else found[:0]
    return found


def search_parts(parts: Sequence[Part], lexicon: Lexicon | None, phrases: list[tuple[str, ...]], mode: str, limit: int,
                 params: BM25Params, *, groups: Collection[str] | None = None,
                 seqs: np.ndarray | None = None) -> list[tuple[str, float, str, str | None, int]]:
    """The best ``limit`` documents of ``parts`` for the query's phrases, as ``(doc id, score, group, content,
    row seq)`` (content: the stored message, or None where a part does not keep it).

    Args:
        parts: The index's parts.
        lexicon: Term ids for segment parts (None if there are none).
        phrases: The query's phrases in query order, repeats included (FTS5 sums over each).
        mode: ``"any"`` (a document matching one phrase) or ``"all"``/``"phrase"`` (every distinct phrase).
        limit: How many hits at most.
        params: BM25 constants.
        groups: Only documents of these groups.
        seqs: Only documents whose row seq is in this sorted array.
    """
    distinct = list(dict.fromkeys(phrases))
    tids = {p: [lexicon.get(t) for t in p] for p in distinct} if lexicon is not None else {}
    found: list[dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]] = []
    for part in parts:
        if isinstance(part, SegmentPart):
            found.append({p: part.phrase(tids[p]) for p in distinct})
        else:
            found.append({p: part.phrase(p) for p in distinct})
    n_docs = sum(part.n_live for part in parts)
    if not n_docs:
        return []
    avgdl = sum(part.live_length for part in parts) / n_docs
    idf = {p: fts5_idf(n_docs, sum(len(f[p][0]) for f in found)) for p in distinct}
    best_scores: list[np.ndarray] = []
    best_keys: list[np.ndarray] = []
    best_where: list[tuple[int, int]] = []
    for index, (part, hits) in enumerate(zip(parts, found)):
        lists = [hits[p][0] for p in distinct]
        if mode == "any":
            candidates = _union([d for d in lists if len(d)], part.segment.n_docs if isinstance(part, SegmentPart)
                                else part.table.postings.size)
        else:
            candidates = _intersection(lists)
        if groups is not None and len(candidates):
            codes = part.group_codes(groups)
            of = part.doc_group(candidates)
            candidates = candidates[of == codes[0] if len(codes) == 1 else np.isin(of, codes)]
        if seqs is not None and len(candidates):
            candidates = candidates[np.isin(part.doc_seq(candidates), seqs)]
        if not len(candidates):
            continue
        scores = np.zeros(len(candidates))
        lengths = part.doc_len(candidates)
        for phrase in phrases:  # query order, repeats included
            docs, tf = hits[phrase]
            if not len(docs):
                continue
            if len(docs) == len(candidates) and mode != "any":  # "all": every candidate has every phrase
                scores += bm25_term(idf[phrase], tf, lengths, avgdl, params)
                continue
            at = np.searchsorted(candidates, docs)
            at[at == len(candidates)] = 0
            ok = candidates[at] == docs
            if ok.any():
                where = at[ok]
                scores[where] += bm25_term(idf[phrase], tf[ok], lengths[where], avgdl, params)
        keys = part.search_seq(candidates)
        keep = top_k(keys, scores, limit) if len(candidates) > limit else np.arange(len(candidates))
        best_scores.append(scores[keep])
        best_keys.append(keys[keep])
        best_where += [(index, d) for d in candidates[keep].tolist()]
    if not best_scores:
        return []
    scores, keys = np.concatenate(best_scores), np.concatenate(best_keys)
    best = top_k(keys, scores, limit).tolist()
    wanted: dict[int, list[int]] = {}
    for i in best:  # one call per part for its documents' ids, groups and contents
        part_index, doc = best_where[i]
        wanted.setdefault(part_index, []).append(doc)
    located = {(p, d): row for p, docs in wanted.items() for d, row in zip(docs, parts[p].hits(docs))}
    out = []
    for i in best:
        doc_id, group, content, seq = located[best_where[i]]
        out.append((doc_id, float(scores[i]), group, content, seq))
    return out


def as_seqs(values: Any) -> np.ndarray:
    """A sorted int64 array of row seqs."""
    return np.unique(np.asarray(list(values), dtype=np.int64))
