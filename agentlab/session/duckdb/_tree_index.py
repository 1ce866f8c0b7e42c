"""The read side of the message tree: the parent map of every session, held in memory, and every read.

DuckDB walks recursive CTEs slowly (about 77 ms at depth 10,000), so :class:`TreeIndex` keeps
``id -> parent, seq, session`` and the leaves of every session in memory, as a
:class:`RowMap` loaded once at first use (numpy arrays, so a million rows cost tens of
megabytes and well under a second to load; roles on first need; children found per call, never a map of them),
and reads only message contents from DuckDB. The writes that keep it in step with the ``messages`` table are
:class:`MessageTree`'s.

Invariants:

* Used only while holding ``store.lock``: the map and the file change together. A stale map (after a
  rollback or outside SQL) is reloaded from the file on next use.
* The latest leaf of a session is its newest (by seq) row with no child in the same session; a fork with no
  rows of its own has its fork point as latest leaf.
* A fork shares its parent's rows up to the fork point (nothing is copied); its path reads through them.
* A read returns ``json.loads`` of exactly the stored text, so Anthropic thinking blocks and their signatures
  round-trip unchanged; texts already read are kept in a bounded :class:`ContentCache`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.session._messages import DEFAULT_MAX_DEPTH, CompactionRecord, RowStat
from agentlab.session.duckdb import _compactions_table as compactions_table
from agentlab.session.duckdb import _messages_table as messages_table
from agentlab.session.duckdb._compactions_table import load_compactions
from agentlab.session.duckdb._contents import ContentCache
from agentlab.session.duckdb._parent_map import RowMap
from agentlab.store import Store

__all__ = ["ForkPoint", "TreeIndex"]


# One row (kind NULL) with the counts of messages and overlays, then one row per session.
_SESSIONS_AND_COUNTS = f"""
SELECT NULL AS kind, ({messages_table.COUNT}), ({compactions_table.COUNT}), NULL, NULL, NULL, NULL
UNION ALL
SELECT 1, NULL, NULL, id, parent_session_id, fork_message_id, seq FROM sessions
"""


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: it reads ``parent_session_id``'s path up to ``message_id``, and its overlays
    older than ``seq`` (the fork's own seq)."""

    parent_session_id: str
    message_id: str
    seq: int


# --- the tree --------------------------------------------------------------------------------------

class TreeIndex:
    """The parent map of every session in one store, in memory, and every read of the tree.

    :class:`MessageTree` adds the writes; get the store's one tree with
    :func:`tree_of`.

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
        """The full-text index of message texts (a :class:`MessageIndex`; group:
        session id)."""
        if self._fts is None:
            from agentlab.session.duckdb._message_index import MessageIndex

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
        # row map (numpy arrays, no Python object per row) and each session's newest leaf.
        store = self.store
        with store.lock:
            # The sessions and two counts in one query: a new agent's messages and overlays are empty, and each
            # query costs a new agent about 0.3 ms.
            rows = store.execute(_SESSIONS_AND_COUNTS).fetchall()
            n_messages, n_compactions = next((r[1], r[2]) for r in rows if r[0] is None)
            self._set_sessions([r[3:] for r in rows if r[0] is not None])
            self._rows = RowMap.load(store.conn) if n_messages else RowMap()
            self._latest: dict[str, str | None] = dict(self._rows.latest_leaves())
            # Parent ids with no row: deleted messages whose children still point at them. Only such
            # an id, appended again, can arrive with children already.
            self._dangling: set[str] = self._rows.detached_parents()
            self._compactions: dict[str, list[CompactionRecord]] = {}
            for record in load_compactions(store) if n_compactions else ():
                self._compactions.setdefault(record.session_id, []).append(record)
            # Before any write of this process, so the index can tell what it already holds.
            self.fts.prepare(indexed=None if n_messages else 0)
            self._inherited_cache: dict[str, tuple[int, frozenset[str]]] = {}
            self._branch_cache: dict[str, tuple[str | None, int, set[int]]] = {}
            self._path_cache: dict[str, tuple[str, int, int, list[str], list[int], bool]] = {}
            self.contents.clear()
            self._stale = False
            self._generation += 1

    def _role_columns(self) -> tuple[Any, Any]:
        table = self.store.conn.sql(messages_table.ROLES).to_arrow_table()
        return table.column("seq"), table.column("role")

    def _load_sessions(self) -> None:
        self._set_sessions(self.store.execute(
            "SELECT id, parent_session_id, fork_message_id, seq FROM sessions").fetchall())

    def _set_sessions(self, rows: list[Any]) -> None:
        self._registered = {r[0] for r in rows}
        self._forks = {r[0]: ForkPoint(r[1] or "", r[2], r[3]) for r in rows if r[2] is not None}

    def has_session_row(self, session_id: str) -> bool:
        """Whether ``session_id`` has a row in ``sessions`` (as read at load and after every change the manager
        makes; SQL from outside reloads it)."""
        with self.store.lock:
            self._ready()
            return session_id in self._registered

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
        return self._rows.session(message_id) == session_id or message_id in self.inherited(session_id)

    def session_of(self, message_id: str) -> str | None:
        with self.store.lock:
            self._ready()
            return self._rows.session(message_id)

    def role_of(self, message_id: str) -> str | None:
        with self.store.lock:
            self._ready()
            return self._rows.role(message_id, self._role_columns)

    def owned_ids(self, session_id: str) -> list[str]:
        """Ids of the rows stored in ``session_id`` (not the inherited ones), by seq."""
        with self.store.lock:
            self._ready()
            return self._rows.ids_of_session(session_id)

    def count(self, session_id: str | None = None) -> int:
        """Rows stored in ``session_id`` (all sessions if None)."""
        with self.store.lock:
            self._ready()
            return self._rows.count(session_id)

    def nodes(self, session_id: str) -> list[tuple[str, str | None, str, int]]:
        """``(id, parent_id, role, seq)`` of every message visible in ``session_id`` (its own rows and a fork's
        shared path), by seq: the tree's shape without reading a message."""
        with self.store.lock:
            self._ready()
            return self._rows.outline(session_id, self.inherited(session_id), self._role_columns)

    def active_sessions(self) -> dict[str, int]:
        """Every session id that stores messages, with the seq of its newest message."""
        with self.store.lock:
            self._ready()
            return self._rows.newest_seqs()

    def _shared_rows(self, session_id: str) -> frozenset[str]:
        shared: set[str] = set()
        for child, fp in self._forks.items():
            if fp.parent_session_id == session_id:
                shared |= self.inherited(child)
        return frozenset(m for m in shared if self._rows.session(m) == session_id)

    # -- reads ---------------------------------------------------------------------------------

    def _walk(self, session_id: str, start: str | None, max_depth: int) -> list[str]:
        return self._walk_cut(session_id, start, max_depth)[0]

    def _walk_cut(self, session_id: str, start: str | None, max_depth: int) -> tuple[list[str], list[int], bool]:
        """The path root -> ``start`` (ids and seqs), at most ``max_depth`` long, and whether a longer one was cut."""
        if start is None:
            return [], [], False
        return self._rows.walk(start, session_id, self.inherited(session_id), max_depth)

    def latest_leaf_id(self, session_id: str) -> str | None:
        """Id of the session's current tip, or None for an empty session."""
        with self.store.lock:
            self._ready()
            own = self._latest.get(session_id)
            if own is not None:
                return own
            fp = self._forks.get(session_id)
            return fp.message_id if fp is not None and fp.message_id in self._rows else None

    def path_ids(self, session_id: str, leaf_id: str | None = None, *,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
        """Ids root -> leaf. A falsy ``leaf_id`` means the latest leaf; an id not visible gives ``[]``."""
        return self.path(session_id, leaf_id, max_depth=max_depth)[0]

    def path(self, session_id: str, leaf_id: str | None = None, *,
             max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], bool]:
        """:meth:`path_ids`, and whether the path was longer than ``max_depth`` (so cut on the root side)."""
        ids, _, cut = self.path_rows(session_id, leaf_id, max_depth=max_depth)
        return ids, cut

    def path_rows(self, session_id: str, leaf_id: str | None = None, *,
                  max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], list[int], bool]:
        """:meth:`path`, with each row's seq (what reading the path's contents needs)."""
        with self.store.lock:
            self._ready()
            start = leaf_id if leaf_id else self.latest_leaf_id(session_id)
            if start is None or not self._visible(session_id, start):
                return [], [], False
            return self._cached_walk(session_id, start, max_depth)

    _PATH_REUSE_STEPS = 64

    def _cached_walk(self, session_id: str, start: str, max_depth: int) -> tuple[list[str], list[int], bool]:
        """:meth:`_walk_cut`, reusing the session's last walked path when ``start`` is on it or a few steps below it.

        Reading the same branch again (every chat turn does) then costs a list copy instead of a walk of every
        ancestor. Only a change that bumps the generation can alter a stored path (appends add rows below it).
        """
        cached = self._path_cache.get(session_id)
        if cached is not None and cached[1] == self._generation and cached[2] == max_depth:
            leaf, _, _, path, seqs, cut = cached
            if start == leaf:
                return list(path), list(seqs), cut
            below: list[tuple[str, int]] = []
            cur: str | None = start
            rows, inherited = self._rows, self.inherited(session_id)
            while cur is not None and len(below) < self._PATH_REUSE_STEPS:
                if cur == leaf:
                    found = path + [m for m, _ in reversed(below)]
                    if len(found) > max_depth:
                        break  # a cut path: walk it for real
                    found_seqs = seqs + [q for _, q in reversed(below)]
                    self._path_cache[session_id] = (start, self._generation, max_depth, found, found_seqs, False)
                    return list(found), list(found_seqs), False
                entry = rows.get(cur)
                if entry is None or (entry[2] != session_id and cur not in inherited):
                    break
                below.append((cur, entry[0]))
                cur = entry[1]
        path, seqs, cut = self._walk_cut(session_id, start, max_depth)
        self._path_cache[session_id] = (start, self._generation, max_depth, path, seqs, cut)
        return list(path), list(seqs), cut

    def on_current_branch(self, session_id: str, message_id: str, *, seq: int | None = None) -> bool:
        """Whether ``message_id`` (whose row seq may be given) is on the path to the latest leaf of ``session_id``.

        The path is cached as a set of seqs (no id strings are made for it); an append under the cached leaf
        extends it instead of walking again, so asking right after each append stays O(1) on a deep branch.
        """
        with self.store.lock:
            self._ready()
            leaf = self.latest_leaf_id(session_id)
            if seq is None:
                found = self._rows.get(message_id)
                if found is None:
                    return False
                seq = found[0]
            cached = self._branch_cache.get(session_id)
            if cached is not None and cached[1] == self._generation:
                old_leaf, _, members = cached
                entry = self._rows.get(leaf) if leaf is not None and old_leaf != leaf else None
                if leaf is not None and entry is not None and entry[1] == old_leaf and entry[2] == session_id:
                    members.add(entry[0])
                    self._branch_cache[session_id] = (leaf, self._generation, members)
                    cached = self._branch_cache[session_id]
                if cached[0] == leaf:
                    return seq in cached[2]
            seqs: set[int] = set()
            if leaf is not None:
                seqs = set(self._rows.walk(leaf, session_id, self.inherited(session_id), DEFAULT_MAX_DEPTH,
                                           with_ids=False)[1])
            self._branch_cache[session_id] = (leaf, self._generation, seqs)
            return seq in seqs

    def children_ids(self, session_id: str, message_id: str) -> list[str]:
        """Visible children of ``message_id``, oldest first (by seq)."""
        with self.store.lock:
            self._ready()
            return [c for c in self._rows.children(message_id) if self._visible(session_id, c)]

    def seqs_of(self, ids: Sequence[str]) -> list[int]:
        """The row seqs of those ``ids`` that are stored (in no particular order)."""
        with self.store.lock:
            self._ready()
            found = (self._rows.seq(m) for m in ids)
            return [q for q in found if q is not None]

    def read(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Parsed messages for ``ids``, in that order, skipping missing or unparsable rows."""
        with self.store.lock:
            self._ready()
            found = (self._rows.seq(m) for m in ids)
            return self.read_seqs([q for q in found if q is not None])

    def read_seqs(self, seqs: list[int]) -> list[dict[str, Any]]:
        """Parsed messages of the rows with these seqs, in that order, skipping missing or unparsable rows."""
        with self.store.lock:
            self._ready()
            return self.contents.read(seqs, self._fetch) if seqs else []

    def _fetch(self, seqs: list[int]) -> dict[int, str]:
        lo, hi = min(seqs), max(seqs)
        if len(seqs) > 64 and hi - lo < 2 * len(seqs):
            # A branch's rows are mostly consecutive seqs: a range scan (zone maps) is about twice as fast as
            # joining the list, even with the few rows of other branches it reads in between.
            wanted = set(seqs)
            rows = messages_table.contents_between(self.store, lo, hi)
            return {seq: text for seq, text in rows if seq in wanted}
        return messages_table.contents(self.store, seqs)

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
            ids, seqs, _ = self.path_rows(session_id, leaf_id, max_depth=max_depth)
            if not ids:
                return []
            found = messages_table.roles_and_sizes(self.store, seqs)
            return [RowStat(m, found[q][0], int(found[q][1])) for m, q in zip(ids, seqs) if q in found]

    # -- writes --------------------------------------------------------------------------------
