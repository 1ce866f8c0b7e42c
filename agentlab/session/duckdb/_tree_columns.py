"""Tree columns for :mod:`agentlab.frames`: depth, branches, leaves and compaction coverage from parent pointers.

DuckDB walks recursive CTEs slowly, so the tree columns are computed in numpy from the ``parent_id`` column of
the frame's own query: depths and path sums by pointer jumping (O(n log depth), vectorised), the current branch by
one walk up from the session's latest leaf, and overlays by upstream's overlay rule (the newest overlay starting
at a message whose end is on the path wins) applied to positions on a path.

A *branch* continues from a message through its oldest child (by seq) and ends at a leaf; its id is the id of its
first message (a root, or a younger sibling). So there is one branch per leaf, and appending a sibling never
changes an existing message's branch id.

Invariants: nothing here writes; a :class:`View` is read under the store lock, so its rows, the session's latest
leaf and its overlays come from one database state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from agentlab.context import estimate_string_tokens
from agentlab.session._messages import DEFAULT_MAX_DEPTH


def _jump(parent: Any, values: Any, combine: Any) -> Any:
    """Aggregate ``values`` from the root down to each row by pointer jumping: O(n log depth), in numpy."""
    import numpy as np

    acc, up = values.copy(), parent.copy()
    for _ in range(64):  # 2**64 exceeds any depth; the cap only guards against a corrupt cycle
        live = up >= 0
        if not live.any():
            break
        target = np.where(live, up, 0)
        acc = np.where(live, combine(acc, acc[target]), acc)
        up = np.where(live, up[target], -1)
    return acc


class Shape:
    """Tree columns of message rows given in seq order.

    Attributes:
        id_array: The ids (a pyarrow string array).
        parent: Row of each row's parent, -1 for a root (a missing or invisible parent makes a root).
        depth: Edges from the root.
        branch: Row of the first message of each row's branch.
        is_leaf: No visible child.
    """

    def __init__(self, ids: Any, parent_ids: Any) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        self.id_array = ids if isinstance(ids, pa.Array) else pa.array(ids, pa.string())
        n = len(self.id_array)
        parent = pc.index_in(parent_ids, value_set=self.id_array).fill_null(-1).to_numpy(zero_copy_only=False)
        parent = parent.astype(np.int64)
        index = np.arange(n, dtype=np.int64)
        parent[parent == index] = -1
        has_parent = parent >= 0
        children = np.flatnonzero(has_parent)
        first = np.full(n, -1, dtype=np.int64)
        if children.size:
            owners, where = np.unique(parent[children], return_index=True)
            first[owners] = children[where]  # rows are in seq order: the first one seen is the oldest child
        is_first = has_parent & (first[np.where(has_parent, parent, 0)] == index)
        top = np.where(is_first, parent, index)
        for _ in range(64):  # follow oldest-child links up to the branch start, doubling each round
            step = top[top]
            if np.array_equal(step, top):
                break
            top = step
        self.parent, self.branch, self.is_leaf = parent, top, first < 0
        self.depth = _jump(parent, has_parent.astype(np.int64), np.add)

    def __len__(self) -> int:
        return len(self.parent)

    @cached_property
    def ids(self) -> list[str]:
        return self.id_array.to_pylist()

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {m: i for i, m in enumerate(self.ids)}

    def prefix_sum(self, values: Any) -> Any:
        """Sum of ``values`` along each row's path, root to the row inclusive."""
        import numpy as np

        return _jump(self.parent, np.asarray(values, dtype=np.int64), np.add)

    def prefix_max(self, values: Any) -> Any:
        """Maximum of ``values`` along each row's path."""
        import numpy as np

        return _jump(self.parent, np.asarray(values), np.maximum)

    def path(self, row: int, max_depth: int | None = None) -> list[int]:
        """Rows from the root (or the cut, for a path longer than ``max_depth``) to ``row``."""
        parent = self._parent_list
        limit = len(parent) if max_depth is None else min(max_depth, len(parent))
        out: list[int] = []
        append = out.append
        while row >= 0 and limit:
            append(row)
            row = parent[row]
            limit -= 1
        out.reverse()
        return out

    @cached_property
    def _parent_list(self) -> list[int]:
        return self.parent.tolist()

    def euler(self) -> tuple[Any, Any]:
        """Entry and exit times of a depth-first walk: ``a`` is an ancestor-or-self of ``x`` iff
        ``tin[a] <= tin[x] < tout[a]``."""
        import numpy as np

        n = len(self.parent)
        order = np.argsort(self.parent, kind="stable")
        sorted_parent = self.parent[order]
        lo = np.searchsorted(sorted_parent, np.arange(n), "left").tolist()
        hi = np.searchsorted(sorted_parent, np.arange(n), "right").tolist()
        kids = order.tolist()
        tin, tout = [0] * n, [0] * n
        stack = kids[:int(np.searchsorted(sorted_parent, 0, "left"))][::-1]  # the roots
        clock = 0
        while stack:
            v = stack.pop()
            if v < 0:  # ~v: leaving v's subtree
                tout[~v] = clock
                continue
            tin[v] = clock
            clock += 1
            stack.append(~v)
            stack.extend(reversed(kids[lo[v]:hi[v]]))
        return np.array(tin, dtype=np.int64), np.array(tout, dtype=np.int64)


@dataclass(frozen=True)
class Applied:
    """An overlay applied on a path: it replaces the rows at positions ``first..last`` of that path."""

    id: str
    first: int
    last: int
    seq: int
    summary: str


def apply_on_path(path: Sequence[int], overlays: Sequence[Any], row_of: dict[str, int]) -> list[Applied]:
    """The overlays that apply on one root-to-leaf path, by upstream's overlay rule.

    At each message the newest overlay (by seq) starting there whose ``to`` lies at or after it on the path wins,
    and the walk resumes after its ``to``; overlays starting inside a replaced range are ignored.

    Args:
        path: Rows, root first.
        overlays: Records with ``id``, ``seq``, ``summary``, ``from_message_id`` and ``to_message_id``.
        row_of: Message id -> row.

    Returns:
        The applied overlays, root side first, with positions on ``path``.
    """
    position = {row: i for i, row in enumerate(path)}
    best: dict[int, tuple[int, Any]] = {}
    for c in overlays:
        start = position.get(row_of.get(c.from_message_id, -2))
        end = position.get(row_of.get(c.to_message_id, -2))
        if start is None or end is None or end < start:
            continue
        if start not in best or c.seq >= best[start][1].seq:
            best[start] = (end, c)
    out: list[Applied] = []
    cursor = -1
    for start in sorted(best):
        if start > cursor:
            end, c = best[start]
            out.append(Applied(c.id, start, end, c.seq, c.summary))
            cursor = end
    return out


def overlay_tokens(summary: str) -> int:
    """Tokens of the message an overlay reads back as: 4 per message plus the summary's text."""
    return 4 + estimate_string_tokens(summary)


# --- which rows a frame reads ----------------------------------------------------------------------------------


def scope(target: Any) -> tuple[Any, Any, str | None]:
    """(store, message tree, session id, or None for every session) of a Session, an Agent or a Store."""
    from agentlab.session.duckdb._tree import (
        tree_of,  # here, so that importing the Agent class does not load the tree module
    )

    session_id = getattr(target, "session_id", None)
    store = getattr(target, "store", target)
    if store is None:
        from agentlab.errors import SessionError

        raise SessionError(f"Frames read an agent's DuckDB file, and this session keeps its messages in "
                           f"{type(getattr(target, 'storage', None)).__name__}; use session.get_history() instead.")
    return store, tree_of(store), session_id if isinstance(session_id, str) else None


def where(tree: Any, session_id: str | None) -> tuple[str, list[Any]]:
    """SQL condition and parameters selecting a session's rows (its own, plus a fork's shared path)."""
    if session_id is None:
        return "true", []
    shared = sorted(tree.inherited_ids(session_id))
    if not shared:
        return "session_id = ?", [session_id]
    return "(session_id = ? OR id IN (SELECT unnest(?::VARCHAR[])))", [session_id, shared]


def _in_seq_order(table: Any) -> Any:
    # A scan returns rows in insertion order, which is seq order unless rows were written out of order.
    import numpy as np

    seq = table.column("seq").to_numpy()
    if len(seq) > 1 and not bool(np.all(seq[1:] > seq[:-1])):
        table = table.take(np.argsort(seq, kind="stable"))
    return table


class View:
    """The rows of one scope, read with one query under the store lock, split into per-session :class:`Part`\\ s.

    Args:
        target: A Session, Agent or Store.
        sql: Query template with a ``{where}`` placeholder; its result must hold ``session_id``, ``seq``, ``id``
            and ``parent_id`` (it is put in seq order here).
        finish: Optional ``finish(store, table) -> table``, run under the same lock (e.g. to add token columns).
    """

    def __init__(self, target: Any, sql: str, finish: Any = None) -> None:
        store, tree, sid = scope(target)
        self.session_id = sid
        max_depth = getattr(target, "max_depth", DEFAULT_MAX_DEPTH)
        with store.lock:  # one database state for the rows, the leaves and the overlays
            condition, params = where(tree, sid)
            table = _in_seq_order(store.relation(sql.replace("{where}", condition), params).to_arrow_table())
            sessions = [sid] if sid is not None else sorted(set(table.column("session_id").to_pylist()))
            self.latest = {s: tree.latest_leaf_id(s) for s in sessions}
            self.overlays = {s: tree.compactions(s) for s in sessions}
            self.inherited = {s: tree.inherited_ids(s) for s in sessions}
            self.table = finish(store, table) if finish is not None else table
        self.parts = [Part(self, s, max_depth) for s in sessions]

    def rows_of(self, sid: str) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.session_id is not None:
            return np.arange(self.table.num_rows, dtype=np.int64)
        mine = pc.equal(self.table.column("session_id"), sid)
        shared = self.inherited[sid]
        if shared:
            mine = pc.or_(mine, pc.is_in(self.table.column("id"), value_set=pa.array(sorted(shared), pa.string())))
        return np.flatnonzero(mine.to_numpy(zero_copy_only=False))


class Part:
    """One session's rows of a :class:`View` (``rows`` index the view's table) with their tree columns."""

    def __init__(self, view: View, sid: str, max_depth: int) -> None:
        import numpy as np
        import pyarrow.compute as pc

        self.session_id = sid
        self.rows = view.rows_of(sid)
        table = view.table if len(self.rows) == view.table.num_rows else view.table.take(self.rows)
        self.table = table
        self.shape = Shape(table.column("id"), table.column("parent_id"))
        self.owned = pc.equal(table.column("session_id"), sid).to_numpy(zero_copy_only=False)
        self.overlays = view.overlays[sid]
        latest = view.latest[sid]
        leaf = int(pc.index(table.column("id"), latest).as_py()) if latest is not None else -1
        self.current_path = self.shape.path(leaf, max_depth) if leaf >= 0 else []
        self.on_current = np.zeros(len(self.rows), dtype=bool)
        self.on_current[self.current_path] = True
        self.current_leaf = self.current_path[-1] if self.current_path else -1

    def leaves(self) -> list[int]:
        import numpy as np

        return np.flatnonzero(self.shape.is_leaf).tolist()

    def leaf_path(self, leaf: int) -> list[int]:
        return self.current_path if leaf == self.current_leaf else self.shape.path(leaf)

    def applied(self, leaf: int) -> list[Applied]:
        """Overlays applied on the path to ``leaf`` (positions index :meth:`leaf_path`)."""
        if not self.overlays or leaf < 0:
            return []
        return apply_on_path(self.leaf_path(leaf), self.overlays, self.shape.row_of)

    def coverage(self) -> list[str | None]:
        """Per row, the overlay replacing it: on the current branch as the session reads it, elsewhere along
        the row's own branch (to that branch's leaf)."""
        out: list[str | None] = [None] * len(self.rows)
        if not self.overlays:
            return out
        for leaf in [self.current_leaf] + [x for x in self.leaves() if not self.on_current[x]]:
            path = self.leaf_path(leaf)
            for a in self.applied(leaf):
                for row in path[a.first:a.last + 1]:
                    if leaf == self.current_leaf or (not self.on_current[row]
                                                     and self.shape.branch[row] == self.shape.branch[leaf]):
                        out[row] = a.id
        return out

    def replay(self) -> list[tuple[int, str, str | None, str | None, int, int | None]]:
        """The history estimate after every append and every compaction, in seq order.

        After an append: the path to the new message, read through the overlays stored before it. After a
        compaction: the path to its leaf (else its last message) with the overlays up to and including it.

        Returns:
            ``(seq, kind, message id, compaction id, appends so far, history tokens)`` per event; the tokens
            are None for a compaction whose leaf is no longer stored.
        """
        shape = self.shape
        local, ids = shape.row_of, shape.ids
        tok = self.table.column("tokens").to_numpy()
        cum, (tin, tout) = shape.prefix_sum(tok).tolist(), shape.euler()
        tin, tout, depth, tok = tin.tolist(), tout.tolist(), shape.depth.tolist(), tok.tolist()
        events: list[tuple[int, int, Any]] = [(seq, row, None) for row, seq in
                                              enumerate(self.table.column("seq").to_pylist())]
        events += [(c.seq, local.get(c.leaf_id or "", local.get(c.to_message_id, -1)), c) for c in self.overlays]
        events.sort(key=lambda e: e[0])
        active: list[tuple[int, int, int, str]] = []  # (from row, to row, seq, summary) of stored overlays
        out: list[tuple[int, str, str | None, str | None, int, int | None]] = []
        appends = 0
        for seq, at, record in events:
            if record is None:
                appends += 1
            else:
                start, end = local.get(record.from_message_id, -1), local.get(record.to_message_id, -1)
                if start >= 0 and end >= 0 and depth[end] >= depth[start]:
                    active.append((start, end, record.seq, record.summary))
            if at < 0:
                out.append((seq, "compaction", None, record.id, appends, None))
                continue
            # Overlays whose both ends are ancestors of `at` apply to its path: newest per start wins, and
            # one starting inside a range already replaced is skipped.
            best: dict[int, tuple[int, int, str]] = {}
            for start, end, oseq, summary in active:
                if tin[start] <= tin[at] < tout[start] and tin[end] <= tin[at] < tout[end] and (
                        start not in best or oseq >= best[start][1]):
                    best[start] = (end, oseq, summary)
            saved, cursor = 0, -1
            for start in sorted(best, key=depth.__getitem__):
                if depth[start] > cursor:
                    end, _, summary = best[start]
                    saved += cum[end] - cum[start] + tok[start] - overlay_tokens(summary)
                    cursor = depth[end]
            out.append((seq, "append" if record is None else "compaction", ids[at],
                        None if record is None else record.id, appends, int(cum[at] - saved)))
        return out
