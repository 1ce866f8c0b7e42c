"""The memory timeline: every write to a writable context block, who made it, when, and the text before and after.

``context_blocks`` keeps only a block's latest text. A session records each write to one of its writable blocks
(``set_block``, ``append_to_block``, a ``set_context`` tool call) as a row of ``context_block_history`` through a
:class:`BlockJournal`, inside the write's own transaction: a write that fails or rolls back leaves no row, and a
row exists for every write that committed. (A block whose provider stores its text outside the agent's file is
recorded too; only the row, not the provider's own storage, rolls back with the transaction.)

Who wrote is one of three *writers*:

* ``"tool"``: a ``set_context`` call run through the context tools (``session.run_tool``, a chat turn); the
  ``writer_id`` is the call's ``tool_use`` id when the caller knows it (:func:`writing_as`);
* ``"client"``: a write made while the agent serves a connection (an RPC from a served client); the
  ``writer_id`` is the connection id;
* ``"python"``: anything else (a notebook cell, a thread).

Invariants: rows are only inserted, in seq order (the store's clock, shared with messages), and nothing is
recorded in a file opened read-only; watchers (:func:`watch_blocks`) hear of a write only after it committed,
and one that raises never breaks the write.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentlab.agent import current_connection
from agentlab.store import Store, clock_of

__all__ = ["WRITERS", "BlockJournal", "BlockWrite", "block_history", "current_writer", "watch_blocks",
           "writing_as"]

logger = logging.getLogger("agentlab.context")

WRITERS = ("tool", "python", "client")
"""Who can write a block: the model's tool call, Python code, a served client."""

_writer: ContextVar[tuple[str, str | None] | None] = ContextVar("agentlab_block_writer", default=None)

_INSERT = """
INSERT INTO context_block_history (seq, session_id, label, writer, writer_id, old_content, new_content)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""

_SELECT = """
SELECT seq, session_id, label, writer, writer_id, old_content, new_content, written_at
FROM context_block_history
WHERE (?::VARCHAR IS NULL OR session_id = ?::VARCHAR) AND (?::VARCHAR IS NULL OR label = ?::VARCHAR)
  AND (?::BIGINT IS NULL OR seq < ?::BIGINT)
ORDER BY seq DESC
LIMIT ?
"""


@dataclass(frozen=True)
class BlockWrite:
    """One row of the memory timeline.

    Attributes:
        seq: Position in the store's clock (shared with messages: a write after message ``m`` has a larger seq).
        session_id, label: The block written.
        writer: ``"tool"``, ``"python"`` or ``"client"``.
        writer_id: The ``tool_use`` id or the connection id, when known.
        old, new: The text before and after the write.
        written_at: When it was written (UTC).
    """

    seq: int
    session_id: str
    label: str
    writer: str
    writer_id: str | None
    old: str
    new: str
    written_at: datetime


@contextmanager
def writing_as(writer: str, writer_id: str | None = None) -> Iterator[None]:
    """Attribute the block writes made inside the ``with`` to ``writer`` (and ``writer_id``).

    An inner ``writing_as`` of the same writer without an id keeps the outer one's id, so the chat layer can name
    the ``tool_use`` id around ``session.run_tool``, which marks its writes as ``"tool"`` itself.

    Raises:
        ValueError: ``writer`` is not one of :data:`WRITERS`.
    """
    if writer not in WRITERS:
        raise ValueError(f"writer must be one of {list(WRITERS)}, not {writer!r}.")
    outer = _writer.get()
    if writer_id is None and outer is not None and outer[0] == writer:
        writer_id = outer[1]
    token = _writer.set((writer, writer_id))
    try:
        yield
    finally:
        _writer.reset(token)


def current_writer() -> tuple[str, str | None]:
    """``(writer, writer_id)`` for a write made now: the innermost :func:`writing_as`, else the connection the
    agent is serving, else Python."""
    explicit = _writer.get()
    if explicit is not None:
        return explicit
    connection = current_connection()
    if connection is not None:
        return "client", connection.id
    return "python", None


# -- watchers -----------------------------------------------------------------------------------------------------

Watcher = Callable[[str, str], Any]

_watchers: weakref.WeakKeyDictionary[Any, list[tuple[str | None, Watcher]]] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def watch_blocks(store: Any, session_id: str | None, callback: Watcher) -> Callable[[], None]:
    """Call ``callback(session_id, label)`` after every committed block change of ``session_id`` (every session
    if None) in ``store``, whichever :class:`~agentlab.session.Session` object made it. ``label`` is ``""`` when
    the frozen prompt was refreshed. ``store`` is the agent's :class:`~agentlab.store.Store`, or for a session
    without one, its session storage. Returns a function that stops watching."""
    entry = (session_id, callback)
    with _watchers_lock:
        _watchers.setdefault(store, []).append(entry)

    def unwatch() -> None:
        with _watchers_lock:
            listed = _watchers.get(store, [])
            if entry in listed:
                listed.remove(entry)

    return unwatch


def _notify(store: Any, session_id: str, label: str) -> None:
    with _watchers_lock:
        listed = list(_watchers.get(store, ()))
    for wanted, callback in listed:
        if wanted is None or wanted == session_id:
            try:
                callback(session_id, label)
            except Exception as exc:  # a broken view must not break the write that already committed
                logger.warning("a block watcher failed: %s: %s", type(exc).__name__, exc)


# -- the journal --------------------------------------------------------------------------------------------------


class BlockJournal:
    """Records the writes to one session's writable blocks (a :class:`~agentlab.context.ContextBlocks` calls it).

    Args:
        store: The agent's store (rows go to its ``context_block_history``); None for a session without one,
            whose writes are then only announced to watchers of ``owner``.
        session_id: The session whose blocks these are.
        owner: What watchers of a store-less session watch (its session storage).
    """

    def __init__(self, store: Store | None, session_id: str, *, owner: Any = None) -> None:
        self.store = store
        self.session_id = session_id
        self.owner = store if store is not None else owner

    def write(self, label: str, old: str, new: str, apply: Callable[[], None]) -> None:
        """Run ``apply()`` (the provider's write) and record it, in one transaction; watchers hear after commit."""
        store = self.store
        if store is None or store.read_only:  # nothing to record in; a provider that stores elsewhere may write
            apply()
            _notify(self.owner, self.session_id, label)
            return
        writer, writer_id = current_writer()
        with store.transaction():
            apply()
            store.execute(_INSERT, [clock_of(store).take(), self.session_id, label, writer, writer_id, old, new])
            store.after_commit(lambda: _notify(store, self.session_id, label))

    def touched(self, label: str) -> None:
        """Tell watchers that ``label`` changed without a timeline row (a keyed entry, or ``""``: the prompt)."""
        if self.store is None:
            _notify(self.owner, self.session_id, label)
        else:
            self.store.after_commit(lambda: _notify(self.store, self.session_id, label))


def block_history(store: Store, session_id: str | None = None, label: str | None = None, *,
                  before: int | None = None, limit: int = 1000) -> list[BlockWrite]:
    """Writes to context blocks, newest first.

    Args:
        store: The agent's store.
        session_id: Only this session's blocks (every session if None).
        label: Only this block.
        before: Only writes with a smaller seq (the next page after a row of this seq).
        limit: At most this many.
    """
    params = [session_id, session_id, label, label, before, before, max(0, int(limit))]
    with store.lock:
        rows = store.execute(_SELECT, params).fetchall()
    return [BlockWrite(*row) for row in rows]
