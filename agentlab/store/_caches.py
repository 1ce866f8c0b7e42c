"""The caches a store keeps beside its file, and when they must change: after a commit, after a rollback, after
SQL that agentlab did not write.

Anything kept in memory for speed (parent maps, postings, texts, FAISS indexes, the seq clock) is derived from the
file. :class:`DerivedCaches` keeps them honest for one :class:`~agentlab.store.Store`: callbacks run after the
outermost COMMIT or after a ROLLBACK, so a cache never holds a change the file does not have, and callbacks that drop
every cache run after SQL that agentlab did not write itself (``agent.sql``) may have changed the file behind their
backs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["DerivedCaches"]

T = TypeVar("T")


class DerivedCaches:
    """The callback lists and derived objects of one store (the store decides when a transaction is open)."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._after_commit: list[Callable[[], object]] = []
        self._after_rollback: list[Callable[[], object]] = []
        self._outside_write: list[Callable[[], None]] = []
        self._derived: dict[str, Any] = {}

    def add_after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the open transaction commits."""
        self._after_commit.append(callback)

    def add_after_rollback(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` if the open transaction rolls back."""
        self._after_rollback.append(callback)

    def committed(self) -> None:
        """The transaction committed: run its commit callbacks, forget its rollback callbacks."""
        callbacks, self._after_commit, self._after_rollback = self._after_commit, [], []
        for callback in callbacks:
            callback()

    def rolled_back(self) -> None:
        """The transaction rolled back: run its rollback callbacks, forget its commit callbacks."""
        callbacks, self._after_rollback, self._after_commit = self._after_rollback, [], []
        for callback in callbacks:
            callback()

    def derived(self, key: str, make: Callable[[], T], *, reset: Callable[[T], None] | None = None) -> T:
        """The one ``key`` object, made by ``make()`` on first use; ``reset(obj)`` runs at every outside write."""
        with self._lock:
            if key not in self._derived:
                obj = self._derived[key] = make()
                if reset is not None:
                    self._outside_write.append(lambda: reset(obj))
            return self._derived[key]

    def on_outside_write(self, callback: Callable[[], None]) -> None:
        """Register ``callback`` to drop a derived cache at every :meth:`outside_write`."""
        with self._lock:
            self._outside_write.append(callback)

    def outside_write(self) -> None:
        """Drop every derived cache (each is rebuilt from the file when next needed)."""
        with self._lock:
            for callback in list(self._outside_write):
                callback()
