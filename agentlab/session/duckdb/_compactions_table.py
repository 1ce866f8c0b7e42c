"""Stored compaction overlays and compaction events, as rows and small records.

An overlay says "read the messages ``from_message_id .. to_message_id`` of a path as this summary"; it is applied
on every read by :func:`agentlab.session.apply_compactions` and never changes the messages themselves. Each
row also records what the compaction did (range size, token estimates before and after, trigger, leaf), for
exports and widgets. A compaction *event* records a run that stored nothing: the summarize function raised
(``"error"``) or there was nothing to compact (``"noop"``).

Invariants: rows are only ever inserted (a session clear deletes them with its messages); their order is
``seq`` order, which is the order in which "newest overlay wins" is decided.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentlab.session._messages import CompactionRecord
from agentlab.store import Store, clock_of

__all__ = [
    "COUNT", "delete_compactions", "delete_events", "insert_compaction", "load_compactions", "load_events",
    "record_event",
]

_COLUMNS = ("seq, id, session_id, summary, from_message_id, to_message_id, leaf_id, messages_covered, "
            "tokens_before, tokens_after, trigger, created_at")

_INSERT = f"""
INSERT INTO compactions ({_COLUMNS})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())
RETURNING {_COLUMNS}
"""

COUNT = "SELECT count(*) FROM compactions"


def delete_compactions(conn: Any, session_id: str) -> None:
    """Delete every overlay of ``session_id``."""
    conn.execute("DELETE FROM compactions WHERE session_id = ?", [session_id]).fetchall()


def delete_events(conn: Any, session_id: str) -> None:
    """Delete every compaction event of ``session_id``."""
    conn.execute("DELETE FROM compaction_events WHERE session_id = ?", [session_id]).fetchall()


def load_compactions(store: Store) -> list[CompactionRecord]:
    """Every stored overlay of every session, oldest first (by seq)."""
    rows = store.execute(f"SELECT {_COLUMNS} FROM compactions ORDER BY seq").fetchall()
    return [CompactionRecord(*row) for row in rows]


def insert_compaction(
    store: Store,
    conn: Any,
    session_id: str,
    summary: str,
    from_message_id: str,
    to_message_id: str,
    *,
    leaf_id: str | None = None,
    messages_covered: int | None = None,
    tokens_before: int | None = None,
    tokens_after: int | None = None,
    trigger: str = "manual",
) -> CompactionRecord:
    """Insert one overlay row through ``conn`` (inside the caller's transaction on ``store``) and return it."""
    row = conn.execute(_INSERT, [clock_of(store).take(), uuid.uuid4().hex, session_id, summary, from_message_id,
                                 to_message_id, leaf_id, messages_covered, tokens_before, tokens_after,
                                 trigger]).fetchall()[0]
    return CompactionRecord(*row)


def record_event(
    store: Store,
    session_id: str,
    kind: str,
    *,
    trigger: str,
    leaf_id: str | None = None,
    tokens_before: int | None = None,
    error: BaseException | None = None,
) -> None:
    """Store a compaction run that changed nothing: ``kind`` is ``"error"`` or ``"noop"``."""
    with store.transaction() as conn:
        conn.execute(
            """
            INSERT INTO compaction_events (seq, session_id, kind, trigger, leaf_id, tokens_before, error_type, error)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [clock_of(store).take(), session_id, kind, trigger, leaf_id, tokens_before,
             type(error).__name__ if error is not None else None, str(error) if error is not None else None],
        ).fetchall()


def load_events(store: Store, session_id: str) -> list[dict[str, Any]]:
    """The compaction events of one session, oldest first."""
    return store.rows(
        """
        SELECT seq, kind, trigger, leaf_id, tokens_before, error_type, error, created_at
        FROM compaction_events WHERE session_id = ? ORDER BY seq
        """,
        [session_id],
    )
