"""BranchTree: a session's message tree, live, with search, branch comparison, compactions and selection.

The widget subscribes to the session's events (``session.subscribe``), so appends, edits, deletes and
compactions made from any cell or thread redraw it. Only small state travels as traitlets: the number of
outline rows and a ``version``, the current and selected leaves, the compaction list and the search hits.
The outline's rows, message texts, a branch's path and two compared branches are fetched on request
(:mod:`agentlab.views._tree_rows`), so a tree of thousands of messages costs the browser only the rows in
view. Long linear runs are collapsed into a gap with a count (see :mod:`agentlab.views._layout`).

Selection: clicking a message selects its branch. ``selected_id`` is the message clicked and
``selected_leaf`` the newest leaf below it (the message itself if it is a leaf), so a notebook can
continue the conversation with ``session.append_message(msg, parent_id=tree.selected_leaf)``.
Until something is selected, and again after ``select(None)``, the selection follows the current
leaf.

Search uses the session's own BM25 search (:meth:`~agentlab.session.Session.search`, mode ``"all"`` by
default); hits are drawn even inside collapsed runs, ranked, and searched again after every change.

Invariants:

* The plan is rebuilt from the database (never patched), under the store's lock, so what is drawn
  is a state the file actually had. Short texts are cached by id and dropped on any edit or delete.
* ``version`` changes whenever any row could have changed; rows fetched for an older version are dropped.
* A tree of up to :data:`SYNC_LIMIT` messages is rebuilt inside the event (it is drawn as soon as
  the write returns); larger ones are rebuilt on a timer that coalesces a burst of events, so a loop
  of appends to a 10,000-message tree is not slowed down by its widget.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import traitlets as t

from ._base import STATIC, RequestWidget, esc
from ._layout import Plan, Row, build_plan, choose_rows, segments_json
from ._messages import short_text, tool_kind
from ._tree_rows import RowContext, compare_sides, covers_by_segment, message_json, page

SYNC_LIMIT = 2_000
"""Trees up to this many messages are rebuilt inside the session event; larger ones on a timer."""

EXPAND_STEP = 500
"""Rows revealed by one click on a collapsed run."""

FIRST_PAGE = 100
"""Rows sent with the widget itself, so that its first paint needs no request (later pages are fetched)."""

PAGE_LIMIT = 500
"""Most outline rows one request returns."""

SEARCH_LIMIT = 100
"""Most search hits kept and highlighted."""

PANEL_TEXT = 600
"""Characters of each part shown in the side panel before "show all" fetches the rest."""

FULL_TEXT = 1_000_000
"""Characters of each part sent by "show all" (a part longer than this says so)."""


class BranchTree(RequestWidget):
    """The message tree of a session as an outline (roles, short text, tool calls, branch points, current leaf,
    compaction brackets, search hits), with a side panel: the selected branch, two branches compared, the
    compactions.

    Args:
        session: The :class:`~agentlab.session.Session` to show.
        collapse_over: Linear runs longer than this are drawn as head, tail and a counted gap.

    Synced traits: ``row_count`` and ``version`` (the outline's rows are fetched on request; ``first_page``
    holds the first rows of the version the widget was built with, for its first paint),
    ``compactions`` (range, summary, tokens before and after, row), ``current_leaf``, ``selected_id``,
    ``selected_leaf``, ``current_row`` and ``selected_row`` (-1: not drawn), ``search`` (query, mode and ranked
    hits with their rows and snippets), ``comparison`` (the two leaves compared), ``stats`` and ``error``.
    """

    _esm = STATIC / "branch_tree.js"
    _css = STATIC / "branch_tree.css"
    _requests = ("rows", "select", "path", "expand", "message", "search", "compare", "compare_at", "reveal",
                 "compaction")

    row_count = t.Int(0).tag(sync=True)
    version = t.Int(0).tag(sync=True)
    compactions: t.List[Any] = t.List().tag(sync=True)
    marks = t.Dict()  # not synced: each fetched row carries its own flags
    current_leaf = t.Unicode(None, allow_none=True).tag(sync=True)
    selected_id = t.Unicode(None, allow_none=True).tag(sync=True)
    selected_leaf = t.Unicode(None, allow_none=True).tag(sync=True)
    current_row = t.Int(-1).tag(sync=True)
    selected_row = t.Int(-1).tag(sync=True)
    search = t.Dict().tag(sync=True)
    comparison = t.Dict().tag(sync=True)
    stats = t.Dict().tag(sync=True)
    first_page = t.Unicode("").tag(sync=True)  # set once: the rows a fresh view draws first, without a round trip

    def __init__(self, session: Any, *, collapse_over: int = 12, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.collapse_over = max(3, int(collapse_over))
        self._plan: Plan | None = None
        self._rows: list[Row] = []
        self._row_of: dict[str, int] = {}
        self._ctx: RowContext | None = None
        self._texts: dict[str, tuple[str, str]] = {}
        self._revealed: set[str] = set()
        self._follow = True
        self._selected: str | None = None
        self._query: tuple[str, str] | None = None
        self._flag_lock = threading.Lock()  # guards the timer fields only; never held while reading
        self._timer: threading.Timer | None = None
        self._build_ms = 0.0
        self._changes = 0  # session events seen: the front end fetches the selected path again when it moves
        self.refresh()
        self.first_page = json.dumps(self._request_rows(0, FIRST_PAGE), ensure_ascii=False, separators=(",", ":"))
        self._unsubscribe = session.subscribe(self._on_event)

    def __repr__(self) -> str:
        return f"<BranchTree of session {self.session.session_id!r}: {self.stats.get('messages', 0)} messages>"

    # -- building -----------------------------------------------------------------------------

    def _nodes(self) -> list[tuple[str, str | None, str, int]]:
        from agentlab.errors import SessionError
        from agentlab.session import OutlineStorage

        storage = self.session.storage
        if not isinstance(storage, OutlineStorage):
            raise SessionError(f"{type(storage).__name__} cannot list its tree (it has no nodes() method), so the "
                               "branch tree cannot draw it; use the DuckDB or the in-memory session storage.")
        return storage.nodes()

    def _short_texts(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        missing = [m for m in ids if m not in self._texts]
        if missing:
            for message in self.session.storage.read(missing):
                self._texts[message["id"]] = (short_text(message), tool_kind(message))
        return {m: self._texts.get(m, ("", "")) for m in ids}

    @property
    def segments(self) -> list[dict[str, Any]]:
        """The drawn outline grouped by segment, with short texts (what the static HTML shows)."""
        plan = self._plan
        if plan is None:
            return []
        return segments_json(plan, self._rows, lambda ids: {m: v[0] for m, v in self._short_texts(ids).items()})

    def _hits(self, plan: Plan) -> list[Any]:
        if self._query is None:
            return []
        query, mode = self._query
        return [h for h in self.session.search(query, mode=mode, limit=SEARCH_LIMIT) if h.id in plan.pos]

    def refresh(self) -> None:
        """Rebuild the plan from the database and publish it (also called by session events)."""
        started = time.perf_counter()
        session = self.session
        with session.storage.lock:
            current = session.latest_leaf_id()
            plan = build_plan(self._nodes(), prefer=current)
            pinned: dict[int, set[int]] = {}

            def pin(mid: str | None) -> None:
                if mid is not None and mid in plan.pos:
                    seg, index = plan.pos[mid]
                    pinned.setdefault(seg, set()).add(index)

            pieces, overlays = [], []
            for number, record in enumerate(session.get_compactions()):
                covered = plan.cover(record.from_message_id, record.to_message_id) or []
                pieces.append((number, covered))
                pin(record.from_message_id)
                pin(record.to_message_id)
                overlays.append({
                    "n": number, "id": record.id, "from": record.from_message_id, "to": record.to_message_id,
                    "summary": record.summary[:400], "summary_chars": len(record.summary),
                    "count": sum(p[2] - p[1] for p in covered), "trigger": record.trigger,
                    "tokens_before": record.tokens_before, "tokens_after": record.tokens_after,
                })
            self._revealed &= plan.pos.keys()
            for mid in self._revealed:
                pin(mid)
            if self._selected is not None and self._selected not in plan.pos:
                self._follow, self._selected = True, None  # the selected message was deleted
            if self._follow or self._selected is None:
                selected_id, selected_leaf = current, current
            else:
                selected_id = self._selected
                selected_leaf = plan.newest_leaf_under(selected_id)
            pin(selected_id)
            hits = self._hits(plan)
            for hit in hits:
                pin(hit.id)
            rows = choose_rows(plan, pinned, collapse_over=self.collapse_over)
            segments = plan.segments
            row_of = {segments[s].ids[a]: k for k, (s, a, b) in enumerate(rows) if b < 0}
            marks = {"current": plan.path_marks(current), "selected": plan.path_marks(selected_leaf)}
            self._ctx = RowContext(plan, {int(seg): int(upto) for seg, upto in marks["current"]},
                                   {int(seg): int(upto) for seg, upto in marks["selected"]},
                                   covers_by_segment(pieces), {h.id: k + 1 for k, h in enumerate(hits)},
                                   current, selected_leaf, selected_id)
            self._plan, self._rows, self._row_of = plan, rows, row_of
            for overlay in overlays:
                overlay["row"] = row_of.get(overlay["from"], -1)
            self._build_ms = (time.perf_counter() - started) * 1000
            with self.hold_sync():
                self.row_count = len(rows)
                self.version += 1
                self.compactions = overlays
                self.marks = marks
                self.current_leaf, self.selected_id, self.selected_leaf = current, selected_id, selected_leaf
                self.current_row = row_of.get(current, -1) if current else -1
                self.selected_row = row_of.get(selected_id, -1) if selected_id else -1
                if self._query is not None:
                    self.search = {"query": self._query[0], "mode": self._query[1], "hits": [
                        {"id": h.id, "row": row_of.get(h.id, -1), "role": h.role, "snippet": h.snippet[:160]}
                        for h in hits]}
                self.stats = {
                    "session": session.session_id, "messages": plan.size, "segments": len(segments),
                    "rows": len(rows), "branch_points": plan.branch_points, "leaves": len(plan.leaves),
                    "compactions": len(overlays), "build_ms": round(self._build_ms, 1), "changes": self._changes,
                }

    # -- live updates -------------------------------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "appended" and not event.get("new_ids"):
            return  # a duplicate id changed nothing
        if kind not in ("appended", "updated", "deleted", "cleared", "compacted"):
            return
        if kind != "appended":
            self._texts.clear()
        self._changes += 1
        self.schedule_refresh()

    def notice_change(self) -> None:
        """Redraw after a change this widget's session object did not announce (a write through another
        :class:`Session` object of the same agent): forget cached texts and refresh."""
        self._texts.clear()
        self._changes += 1
        self.schedule_refresh()

    def schedule_refresh(self) -> None:
        """Refresh now for a tree of up to :data:`SYNC_LIMIT` messages, else soon on a timer (coalescing bursts)."""
        plan = self._plan
        if plan is None or plan.size <= SYNC_LIMIT:
            self.refresh()
            return
        with self._flag_lock:
            if self._timer is not None:
                return  # a refresh is already on its way and will see this change too
            self._timer = threading.Timer(max(0.05, 2 * self._build_ms / 1000), self._timed_refresh)
            self._timer.daemon = True
            self._timer.start()

    def _timed_refresh(self) -> None:
        with self._flag_lock:
            self._timer = None
        try:
            self.refresh()
        except Exception as exc:  # a background refresh must not die silently
            self.error = f"Refreshing the tree failed: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Stop listening to the session and close the widget."""
        if hasattr(self, "_unsubscribe"):  # absent when the constructor failed
            self._unsubscribe()
            with self._flag_lock:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        super().close()

    # -- Python API -----------------------------------------------------------------------------

    def _known(self, message_id: str) -> Plan:
        from agentlab.errors import UnknownMessageError

        plan = self._plan
        if plan is None or message_id not in plan.pos:
            self.refresh()  # it may have been appended a moment ago
            plan = self._plan
            if plan is None or message_id not in plan.pos:
                raise UnknownMessageError(message_id)
        return plan

    def select(self, message_id: str | None) -> str | None:
        """Select the branch through ``message_id`` (None: follow the current leaf again).

        Returns:
            The selected leaf: the newest leaf at or below ``message_id``.

        Raises:
            UnknownMessageError: The session has no such message.
        """
        with self.session.storage.lock:
            if message_id is not None:
                self._known(message_id)
            self._follow = message_id is None
            self._selected = message_id
            self.refresh()
            return self.selected_leaf

    def path(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The messages of the selected branch (or of ``leaf_id``), overlays applied, root first."""
        return self.session.get_history(leaf_id or self.selected_leaf)

    def find(self, query: str | None, mode: str = "all") -> list[str]:
        """Highlight the messages the session's search finds for ``query`` (None or blank: stop searching).

        Args:
            query: Words to find.
            mode: ``"all"`` (every word), ``"any"`` or ``"phrase"`` (see :meth:`Session.search`).

        Returns:
            The ids of the hits, best first (at most :data:`SEARCH_LIMIT`).

        Raises:
            InvalidSearchError: ``mode`` is not one of the search modes.
        """
        if query is None or not str(query).strip():
            self._query = None
            self.search = {}
            self.refresh()
            return []
        self.session.search(query, mode=mode, limit=1)  # a bad mode raises here, before anything changes
        self._query = (str(query), mode)
        self.refresh()
        return [h["id"] for h in self.search.get("hits", [])]

    def compare(self, a: str, b: str, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """Two branches side by side from their fork point.

        Args:
            a, b: Messages of the two branches; each stands for the newest leaf below it.
            offset, limit: Which messages after the fork point each side returns.

        Returns:
            ``{"fork", "shared", "a", "b"}``: the last shared message, how many messages the branches share, and
            per side its ``leaf``, ``total`` messages after the fork point and those ``messages``.

        Raises:
            UnknownMessageError: The session has no such message.
        """
        session = self.session
        storage = session.storage
        with storage.lock:
            plan = self._known(a)
            plan = self._known(b)
            leaf_a, leaf_b = plan.newest_leaf_under(a), plan.newest_leaf_under(b)
            path_a = storage.path_ids(leaf_a, max_depth=session.max_depth)
            path_b = storage.path_ids(leaf_b, max_depth=session.max_depth)
            result = compare_sides(path_a, path_b, storage.read, limit=max(1, min(int(limit), 500)),
                                   offset=max(0, int(offset)), text_limit=PANEL_TEXT)
        self.comparison = {"a": leaf_a, "b": leaf_b}
        return result

    # -- front-end requests ---------------------------------------------------------------------

    def _request_rows(self, start: int, stop: int) -> dict[str, Any]:
        with self.session.storage.lock:  # the rows, their flags and the version from one refresh
            start, stop = max(0, int(start)), int(stop)
            stop = min(stop, start + PAGE_LIMIT, len(self._rows))
            ctx = self._ctx
            rows = page(ctx, self._rows, start, stop, self._short_texts) if ctx is not None else []
            return {"version": self.version, "start": start, "rows": rows}

    def _request_select(self, id: str) -> dict[str, Any]:
        leaf = self.select(id)
        return {"id": id, "leaf": leaf, "row": self.selected_row}

    def _request_path(self, leaf: str | None = None, limit: int = 80, skip: int = 0) -> dict[str, Any]:
        history = self.path(leaf)
        limit, skip = max(1, min(int(limit), 1000)), max(0, int(skip))
        end = len(history) - skip
        shown = history[max(0, end - limit):max(0, end)]
        return {
            "leaf": leaf or self.selected_leaf, "total": len(history), "skip": skip,
            "messages": [message_json(m, FULL_TEXT if str(m["id"]).startswith("compaction_") else PANEL_TEXT)
                         for m in shown],
        }

    def _request_expand(self, segment: int, start: int, stop: int) -> dict[str, Any]:
        plan = self._plan
        if plan is None or not 0 <= segment < len(plan.segments):
            raise ValueError("That part of the tree changed; the view has been redrawn.")
        ids = plan.segments[segment].ids
        start = max(0, int(start))
        stop = min(len(ids), int(stop), start + EXPAND_STEP)
        self._revealed.update(ids[start:stop])
        self.refresh()
        return {"revealed": stop - start}

    def _request_reveal(self, id: str) -> dict[str, Any]:
        self._known(id)
        self._revealed.add(id)
        self.refresh()
        return {"row": self._row_of.get(id, -1)}

    def _request_message(self, id: str) -> dict[str, Any]:
        message = self.session.get_message(id)
        if message is None and id.startswith("compaction_"):
            message = next((m for m in self.path() if m["id"] == id), None)
        if message is None:
            raise KeyError(f"No message {id!r} in this session.")
        return message_json(message, FULL_TEXT)

    def _request_compaction(self, id: str) -> dict[str, Any]:
        record = next((r for r in self.session.get_compactions() if r.id == id), None)
        if record is None:
            raise KeyError(f"No compaction {id!r} in this session.")
        return {"id": id, "summary": record.summary}

    def _request_search(self, query: str, mode: str = "all") -> dict[str, Any]:
        found = self.find(query, mode)
        return {"total": len(found)}

    def _request_compare(self, a: str, b: str, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        return self.compare(a, b, offset=offset, limit=limit)

    def _request_compare_at(self, id: str) -> dict[str, Any]:
        plan = self._known(id)
        kids = plan.children.get(id, [])
        if len(kids) < 2:
            raise ValueError(f"Message {id!r} has {len(kids)} children; a comparison needs a branch point.")
        marks = self._ctx.selected if self._ctx is not None else {}
        on_selected = [k for k in kids if plan.pos[k][1] < marks.get(plan.pos[k][0], 0)]
        first = on_selected[0] if on_selected else kids[0]
        second = next(k for k in kids if k != first)
        return self.compare(first, second)

    # -- static fallback ----------------------------------------------------------------------

    def to_html(self) -> str:
        """An indented outline of the drawn rows (for front ends without widgets)."""
        lines: list[str] = []
        plan = self._plan
        shown = segments_json(plan, self._rows, lambda ids: {m: v[0] for m, v in self._short_texts(ids).items()},
                              limit=200) if plan is not None else []
        for seg in shown:
            pad = "&nbsp;" * 2 * min(seg["d"], 30)
            for item in seg["items"]:
                if "gap" in item:
                    lines.append(f"{pad}⋯ {item['gap'][1] - item['gap'][0]} messages")
                    continue
                mark = " ● current" if item["id"] == self.current_leaf else ""
                fork = f" ({item['k']} branches)" if item["k"] > 1 else ""
                lines.append(f"{pad}<b>{esc(item['r'])}</b> {esc(item['t'])}{fork}{mark}")
        stats = self.stats
        return (
            f'<div class="agentlab-static"><b>Branch tree</b> <small>{stats.get("messages", 0)} messages, '
            f'{stats.get("branch_points", 0)} branch points, {stats.get("compactions", 0)} compactions</small>'
            f'<div style="font-family:monospace">{"<br>".join(lines)}</div></div>'
        )
