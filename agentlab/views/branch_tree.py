"""BranchTree: a session's message tree, live, with branch points, compaction brackets and selection.

The widget subscribes to the session's events (``session.subscribe``), so appends, edits, deletes and
compactions made from any cell or thread redraw it. Only a compact plan travels as traitlets (see
:mod:`agentlab.views._layout`): long linear runs are collapsed into a gap with a count, and message
text beyond one short line, a branch's path, and the rows of a gap are fetched on request.

Selection: clicking a message selects its branch. ``selected_id`` is the message clicked and
``selected_leaf`` the newest leaf below it (the message itself if it is a leaf), so a notebook can
continue the conversation with ``session.append_message(msg, parent_id=tree.selected_leaf)``.
Until something is selected, and again after ``select(None)``, the selection follows the current
leaf.

Invariants:

* The plan is rebuilt from the database (never patched), under the store's lock, so what is drawn
  is a state the file actually had. Short texts are cached by id and dropped on any edit or delete.
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
from ._layout import Plan, build_plan, layout_json, short_text

SYNC_LIMIT = 2_000
"""Trees up to this many messages are rebuilt inside the session event; larger ones on a timer."""

EXPAND_STEP = 500
"""Rows revealed by one click on a collapsed run."""

_NODES = """
SELECT id, parent_id, role, seq FROM messages
WHERE session_id = ? OR id IN (SELECT unnest(?::VARCHAR[]))
"""


class BranchTree(RequestWidget):
    """The message tree of a session as an outline (roles, short text, branch points, current leaf,
    compaction brackets), with the selected branch's messages beside it.

    Args:
        session: The :class:`~agentlab.session.Session` to show.
        collapse_over: Linear runs longer than this are drawn as head, tail and a counted gap.

    Synced traits: ``segments_json`` (the drawing plan as JSON text; ``segments`` holds it as Python
    objects), ``compactions``, ``marks`` (rows on the current and selected paths), ``current_leaf``,
    ``selected_id``, ``selected_leaf``, ``stats`` and ``error``.
    """

    _esm = STATIC / "branch_tree.js"
    _css = STATIC / "branch_tree.css"
    _requests = ("select", "path", "expand", "message")

    segments: t.List[Any] = t.List()  # not synced: it travels as segments_json
    # JSON text, not a nested trait: ipywidgets walks nested values looking for binary buffers, which
    # costs more than the whole rebuild for a 10,000-row plan; a string is passed through as is.
    segments_json = t.Unicode("[]").tag(sync=True)
    compactions: t.List[Any] = t.List().tag(sync=True)
    marks = t.Dict().tag(sync=True)
    current_leaf = t.Unicode(None, allow_none=True).tag(sync=True)
    selected_id = t.Unicode(None, allow_none=True).tag(sync=True)
    selected_leaf = t.Unicode(None, allow_none=True).tag(sync=True)
    stats = t.Dict().tag(sync=True)

    def __init__(self, session: Any, *, collapse_over: int = 12, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.collapse_over = max(3, int(collapse_over))
        self._plan: Plan | None = None
        self._texts: dict[str, str] = {}
        self._revealed: set[str] = set()
        self._follow = True
        self._selected: str | None = None
        self._flag_lock = threading.Lock()  # guards the timer fields only; never held while reading
        self._timer: threading.Timer | None = None
        self._build_ms = 0.0
        self.refresh()
        self._unsubscribe = session.subscribe(self._on_event)

    def __repr__(self) -> str:
        return f"<BranchTree of session {self.session.session_id!r}: {self.stats.get('messages', 0)} messages>"

    # -- building -----------------------------------------------------------------------------

    def _nodes(self) -> list[tuple[str, str | None, str, int]]:
        session = self.session
        # A fork reads its parent's path up to the fork point: those rows are part of its tree.
        fork = session.tree.fork_point(session.session_id)
        inherited = sorted(session.tree.inherited(session.session_id)) if fork is not None else []
        rows = session.store.execute(_NODES, [session.session_id, inherited]).fetchall()
        return [(r[0], r[1], r[2], int(r[3])) for r in rows]

    def _short_texts(self, ids: Sequence[str]) -> dict[str, str]:
        missing = [m for m in ids if m not in self._texts]
        if missing:
            for message in self.session.tree.read(missing):
                self._texts[message["id"]] = short_text(message)
        return {m: self._texts.get(m, "") for m in ids}

    def refresh(self) -> None:
        """Rebuild the plan from the database and publish it (also called by session events)."""
        started = time.perf_counter()
        session = self.session
        with session.store.lock:
            current = session.latest_leaf_id()
            plan = build_plan(self._nodes(), prefer=current)
            records = session.get_compactions()
            pinned: dict[int, set[int]] = {}

            def pin(mid: str | None) -> None:
                if mid is not None and mid in plan.pos:
                    seg, index = plan.pos[mid]
                    pinned.setdefault(seg, set()).add(index)

            overlays = []
            for number, record in enumerate(records):
                pieces = plan.cover(record.from_message_id, record.to_message_id)
                pin(record.from_message_id)
                pin(record.to_message_id)
                overlays.append({
                    "n": number, "id": record.id, "from": record.from_message_id, "to": record.to_message_id,
                    "summary": record.summary[:400], "pieces": pieces or [],
                    "count": sum(p[2] - p[1] for p in pieces) if pieces else 0,
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
            segments = layout_json(plan, self._short_texts, pinned=pinned, collapse_over=self.collapse_over)
            encoded = json.dumps(segments, ensure_ascii=False, separators=(",", ":"))
            self._plan = plan
            self._build_ms = (time.perf_counter() - started) * 1000
            with self.hold_sync():
                self.segments = segments
                self.segments_json = encoded
                self.compactions = overlays
                self.current_leaf = current
                self.selected_id = selected_id
                self.selected_leaf = selected_leaf
                self.marks = {"current": plan.path_marks(current), "selected": plan.path_marks(selected_leaf)}
                self.stats = {
                    "session": session.session_id, "messages": plan.size, "segments": len(plan.segments),
                    "branch_points": plan.branch_points, "leaves": len(plan.leaves),
                    "compactions": len(overlays), "build_ms": round(self._build_ms, 1),
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

    # -- selection ------------------------------------------------------------------------------

    def select(self, message_id: str | None) -> str | None:
        """Select the branch through ``message_id`` (None: follow the current leaf again).

        Returns:
            The selected leaf: the newest leaf at or below ``message_id``.

        Raises:
            UnknownMessageError: The session has no such message.
        """
        from agentlab.errors import UnknownMessageError

        with self.session.store.lock:
            plan = self._plan
            if message_id is not None and (plan is None or message_id not in plan.pos):
                self.refresh()  # it may have been appended a moment ago
                plan = self._plan
                if plan is None or message_id not in plan.pos:
                    raise UnknownMessageError(message_id)
            self._follow = message_id is None
            self._selected = message_id
            self.refresh()
            return self.selected_leaf

    def path(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The messages of the selected branch (or of ``leaf_id``), overlays applied, root first."""
        return self.session.get_history(leaf_id or self.selected_leaf)

    # -- front-end requests ---------------------------------------------------------------------

    def _request_select(self, id: str) -> dict[str, Any]:
        leaf = self.select(id)
        return {"id": id, "leaf": leaf}

    def _request_path(self, leaf: str | None = None, limit: int = 80) -> dict[str, Any]:
        history = self.path(leaf)
        shown = history[-max(1, min(int(limit), 1000)):]
        return {
            "leaf": leaf or self.selected_leaf, "total": len(history),
            "messages": [{"id": m["id"], "role": m.get("role", "?"), "text": short_text(m, 600),
                          "compaction": m["id"].startswith("compaction_")} for m in shown],
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

    def _request_message(self, id: str) -> dict[str, Any]:
        message = self.session.get_message(id)
        if message is None:
            raise KeyError(f"No message {id!r} in this session.")
        return {"id": id, "role": message.get("role"), "text": short_text(message, 20_000),
                "parts": len(message.get("parts") or [])}

    # -- static fallback ----------------------------------------------------------------------

    def to_html(self) -> str:
        """An indented outline of the drawn rows (for front ends without widgets)."""
        lines: list[str] = []
        for seg in self.segments[:200]:
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
