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
  or of either prompt is fetched on request.
* The view re-reads the providers after every session event (appends, edits, compactions, clears),
  so a ``set_context`` tool call made during a turn shows up when the turn's messages are stored.
"""

from __future__ import annotations

import re
from typing import Any

import traitlets as t

from agentlab.context.prompt import SEPARATOR, js_round, render_block, render_prompt
from agentlab.context.tokens import estimate_string_tokens

from ._base import STATIC, RequestWidget, esc

PREVIEW_CHARS = 3000
"""Characters of each block's text sent with the traits (the rest on request)."""

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


def frozen_prompt(context: Any) -> str | None:
    """The prompt the model sees now (stored, else the in-memory snapshot), or None if none is frozen.

    Reads without side effects, in :meth:`ContextBlocks.freeze_system_prompt`'s order.
    """
    store = context.prompt_store
    if store is not None:
        stored = store.get()
        if stored is not None:
            return stored
    # ContextBlocks keeps its in-memory snapshot private; reading it is the only side-effect-free way.
    return getattr(context, "_snapshot", None)


def _cut(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS]


class ContextView(RequestWidget):
    """Each context block of a session with its tag, usage bar and content, live vs frozen.

    Args:
        session: A :class:`~agentlab.session.Session` with context blocks (``session.context``).

    Synced traits: ``blocks`` (one dict per block), ``frozen`` (whether a prompt is frozen),
    ``summary`` (token totals and whether the frozen prompt is stale) and ``error``.
    """

    _esm = STATIC / "context_view.js"
    _css = STATIC / "context_view.css"
    _requests = ("reload", "refresh_prompt", "prompt", "block")

    blocks: t.List[Any] = t.List().tag(sync=True)
    frozen = t.Bool(False).tag(sync=True)
    summary = t.Dict().tag(sync=True)

    def __init__(self, session: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.refresh()
        subscribe = getattr(session, "subscribe", None)
        self._unsubscribe = subscribe(self._on_event) if callable(subscribe) else (lambda: None)

    def __repr__(self) -> str:
        return f"<ContextView of session {getattr(self.session, 'session_id', '?')!r}: {len(self.blocks)} blocks>"

    @property
    def context(self) -> Any:
        """The session's ContextBlocks, or None when the session has no context layer."""
        return getattr(self.session, "context", None)

    def _on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") in ("appended", "updated", "deleted", "cleared", "compacted"):
            self.refresh()

    def refresh(self) -> None:
        """Re-read every provider and the frozen prompt, and publish them."""
        context = self.context
        if context is None:
            self.blocks, self.frozen = [], False
            self.summary = {"session": getattr(self.session, "session_id", ""), "blocks": 0,
                            "live_tokens": 0, "frozen_tokens": 0, "stale": False}
            return
        live_blocks = context.load()  # re-reads providers; never touches the frozen prompt
        failed = context.errors
        frozen_text = frozen_prompt(context)
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

    def _request_prompt(self, which: str = "frozen") -> dict[str, Any]:
        context = self.context
        if which == "frozen":
            return {"text": frozen_prompt(context)}
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
        section = _section_for(label, split_prompt(frozen_prompt(context) or ""))
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
        return (
            '<div class="agentlab-static"><b>Context blocks</b><table><tr><th>block</th>'
            "<th>live provider content</th><th>frozen prompt</th></tr>" + "".join(rows) + "</table></div>")
