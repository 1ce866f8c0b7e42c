"""Full-text search over DuckDB: SQLite FTS5 semantics (``porter unicode61`` + ``bm25()``), no extension.

A :class:`FullTextIndex` is one *namespace* (upstream: one FTS5 table); a document has an id, a text and a
*group* (any label the caller filters on).

Storage and caching:

* The truth is one row per document in ``fulltext_docs`` (migration ``m010_fulltext``): its stemmed
  tokens, length and an insertion ``seq``. :meth:`FullTextIndex.index` writes that row in the
  caller's transaction, so a caller's row and its index row commit or roll back together.
* Searching runs on an in-memory positional inverted index (:mod:`agentlab.search._postings`), built from
  those rows on first use and shared by every :class:`FullTextIndex` of the same store and namespace.
  It is changed only by ``Store.after_commit`` callbacks, so it never holds an uncommitted change.
  Consequence: a search inside an open transaction does not see that transaction's own writes.
* One :class:`agentlab.store.Store` per file per process (as the agent registry guarantees);
  ``fulltext_docs`` is private to this module.
* A caller that keeps the tokens in its own rows builds on the same engine instead: segments
  (:mod:`agentlab.search._segment`, persisted by :mod:`agentlab.search._index_files`) searched with
  :func:`agentlab.search._searcher.search_parts`, with this module's query semantics and scores.

Query semantics , for ``mode``:

* ``"phrase"``: the whole query is one FTS5 phrase, its tokens adjacent and in order (upstream quotes the
  whole query).
* ``"all"``: every whitespace-separated word must match; a word that tokenizes to several tokens
  ("state-of-the-art") is a phrase, as when upstream quotes each word.
* ``"any"``: at least one word matches, ranked (FTS5 ``OR`` of the quoted words).

Scores are FTS5's ``bm25()`` negated (higher is better, see :mod:`agentlab.search._bm25`), with N, document
frequency and average length over the whole namespace; groups and ids only filter. Ties go to the
document indexed first. Queries never raise for their content: FTS5 syntax (``"``, ``*``, ``NEAR``,
``AND``, ``-``, ...) is plain text here, and a query without tokens gives ``[]``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentlab.errors import InvalidSearchError
from agentlab.search._bm25 import FTS5_BM25, BM25Params, bm25_term, fts5_idf, top_k
from agentlab.search._postings import DocTable, arrow_ints, arrow_strings
from agentlab.search._snippet import snippet
from agentlab.search._tokenizer import token_strings, tokenize
from agentlab.store import Store

MODES = ("any", "all", "phrase")

_LOAD = """
SELECT doc_id, grp, seq, length, tokens
FROM fulltext_docs
WHERE namespace = ?
ORDER BY seq
"""
_INSERT = "INSERT INTO fulltext_docs (namespace, doc_id, grp, seq, length, tokens) VALUES (?, ?, ?, ?, ?, ?)"
_INSERT_STAGED = """
INSERT INTO fulltext_docs (namespace, doc_id, grp, seq, length, tokens)
SELECT ?, doc_id, grp, seq, length, tokens FROM _fulltext_staged
"""
_DELETE_ONE = "DELETE FROM fulltext_docs WHERE namespace = ? AND doc_id = ?"
_DELETE_STAGED = """
DELETE FROM fulltext_docs
WHERE namespace = ? AND doc_id IN (SELECT doc_id FROM _fulltext_staged)
"""
_DELETE_IDS = """
DELETE FROM fulltext_docs
WHERE namespace = ? AND doc_id IN (SELECT unnest(?::VARCHAR[]))
"""


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its BM25 score (higher is better) and its group; the message index
    also returns the stored content and the seq of the row it found (``content``, ``seq``)."""

    doc_id: str
    score: float
    group: str
    content: str | None = None
    seq: int | None = None


def _check_row(doc_id: Any, text: Any, group: Any) -> None:
    if not (isinstance(doc_id, str) and isinstance(text, str) and isinstance(group, str)):
        raise InvalidSearchError(
            f"Index rows are (doc_id: str, text: str, group: str); got ({doc_id!r:.40}, {text!r:.40}, {group!r:.40})."
        )


def query_phrases(query: str, mode: str) -> list[tuple[str, ...]]:
    """The phrases a query stands for: one for ``"phrase"``, one per word otherwise (empty ones dropped)."""
    if mode == "phrase":
        tokens = tokenize(query)
        return [tuple(tokens)] if tokens else []
    return [tuple(t) for t in (tokenize(w) for w in query.split()) if t]


@dataclass
class _Namespace:
    """Per store and namespace: the committed view (or None until first needed) and open-transaction ids."""

    loaded: DocTable | None = None
    written: set[str] = field(default_factory=set)  # doc ids written by the open transaction


@dataclass
class _StoreState:
    next_seq: int | None = None
    namespaces: dict[tuple[str, str], _Namespace] = field(default_factory=dict)

    def forget(self) -> None:
        """Drop every view (rebuilt from the file on the next search), after SQL from outside."""
        self.next_seq = None
        for ns in self.namespaces.values():
            ns.loaded = None
            ns.written.clear()


class _SearchView:
    """The reading half of a full-text index: the in-memory view of one namespace and BM25 search over it.

    Subclasses say where the durable rows are (:meth:`_load_table`) and how they are written.
    """

    _kind = "docs"

    def __init__(self, store: Store, namespace: str, *, params: BM25Params = FTS5_BM25) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise InvalidSearchError(f"namespace must be a non-empty string, not {namespace!r}.")
        if params.idf != "fts5":
            raise InvalidSearchError("FullTextIndex ranks with FTS5's idf; use BM25Corpus for idf='okapi'.")
        self.store = store
        self.namespace = namespace
        self.params = params
        with store.lock:
            self._state = store.derived("fulltext_state", _StoreState, reset=_StoreState.forget)
            self._ns = self._state.namespaces.setdefault((self._kind, namespace), _Namespace())

    def _load_table(self, cursor: Any) -> Any:
        """The namespace's committed rows as Arrow (doc_id, grp, seq, length, tokens), in seq order."""
        return cursor.sql(_LOAD, params=[self.namespace]).to_arrow_table()

    def _compact_if_needed(self) -> None:
        if self._ns.loaded is not None and self._ns.loaded.postings.mostly_dead():
            self._ns.loaded = None  # rebuilt from the file on the next search, without the dead rows

    # -- reading -------------------------------------------------------------------------------

    def _view(self) -> DocTable:
        ns = self._ns
        if ns.loaded is None:
            # A second connection sees committed rows only, even inside an open transaction.
            cursor = self.store.conn.cursor()
            try:
                table = self._load_table(cursor)
            finally:
                cursor.close()
            loaded = DocTable()
            if table.num_rows:
                loaded.add_table(table)
            ns.loaded = loaded
        return ns.loaded

    def search(
        self,
        query: str,
        *,
        mode: str = "any",
        limit: int = 10,
        groups: Collection[str] | None = None,
        doc_ids: Collection[str] | None = None,
    ) -> list[Hit]:
        """Find documents matching a query, best BM25 score first.

        Args:
            query: Free text; never parsed as FTS syntax.
            mode: ``"any"`` (ranked OR of words), ``"all"`` (AND of words) or ``"phrase"``.
            limit: At most this many hits.
            groups: Only documents in these groups.
            doc_ids: Only these documents.

        Returns:
            Hits, best first; ties in insertion order. ``[]`` for a query without tokens.

        Raises:
            InvalidSearchError: An unknown mode or a negative limit.
        """
        if mode not in MODES:
            raise InvalidSearchError(f"Unknown search mode {mode!r}; use one of {', '.join(MODES)}.")
        if not isinstance(limit, int) or limit < 0:
            raise InvalidSearchError(f"limit must be an int >= 0, not {limit!r}.")
        for name, value in (("groups", groups), ("doc_ids", doc_ids)):
            if isinstance(value, str):
                raise InvalidSearchError(f"{name} takes a collection; use {name}=[{value!r}].")
        phrases = query_phrases(query, mode)
        if not phrases or limit == 0:
            return []
        with self.store.lock:
            view = self._view()
            postings = view.postings
            if not postings.n_alive:
                return []
            distinct = {p: postings.phrase(p) for p in phrases}
            n_docs, avgdl = postings.n_alive, postings.total_length / postings.n_alive
            doc_len = postings.lengths.values
            scores = np.zeros(postings.size)
            matched = np.zeros(postings.size, dtype=np.int32)
            for docs, _ in distinct.values():
                matched[docs] += 1
            for phrase in phrases:  # query order, repeats included: FTS5 sums over every phrase
                docs, tf = distinct[phrase]
                if len(docs):
                    idf = fts5_idf(n_docs, len(docs))
                    scores[docs] += bm25_term(idf, tf, doc_len[docs], avgdl, self.params)
            candidates = np.flatnonzero(matched >= (1 if mode == "any" else len(distinct)))
            if groups is not None:
                codes = [view.group_code[g] for g in groups if g in view.group_code]
                candidates = candidates[np.isin(view.group_of.values[candidates], codes)]
            if doc_ids is not None:
                nums = [view.doc_num[d] for d in doc_ids if d in view.doc_num]
                candidates = np.intersect1d(candidates, np.array(nums, dtype=np.int64))
            best = candidates[top_k(candidates, scores[candidates], limit)]
            return [
                Hit(view.doc_ids[n], float(scores[n]), view.groups[view.group_of.values[n]])
                for n in best.tolist()
            ]

    def snippet(self, text: str, query: str, width: int = 160) -> str:
        """:func:`snippet` (here so callers holding an index need no other import)."""
        return snippet(text, query, width=width)



class FullTextIndex(_SearchView):
    """A durable full-text index in an agent's DuckDB file, searched with FTS5 semantics.

    Args:
        store: The open store (its schema includes ``m010_fulltext``).
        namespace: Which index, e.g. ``"knowledge"``.
        params: The BM25 constants (default :data:`agentlab.search._bm25.FTS5_BM25`).

    Example:
        >>> fts = FullTextIndex(Store(), "notes")
        >>> fts.index("m1", "Deploying on Friday", group="s1")
        >>> [h.doc_id for h in fts.search("deploy friday", mode="all")]
        ['m1']
    """

    # -- writing -------------------------------------------------------------------------------

    def _take_seqs(self, n: int) -> int:
        if self._state.next_seq is None:
            self._state.next_seq = int(self.store.scalar("SELECT coalesce(max(seq), 0) + 1 FROM fulltext_docs"))
        first = self._state.next_seq
        self._state.next_seq += n
        return first

    def _may_exist(self, doc_id: str) -> bool:
        # Without a loaded view we cannot know, and DELETE is the safe answer.
        ns = self._ns
        return ns.loaded is None or doc_id in ns.written or doc_id in ns.loaded.doc_num

    def _mark_written(self, doc_ids: Iterable[str]) -> None:
        ns = self._ns
        if not ns.written:
            self.store.after_commit(ns.written.clear)
            self.store.after_rollback(ns.written.clear)
        ns.written.update(doc_ids)

    def index(self, doc_id: str, text: str, *, group: str = "") -> None:
        """Index (or re-index) one document, replacing any previous text under ``doc_id``.

        Runs in the caller's transaction if one is open (so it commits or rolls back with it),
        otherwise in its own. A text without tokens is stored too and counts toward N, like an FTS5 row.

        Args:
            doc_id: The document's id in this namespace.
            text: Its text.
            group: A filter value (any label the caller searches within).
        """
        _check_row(doc_id, text, group)
        tokens = tokenize(text)
        ns = self._ns
        with self.store.transaction():
            seq = self._take_seqs(1)
            # Build the view now if needed: it tells whether a row exists, so that a new document
            # costs one INSERT, not a DELETE (a table scan) as well.
            view = self._view()
            if doc_id in ns.written or doc_id in view.doc_num:
                self.store.execute(_DELETE_ONE, [self.namespace, doc_id])
            self.store.execute(_INSERT, [self.namespace, doc_id, group, seq, len(tokens), " ".join(tokens)])
            self._mark_written([doc_id])
            self.store.after_commit(lambda: ns.loaded.add(doc_id, group, seq, tokens) if ns.loaded else None)

    def index_many(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """Index many documents at once (bulk insert through Arrow); replace semantics per id.

        Args:
            rows: ``(doc_id, text, group)`` tuples; if an id repeats, its last row wins.
        """
        import pyarrow as pa

        latest: dict[str, tuple[str, str]] = {}
        for doc_id, text, group in rows:
            latest.pop(doc_id, None)  # re-insert so the id takes its last position
            latest[doc_id] = (text, group)
        if not latest:
            return
        try:
            tokens = token_strings([text for text, _ in latest.values()])
            columns = [arrow_strings(list(latest)), arrow_strings([g for _, g in latest.values()])]
        except (AttributeError, TypeError):  # checked only on failure: a check per row costs ~10%
            for doc_id, (text, group) in latest.items():
                _check_row(doc_id, text, group)
            raise
        lengths = np.fromiter((t.count(" ") + 1 if t else 0 for t in tokens), dtype=np.int32, count=len(tokens))
        ns = self._ns
        with self.store.transaction():  # holds store.lock
            first = self._take_seqs(len(latest))
            table = pa.Table.from_arrays(
                [*columns, arrow_ints(np.arange(first, first + len(latest), dtype=np.int64)), arrow_ints(lengths),
                 arrow_strings(tokens)],
                names=["doc_id", "grp", "seq", "length", "tokens"],
            )
            conn = self.store.conn
            conn.register("_fulltext_staged", table)
            try:
                if any(self._may_exist(d) for d in latest):
                    self.store.execute(_DELETE_STAGED, [self.namespace])
                self.store.execute(_INSERT_STAGED, [self.namespace])
            finally:
                conn.unregister("_fulltext_staged")
            self._mark_written(latest)
            self.store.after_commit(lambda: ns.loaded.add_table(table) if ns.loaded else None)

    def remove(self, doc_ids: Iterable[str]) -> None:
        """Remove documents by id; unknown ids are ignored.

        Raises:
            InvalidSearchError: ``doc_ids`` is a single string (pass a list).
        """
        if isinstance(doc_ids, str):
            raise InvalidSearchError(f"remove() takes a collection of ids; use remove([{doc_ids!r}]).")
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return
        ns = self._ns

        def forget() -> None:
            if ns.loaded is not None:
                for doc_id in ids:
                    ns.loaded.drop(doc_id)
                self._compact_if_needed()

        with self.store.transaction():
            self.store.execute(_DELETE_IDS, [self.namespace, ids])
            self.store.after_commit(forget)

    def clear(self, group: str | None = None) -> None:
        """Remove every document of the namespace, or only those of one group."""
        ns = self._ns

        def forget() -> None:
            if ns.loaded is not None:
                if group is None:
                    ns.loaded = DocTable()
                else:
                    ns.loaded.clear_group(group)
                    self._compact_if_needed()

        with self.store.transaction():
            if group is None:
                self.store.execute("DELETE FROM fulltext_docs WHERE namespace = ?", [self.namespace])
            else:
                self.store.execute("DELETE FROM fulltext_docs WHERE namespace = ? AND grp = ?", [self.namespace, group])
            self.store.after_commit(forget)

    def count(self, group: str | None = None) -> int:
        """Number of indexed documents (in one group if given), as the file holds them now."""
        if group is None:
            return int(self.store.scalar("SELECT count(*) FROM fulltext_docs WHERE namespace = ?", [self.namespace]))
        return int(self.store.scalar(
            "SELECT count(*) FROM fulltext_docs WHERE namespace = ? AND grp = ?", [self.namespace, group]
        ))
