"""The read side of the message tree: the parent map of every session, held in memory, and every read.

DuckDB walks recursive CTEs slowly (about 77 ms at depth 10,000), so :class:`TreeIndex` keeps
``id -> parent, seq, session`` and the leaves of every session in memory, loaded once at first use (children
lists and roles on first need), and reads only message contents from DuckDB. The writes that keep it in step
with the ``messages`` table are :class:`~agentlab.session.tree.MessageTree`'s.

Invariants:

* Used only while holding ``store.lock``: the map and the file change together. A stale map (after a
  rollback or outside SQL) is reloaded from the file on next use.
* The latest leaf of a session is its newest (by seq) row with no child in the same session; a fork with no
  rows of its own has its fork point as latest leaf.
* A fork shares its parent's rows up to the fork point (nothing is copied); its path reads through them.
* A read returns ``json.loads`` of exactly the stored text, so Anthropic thinking blocks and their signatures
  round-trip unchanged; texts already read are kept in a bounded :class:`~agentlab.session.contents.ContentCache`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.session.contents import ContentCache
from agentlab.session.messages import DEFAULT_MAX_DEPTH, RowStat
from agentlab.session.overlays import CompactionRecord, load_compactions
from agentlab.store.database import Store

__all__ = ["SEQS_PARAM", "ForkPoint", "TreeIndex"]


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: it reads ``parent_session_id``'s path up to ``message_id``, and its overlays
    older than ``seq`` (the fork's own seq)."""

    parent_session_id: str
    message_id: str
    seq: int


# --- the tree --------------------------------------------------------------------------------------

SEQS_PARAM = "SELECT unnest(?::BIGINT[])"
"""A subquery over a list of seqs bound as one parameter."""

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


class TreeIndex:
    """The parent map of every session in one store, in memory, and every read of the tree.

    :class:`~agentlab.session.tree.MessageTree` adds the writes; get the store's one tree with
    :func:`~agentlab.session.tree.tree_of`.

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
            # Parent ids with no row: deleted messages whose children still point at them. Only such
            # an id, appended again, can arrive with children already.
            self._dangling: set[str] = {r[0] for r in store.execute(_DANGLING).fetchall()}
            self._compactions: dict[str, list[CompactionRecord]] = {}
            for record in load_compactions(store):
                self._compactions.setdefault(record.session_id, []).append(record)
            self._load_sessions()
            self._inherited_cache: dict[str, tuple[int, frozenset[str]]] = {}
            self._branch_cache: dict[str, tuple[str | None, int, set[str]]] = {}
            self._path_cache: dict[str, tuple[str, int, int, list[str], bool]] = {}
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
        return self._walk_cut(session_id, start, max_depth)[0]

    def _walk_cut(self, session_id: str, start: str | None, max_depth: int) -> tuple[list[str], bool]:
        """The path root -> ``start``, at most ``max_depth`` long, and whether a longer path was cut."""
        inherited = self.inherited(session_id)
        session, parent = self._session, self._parent
        path: list[str] = []
        cur = start
        while cur is not None:
            owner = session.get(cur)
            if owner is None or (owner != session_id and cur not in inherited):
                break  # a deleted or foreign ancestor ends the path, as upstream's CTE does
            if len(path) == max_depth:
                path.reverse()
                return path, True
            path.append(cur)
            cur = parent[cur]
        path.reverse()
        return path, False

    def latest_leaf_id(self, session_id: str) -> str | None:
        """Id of the session's current tip, or None for an empty session."""
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
        return self.path(session_id, leaf_id, max_depth=max_depth)[0]

    def path(self, session_id: str, leaf_id: str | None = None, *,
             max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], bool]:
        """:meth:`path_ids`, and whether the path was longer than ``max_depth`` (so cut on the root side)."""
        with self.store.lock:
            self._ready()
            start = leaf_id if leaf_id else self.latest_leaf_id(session_id)
            if start is None or not self._visible(session_id, start):
                return [], False
            return self._cached_walk(session_id, start, max_depth)

    _PATH_REUSE_STEPS = 64

    def _cached_walk(self, session_id: str, start: str, max_depth: int) -> tuple[list[str], bool]:
        """:meth:`_walk_cut`, reusing the session's last walked path when ``start`` is on it or a few steps below it.

        Reading the same branch again (every chat turn does) then costs a list copy instead of a walk of every
        ancestor. Only a change that bumps the generation can alter a stored path (appends add rows below it).
        """
        cached = self._path_cache.get(session_id)
        if cached is not None and cached[1] == self._generation and cached[2] == max_depth:
            leaf, _, _, path, cut = cached
            if start == leaf:
                return list(path), cut
            below: list[str] = []
            cur: str | None = start
            session, parent, inherited = self._session, self._parent, self.inherited(session_id)
            while cur is not None and len(below) < self._PATH_REUSE_STEPS:
                if cur == leaf:
                    found = path + below[::-1]
                    if len(found) > max_depth:
                        break  # a cut path: walk it for real
                    self._path_cache[session_id] = (start, self._generation, max_depth, found, False)
                    return list(found), False
                owner = session.get(cur)
                if owner is None or (owner != session_id and cur not in inherited):
                    break
                below.append(cur)
                cur = parent[cur]
        path, cut = self._walk_cut(session_id, start, max_depth)
        self._path_cache[session_id] = (start, self._generation, max_depth, path, cut)
        return list(path), cut

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
        query = f"SELECT seq, content FROM messages WHERE seq IN ({SEQS_PARAM})"
        return dict(self.store.execute(query, [seqs]).fetchall())

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
                f"SELECT seq, strlen(content) FROM messages WHERE seq IN ({SEQS_PARAM})", [seqs]).fetchall())
            roles = self._roles()
            return [RowStat(m, roles[m], int(sizes[s])) for m, s in zip(ids, seqs) if s in sizes]

    # -- writes --------------------------------------------------------------------------------
