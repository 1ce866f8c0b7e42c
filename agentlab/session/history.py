"""Reading a session's branch: the path with its overlays, a byte-bounded window of it, and what a cut means.

A branch longer than the session's ``max_depth`` is read as its newest ``max_depth`` messages, and never silently:
:func:`read_history` returns a :class:`~agentlab.session.messages.History` whose ``truncated`` is set, and warns
or raises as the session's (or the call's) ``on_overflow`` asks (:data:`~agentlab.session.messages.OVERFLOW_MODES`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Protocol

from agentlab.errors import HistoryTooDeepError, HistoryTruncatedWarning
from agentlab.session.compactor import apply_compactions
from agentlab.session.messages import OVERFLOW_MODES, History, RecentHistory, RowStat
from agentlab.session.tree import MessageTree
from agentlab.store.database import Store


class Session(Protocol):
    """What reading a branch needs from a :class:`~agentlab.session.session.Session`."""

    store: Store
    tree: MessageTree
    session_id: str
    max_depth: int

    def get_history_row_stats(self, leaf_id: str | None = None) -> list[RowStat]: ...

__all__ = ["Session", "check_overflow", "history_path", "read_history", "recent_history"]


def check_overflow(mode: Any) -> str:
    """``mode`` if it is one of :data:`~agentlab.session.messages.OVERFLOW_MODES`, else a ValueError."""
    if mode not in OVERFLOW_MODES:
        raise ValueError(f"on_overflow must be one of {', '.join(map(repr, OVERFLOW_MODES))}, not {mode!r}.")
    return str(mode)


def history_path(session: Session, leaf_id: str | None, extra: Any = None
                 ) -> tuple[list[dict[str, Any]], list[str], bool]:
    """The branch's messages with overlays applied (plus ``extra``), its ids, and whether it was cut."""
    with session.store.lock:
        ids, seqs, cut = session.tree.path_rows(session.session_id, leaf_id, max_depth=session.max_depth)
        raw = session.tree.read_seqs(seqs)
        overlays: list[Any] = list(session.tree.compactions(session.session_id))
    if extra is not None:
        overlays.append(extra)
    return (apply_compactions(raw, overlays) if overlays else raw), ids, cut


def read_history(session: Session, leaf_id: str | None, mode: str) -> History:
    """:meth:`Session.get_history <agentlab.session.Session.get_history>` with ``on_overflow`` resolved."""
    messages, ids, cut = history_path(session, leaf_id)
    if cut:
        leaf = ids[-1]
        if mode == "raise":
            raise HistoryTooDeepError(leaf, session.max_depth)
        if mode == "warn":
            warnings.warn(
                f"The branch ending at {leaf!r} is longer than max_depth={session.max_depth:,}; get_history returned "
                f"only its newest {session.max_depth:,} messages (result.truncated is True). Pass a larger "
                "Session(max_depth=...) to read it whole, or on_overflow='raise' to get an error instead.",
                HistoryTruncatedWarning, stacklevel=3)
    return History(messages, cut)


def recent_history(session: Session, max_bytes: int, min_recent: int, leaf_id: str | None) -> RecentHistory:
    """:meth:`Session.get_recent_history <agentlab.session.Session.get_recent_history>`."""
    with session.store.lock:
        stats = session.get_history_row_stats(leaf_id)
        cut = session.tree.path(session.session_id, leaf_id, max_depth=session.max_depth)[1]
    floor_recent = max(1, math.floor(min_recent))
    start, used, taken = len(stats), 0, 0
    while start > 0 and (taken < floor_recent or used + stats[start - 1].bytes <= max_bytes):
        start -= 1
        used += stats[start].bytes
        taken += 1
    raw = session.tree.read([s.id for s in stats[start:]])
    overlays = session.tree.compactions(session.session_id)
    messages = apply_compactions(raw, overlays) if overlays else raw
    return RecentHistory(messages, start > 0 or cut, sum(s.bytes for s in stats))
