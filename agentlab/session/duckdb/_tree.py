"""The message tree: one row per message in DuckDB, the parent map in memory.

Every session of an agent stores its messages in the ``messages`` table; a message points at its parent by
id, so a conversation is a tree and a branch is the path from a root to a leaf. DuckDB walks recursive CTEs
slowly (about 77 ms at depth 10,000), so :class:`MessageTree` keeps ``id -> parent, seq, session`` and the
leaves of every session in memory (a :class:`RowMap`: numpy arrays for the rows loaded
at first use, dicts for the rows written since; roles on first need, children found per call), and reads only
message contents from DuckDB.

Invariants:

* One :class:`MessageTree` per :class:`~agentlab.store.Store` (:func:`tree_of`), shared by every Session
  object on that store, and used only while holding ``store.lock``: the map and the file change together.
* The map is updated inside the write's transaction, right after its SQL succeeds, so later reads in the
  same transaction see the write. A rollback marks the whole map stale; it is reloaded from the file on the
  next use, so the map never holds a change the file does not have.
* ``seq`` comes from the store's :class:`~agentlab.store.SeqClock` and only grows: ties are broken by seq, never
  by time.
* The latest leaf of a session is its newest (by seq) row with no child in the same session; a fork
  with no rows of its own has its fork point as latest leaf.
* A fork shares its parent's rows up to the fork point (nothing is copied). Shared rows are frozen:
  updating, deleting or clearing them raises :class:`~agentlab.errors.ForkedHistoryError`.
* Contents are stored as compact JSON (``ensure_ascii=False``), and a read returns ``json.loads`` of exactly
  that text, so Anthropic thinking blocks and their signatures round-trip unchanged.
* Each row carries its own search tokens (``search_tokens``, ``search_seq``), written by the same statement as
  the row; the search index (:class:`MessageIndex`, group = session id) takes the
  change when it commits, so a search right after an append finds the message.
* A single append outside any transaction, in a session without a ``sessions`` row, is one autocommitted
  INSERT: DuckDB makes one statement atomic and durable by itself, and each extra statement in a commit costs
  a large part of a millisecond.
* Stored texts already read or written are kept in a bounded :class:`ContentCache`, so
  reading a branch again is one parse without a query; it is emptied with the map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentlab.errors import ForkedHistoryError, InvalidMessageError, UnknownMessageError
from agentlab.session._messages import (
    UNSET,
    Appended,
    CompactionRecord,
    now_iso,
    prepare_message,
    prepare_placed,
)
from agentlab.session.duckdb import _messages_table as messages_table
from agentlab.session.duckdb._compactions_table import delete_compactions, insert_compaction
from agentlab.session.duckdb._contents import gc_paused
from agentlab.session.duckdb._messages_table import insert_one, insert_rows, search_tokens
from agentlab.session.duckdb._tree_index import ForkPoint, TreeIndex
from agentlab.store import Store, clock_of

__all__ = ["ForkPoint", "MessageTree", "tree_of"]


def tree_of(store: Store) -> MessageTree:
    """The one :class:`MessageTree` of ``store`` (created on first use; reloaded after outside SQL)."""
    return store.derived("message_tree", lambda: MessageTree(store), reset=MessageTree.invalidate)


class MessageTree(TreeIndex):
    """Messages of every session in one store: the in-memory index (:class:`TreeIndex`) and the writes that
    keep it and the ``messages`` table in step. Get it with :func:`tree_of`.

    Session ids scope every method: a session sees its own rows plus, for a fork, the shared path.
    """

    def _resolve_parent(self, session_id: str, parent_id: Any, batch: Mapping[str, Any] = {}) -> str | None:
        if parent_id is UNSET:
            return self.latest_leaf_id(session_id)
        if parent_id is None:
            return None
        if not isinstance(parent_id, str):
            raise InvalidMessageError(f"parent_id must be a message id, None or omitted; got {parent_id!r}.")
        if parent_id in batch or self._visible(session_id, parent_id):
            return parent_id
        raise UnknownMessageError(parent_id, "parent message")

    def _check_new_id(self, session_id: str, mid: str) -> bool:
        """True if ``mid`` is a duplicate visible here; raise if another session holds it."""
        owner = self._rows.session(mid)
        if owner is not None:
            if owner == session_id or self._visible(session_id, mid):
                return True
            raise InvalidMessageError(
                f"Message id {mid!r} is already used by session {owner!r}; ids are unique "
                "across the agent, so give this message a new id.")
        return False

    def _check_cycle(self, mid: str, parent: str | None, pending: Mapping[str, str | None] = {}) -> None:
        # Only the id of a deleted message, appended again, can have children already (its orphans). The walk goes
        # through ``pending`` (id -> parent of the batch's earlier messages, not in the map yet) too.
        if mid not in self._dangling:
            return
        cur, steps, limit = parent, 0, len(self._rows) + len(pending)
        while cur is not None and steps <= limit:
            if cur == mid:
                raise InvalidMessageError(
                    f"Appending {mid!r} under {parent!r} would make a cycle: {parent!r} descends from an earlier "
                    f"message with id {mid!r}. Use a new id.")
            found = self._rows.get(cur)
            cur, steps = found[1] if found is not None else pending.get(cur), steps + 1

    def _add(self, session_id: str, rows: Iterable[tuple[str, str | None, int, str]]) -> None:
        """Put new rows ``(id, parent, seq, role)`` of one session, in seq order, into the map."""
        index, dangling = self._rows, self._dangling
        newest = None
        for mid, parent, seq, role in rows:
            index.add(mid, parent, seq, session_id, role)
            if parent is not None and index.session(parent) == session_id:
                index.discard_leaf(parent)
            if mid in dangling:  # a deleted id comes back: its old children point at it again
                dangling.discard(mid)
                self._generation += 1  # so their paths (and any path cached through them) change
                if any(index.session(c) == session_id for c in index.children(mid)):
                    continue
            index.add_leaf(session_id, mid)
            newest = mid
        latest = self._latest.get(session_id)
        if newest is not None and index.is_leaf(newest):
            self._latest[session_id] = newest  # the newest row, and childless: the tip
        elif latest is not None and not index.is_leaf(latest):
            self._latest[session_id] = index.newest_leaf(session_id)

    def _touch(self, conn: Any, session_id: str) -> None:
        if session_id in self._registered:
            conn.execute("UPDATE sessions SET updated_at = now() WHERE id = ?", [session_id]).fetchall()

    def append(self, session_id: str, message: Any, parent_id: Any = UNSET) -> tuple[Appended, dict[str, Any]]:
        """Store one message; see :meth:`agentlab.session.Session.append_message`.

        Returns:
            What happened, and the message as stored (``created_at`` filled in).
        """
        msg, content = prepare_message(message)
        mid = msg["id"]
        store = self.store
        with store.lock:
            self._ready()
            if self._check_new_id(session_id, mid):
                seq_of, parent_of, _ = self._rows.get(mid)  # type: ignore[misc]
                return Appended(mid, parent_of, seq_of, True), msg
            parent = self._resolve_parent(session_id, parent_id)
            self._check_cycle(mid, parent)
            tokens = search_tokens(msg)
            seq = clock_of(store).take()
            insert, params = insert_one(seq, mid, session_id, parent, msg, content, tokens)
            if store.in_transaction or session_id in self._registered:
                with store.transaction() as conn:
                    store.after_rollback(self.invalidate)
                    conn.execute(insert, params).fetchall()
                    self._touch(conn, session_id)
                    self._stored(session_id, mid, parent, seq, msg["role"], content, tokens)
            else:  # one statement: DuckDB commits it atomically on its own
                store.require_writable()
                store.execute(insert, params).fetchall()
                self._stored(session_id, mid, parent, seq, msg["role"], content, tokens)
        return Appended(mid, parent, seq), msg

    def _stored(self, session_id: str, mid: str, parent: str | None, seq: int, role: str, content: str,
                tokens: list[str] | None) -> None:
        """Bring the map, the search index and the cache up to date with one row just written."""
        self._add(session_id, [(mid, parent, seq, role)])
        if tokens is not None:
            self.fts.added(mid, session_id, seq, tokens, content=content)
        self.contents.put(seq, content)

    def append_many(self, session_id: str, messages: Iterable[Any],
                    parent_id: Any = UNSET) -> tuple[list[Appended], list[dict[str, Any]]]:
        """Store many messages in one transaction; see :meth:`agentlab.session.Session.append_messages`.

        Every message is checked before anything is written, so a bad one stores nothing. The work per
        message is kept to one pass that fills the insert's columns (a bulk import is a measured figure).

        Returns:
            One :class:`Appended` per input message, and the new messages as stored.
        """
        stamp = now_iso()
        store = self.store
        with store.lock, gc_paused():
            self._ready()
            plan: list[tuple[str, str | None, int | None]] = []  # (id, parent, seq if duplicate, 0 if in batch)
            new: dict[str, int] = {}  # id -> position among the new rows
            ids: list[str] = []
            parents: list[str | None] = []
            stored: list[dict[str, Any]] = []
            contents: list[str] = []
            prev = self._resolve_parent(session_id, parent_id)
            known, dangling = self._rows, self._dangling
            for message in messages:
                msg, content, own_parent = prepare_placed(message, stamp=stamp)
                mid = msg["id"]
                if own_parent is UNSET:
                    parent = prev
                elif own_parent in new or (type(own_parent) is str and known.session(own_parent) == session_id):
                    parent = own_parent  # in this batch, or a row of this session: what _resolve_parent allows
                else:
                    parent = self._resolve_parent(session_id, own_parent, new)
                if mid in new:
                    plan.append((mid, parents[new[mid]], 0))
                elif mid in known and self._check_new_id(session_id, mid):
                    found = known.get(mid)
                    assert found is not None
                    plan.append((mid, found[1], found[0]))
                else:
                    if mid in dangling:
                        self._check_cycle(mid, parent, dict(zip(ids, parents)))
                    new[mid] = len(ids)
                    ids.append(mid)
                    parents.append(parent)
                    stored.append(msg)
                    contents.append(content)
                    plan.append((mid, parent, None))
                prev = mid  # chain on, even after a duplicate: re-importing a list is a no-op
            first = 0
            if ids:
                first = clock_of(store).take(len(ids))
                with store.transaction() as conn:
                    store.after_rollback(self.invalidate)
                    roles, indexed = insert_rows(conn, session_id, ids, parents, stored, contents, first)
                    if indexed is not None:
                        self.fts.added_table(indexed)
                    self._touch(conn, session_id)
                    self._add(session_id, zip(ids, parents, range(first, first + len(ids)), roles))
            results = [Appended(mid, parent, first + new[mid] if dup is None else (dup or first + new[mid]),
                                dup is not None) for mid, parent, dup in plan]
            return results, stored

    def update(self, session_id: str, message: Any) -> dict[str, Any]:
        """Rewrite a stored message's content (not its role column or parent), and re-index it.

        Raises:
            UnknownMessageError: No row with this id in this session.
            ForkedHistoryError: The row is shared with a fork.
        """
        msg, content = prepare_message(message)
        mid = msg["id"]
        store = self.store
        with store.lock:
            self._ready()
            found = self._rows.get(mid)
            if found is None or found[2] != session_id:
                raise UnknownMessageError(mid)
            if mid in self._shared_rows(session_id):
                raise ForkedHistoryError(
                    f"Message {mid!r} is shared with a fork of this session, so it cannot change; "
                    "append a corrected message instead.")
            tokens = search_tokens(msg)
            seq = found[0]
            # A rewritten text is a new document for ranking ties (FTS5 deletes and re-inserts the row).
            search_seq = clock_of(store).take() if tokens is not None else None
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                messages_table.rewrite(conn, seq, content, tokens, search_seq)
                self._generation += 1  # path contents changed: cached estimates are stale
                if tokens is not None:
                    self.fts.added(mid, session_id, seq, tokens, search_seq=search_seq, replaces=True,
                                   content=content)
                else:
                    self.fts.removed([mid], [seq])
                self.contents.put(seq, content)
                self._touch(conn, session_id)
        return msg

    def delete(self, session_id: str, ids: Iterable[str]) -> list[str]:
        """Delete this session's rows among ``ids`` (others are ignored); returns the ids deleted.

        Children are not re-parented: their path now stops below the gap.

        Raises:
            ForkedHistoryError: One of the rows is shared with a fork (nothing is deleted).
        """
        store = self.store
        with store.lock:
            self._ready()
            doomed = list(dict.fromkeys(m for m in ids if self._rows.session(m) == session_id))
            if not doomed:
                return []
            shared = self._shared_rows(session_id).intersection(doomed)
            if shared:
                raise ForkedHistoryError(
                    f"Messages {sorted(shared)!r} are shared with a fork of this session; delete the fork first "
                    "(SessionManager.delete).")
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                seqs = [self._rows.get(m)[0] for m in doomed]  # type: ignore[index]
                messages_table.delete_seqs(conn, seqs)
                self.fts.removed(doomed, seqs)
                self.contents.discard(seqs)
                self._touch(conn, session_id)
                self._drop(session_id, doomed)
            return doomed

    def _drop(self, session_id: str, doomed: list[str]) -> None:
        index = self._rows
        parents: list[str] = []
        for mid in doomed:
            if index.children(mid):
                self._dangling.add(mid)  # its children keep pointing at it (orphans), as upstream
            parent = index.remove(mid)
            if parent is not None:
                parents.append(parent)
        for parent in parents:  # a parent left without children in this session is a leaf again
            if index.session(parent) == session_id and not any(
                    index.session(c) == session_id for c in index.children(parent)):
                index.add_leaf(session_id, parent)
        self._latest[session_id] = index.newest_leaf(session_id)
        self._generation += 1

    def clear(self, session_id: str) -> int:
        """Delete every row and overlay of ``session_id``; returns the number of messages deleted.

        Raises:
            ForkedHistoryError: The session has forks (their history would vanish).
        """
        store = self.store
        with store.lock:
            self._ready()
            if self._shared_rows(session_id):
                raise ForkedHistoryError(
                    f"Session {session_id!r} has forks that share its messages; delete the forks first.")
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                messages_table.delete_session(conn, session_id)
                delete_compactions(conn, session_id)
                self.fts.cleared(session_id)
                self.contents.clear()
                self._touch(conn, session_id)
                own = self._rows.drop_session(session_id)
                self._latest.pop(session_id, None)
                self._compactions.pop(session_id, None)
                self._generation += 1
            return len(own)

    # -- overlays ------------------------------------------------------------------------------

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        """Overlays visible to ``session_id``, oldest first: its own, plus for a fork each ancestor's
        overlays stored before the fork (by seq)."""
        with self.store.lock:
            self._ready()
            found = list(self._compactions.get(session_id, ()))
            cutoff: int | None = None
            seen = {session_id}
            fp = self._forks.get(session_id)
            while fp is not None and fp.parent_session_id not in seen:
                cutoff = fp.seq if cutoff is None else min(cutoff, fp.seq)
                found.extend(c for c in self._compactions.get(fp.parent_session_id, ()) if c.seq < cutoff)
                seen.add(fp.parent_session_id)
                fp = self._forks.get(fp.parent_session_id)
            found.sort(key=lambda c: c.seq)
            return found

    def add_compaction(self, session_id: str, summary: str, from_message_id: str, to_message_id: str,
                       **details: Any) -> CompactionRecord:
        """Store an overlay for ``session_id`` (details: leaf_id, messages_covered, tokens_before,
        tokens_after, trigger) and return it. The ids are not checked here; the Session checks them."""
        store = self.store
        with store.lock:
            self._ready()
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                record = insert_compaction(store, conn, session_id, summary, from_message_id, to_message_id,
                                            **details)
                self._compactions.setdefault(session_id, []).append(record)
                self._generation += 1
            return record
