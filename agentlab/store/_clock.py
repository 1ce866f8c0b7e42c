"""The session layer's logical clock: one increasing ``seq`` for every row it writes.

Messages, compactions, compaction events, sessions and block writes share one counter, so "stored before" can be
compared across tables (a fork's own seq is its point in time; ties between messages go to the older
seq, never to a timestamp). The numbers are handed out here, in Python, instead of by the DuckDB
sequence ``session_seq``: asking the sequence costs a statement (or a sequence write in the commit),
and a single append should be one INSERT.

Invariants:

* One :class:`SeqClock` per :class:`~agentlab.store.Store` (:func:`clock_of`). The store is the only
  writer of its file (DuckDB's file lock keeps other processes out, the agent registry other Store
  objects in this process), so numbers counted here cannot collide with another writer's.
* The clock starts above every seq stored in the five tables and above the ``session_seq`` sequence
  (which older files and ``DEFAULT`` clauses used), and only grows. A number taken by a write that
  rolled back is simply never used; the next open starts above what was committed.
* Every writer of those five tables passes an explicit seq from here; none relies on the column default.
"""

from __future__ import annotations

import weakref

from agentlab.store._database import Store

__all__ = ["SeqClock", "clock_of"]

_HIGHEST = """
SELECT greatest(
    (SELECT coalesce(max(seq), 0) FROM messages),
    (SELECT coalesce(max(search_seq), 0) FROM messages),
    (SELECT coalesce(max(seq), 0) FROM compactions),
    (SELECT coalesce(max(seq), 0) FROM compaction_events),
    (SELECT coalesce(max(seq), 0) FROM sessions),
    (SELECT coalesce(max(seq), 0) FROM context_block_history),
    (SELECT coalesce(max(coalesce(last_value, start_value - 1)), 0) FROM duckdb_sequences()
     WHERE sequence_name = 'session_seq' AND database_name = current_database())
)
"""


class SeqClock:
    """Hands out increasing seqs for one store. Use :func:`clock_of`; call under ``store.lock``."""

    def __init__(self, store: Store) -> None:
        self._store_ref = weakref.ref(store)
        # A file the store has just created holds no seqs: no need to ask it.
        self._next: int | None = 1 if store.fresh else None

    def reset(self) -> None:
        """Forget the count; the next :meth:`take` reads the highest stored seq again."""
        self._next = None

    def take(self, n: int = 1) -> int:
        """Reserve ``n`` consecutive seqs and return the first."""
        if self._next is None:
            store = self._store_ref()
            if store is None:  # pragma: no cover - only a clock kept after its store was dropped
                raise RuntimeError("The store of this clock was garbage-collected; open the agent again.")
            self._next = int(store.scalar(_HIGHEST)) + 1
        first = self._next
        self._next += n
        return first


def clock_of(store: Store) -> SeqClock:
    """The one :class:`SeqClock` of ``store`` (created on first use; it reads the file again after outside SQL)."""
    return store.derived("seq_clock", lambda: SeqClock(store), reset=SeqClock.reset)
