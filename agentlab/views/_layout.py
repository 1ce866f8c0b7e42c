"""The compact drawing plan of a message tree, as small JSON, for :class:`~agentlab.views.BranchTree`.

A conversation tree of 10,000 messages is mostly long linear runs with a few branch points. The plan
cuts the tree into *segments*: maximal runs in which every message but the last has exactly one child.
A segment ends at a leaf or at a branch point, whose children each start a new segment. At each branch
point one child is the *continuation* (the one on the way to the preferred leaf, usually the current
one; else the biggest subtree): it keeps the branch point's depth and comes last, after the other
children, which are indented one level. Segments come in that depth-first order, so drawing them top
to bottom, indented by ``depth``, reads the main conversation straight down with its alternatives
nested where they branch off.

Only a few rows of a long segment are drawn: its head, its tail, and *pinned* rows (the ends of
compaction overlays, the selection, search hits, rows the user revealed); the rest are gaps the front end
expands on request. :func:`choose_rows` flattens the result into the outline's rows, in drawing order.

Invariants:

* Every visible message is in exactly one segment; ``pos[id] = (segment, index)`` inverts that.
* Segment ``s`` (other than a root segment) starts at a child of the last message of segment
  ``parent(s)``.
* Work is linear in the number of messages and never recursive (paths can be 100,000 deep).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Segment:
    """One linear run of the tree."""

    ids: list[str]
    parent: int  # index of the parent segment, -1 for a root segment
    depth: int


@dataclass
class Plan:
    """A tree cut into segments, with the lookups the widget needs."""

    segments: list[Segment]
    pos: dict[str, tuple[int, int]]
    children: dict[str, list[str]]
    seq: dict[str, int]
    role: dict[str, str]
    branch_points: int = 0
    leaves: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.pos)

    def newest_leaf_under(self, message_id: str) -> str:
        """The newest (by seq) leaf in the subtree of ``message_id`` (itself if it is a leaf)."""
        best, best_seq = message_id, self.seq.get(message_id, -1)
        stack = [message_id]
        while stack:
            node = stack.pop()
            kids = self.children.get(node)
            if kids:
                stack.extend(kids)
            elif self.seq.get(node, -1) >= best_seq:
                best, best_seq = node, self.seq.get(node, -1)
        return best

    def path_marks(self, leaf: str | None) -> list[list[int]]:
        """``[[segment, upto], ...]``: the path root -> ``leaf`` covers rows ``[0, upto)`` of each segment."""
        if leaf is None or leaf not in self.pos:
            return []
        seg, index = self.pos[leaf]
        marks = [[seg, index + 1]]
        seg = self.segments[seg].parent
        while seg >= 0:
            marks.append([seg, len(self.segments[seg].ids)])
            seg = self.segments[seg].parent
        marks.reverse()
        return marks

    def cover(self, from_id: str, to_id: str) -> list[list[int]] | None:
        """Rows covered by an overlay ``from_id .. to_id`` as ``[[segment, start, stop], ...]`` (stop
        exclusive), or None when ``from_id`` is not an ancestor-or-self of ``to_id`` here."""
        if from_id not in self.pos or to_id not in self.pos:
            return None
        pieces: list[list[int]] = []
        seg, index = self.pos[to_id]
        target_seg, target_index = self.pos[from_id]
        stop = index + 1
        while seg >= 0:
            if seg == target_seg:
                if target_index >= stop:
                    return None
                pieces.append([seg, target_index, stop])
                pieces.reverse()
                return pieces
            pieces.append([seg, 0, stop])
            seg = self.segments[seg].parent
            stop = len(self.segments[seg].ids) if seg >= 0 else 0
        return None


def build_plan(nodes: Iterable[tuple[str, str | None, str, int]], prefer: str | None = None) -> Plan:
    """Cut a tree into segments.

    Args:
        nodes: ``(id, parent_id, role, seq)`` for every visible message, in any order. A parent that
            is not among the nodes makes its child a root (as after deleting an interior message).
        prefer: A leaf whose path is drawn as the continuation at every branch point on it.
    """
    rows = sorted(nodes, key=lambda row: row[3])
    seq = {row[0]: row[3] for row in rows}
    role = {row[0]: row[2] for row in rows}
    parent_of: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for mid, parent, _role, _seq in rows:
        if parent is not None and parent in seq:
            children.setdefault(parent, []).append(mid)
            parent_of[mid] = parent
        else:
            roots.append(mid)
            parent_of[mid] = None
    # Subtree sizes, from a pre-order walked backwards (children before parents, no recursion).
    order: list[str] = []
    walk = list(roots)
    while walk:
        node = walk.pop()
        order.append(node)
        walk.extend(children.get(node, ()))
    size: dict[str, int] = {}
    for node in reversed(order):
        size[node] = 1 + sum(size[kid] for kid in children.get(node, ()))
    on_path: set[str] = set()
    cur = prefer if prefer in seq else None
    while cur is not None:
        on_path.add(cur)
        cur = parent_of[cur]

    segments: list[Segment] = []
    pos: dict[str, tuple[int, int]] = {}
    leaves: list[str] = []
    branch_points = 0
    stack: list[tuple[str, int, int]] = [(root, -1, 0) for root in reversed(roots)]
    while stack:
        start, parent_seg, depth = stack.pop()
        index = len(segments)
        ids = [start]
        pos[start] = (index, 0)
        cur = start
        kids = children.get(cur, ())
        while len(kids) == 1:
            cur = kids[0]
            pos[cur] = (index, len(ids))
            ids.append(cur)
            kids = children.get(cur, ())
        segments.append(Segment(ids, parent_seg, depth))
        if not kids:
            leaves.append(cur)
            continue
        branch_points += 1
        main = next((kid for kid in kids if kid in on_path), None)
        if main is None:
            main = max(kids, key=size.__getitem__)  # ties: the oldest child
        # Popped in reverse: the alternatives first (indented), the continuation last (same depth).
        stack.append((main, index, depth))
        stack.extend((kid, index, depth + 1) for kid in reversed(kids) if kid != main)
    return Plan(segments, pos, children, seq, role, branch_points, leaves)


def shown_indices(length: int, pinned: Iterable[int], *, head: int, tail: int, collapse_over: int) -> list[int]:
    """Which rows of a segment of ``length`` rows to draw (sorted): all of a short one, else head, tail
    and pinned rows; a gap of a single row is drawn instead of being hidden."""
    if length <= collapse_over:
        return list(range(length))
    chosen = set(range(min(head, length))) | set(range(max(0, length - tail), length))
    chosen |= {i for i in pinned if 0 <= i < length}
    ordered = sorted(chosen)
    filled: list[int] = []
    for i in ordered:
        if filled and i - filled[-1] == 2:
            filled.append(i - 1)
        filled.append(i)
    return filled


Row = tuple[int, int, int]
"""An outline row: ``(segment, index, -1)`` for a message, ``(segment, start, stop)`` for a collapsed gap."""


def choose_rows(plan: Plan, pinned: dict[int, set[int]], *, head: int = 3, tail: int = 3,
                collapse_over: int = 12) -> list[Row]:
    """The outline's rows in drawing order: every segment's drawn messages (:func:`shown_indices`) and its gaps.

    Args:
        plan: From :func:`build_plan`.
        pinned: Rows to draw whatever the collapsing, per segment.
    """
    rows: list[Row] = []
    for s, seg in enumerate(plan.segments):
        previous = -1
        for i in shown_indices(len(seg.ids), pinned.get(s, ()), head=head, tail=tail, collapse_over=collapse_over):
            if i - previous > 1:
                rows.append((s, previous + 1, i))
            rows.append((s, i, -1))
            previous = i
        if previous < len(seg.ids) - 1:
            rows.append((s, previous + 1, len(seg.ids)))
    return rows


def segments_json(plan: Plan, rows: Sequence[Row], texts: Callable[[Sequence[str]], dict[str, str]],
                  limit: int | None = None) -> list[dict[str, Any]]:
    """The outline grouped by segment, with texts: ``{"s", "p", "d", "n", "items"}``, items being
    ``{"i", "id", "r", "t", "k"}`` rows or ``{"gap": [start, stop]}`` (for tests and the static HTML).

    Args:
        limit: Only the first ``limit`` segments.
    """
    segments = plan.segments
    wanted = [segments[s].ids[i] for s, i, stop in rows if stop < 0 and (limit is None or s < limit)]
    found = texts(wanted)
    out: list[dict[str, Any]] = []
    for s, a, b in rows:
        if limit is not None and s >= limit:
            break
        if not out or out[-1]["s"] != s:
            seg = segments[s]
            out.append({"s": s, "p": seg.parent, "d": seg.depth, "n": len(seg.ids), "items": []})
        if b >= 0:
            out[-1]["items"].append({"gap": [a, b]})
        else:
            mid = segments[s].ids[a]
            out[-1]["items"].append({"i": a, "id": mid, "r": plan.role.get(mid, "?"), "t": found.get(mid, ""),
                                     "k": len(plan.children.get(mid, ()))})
    return out
