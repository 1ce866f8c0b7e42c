"""ContextView: a session's context blocks, live provider content beside the frozen system prompt.

The model sees the *frozen* prompt: rendered on first use and re-rendered only by a refresh (an
explicit call, a compaction, ``clear_messages``). Writes to blocks reach their providers at once but
not the frozen prompt. The view shows both per block, side by side, so a researcher sees what the
model sees now and what it will see after a refresh, with each block's tag and a usage bar
(tokens / max tokens).

Invariants:

* Looking never freezes: when no prompt is frozen yet the view says so and shows the live render;
  it never calls ``freeze_system_prompt``. Only the "Refresh prompt" action (or
  :meth:`ContextView.refresh_prompt`) changes the frozen prompt.
* Only small JSON is synced: block texts are cut to :data:`PREVIEW_CHARS`; the full text of a block
  or of either prompt, and older timeline rows, are fetched on request.
* The view redraws after every committed block write of its session, whoever made it (a ``set_context``
  call in a turn, ``session.run_tool``, ``set_block`` from any cell, thread or Session object of the agent),
  and after compactions and clears: no reload needed.
* The memory timeline (every write to a writable block: who, when, old -> new) is read from the file,
  so it shows the session's writes even where this Session object has no blocks configured.
"""

from __future__ import annotations

import re
from typing import Any

import traitlets as t

from agentlab.context import (
    SEPARATOR,
    block_history,
    estimate_string_tokens,
    js_round,
    render_block,
    render_prompt,
    watch_blocks,
)

from ._base import STATIC, RequestWidget, esc
from ._timeline import stamp, timeline_row

PREVIEW_CHARS = 3000
"""Characters of each block's text sent with the traits (the rest on request)."""

TIMELINE_ROWS = 30
"""Newest timeline rows sent with the traits (older ones on request)."""

_SECTION = re.compile(f"{SEPARATOR}\n(.*)\n{SEPARATOR}\n")


def tag_of(block: Any) -> str:
    """The block's single tag, with upstream's precedence: searchable > loadable > readonly > writable."""
    if block.is_searchable:
        return "searchable"
    if block.is_skill:
        return "loadable"
    return "writable" if block.writable else "readonly"


def split_prompt(prompt: str) -> list[tuple[str, str]]:
    """A rendered prompt's sections as ``(header, content)`` pairs, in order."""
    matches = list(_SECTION.finditer(prompt))
    sections = []
    for k, match in enumerate(matches):
        end = matches[k + 1].start() - 2 if k + 1 < len(matches) else len(prompt)  # "\n\n" joins sections
        sections.append((match.group(1), prompt[match.end():max(match.end(), end)]))
    return sections


def _section_for(label: str, sections: list[tuple[str, str]]) -> tuple[str, str] | None:
    name = label.upper()
    for header, content in sections:
        if header == name or header.startswith(name + " "):
            return header, content
    return None


def _cut(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS]


class ContextView(RequestWidget):
    """Each context block of a session with its tag, usage bar and content, live vs frozen.

    Args:
        session: A :class:`~agentlab.session.Session` with context blocks (``session.context``).

    Synced traits: ``blocks`` (one dict per block), ``frozen`` (whether a prompt is frozen),
    ``summary`` (token totals and whether the frozen prompt is stale), ``timeline`` (the newest writes to
    the session's writable blocks, newest first: label, writer, time and what changed), ``timeline_more``
    (older writes exist) and ``error``.
    """

    _esm = STATIC / "context_view.js"
    _css = STATIC / "context_view.css"
    _requests = ("reload", "refresh_prompt", "prompt", "block", "history", "write")

    blocks: t.List[Any] = t.List().tag(sync=True)
    frozen = t.Bool(False).tag(sync=True)
    summary = t.Dict().tag(sync=True)
    timeline: t.List[Any] = t.List().tag(sync=True)
    timeline_more = t.Bool(False).tag(sync=True)

    def __init__(self, session: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.refresh()
        subscribe = getattr(session, "subscribe", None)
        unsubscribe = subscribe(self._on_event) if callable(subscribe) else (lambda: None)
        # Block writes are announced per agent file, or per storage for a session without one.
        owner = getattr(session, "store", None) or getattr(session, "storage", None)
        session_id = getattr(session, "session_id", None)
        unwatch = watch_blocks(owner, session_id, self._on_write) if owner is not None and session_id is not None \
            else (lambda: None)

        def stop() -> None:
            unsubscribe()
            unwatch()

        self._unsubscribe = stop

    def __repr__(self) -> str:
        return f"<ContextView of session {getattr(self.session, 'session_id', '?')!r}: {len(self.blocks)} blocks>"

    @property
    def context(self) -> Any:
        """The session's ContextBlocks, or None when the session has no context layer."""
        return getattr(self.session, "context", None)

    def _on_event(self, event: dict[str, Any]) -> None:
        # Block writes arrive through _on_write; these events change what the prompt holds or what was loaded.
        if event.get("type") in ("cleared", "compacted"):
            self.refresh()

    def _on_write(self, _session_id: str, _label: str) -> None:
        self.refresh()

    def _timeline(self) -> None:
        store, session_id = getattr(self.session, "store", None), getattr(self.session, "session_id", None)
        if store is None or session_id is None:
            self.timeline, self.timeline_more = [], False
            return
        writes = block_history(store, session_id, limit=TIMELINE_ROWS + 1)
        self.timeline = [timeline_row(w) for w in writes[:TIMELINE_ROWS]]
        self.timeline_more = len(writes) > TIMELINE_ROWS

    def refresh(self) -> None:
        """Re-read every provider, the frozen prompt and the timeline, and publish them."""
        context = self.context
        if context is None:
            with self.hold_sync():
                self.blocks, self.frozen = [], False
                self.summary = {"session": getattr(self.session, "session_id", ""), "blocks": 0,
                                "live_tokens": 0, "frozen_tokens": 0, "stale": False}
                self._timeline()
            return
        live_blocks = context.load()  # re-reads providers; never touches the frozen prompt
        failed = context.errors
        frozen_text = context.frozen_prompt()
        live_text = render_prompt(live_blocks)
        sections = split_prompt(frozen_text) if frozen_text is not None else []
        by_label = {b.label: b for b in live_blocks}
        rows = []
        for label in context.labels:
            block = by_label.get(label)
            section = _section_for(label, sections)
            rendered = render_block(block) if block is not None else None
            config = context.config(label)
            max_tokens = block.max_tokens if block is not None else getattr(config, "max_tokens", None)
            content = block.content if block is not None else ""
            row = {
                "label": label,
                "description": (block.description if block is not None else getattr(config, "description", None)),
                "tag": tag_of(block) if block is not None else "failed",
                "tokens": block.tokens if block is not None else 0,
                "max_tokens": max_tokens,
                "pct": js_round(block.tokens / max_tokens * 100) if block is not None and max_tokens else None,
                "header": rendered.split("\n", 2)[1] if rendered else label.upper(),
                "content": _cut(content), "content_chars": len(content),
                "in_prompt": rendered is not None,
                "frozen_header": section[0] if section else None,
                "frozen": _cut(section[1]) if section else None,
                "frozen_chars": len(section[1]) if section else 0,
                "error": str(failed[label]) if label in failed else None,
            }
            row["changed"] = frozen_text is not None and (section[1] if section else None) != (
                content if rendered is not None else None)
            rows.append(row)
        with self.hold_sync():
            self._timeline()
            self.blocks = rows
            self.frozen = frozen_text is not None
            self.summary = {
                "session": getattr(self.session, "session_id", ""), "blocks": len(rows),
                "live_tokens": estimate_string_tokens(live_text),
                "frozen_tokens": estimate_string_tokens(frozen_text) if frozen_text is not None else None,
                "stale": frozen_text is not None and frozen_text != live_text,
            }

    def refresh_prompt(self) -> str:
        """Refresh the session's system prompt (what the model will see from its next call) and redraw."""
        prompt = self.context.refresh_system_prompt()
        self.refresh()
        return prompt

    def close(self) -> None:
        """Stop listening to the session and close the widget."""
        if hasattr(self, "_unsubscribe"):  # absent when the constructor failed
            self._unsubscribe()
        super().close()

    # -- front-end requests ---------------------------------------------------------------------

    def _request_reload(self) -> dict[str, Any]:
        self.refresh()
        return {"ok": True}

    def _request_refresh_prompt(self) -> dict[str, Any]:
        self.refresh_prompt()
        return {"ok": True}

    def _request_history(self, before: int, limit: int = TIMELINE_ROWS) -> dict[str, Any]:
        limit = max(1, min(int(limit), 500))
        writes = block_history(self.session.store, self.session.session_id, before=int(before), limit=limit + 1)
        return {"rows": [timeline_row(w) for w in writes[:limit]], "more": len(writes) > limit}

    def _request_write(self, seq: int) -> dict[str, Any]:
        found = block_history(self.session.store, self.session.session_id, before=int(seq) + 1, limit=1)
        if not found or found[0].seq != int(seq):
            raise KeyError(f"No write {seq} in this session's timeline.")
        w = found[0]
        return {"seq": w.seq, "label": w.label, "writer": w.writer, "writer_id": w.writer_id,
                "at": stamp(w.written_at), "old": w.old, "new": w.new}

    def _request_prompt(self, which: str = "frozen") -> dict[str, Any]:
        context = self.context
        if which == "frozen":
            return {"text": context.frozen_prompt()}
        if which == "live":
            return {"text": render_prompt(context.load())}
        raise ValueError(f"which must be 'frozen' or 'live', not {which!r}.")

    def _request_block(self, label: str, which: str = "live") -> dict[str, Any]:
        context = self.context
        if which == "live":
            block = context.get_context_block(label)
            if block is None:
                raise KeyError(f"No loaded block {label!r}.")
            return {"text": block.content}
        section = _section_for(label, split_prompt(context.frozen_prompt() or ""))
        return {"text": section[1] if section else None}

    # -- static fallback ----------------------------------------------------------------------

    def to_html(self) -> str:
        """A table of blocks: tag, usage and both texts (for front ends without widgets)."""
        rows = []
        for b in self.blocks:
            usage = (f"{b['tokens']}/{b['max_tokens']} tokens ({b['pct']}%)" if b["max_tokens"]
                     else f"{b['tokens']} tokens")
            frozen = esc(b["frozen"]) if b["frozen"] is not None else "<i>not in the frozen prompt</i>"
            rows.append(
                f"<tr><td><b>{esc(b['label'])}</b> [{esc(b['tag'])}]<br><small>{usage}</small></td>"
                f"<td><pre>{esc(b['content'])}</pre></td><td><pre>{frozen}</pre></td></tr>")
        writes = "".join(
            f"<tr><td>{esc(w['at'])}</td><td>{esc(w['label'])}</td><td>{esc(w['writer'])}</td>"
            f"<td><del>{esc(w['removed'])}</del> <ins>{esc(w['added'])}</ins></td></tr>" for w in self.timeline)
        timeline = ("<b>Memory timeline</b><table><tr><th>when</th><th>block</th><th>writer</th><th>change</th></tr>"
                    + writes + "</table>") if writes else ""
        return (
            '<div class="agentlab-static"><b>Context blocks</b><table><tr><th>block</th>'
            "<th>live provider content</th><th>frozen prompt</th></tr>" + "".join(rows) + "</table>"
            + timeline + "</div>")
