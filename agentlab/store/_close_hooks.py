"""Callbacks around closing a store: derived files beside the DuckDB file are saved before it closes."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

__all__ = ["CloseHooks"]


class CloseHooks:
    """What a :class:`~agentlab.store.Store` runs around ``close()`` (one per store, under the store's lock):
    ``before`` callbacks while it still holds the file (they may use the store), ``after`` callbacks once it released
    it. Each runs once; one that fails is reported as a :class:`RuntimeWarning` and the close goes on (a derived file
    is rebuilt when next needed)."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._before: list[Callable[[], None]] = []
        self._after: list[Callable[[], None]] = []

    def add(self, before: Callable[[], None], after: Callable[[], None] | None = None) -> None:
        """Run ``before`` when the store closes, while it still holds the file, and ``after`` once it released it."""
        with self._lock:
            self._before.append(before)
            if after is not None:
                self._after.append(after)

    def run(self, *, before: bool) -> None:
        """Run (and forget) the ``before`` or the ``after`` callbacks."""
        with self._lock:
            if before:
                callbacks, self._before = self._before, []
            else:
                callbacks, self._after = self._after, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # closing must release the file whatever saving a cache does
                warnings.warn(f"While closing an agent file, saving a derived cache failed ({exc!r}); it is rebuilt "
                              "from the file when next needed.", RuntimeWarning, stacklevel=4)
