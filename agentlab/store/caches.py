"""The caches a store keeps beside its file, and when they must change: after a commit, after a rollback, after
SQL that agentlab did not write.

Anything kept in memory for speed (parent maps, postings, texts, FAISS indexes, the seq clock) is derived from the
file. :class:`DerivedCaches` is the part of :class:`~agentlab.store.Store` that keeps them honest: callbacks run
after the outermost COMMIT or after a ROLLBACK, so a cache never holds a change the file does not have, and
callbacks that drop every cache run after SQL that agentlab did not write itself (``agent.sql``) may have changed
the file behind their backs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DerivedCaches"]

T = TypeVar("T")


class DerivedCaches:
    """Callback lists and the derived objects of one store (mixed into :class:`~agentlab.store.Store`)."""

    lock: threading.RLock
    _depth: int
    fresh: bool
    outside_writes: int

    def __init__(self) -> None:
        self._after_commit: list[Callable[[], object]] = []
        self._after_rollback: list[Callable[[], object]] = []
        self._outside_write: list[Callable[[], None]] = []
        self._derived: dict[str, Any] = {}

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the current transaction commits (at once if none is open).

        Used to update in-memory caches only with changes that reached the file.
        """
        with self.lock:
            if self._depth:
                self._after_commit.append(callback)
                return
        callback()

    def after_rollback(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` if the current transaction rolls back (never if none is open).

        Used to drop caches that were updated optimistically inside the transaction.
        """
        with self.lock:
            if self._depth:
                self._after_rollback.append(callback)

    def derived(self, key: str, make: Callable[[], T], *, reset: Callable[[T], None] | None = None) -> T:
        """The store's one ``key`` object (a cache derived from the file), made by ``make()`` on first use.

        ``reset(obj)`` is registered with :meth:`on_outside_write`. The object lives as long as the store, so it
        should refer back to the store weakly.
        """
        with self.lock:
            if key not in self._derived:
                obj = self._derived[key] = make()
                if reset is not None:
                    self._outside_write.append(lambda: reset(obj))
            return self._derived[key]

    def on_outside_write(self, callback: Callable[[], None]) -> None:
        """Register ``callback`` to drop a derived cache whenever :meth:`note_outside_write` is called."""
        with self.lock:
            self._outside_write.append(callback)

    def note_outside_write(self) -> None:
        """Say that statements agentlab did not write (``agent.sql``) may have changed the file.

        Every derived cache (message map and texts, search views, FAISS indexes) is dropped and rebuilt
        from the file when next needed. The callbacks run under :attr:`lock`, so they must take no other lock.
        """
        with self.lock:
            self.fresh = False
            self.outside_writes += 1
            for callback in list(self._outside_write):
                callback()

