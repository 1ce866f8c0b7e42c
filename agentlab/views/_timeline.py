"""The memory timeline as small JSON rows for :class:`~agentlab.views.ContextView`.

Each write is shown as *what changed*: the common start and end of the old and new texts are cut to a little
context on each side, and only the removed and the added middle is sent (each cut to :data:`CHANGE_CHARS`), so
an append to a long block costs a line, not the block twice. Full texts are fetched on request.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

CONTEXT_CHARS = 40
"""Unchanged characters shown on each side of a change."""

CHANGE_CHARS = 240
"""Characters of the removed and of the added text sent with a row (the rest on request)."""


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def change(old: str, new: str) -> dict[str, Any]:
    """``{"before", "removed", "added", "after", "cut"}``: the change from ``old`` to ``new`` with a little
    unchanged context; ``cut`` is True when the removed or added text was shortened."""
    head = _common_prefix(old, new)
    tail = _common_prefix(old[head:][::-1], new[head:][::-1])
    # Whole words read better than a cut inside one ("tra[ins]" / "tra[ms]"): widen the change to word ends.
    if head and old[head - 1].isalnum() and any(k < len(x) and x[k].isalnum() for x, k in ((old, head), (new, head))):
        while head and old[head - 1].isalnum():
            head -= 1
    o, n = len(old) - tail, len(new) - tail  # where the common end starts in each text
    if tail and old[o].isalnum() and any(head < k and x[k - 1].isalnum() for x, k in ((old, o), (new, n))):
        while tail and old[len(old) - tail].isalnum():
            tail -= 1
    removed, added = old[head:len(old) - tail], new[head:len(new) - tail]
    before = old[max(0, head - CONTEXT_CHARS):head]
    after = old[len(old) - tail:][:CONTEXT_CHARS]
    return {
        "before": ("…" if head > CONTEXT_CHARS else "") + before,
        "removed": removed[:CHANGE_CHARS], "added": added[:CHANGE_CHARS],
        "after": after + ("…" if tail > CONTEXT_CHARS else ""),
        "cut": len(removed) > CHANGE_CHARS or len(added) > CHANGE_CHARS,
    }


def stamp(value: Any) -> str:
    """A timestamp as ISO 8601 in UTC, to the millisecond."""
    if isinstance(value, _dt.datetime):
        return value.astimezone(_dt.UTC).isoformat(timespec="milliseconds")
    return str(value)


def timeline_row(write: Any) -> dict[str, Any]:
    """One :class:`~agentlab.context.BlockWrite` as a timeline row."""
    return {"seq": write.seq, "label": write.label, "writer": write.writer, "writer_id": write.writer_id,
            "at": stamp(write.written_at), "old_chars": len(write.old), "new_chars": len(write.new),
            **change(write.old, write.new)}
