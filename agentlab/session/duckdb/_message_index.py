"""Full-text search over the ``messages`` table, kept in segments beside the file so that opening costs nothing.

The truth is each message row's ``search_tokens`` (written by :class:`agentlab.session.duckdb._tree.MessageTree` in the
same statement as the row). This index is derived from them and lives in three places:

* **persisted segments** in the folder of :mod:`agentlab.search._index_files`, memory-mapped, with the documents
  deleted since each was written;
* **in-memory segments** built from bulk import batches: once ``BUILD_DOCS`` documents have been written in bulk,
  they are built into a segment on the process's builder thread while the caller goes on (its next batch is
  tokenized and written meanwhile); anything that reads the index, and the flush, waits for those builds first;
* **the buffer** of single appends (:class:`~agentlab.search._searcher.BufferPart`).

When in-memory documents pass ``FLUSH_DOCS`` (or ``FLUSH_TOKENS`` tokens) they are merged into one persisted
segment; when there are more than ``MAX_SEGMENTS``, the smallest are merged (the constants are in
:mod:`agentlab.session.duckdb._index_state`). Closing the store flushes, checkpoints DuckDB and writes the file's
:func:`~agentlab.store._stamp.file_stamp` into the index.

Trust (which index a search may use):

* **Exact at open**: the index's stamp equals the file's stamp taken when this store opened it, and no SQL from
  outside has run since. Then no commit reached the file since the index was saved, by anyone, and the segments
  are used as they are: a cold open reads no message row.
* **Otherwise** (a writer killed before it closed, ``agent.sql`` writes, another program, an older agentlab, a
  file replaced or copied without its index, a damaged index file): before the first search, the index is
  reconciled with the file. DuckDB computes ``hash(id, session_id, search_tokens)`` of every indexed row; a
  persisted document whose ``search_seq`` is gone or whose hash differs is deleted, and every row the index
  lacks is read and indexed. A change is therefore seen unless it keeps a row's ``search_seq`` and collides all
  64 bits of its hash. SQL from outside in this process drops the in-memory parts and reconciles the same way.
* Read-only stores never write the folder; stores in memory and stores with fewer than ``PERSIST_MIN_DOCS``
  indexed messages (that never had an index folder) are indexed in memory only.
* A damaged index file (its CRC-32s are checked as blocks are first read) makes the index forget itself, delete
  its folder if it may, and rebuild from the file.

Changes reach the index after their commit (``Store.after_commit``), so a search inside an open transaction does
not see that transaction's own writes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from agentlab.errors import CorruptIndexError, InvalidSearchError
from agentlab.search import FTS5_BM25, MODES, BM25Params, Hit, as_seqs, query_phrases, search_parts, snippet
from agentlab.session.duckdb._index_state import IndexState
from agentlab.session.duckdb._messages_table import count_indexed
from agentlab.store import Store

__all__ = ["MessageIndex"]


class MessageIndex:
    """Full-text search over the ``messages`` table (see the module docstring), one per store.

    Only :class:`agentlab.session.duckdb._tree.MessageTree` writes message rows; it calls :meth:`added`,
    :meth:`added_table`, :meth:`removed` and :meth:`cleared` inside the write's transaction (or right after an
    autocommitted statement), and the change reaches the index when the write commits. Documents are message ids,
    groups are session ids.
    """

    def __init__(self, store: Store, *, params: BM25Params = FTS5_BM25) -> None:
        if params.idf != "fts5":
            raise InvalidSearchError("MessageIndex ranks with FTS5's idf; use BM25Corpus for idf='okapi'.")
        self.store = store
        self.params = params
        with store.lock:
            self._state = store.derived("message_index", lambda: IndexState(store), reset=IndexState.reset)

    # -- changes, applied after commit ---------------------------------------------------------

    def added(self, doc_id: str, group: str, seq: int, tokens: list[str], *, search_seq: int | None = None,
              replaces: bool = False, content: str | None = None) -> None:
        """One message row was written (``replaces``: rewritten) with these tokens and this stored content."""
        state = self._state
        version = seq if search_seq is None else search_seq
        self.store.after_commit(lambda: state.guarded(lambda: state.add_one(doc_id, group, seq, version, tokens,
                                                                              replaces, content)))

    def added_table(self, table: Any) -> None:
        """New message rows were written in bulk: an Arrow table (doc_id, grp, seq, search_seq, length, tokens,
        content)."""
        state = self._state
        self.store.after_commit(lambda: state.guarded(lambda: state.add_table(table)))

    def removed(self, doc_ids: Iterable[str], seqs: Iterable[int]) -> None:
        """Message rows were deleted, or lost their text: their ids and row seqs."""
        state, ids, rows = self._state, list(doc_ids), as_seqs(seqs)
        self.store.after_commit(lambda: state.guarded(lambda: state.kill_seqs(rows, ids=ids)))

    def cleared(self, group: str) -> None:
        """Every message row of one session was deleted."""
        state = self._state
        self.store.after_commit(lambda: state.guarded(lambda: state.kill_group(group)))

    # -- reading -------------------------------------------------------------------------------

    def search(self, query: str, *, mode: str = "any", limit: int = 10, groups: Collection[str] | None = None,
               seqs: Iterable[int] | None = None) -> list[Any]:
        """Messages matching ``query``, best BM25 score first (see :meth:`FullTextIndex.search`).

        Args:
            query: Free text; never parsed as FTS syntax.
            mode: ``"any"``, ``"all"`` or ``"phrase"``.
            limit: At most this many hits.
            groups: Only messages of these sessions.
            seqs: Only the message rows with these seqs.
        """
        if mode not in MODES:
            raise InvalidSearchError(f"Unknown search mode {mode!r}; use one of {', '.join(MODES)}.")
        if not isinstance(limit, int) or limit < 0:
            raise InvalidSearchError(f"limit must be an int >= 0, not {limit!r}.")
        if isinstance(groups, str):
            raise InvalidSearchError(f"groups takes a collection; use groups=[{groups!r}].")
        phrases = query_phrases(query, mode)
        if not phrases or limit == 0:
            return []
        rows = None if seqs is None else as_seqs(seqs)
        with self.store.lock:
            state = self._state
            for attempt in (1, 2):
                try:
                    state.ready()
                    found = search_parts(state.parts(), state.lexicon, phrases, mode, limit, self.params,
                                         groups=groups, seqs=rows)
                    break
                except CorruptIndexError:
                    if attempt == 2:
                        raise
                    state.damaged()
        return [Hit(doc_id, score, group, content, seq) for doc_id, score, group, content, seq in found]

    def snippet(self, text: str, query: str, width: int = 160) -> str:
        """:func:`~agentlab.search._fulltext.snippet` (here so callers holding an index need no other import)."""
        return snippet(text, query, width=width)

    def count(self, group: str | None = None) -> int:
        """Number of indexed messages (in one session if given), as the file holds them now."""
        return count_indexed(self.store, group)

    def prepare(self, indexed: int | None = None) -> None:
        """Open the index now (the tree calls this before its first write, so the index sees every write).

        Args:
            indexed: How many indexed messages the file holds, when the caller has just counted them (0 saves a
                query on a new agent's file).
        """
        with self.store.lock:
            self._state.guarded(lambda: self._state.open(indexed))

    def flush(self) -> None:
        """Write what is in memory as a segment now and commit it (tests and benchmarks; closing does it too)."""
        with self.store.lock:
            state = self._state

            def flush() -> None:
                state.open()
                if state._writable():
                    state.flush()
                    state.commit(None)

            state.guarded(flush)
