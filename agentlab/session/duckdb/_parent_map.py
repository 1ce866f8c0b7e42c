"""Where every message row sits in the tree, in memory, for millions of rows: id -> seq, parent and session.

The rows present when the map was loaded are the *base*: numpy arrays in seq order (seq, parent row, session
code, whether alive, whether a leaf of its session), the ids as one UTF-8 buffer with offsets, and the ids' 64-bit
FNV-1a hashes sorted for lookups. The hashes are computed over the Arrow buffers with numpy, one byte position
at a time for all ids, so loading a million rows creates no Python string; a lookup hashes the one id it is
asked about the same way and compares the candidate row's id, so a hash collision can never mix two ids up.
Rows written after the load are the *overlay*: plain dicts, as small as the writes since.

Invariants:

* A base row is alive until deleted; a deleted id may come back as an overlay row (and then wins).
* Among rows loaded with the same id, the oldest (smallest seq) is the row; the others are ignored, as a
  repeated append is.
* ``parent`` of a base row is the base row of its parent id when that row existed at load, else -1 for a root
  and -2 for a parent id with no row then (its id is kept in ``detached``).
* Leaves: a row is a leaf of its session when no alive row of the same session has it as parent. Base leaves are
  a mask computed at load and kept up to date; overlay leaves are sets per session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from agentlab._memory import release_freed_memory
from agentlab.session.duckdb._id_hash import hash_column, id_hash
from agentlab.session.duckdb._messages_table import ROW_LINKS, parent_ids

__all__ = ["RowMap"]



def _ints(array: Any, dtype: Any) -> np.ndarray:
    from agentlab.search import numpy_ints

    return numpy_ints(array).astype(dtype, copy=False)


class RowMap:
    """id -> (seq, parent id, session) for every row of the ``messages`` table (see the module docstring)."""

    def __init__(self) -> None:
        self._n = 0
        self._seq = np.zeros(0, dtype=np.int64)
        self._sorted_hash = np.zeros(0, dtype=np.uint64)
        self._hash_rows = np.zeros(0, dtype=np.int64)
        self._parent = np.zeros(0, dtype=np.int64)
        self._session = np.zeros(0, dtype=np.int32)
        self._alive = np.zeros(0, dtype=np.bool_)
        self._leaf = np.zeros(0, dtype=np.bool_)
        self._id_offsets = np.zeros(1, dtype=np.int64)
        self._id_bytes = b""
        self.detached: dict[int, str] = {}
        self._sessions: list[str] = []
        self._code: dict[str, int] = {}
        self._n_alive = 0
        self._over: dict[str, tuple[int, str | None, str]] = {}
        self._over_children: dict[str, list[str]] = {}
        self._over_leaves: dict[str, set[str]] = {}
        self._roles: np.ndarray | None = None
        self._role_names: list[str] = []
        self._over_roles: dict[str, str] = {}
        self._inherited: tuple[frozenset[str], set[int]] | None = None
        self._views()

    def _views(self) -> None:
        # memoryviews index to plain Python ints and bools, several times faster than numpy scalars in a walk
        self._mv_parent = self._parent.data
        self._mv_session = self._session.data
        self._mv_alive = self._alive.data
        self._mv_seq = self._seq.data
        self._mv_offsets = self._id_offsets.data

    # -- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, conn: Any) -> RowMap:
        """Every row of ``messages`` through ``conn`` (a DuckDB connection or cursor)."""
        import pyarrow.compute as pc

        table = conn.sql(ROW_LINKS).to_arrow_table()
        self = cls()
        n = table.num_rows
        if not n:
            return self
        from agentlab.search import utf8_buffers

        seq = _ints(table.column("seq"), np.int64)
        if n > 1 and not bool(np.all(seq[1:] > seq[:-1])):  # written out of order (SQL from outside)
            order = np.argsort(seq, kind="stable")
            from agentlab.search import arrow_ints

            table = table.take(arrow_ints(order))
            seq = seq[order]
        self._id_offsets, raw = utf8_buffers(table.column("id"))
        hashes = hash_column(self._id_offsets[:-1], np.diff(self._id_offsets), raw)
        self._id_bytes = raw.tobytes()
        self._mv_offsets = self._id_offsets.data
        sessions = pc.dictionary_encode(table.column("session_id").combine_chunks())
        self._sessions = sessions.dictionary.to_pylist()
        self._code = {s: i for i, s in enumerate(self._sessions)}
        self._session = _ints(sessions.indices, np.int32)
        self._seq = seq
        order = np.argsort(hashes, kind="stable")  # equal hashes keep seq order: the oldest row comes first
        self._sorted_hash, self._hash_rows = hashes[order], order.astype(np.int64)
        self._n = n
        alive = np.ones(n, dtype=np.bool_)
        same = np.flatnonzero(self._sorted_hash[1:] == self._sorted_hash[:-1])
        for i in same.tolist():  # a repeated id (or, once in ~10^10 files, two ids sharing 64 bits)
            first, later = int(self._hash_rows[i]), int(self._hash_rows[i + 1])
            if self._id(first) == self._id(later):
                alive[later] = False
        self._alive = alive
        # Parents: the base row holding the parent id, found by its hash and checked where hashes repeat.
        parents = table.column("parent_id").combine_chunks()
        root = _ints(parents.is_null().cast("int8"), np.int8).astype(np.bool_)
        parent_offsets, parent_raw = utf8_buffers(parents)
        parent_hash = hash_column(parent_offsets[:-1], np.where(root, 0, np.diff(parent_offsets)), parent_raw)
        del parents, parent_raw, table
        by_parent = np.argsort(parent_hash)  # searching sorted keys is several times faster than random ones
        at = np.empty(n, dtype=np.int64)
        at[by_parent] = np.minimum(np.searchsorted(self._sorted_hash, parent_hash[by_parent]), n - 1)
        found = (self._sorted_hash[at] == parent_hash) & ~root
        parent = np.where(root, -1, np.where(found, self._hash_rows[at], -2)).astype(np.int64)
        ambiguous = np.isin(parent_hash, self._sorted_hash[same]) & ~root if len(same) else np.zeros(n, np.bool_)
        parent[ambiguous] = -2
        self._parent = parent
        self._views()
        need = np.flatnonzero(parent == -2)
        if len(need):
            by_seq = parent_ids(conn, seq[need].tolist())
            self.detached = {int(r): by_seq[int(seq[r])] for r in need.tolist() if int(seq[r]) in by_seq}
            for r, pid in list(self.detached.items()):
                row = self._row(pid)
                if row >= 0:  # a collision, resolved by comparing the ids themselves
                    self._parent[r] = row
                    del self.detached[r]
        # A row is a leaf unless an alive row of its own session hangs under it.
        kids = np.flatnonzero(alive & (self._parent >= 0))
        has_child = np.zeros(n, dtype=np.bool_)
        same_session = self._session[kids] == self._session[self._parent[kids]]
        has_child[self._parent[kids[same_session]]] = True
        self._leaf = alive & ~has_child
        self._n_alive = int(alive.sum())
        self._views()
        release_freed_memory()  # the load's temporaries were several times the arrays kept
        return self

    def detached_parents(self) -> set[str]:
        """Parent ids that had no row at load, of rows still alive (deleted messages whose children remain)."""
        return {pid for r, pid in self.detached.items() if self._alive[r]}

    def latest_leaves(self) -> dict[str, str]:
        """Each session's newest leaf (by seq) among the base rows."""
        rows = np.flatnonzero(self._leaf)
        if not len(rows):
            return {}
        codes = self._session[rows]
        order = np.lexsort((self._seq[rows], codes))
        last = np.r_[np.flatnonzero(codes[order][1:] != codes[order][:-1]), len(order) - 1]
        return {self._sessions[int(codes[order][i])]: self._id(int(rows[order][i])) for i in last.tolist()}

    # -- single rows ---------------------------------------------------------------------------

    def _id(self, row: int) -> str:
        offsets = self._mv_offsets
        return self._id_bytes[offsets[row]:offsets[row + 1]].decode("utf-8")

    def _row(self, mid: str) -> int:
        """The alive base row of ``mid``, or -1."""
        if not self._n:
            return -1
        h = np.uint64(id_hash(mid))
        i = int(np.searchsorted(self._sorted_hash, h))
        while i < self._n and self._sorted_hash[i] == h:
            row = int(self._hash_rows[i])
            if self._mv_alive[row] and self._id(row) == mid:
                return row
            i += 1
        return -1

    def __len__(self) -> int:
        return self._n_alive + len(self._over)

    def __contains__(self, mid: object) -> bool:
        return isinstance(mid, str) and (mid in self._over or self._row(mid) >= 0)

    def get(self, mid: str) -> tuple[int, str | None, str] | None:
        """``(seq, parent id, session)`` of ``mid``, or None."""
        found = self._over.get(mid)
        if found is not None:
            return found
        row = self._row(mid)
        if row < 0:
            return None
        return self._seq[row].item(), self._parent_id(row), self._sessions[self._mv_session[row]]

    def _parent_id(self, row: int) -> str | None:
        parent = self._mv_parent[row]
        if parent == -1:
            return None
        if parent == -2:
            return self.detached.get(row)
        return self._id(parent)

    def seq(self, mid: str) -> int | None:
        found = self.get(mid)
        return None if found is None else found[0]

    def session(self, mid: str) -> str | None:
        found = self._over.get(mid)
        if found is not None:
            return found[2]
        row = self._row(mid)
        return None if row < 0 else self._sessions[self._mv_session[row]]

    def parent(self, mid: str) -> str | None:
        found = self.get(mid)
        return None if found is None else found[1]

    def role(self, mid: str, load: Any) -> str | None:
        """``mid``'s role; ``load()`` returns (seq, role) Arrow columns of every row the first time it is needed."""
        role = self._over_roles.get(mid)
        if role is not None:
            return role
        row = self._row(mid)
        if row < 0:
            return None
        return self._role_names[int(self._base_roles(load)[row])]

    def _base_roles(self, load: Any) -> np.ndarray:
        """Each base row's role, as a code into ``_role_names`` (read through ``load()`` the first time)."""
        if self._roles is None:
            import pyarrow.compute as pc

            seqs, roles = load()
            encoded = pc.dictionary_encode(roles.combine_chunks() if hasattr(roles, "combine_chunks") else roles)
            self._role_names = encoded.dictionary.to_pylist()
            codes = _ints(encoded.indices, np.int32)
            at = np.searchsorted(_ints(seqs, np.int64), self._seq)
            self._roles = codes[np.minimum(at, len(codes) - 1)] if len(codes) else np.zeros(self._n, np.int32)
        return self._roles

    # -- writes --------------------------------------------------------------------------------

    def add(self, mid: str, parent: str | None, seq: int, session: str, role: str | None = None) -> None:
        self._over[mid] = (seq, parent, session)
        if parent is not None:
            self._over_children.setdefault(parent, []).append(mid)
        if role is not None:
            self._over_roles[mid] = role

    def remove(self, mid: str) -> str | None:
        """Forget ``mid``'s row; returns its parent id."""
        found = self._over.pop(mid, None)
        self._over_roles.pop(mid, None)
        if found is not None:
            self._over_leaves.get(found[2], set()).discard(mid)
            return found[1]
        row = self._row(mid)
        if row < 0:
            return None
        parent = self._parent_id(row)
        self._alive[row] = False
        self._leaf[row] = False
        self._n_alive -= 1
        return parent

    # -- leaves --------------------------------------------------------------------------------

    def is_leaf(self, mid: str) -> bool:
        found = self._over.get(mid)
        if found is not None:
            return mid in self._over_leaves.get(found[2], ())
        row = self._row(mid)
        return row >= 0 and bool(self._leaf[row])

    def add_leaf(self, session: str, mid: str) -> None:
        row = -1 if mid in self._over else self._row(mid)
        if row >= 0:
            self._leaf[row] = True
        else:
            self._over_leaves.setdefault(session, set()).add(mid)

    def discard_leaf(self, mid: str) -> None:
        found = self._over.get(mid)
        if found is not None:
            self._over_leaves.get(found[2], set()).discard(mid)
            return
        row = self._row(mid)
        if row >= 0:
            self._leaf[row] = False

    def newest_leaf(self, session: str) -> str | None:
        """The session's leaf with the largest seq, or None."""
        best: tuple[int, str] | None = None
        for mid in self._over_leaves.get(session, ()):
            seq = self._over[mid][0]
            if best is None or seq > best[0]:
                best = (seq, mid)
        code = self._code.get(session)
        if code is not None:
            rows = np.flatnonzero(self._leaf & (self._session == code))
            if len(rows):
                row = int(rows[np.argmax(self._seq[rows])])
                if best is None or self._seq[row] > best[0]:
                    best = (int(self._seq[row]), self._id(row))
        return None if best is None else best[1]

    def drop_session(self, session: str) -> list[str]:
        """Forget every row of ``session``; returns their ids."""
        gone = [m for m, v in self._over.items() if v[2] == session]
        for mid in gone:
            self.remove(mid)
        self._over_leaves.pop(session, None)
        code = self._code.get(session)
        if code is not None:
            rows = np.flatnonzero(self._alive & (self._session == code))
            gone += self._ids_of(rows)
            self._alive[rows] = False
            self._leaf[rows] = False
            self._n_alive -= len(rows)
        return gone

    # -- many rows -----------------------------------------------------------------------------

    def _ids_of(self, rows: Iterable[int]) -> list[str]:
        return [self._id(r) for r in rows]

    def ids_of_session(self, session: str) -> list[str]:
        """Ids of the session's rows, by seq."""
        code = self._code.get(session)
        rows = np.flatnonzero(self._alive & (self._session == code)) if code is not None else np.zeros(0, np.int64)
        pairs = [(int(self._seq[r]), self._id(int(r))) for r in rows.tolist()]
        pairs += [(v[0], m) for m, v in self._over.items() if v[2] == session]
        return [m for _, m in sorted(pairs)]

    def count(self, session: str | None = None) -> int:
        if session is None:
            return len(self)
        code = self._code.get(session)
        base = int(np.count_nonzero(self._alive & (self._session == code))) if code is not None else 0
        return base + sum(1 for v in self._over.values() if v[2] == session)

    def outline(self, session: str, inherited: frozenset[str], load: Any) -> list[tuple[str, str | None, str, int]]:
        """``(id, parent id, role, seq)`` of the rows of ``session`` and the ``inherited`` ids, by seq; ``load`` as
        for :meth:`role`."""
        code = self._code.get(session)
        mask = self._alive & (self._session == code) if code is not None else np.zeros(self._n, dtype=np.bool_)
        for row in (self._row(m) for m in inherited):
            if row >= 0:
                mask[row] = True
        rows = np.flatnonzero(mask).tolist()
        found: list[tuple[str, str | None, str, int]] = []
        if rows:
            codes, names = self._base_roles(load).data, self._role_names
            found = [(mid, self._parent_id(r), names[codes[r]], self._mv_seq[r])
                     for mid, r in zip(self._ids_of(rows), rows)]
        found += [(mid, parent, self._over_roles.get(mid, "?"), seq) for mid, (seq, parent, owner) in self._over.items()
                  if owner == session or mid in inherited]
        found.sort(key=lambda node: node[3])
        return found

    def newest_seqs(self) -> dict[str, int]:
        """Every session that has rows, with the seq of its newest row."""
        newest: dict[str, int] = {}
        rows = np.flatnonzero(self._alive)
        if len(rows):
            codes, seqs = self._session[rows], self._seq[rows]
            top = np.full(len(self._sessions), -1, dtype=np.int64)
            np.maximum.at(top, codes, seqs)
            newest = {self._sessions[c]: int(top[c]) for c in np.flatnonzero(top >= 0).tolist()}
        for seq, _, owner in self._over.values():
            if seq > newest.get(owner, -1):
                newest[owner] = seq
        return newest

    def children(self, mid: str) -> list[str]:
        """Ids of the rows whose parent id is ``mid``, any session, by seq."""
        found: list[tuple[int, str]] = []
        row = -1 if mid in self._over else self._row(mid)
        if row >= 0:
            kids = np.flatnonzero((self._parent == row) & self._alive)
            found += [(int(self._seq[k]), self._id(int(k))) for k in kids.tolist()]
        found += [(int(self._seq[r]), self._id(r)) for r, pid in self.detached.items()
                  if pid == mid and self._mv_alive[r]]
        for kid in self._over_children.get(mid, ()):
            entry = self._over.get(kid)
            if entry is not None and entry[1] == mid:
                found.append((entry[0], kid))
        return [m for _, m in sorted(set(found))]

    def walk(self, start: str, session: str, inherited: frozenset[str], max_depth: int, *, with_ids: bool = True
             ) -> tuple[list[str], list[int], bool]:
        """The path root -> ``start`` within what ``session`` sees, at most ``max_depth`` long.

        Returns:
            Its ids (empty with ``with_ids=False``, which saves making a string per row), its seqs, and whether a
            longer path was cut. A missing ancestor, or one the session does not see, ends the path.
        """
        ids: list[str | None] = []
        seqs: list[int] = []
        rows: list[int] = []
        code = self._code.get(session, -1)
        inherited_rows: set[int] = set()
        if inherited:
            if self._inherited is None or self._inherited[0] is not inherited:
                self._inherited = (inherited, {r for r in (self._row(m) for m in inherited) if r >= 0})
            inherited_rows = self._inherited[1]
        par, sess, alive, seq_of = self._mv_parent, self._mv_session, self._mv_alive, self._mv_seq
        over = self._over
        cur: str | None = start
        row = -1
        cut = False
        while True:
            if cur is not None:  # by id: overlay rows, or the way into the base
                entry = over.get(cur)
                if entry is not None:
                    if entry[2] != session and cur not in inherited:
                        break
                    if len(seqs) == max_depth:
                        cut = True
                        break
                    ids.append(cur)
                    seqs.append(entry[0])
                    rows.append(-1)
                    cur = entry[1]
                    continue
                row = self._row(cur)
                cur = None
                if row < 0:
                    break
            while row >= 0:  # through the base by row numbers
                if sess[row] != code and row not in inherited_rows:
                    row = -1
                    break
                if len(seqs) == max_depth:
                    cut = True
                    break
                ids.append(None)
                seqs.append(seq_of[row])
                rows.append(row)
                parent = par[row]
                if parent >= 0 and alive[parent]:
                    row = parent
                    continue
                cur = None if parent == -1 else (self.detached.get(row) if parent == -2 else self._id(parent))
                row = -1
            if cut or cur is None:
                break
        if not with_ids:
            seqs.reverse()
            return [], seqs, cut
        base = [r for r in rows if r >= 0]
        if base:
            names = iter(self._ids_of(base))
            ids = [next(names) if r >= 0 else i for i, r in zip(ids, rows)]
        ids.reverse()
        seqs.reverse()
        return ids, seqs, cut  # type: ignore[return-value]
