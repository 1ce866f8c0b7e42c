"""What the branch tree's front end fetches on request: pages of outline rows, messages, and two branches compared.

The outline of a tree of thousands of messages is never sent whole. The widget syncs its row count and a
``version``; the front end asks for the rows it is about to draw (:func:`page`), each with the flags it needs to
draw it (on the current path, on the selected path, a search hit, the compaction lanes crossing it), and asks
again when the version changes.

A row is ``{"id", "r" (role), "t" (short text), "x" (tool kind), "k" (children), "d" (depth)}`` plus, only when
true or non-empty, ``"c"`` (on the current path), ``"v"`` (on the selected path), ``"cl"`` (the current leaf),
``"sl"`` (the selected leaf), ``"si"`` (the clicked message), ``"h"`` (search rank, 1 best), ``"g"`` (lanes:
``[lane, caps, compaction]`` with caps 1 top, 2 bottom, 3 both) and ``"cs"`` (compactions starting here). A gap
is ``{"gap": [start, stop], "s", "d"}`` with the same ``"c"``, ``"v"`` and ``"g"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._layout import Plan, Row
from ._messages import parts_json

LANES = 4
"""Gutter lanes for compaction brackets (overlay ``n`` uses lane ``n % LANES``)."""


@dataclass(frozen=True)
class Cover:
    """The rows ``[start, stop)`` of one segment covered by compaction ``n``; ``first``/``last`` are the
    covered range's end rows when they fall in this segment, else -1."""

    n: int
    start: int
    stop: int
    first: int
    last: int


def covers_by_segment(pieces: Sequence[tuple[int, list[list[int]]]]) -> dict[int, list[Cover]]:
    """``segment -> covers`` from each compaction's ``(n, [[segment, start, stop], ...])``."""
    out: dict[int, list[Cover]] = {}
    for n, parts in pieces:
        for k, (segment, start, stop) in enumerate(parts):
            first = start if k == 0 else -1
            last = stop - 1 if k == len(parts) - 1 else -1
            out.setdefault(segment, []).append(Cover(n, start, stop, first, last))
    return out


@dataclass
class RowContext:
    """Everything a page needs besides the rows themselves (rebuilt with the plan or the selection)."""

    plan: Plan
    current: dict[int, int]  # segment -> rows [0, upto) on the current path
    selected: dict[int, int]
    covers: dict[int, list[Cover]]
    hits: dict[str, int]
    current_leaf: str | None
    selected_leaf: str | None
    selected_id: str | None


def _lanes(covers: Sequence[Cover], start: int, stop: int) -> tuple[list[list[int]], list[int]]:
    lanes, starts = [], []
    for cover in covers:
        if cover.stop <= start or cover.start >= stop:
            continue
        caps = (1 if start <= cover.first < stop else 0) | (2 if start <= cover.last < stop else 0)
        lanes.append([cover.n % LANES, caps, cover.n])
        if start <= cover.first < stop and stop - start == 1:
            starts.append(cover.n)
    return lanes, starts


def page(ctx: RowContext, rows: Sequence[Row], start: int, stop: int,
         texts: Callable[[Sequence[str]], dict[str, tuple[str, str]]]) -> list[dict[str, Any]]:
    """Rows ``[start, stop)`` of the outline as JSON (see the module docstring)."""
    plan = ctx.plan
    chosen = rows[max(0, start):max(0, stop)]
    found = texts([plan.segments[s].ids[a] for s, a, b in chosen if b < 0])
    out: list[dict[str, Any]] = []
    for s, a, b in chosen:
        depth = plan.segments[s].depth
        covers = ctx.covers.get(s, ())
        if b >= 0:
            item: dict[str, Any] = {"gap": [a, b], "s": s, "d": depth}
            lanes, _ = _lanes(covers, a, b)
        else:
            mid = plan.segments[s].ids[a]
            text, kind = found.get(mid, ("", ""))
            item = {"id": mid, "r": plan.role.get(mid, "?"), "t": text, "x": kind,
                    "k": len(plan.children.get(mid, ())), "d": depth}
            lanes, starts = _lanes(covers, a, a + 1)
            if starts:
                item["cs"] = starts
            for key, flag in (("cl", mid == ctx.current_leaf), ("sl", mid == ctx.selected_leaf),
                              ("si", mid == ctx.selected_id)):
                if flag:
                    item[key] = 1
            if mid in ctx.hits:
                item["h"] = ctx.hits[mid]
        if a < ctx.current.get(s, 0):
            item["c"] = 1
        if a < ctx.selected.get(s, 0):
            item["v"] = 1
        if lanes:
            item["g"] = lanes
        out.append(item)
    return out


def message_json(message: dict[str, Any], limit: int) -> dict[str, Any]:
    """A message for the side panel: id, role, typed parts cut to ``limit``, whether any was cut, and whether it
    is a compaction overlay."""
    parts, cut = parts_json(message, limit)
    return {"id": message.get("id"), "role": message.get("role", "?"), "parts": parts, "cut": cut,
            "compaction": str(message.get("id", "")).startswith("compaction_")}


def fork_of(path_a: Sequence[str], path_b: Sequence[str]) -> int:
    """How many messages two root-first paths share from the root."""
    n = min(len(path_a), len(path_b))
    k = 0
    while k < n and path_a[k] == path_b[k]:
        k += 1
    return k


def compare_sides(path_a: Sequence[str], path_b: Sequence[str], read: Callable[[Sequence[str]], list[Any]], *,
                  limit: int, offset: int = 0, text_limit: int = 600) -> dict[str, Any]:
    """Two branches side by side from their fork point: the last shared message and each side's messages after it.

    Args:
        path_a, path_b: Root-first ids of the two branches.
        read: Reads stored messages by id.
        limit: Messages of each side to return, from ``offset`` after the fork point.
    """
    shared = fork_of(path_a, path_b)
    fork = path_a[shared - 1] if shared else None
    sides = {}
    for name, path in (("a", path_a), ("b", path_b)):
        after = path[shared:]
        ids = after[offset:offset + limit]
        messages = {m["id"]: m for m in read(ids)}
        sides[name] = {"leaf": path[-1] if path else None, "total": len(after), "offset": offset,
                       "messages": [message_json(messages[i], text_limit) for i in ids if i in messages]}
    found = read([fork]) if fork is not None else []
    fork_message = found[0] if found else None
    return {"fork": message_json(fork_message, text_limit) if fork_message else None, "shared": shared, **sides}
