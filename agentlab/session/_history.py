"""Reading a session's branch: the path with its overlays, a byte-bounded window of it, and what a cut means.

Every read goes through the session's :class:`~agentlab.session.SessionStorage`, so it behaves the same on
each storage. A branch longer than the session's ``max_depth`` is read as its newest ``max_depth`` messages, and
never silently: :func:`read_history` returns a :class:`~agentlab.session._messages.History` whose ``truncated`` is
set, and warns or raises as the session's (or the call's) ``on_overflow`` asks
(:data:`~agentlab.session._messages.OVERFLOW_MODES`). A leaf id the session does not store reads as ``[]`` with an
:class:`~agentlab.errors.UnknownLeafWarning`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.errors import HistoryTooDeepError, HistoryTruncatedWarning
from agentlab.session._compact_function import apply_compactions
from agentlab.session._intake import warn_unknown_leaf
from agentlab.session._messages import OVERFLOW_MODES, History, RecentHistory, recent_window

if TYPE_CHECKING:
    from agentlab.session._storage_contract import SessionStorage

__all__ = ["HistoryHost", "check_overflow", "history_path", "read_history", "recent_history"]


class HistoryHost(Protocol):
    """What reading a branch needs from a :class:`~agentlab.session.Session`."""

    storage: SessionStorage
    max_depth: int


def check_overflow(mode: Any) -> str:
    """``mode`` if it is one of :data:`~agentlab.session._messages.OVERFLOW_MODES`, else a ValueError."""
    if mode not in OVERFLOW_MODES:
        raise ValueError(f"on_overflow must be one of {', '.join(map(repr, OVERFLOW_MODES))}, not {mode!r}.")
    return str(mode)


def history_path(session: HistoryHost, leaf_id: str | None, extra: Any = None
                 ) -> tuple[list[dict[str, Any]], list[str], bool]:
    """The branch's messages with overlays applied (plus ``extra``), its ids, and whether it was cut."""
    storage = session.storage
    with storage.lock:
        ids, raw, cut = storage.read_path(leaf_id, max_depth=session.max_depth)
        overlays: list[Any] = list(storage.compactions())
    if extra is not None:
        overlays.append(extra)
    return (apply_compactions(raw, overlays) if overlays else raw), ids, cut


def read_history(session: HistoryHost, leaf_id: str | None, mode: str) -> History:
    """:meth:`Session.get_history <agentlab.session.Session.get_history>` with ``on_overflow`` resolved; warnings
    point at the caller of ``get_history``."""
    messages, ids, cut = history_path(session, leaf_id)
    if not ids and leaf_id:
        warn_unknown_leaf(session.storage, leaf_id, stacklevel=3)
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


def recent_history(session: HistoryHost, max_bytes: int, min_recent: float, leaf_id: str | None) -> RecentHistory:
    """:meth:`Session.get_recent_history <agentlab.session.Session.get_recent_history>`."""
    storage = session.storage
    with storage.lock:
        stats = storage.row_stats(leaf_id, max_depth=session.max_depth)
        cut = bool(stats) and storage.path(leaf_id, max_depth=session.max_depth)[1]
        start = recent_window(stats, max_bytes, min_recent)
        raw = storage.read([s.id for s in stats[start:]])
        overlays = storage.compactions()
    messages = apply_compactions(raw, overlays) if overlays else raw
    return RecentHistory(messages, start > 0 or cut, sum(s.bytes for s in stats))
