"""The message tree: one row per message in DuckDB, the parent map in memory.

Every session of an agent stores its messages in the ``messages`` table; a message points at its parent by
id, so a conversation is a tree and a branch is the path from a root to a leaf. DuckDB walks recursive CTEs
slowly (about 77 ms at depth 10,000), so :class:`MessageTree` keeps ``id -> parent, seq, session`` and the
leaves of every session in memory, loaded once at first use (children lists and roles on first need), and
reads only message contents from DuckDB.

Invariants:

* One :class:`MessageTree` per :class:`~agentlab.store.Store` (:func:`tree_of`), shared by every Session
  object on that store, and used only while holding ``store.lock``: the map and the file change together.
* The map is updated inside the write's transaction, right after its SQL succeeds, so later reads in the
  same transaction see the write. A rollback marks the whole map stale; it is reloaded from the file on the
  next use, so the map never holds a change the file does not have.
* ``seq`` comes from the store's :class:`~agentlab.store.clock.SeqClock` and only grows: ties are broken by seq, never
  by time.
* The latest leaf of a session is its newest (by seq) row with no child in the same session (spec 3); a fork
  with no rows of its own has its fork point as latest leaf.
* A fork shares its parent's rows up to the fork point (nothing is copied). Shared rows are frozen:
  updating, deleting or clearing them raises :class:`~agentlab.errors.ForkedHistoryError`.
* Contents are stored as compact JSON (``ensure_ascii=False``), and a read returns ``json.loads`` of exactly
  that text, so Anthropic thinking blocks and their signatures round-trip unchanged.
* Each row carries its own search tokens (``search_tokens``, ``search_seq``), written by the same statement as
  the row; the in-memory search view (:class:`~agentlab.search.fulltext.MessageIndex`, group = session id) takes the
  change when it commits, so a search right after an append finds the message.
* A single append outside any transaction, in a session without a ``sessions`` row, is one autocommitted
  INSERT: DuckDB makes one statement atomic and durable by itself, and each extra statement in a commit costs
  a large part of a millisecond.
* Stored texts already read or written are kept in a bounded :class:`~agentlab.session.contents.ContentCache`, so
  reading a branch again is one parse without a query; it is emptied with the map.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.errors import ForkedHistoryError, InvalidMessageError, UnknownMessageError
from agentlab.session.contents import ContentCache, gc_paused
from agentlab.session.messages import (
    DEFAULT_MAX_DEPTH,
    UNSET,
    Appended,
    RowStat,
    now_iso,
    prepare_message,
    prepare_placed,
)
from agentlab.session.overlays import CompactionRecord, insert_compaction, load_compactions
from agentlab.session.rows import insert_one, insert_rows, search_tokens
from agentlab.store.clock import clock_of
from agentlab.store.database import Store

__all__ = ["ForkPoint", "MessageTree", "tree_of"]


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: it reads ``parent_session_id``'s path up to ``message_id``, and its overlays
    older than ``seq`` (the fork's own seq)."""

    parent_session_id: str
    message_id: str
    seq: int


# --- the tree --------------------------------------------------------------------------------------

_SEQS = "SELECT unnest(?::BIGINT[])"

_LOAD_MAP = """
SELECT m.seq, m.id, m.parent_id, m.session_id,
       EXISTS (SELECT 1 FROM messages AS c WHERE c.parent_id = m.id AND c.session_id = m.session_id) AS has_child
FROM messages AS m
ORDER BY m.seq
"""

_DANGLING = """
SELECT DISTINCT m.parent_id FROM messages AS m
WHERE m.parent_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM messages AS p WHERE p.id = m.parent_id)
"""


def tree_of(store: Store) -> MessageTree:
    """The one :class:`MessageTree` of ``store`` (created on first use; reloaded after outside SQL)."""
    return store.derived("message_tree", lambda: MessageTree(store), reset=MessageTree.invalidate)


class MessageTree:
    """Messages of every session in one store, with the parent map in memory. Get it with :func:`tree_of`.

    Session ids scope every method: a session sees its own rows plus, for a fork, the shared path.
    """

    def __init__(self, store: Store) -> None:
        self._store_ref = weakref.ref(store)
        self._fts: Any = None
        self._stale = True
        self._generation = 0
        self.contents = ContentCache()

    @property
    def store(self) -> Store:
        store = self._store_ref()
        if store is None:  # pragma: no cover - the registry holds the tree only while the store lives
            raise RuntimeError("The store of this message tree was garbage-collected.")
        return store

    @property
    def fts(self) -> Any:
        """The full-text index of message texts (a :class:`~agentlab.search.fulltext.MessageIndex`; group: session
        id)."""
        if self._fts is None:
            from agentlab.search.fulltext import MessageIndex

            self._fts = MessageIndex(self.store)
        return self._fts

    @property
    def generation(self) -> int:
        """Bumped by deletions, clears, forks and reloads (caches of paths compare it)."""
        return self._generation

    # -- loading -------------------------------------------------------------------------------

    def invalidate(self) -> None:
        """Forget the map and the cached texts; the next use reloads the map from the file (after a rollback)."""
        self._stale = True
        self._generation += 1
        self.contents.clear()

    def _ready(self) -> None:
        if self._stale:
            self._load()

    def _load(self) -> None:
        # Only what every operation needs is built here (cold open + first read is a measured figure): the
        # parent map and the leaves. Children lists and roles are built on first use (_kids, _roles).
        store = self.store
        with store.lock:
            cols = store.execute(_LOAD_MAP).fetchnumpy()
            seqs, ids, parents = cols["seq"].tolist(), cols["id"].tolist(), cols["parent_id"].tolist()
            sessions, has_child = cols["session_id"].tolist(), cols["has_child"].tolist()
            self._seq: dict[str, int] = dict(zip(ids, seqs))
            if len(self._seq) < len(ids):
                # The table has no UNIQUE index (m060); only SQL from outside can repeat an id. The first row
                # wins, as a repeated append is ignored: keep each id's oldest row, drop the later ones.
                first = {}
                for i, mid in enumerate(ids):
                    first.setdefault(mid, i)
                keep = sorted(first.values())
                seqs, ids, parents = [seqs[i] for i in keep], [ids[i] for i in keep], [parents[i] for i in keep]
                sessions, has_child = [sessions[i] for i in keep], [has_child[i] for i in keep]
                self._seq = dict(zip(ids, seqs))
            self._parent: dict[str, str | None] = dict(zip(ids, parents))
            self._session: dict[str, str] = dict(zip(ids, sessions))
            self._children: dict[str, list[str]] | None = None
            self._role: dict[str, str] | None = None
            leaves: dict[str, set[str]] = {}
            latest: dict[str, str | None] = {}
            for mid, sid, busy in zip(ids, sessions, has_child):  # seq order: the last leaf seen is the newest
                if not busy:
                    group = leaves.get(sid)
                    if group is None:
                        leaves[sid] = group = set()
                    group.add(mid)
                    latest[sid] = mid
            self._leaves, self._latest = leaves, latest
            # Parent ids with no row: deleted messages whose children still point at them (spec 3). Only such
            # an id, appended again, can arrive with children already.
            self._dangling: set[str] = {r[0] for r in store.execute(_DANGLING).fetchall()}
            self._compactions: dict[str, list[CompactionRecord]] = {}
            for record in load_compactions(store):
                self._compactions.setdefault(record.session_id, []).append(record)
            self._load_sessions()
            self._inherited_cache: dict[str, tuple[int, frozenset[str]]] = {}
            self._branch_cache: dict[str, tuple[str | None, int, set[str]]] = {}
            self._path_cache: dict[str, tuple[str, int, int, list[str]]] = {}
            self.contents.clear()
            self._stale = False
            self._generation += 1

    def _kids(self) -> dict[str, list[str]]:
        """``parent id -> child ids`` (oldest first), built on first use."""
        if self._children is None:
            children: dict[str, list[str]] = {}
            for mid, parent in self._parent.items():  # insertion order is seq order
                if parent is not None:
                    kids = children.get(parent)
                    if kids is None:
                        children[parent] = [mid]
                    else:
                        kids.append(mid)
            self._children = children
        return self._children

    def _roles(self) -> dict[str, str]:
        """``id -> role``, read on first use (role filters and row stats need it)."""
        if self._role is None:
            cols = self.store.execute("SELECT id, role FROM messages").fetchnumpy()
            self._role = dict(zip(cols["id"].tolist(), cols["role"].tolist()))
        return self._role

    def _load_sessions(self) -> None:
        rows = self.store.execute(
            "SELECT id, parent_session_id, fork_message_id, seq FROM sessions").fetchall()
        self._registered = {r[0] for r in rows}
        self._forks = {r[0]: ForkPoint(r[1] or "", r[2], r[3]) for r in rows if r[2] is not None}

    def sessions_changed(self) -> None:
        """Re-read the ``sessions`` table (the manager calls this after writing it)."""
        with self.store.lock:
            if not self._stale:
                self._load_sessions()
                self._inherited_cache = {}
            self._generation += 1
            self.store.after_rollback(self.invalidate)

    # -- visibility ----------------------------------------------------------------------------

    def fork_point(self, session_id: str) -> ForkPoint | None:
        """The fork point of ``session_id``, or None if it is not a fork."""
        with self.store.lock:
            self._ready()
            return self._forks.get(session_id)

    def inherited(self, session_id: str) -> frozenset[str]:
        """Ids a fork reads from its ancestors (the path to its fork point); empty for a non-fork."""
        fp = self._forks.get(session_id)
        if fp is None:
            return frozenset()
        cached = self._inherited_cache.get(session_id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        shared = frozenset(self._walk(fp.parent_session_id, fp.message_id, DEFAULT_MAX_DEPTH))
        self._inherited_cache[session_id] = (self._generation, shared)
        return shared

    def inherited_ids(self, session_id: str) -> frozenset[str]:
        """:meth:`inherited`, safe to call from outside (takes the lock, loads the map)."""
        with self.store.lock:
            self._ready()
            return self.inherited(session_id)

    def visible(self, session_id: str, message_id: str) -> bool:
        """Whether ``message_id`` is a row of ``session_id`` or on its inherited path."""
        with self.store.lock:
            self._ready()
            return self._visible(session_id, message_id)

    def _visible(self, session_id: str, message_id: str) -> bool:
        return self._session.get(message_id) == session_id or message_id in self.inherited(session_id)

    def session_of(self, message_id: str) -> str | None:
        with self.store.lock:
            self._ready()
            return self._session.get(message_id)

    def role_of(self, message_id: str) -> str | None:
        with self.store.lock:
            self._ready()
            return self._roles().get(message_id)

    def owned_ids(self, session_id: str) -> list[str]:
        """Ids of the rows stored in ``session_id`` (not the inherited ones), by seq."""
        with self.store.lock:
            self._ready()
            return sorted((m for m, s in self._session.items() if s == session_id), key=self._seq.__getitem__)

    def count(self, session_id: str | None = None) -> int:
        """Rows stored in ``session_id`` (all sessions if None)."""
        with self.store.lock:
            self._ready()
            if session_id is None:
                return len(self._seq)
            return sum(1 for s in self._session.values() if s == session_id)

    def _shared_rows(self, session_id: str) -> frozenset[str]:
        shared: set[str] = set()
        for child, fp in self._forks.items():
            if fp.parent_session_id == session_id:
                shared |= self.inherited(child)
        return frozenset(m for m in shared if self._session.get(m) == session_id)

    # -- reads ---------------------------------------------------------------------------------

    def _walk(self, session_id: str, start: str | None, max_depth: int) -> list[str]:
        inherited = self.inherited(session_id)
        session, parent = self._session, self._parent
        path: list[str] = []
        cur = start
        while cur is not None and len(path) < max_depth:
            owner = session.get(cur)
            if owner is None or (owner != session_id and cur not in inherited):
                break  # a deleted or foreign ancestor ends the path, as upstream's CTE does
            path.append(cur)
            cur = parent[cur]
        path.reverse()
        return path

    def latest_leaf_id(self, session_id: str) -> str | None:
        """Id of the session's current tip (spec 3), or None for an empty session."""
        with self.store.lock:
            self._ready()
            own = self._latest.get(session_id)
            if own is not None:
                return own
            fp = self._forks.get(session_id)
            return fp.message_id if fp is not None and fp.message_id in self._seq else None

    def path_ids(self, session_id: str, leaf_id: str | None = None, *,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
        """Ids root -> leaf. A falsy ``leaf_id`` means the latest leaf; an id not visible gives ``[]``."""
        with self.store.lock:
            self._ready()
            start = leaf_id if leaf_id else self.latest_leaf_id(session_id)
            if start is None or not self._visible(session_id, start):
                return []
            return self._cached_walk(session_id, start, max_depth)

    _PATH_REUSE_STEPS = 64

    def _cached_walk(self, session_id: str, start: str, max_depth: int) -> list[str]:
        """:meth:`_walk`, reusing the session's last walked path when ``start`` is on it or a few steps below it.

        Reading the same branch again (every chat turn does) then costs a list copy instead of a walk of every
        ancestor. Only a change that bumps the generation can alter a stored path (appends add rows below it).
        """
        cached = self._path_cache.get(session_id)
        if cached is not None and cached[1] == self._generation and cached[2] == max_depth:
            leaf, _, _, path = cached
            if start == leaf:
                return list(path)
            below: list[str] = []
            cur: str | None = start
            session, parent, inherited = self._session, self._parent, self.inherited(session_id)
            while cur is not None and len(below) < self._PATH_REUSE_STEPS:
                if cur == leaf:
                    found = path + below[::-1]
                    if len(found) > max_depth:
                        break  # a cut path: walk it for real
                    self._path_cache[session_id] = (start, self._generation, max_depth, found)
                    return list(found)
                owner = session.get(cur)
                if owner is None or (owner != session_id and cur not in inherited):
                    break
                below.append(cur)
                cur = parent[cur]
        path = self._walk(session_id, start, max_depth)
        self._path_cache[session_id] = (start, self._generation, max_depth, path)
        return list(path)

    def on_current_branch(self, session_id: str, message_id: str) -> bool:
        """Whether ``message_id`` is on the path to the latest leaf of ``session_id``.

        The path is cached as a set; an append under the cached leaf extends it instead of walking again, so
        asking right after each append stays O(1) on a deep branch.
        """
        with self.store.lock:
            self._ready()
            leaf = self.latest_leaf_id(session_id)
            cached = self._branch_cache.get(session_id)
            if cached is not None and cached[1] == self._generation:
                old_leaf, _, members = cached
                if old_leaf != leaf and leaf is not None and self._parent.get(leaf) == old_leaf and \
                        self._session.get(leaf) == session_id:
                    members.add(leaf)
                    self._branch_cache[session_id] = (leaf, self._generation, members)
                    cached = self._branch_cache[session_id]
                if cached[0] == leaf:
                    return message_id in cached[2]
            members = set(self._walk(session_id, leaf, DEFAULT_MAX_DEPTH)) if leaf is not None else set()
            self._branch_cache[session_id] = (leaf, self._generation, members)
            return message_id in members

    def children_ids(self, session_id: str, message_id: str) -> list[str]:
        """Visible children of ``message_id``, oldest first (by seq)."""
        with self.store.lock:
            self._ready()
            kids = [c for c in self._kids().get(message_id, ()) if c in self._seq and self._visible(session_id, c)]
            return sorted(kids, key=self._seq.__getitem__)

    def read(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Parsed messages for ``ids``, in that order, skipping missing or unparsable rows."""
        with self.store.lock:
            self._ready()
            seqs = [self._seq[m] for m in ids if m in self._seq]
            if not seqs:
                return []
            return self.contents.read(seqs, self._fetch)

    def _fetch(self, seqs: list[int]) -> dict[int, str]:
        return dict(self.store.execute(f"SELECT seq, content FROM messages WHERE seq IN ({_SEQS})", [seqs]).fetchall())

    def get(self, session_id: str, message_id: str) -> dict[str, Any] | None:
        """The stored message if visible in ``session_id``, else None."""
        with self.store.lock:
            self._ready()
            if not self._visible(session_id, message_id):
                return None
            found = self.read([message_id])
            return found[0] if found else None

    def row_stats(self, session_id: str, leaf_id: str | None = None, *,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> list[RowStat]:
        """``RowStat`` per row on the path root -> leaf, without reading contents into Python."""
        with self.store.lock:
            ids = self.path_ids(session_id, leaf_id, max_depth=max_depth)
            if not ids:
                return []
            seqs = [self._seq[m] for m in ids]
            sizes = dict(self.store.execute(
                f"SELECT seq, strlen(content) FROM messages WHERE seq IN ({_SEQS})", [seqs]).fetchall())
            roles = self._roles()
            return [RowStat(m, roles[m], int(sizes[s])) for m, s in zip(ids, seqs) if s in sizes]

    # -- writes --------------------------------------------------------------------------------

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
        if mid in self._seq:
            if self._visible(session_id, mid):
                return True
            raise InvalidMessageError(
                f"Message id {mid!r} is already used by session {self._session[mid]!r}; ids are unique "
                "across the agent, so give this message a new id.")
        return False

    def _check_cycle(self, mid: str, parent: str | None) -> None:
        # Only the id of a deleted message, appended again, can have children already (its orphans).
        if mid not in self._dangling:
            return
        cur, steps = parent, 0
        while cur is not None and steps <= len(self._parent):
            if cur == mid:
                raise InvalidMessageError(
                    f"Appending {mid!r} under {parent!r} would make a cycle: {parent!r} descends from an earlier "
                    f"message with id {mid!r}. Use a new id.")
            cur, steps = self._parent.get(cur), steps + 1

    def _add(self, session_id: str, rows: Iterable[tuple[str, str | None, int, str]]) -> None:
        """Put new rows ``(id, parent, seq, role)`` of one session, in seq order, into the map."""
        seq_of, parent_of, session_of, role_of = self._seq, self._parent, self._session, self._role
        children, dangling = self._children, self._dangling
        leaves = self._leaves.setdefault(session_id, set())
        newest = None
        for mid, parent, seq, role in rows:
            seq_of[mid], parent_of[mid], session_of[mid] = seq, parent, session_id
            if role_of is not None:
                role_of[mid] = role
            if parent is not None:
                if children is not None:
                    kids = children.get(parent)
                    if kids is None:
                        children[parent] = [mid]
                    else:
                        kids.append(mid)
                if session_of.get(parent) == session_id:
                    leaves.discard(parent)
            if mid in dangling:  # a deleted id comes back: its old children point at it again
                dangling.discard(mid)
                self._generation += 1  # so their paths (and any path cached through them) change
                children = self._kids()
                if any(session_of.get(c) == session_id for c in children.get(mid, ())):
                    continue
            leaves.add(mid)
            newest = mid
        latest = self._latest.get(session_id)
        if newest is not None and newest in leaves:
            self._latest[session_id] = newest  # the newest row, and childless: the tip
        elif latest is not None and latest not in leaves:
            self._latest[session_id] = max(leaves, key=seq_of.__getitem__) if leaves else None

    def _touch(self, conn: Any, session_id: str) -> None:
        if session_id in self._registered:
            conn.execute("UPDATE sessions SET updated_at = now() WHERE id = ?", [session_id]).fetchall()

    def append(self, session_id: str, message: Any, parent_id: Any = UNSET) -> tuple[Appended, dict[str, Any]]:
        """Store one message (spec 3); see :meth:`agentlab.session.Session.append_message`.

        Returns:
            What happened, and the message as stored (``created_at`` filled in).
        """
        msg, content = prepare_message(message)
        mid = msg["id"]
        store = self.store
        with store.lock:
            self._ready()
            if self._check_new_id(session_id, mid):
                return Appended(mid, self._parent.get(mid), self._seq[mid], True), msg
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
        """Bring the map, the search view and the cache up to date with one row just written."""
        self._add(session_id, [(mid, parent, seq, role)])
        if tokens is not None:
            self.fts.added(mid, session_id, seq, tokens)
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
            known, dangling, owner = self._seq, self._dangling, self._session
            for message in messages:
                msg, content, own_parent = prepare_placed(message, stamp=stamp)
                mid = msg["id"]
                if own_parent is UNSET:
                    parent = prev
                elif own_parent in new or (type(own_parent) is str and owner.get(own_parent) == session_id):
                    parent = own_parent  # in this batch, or a row of this session: what _resolve_parent allows
                else:
                    parent = self._resolve_parent(session_id, own_parent, new)
                if mid in new:
                    plan.append((mid, parents[new[mid]], 0))
                elif mid in known and self._check_new_id(session_id, mid):
                    plan.append((mid, self._parent.get(mid), known[mid]))
                else:
                    if mid in dangling:
                        self._check_cycle(mid, parent)
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
            if self._session.get(mid) != session_id:
                raise UnknownMessageError(mid)
            if mid in self._shared_rows(session_id):
                raise ForkedHistoryError(
                    f"Message {mid!r} is shared with a fork of this session, so it cannot change; "
                    "append a corrected message instead.")
            tokens = search_tokens(msg)
            seq = self._seq[mid]
            # A rewritten text is a new document for ranking ties (FTS5 deletes and re-inserts the row).
            search_seq = clock_of(store).take() if tokens is not None else None
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                conn.execute("UPDATE messages SET content = ?, search_tokens = ?, search_seq = ? WHERE seq = ?",
                             [content, None if tokens is None else " ".join(tokens), search_seq, seq]).fetchall()
                self._generation += 1  # path contents changed: cached estimates are stale
                if tokens is not None:
                    self.fts.added(mid, session_id, search_seq, tokens)
                else:
                    self.fts.removed([mid])
                self.contents.put(seq, content)
                self._touch(conn, session_id)
        return msg

    def delete(self, session_id: str, ids: Iterable[str]) -> list[str]:
        """Delete this session's rows among ``ids`` (others are ignored); returns the ids deleted.

        Children are not re-parented: their path now stops below the gap (spec 3).

        Raises:
            ForkedHistoryError: One of the rows is shared with a fork (nothing is deleted).
        """
        store = self.store
        with store.lock:
            self._ready()
            doomed = list(dict.fromkeys(m for m in ids if self._session.get(m) == session_id))
            if not doomed:
                return []
            shared = self._shared_rows(session_id).intersection(doomed)
            if shared:
                raise ForkedHistoryError(
                    f"Messages {sorted(shared)!r} are shared with a fork of this session; delete the fork first "
                    "(SessionManager.delete).")
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                seqs = [self._seq[m] for m in doomed]
                conn.execute(f"DELETE FROM messages WHERE seq IN ({_SEQS})", [seqs]).fetchall()
                self.fts.removed(doomed)
                self.contents.discard(seqs)
                self._touch(conn, session_id)
                self._drop(session_id, doomed)
            return doomed

    def _drop(self, session_id: str, doomed: list[str]) -> None:
        children = self._kids()
        leaves = self._leaves.setdefault(session_id, set())
        parents: list[str] = []
        for mid in doomed:
            parent = self._parent.pop(mid)
            del self._seq[mid], self._session[mid]
            if self._role is not None:
                self._role.pop(mid, None)
            leaves.discard(mid)
            if children.get(mid):
                self._dangling.add(mid)  # its children keep pointing at it (orphans), as upstream
            if parent is not None:
                siblings = children.get(parent)
                if siblings and mid in siblings:
                    siblings.remove(mid)
                parents.append(parent)
        for parent in parents:  # a parent left without children in this session is a leaf again
            if self._session.get(parent) == session_id and not any(
                    self._session.get(c) == session_id for c in children.get(parent, ())):
                leaves.add(parent)
        self._latest[session_id] = max(leaves, key=self._seq.__getitem__) if leaves else None
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
            own = [m for m, s in self._session.items() if s == session_id]
            with store.transaction() as conn:
                store.after_rollback(self.invalidate)
                conn.execute("DELETE FROM messages WHERE session_id = ?", [session_id]).fetchall()
                conn.execute("DELETE FROM compactions WHERE session_id = ?", [session_id]).fetchall()
                self.fts.cleared(session_id)
                self.contents.discard(self._seq[m] for m in own)
                self._touch(conn, session_id)
                for mid in own:
                    del self._seq[mid], self._session[mid], self._parent[mid]
                    if self._role is not None:
                        self._role.pop(mid, None)
                self._children = None  # rebuilt on first use, without the session's rows
                self._leaves.pop(session_id, None)
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
