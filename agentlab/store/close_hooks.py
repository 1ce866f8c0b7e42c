"""Callbacks around closing a store: derived files beside the DuckDB file are saved before it closes."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

__all__ = ["CloseHooks"]


class CloseHooks:
    """What :class:`~agentlab.store.Store` runs around ``close()``: ``before`` callbacks while it still holds the
    file (they may use the store), ``after`` callbacks once it released it. Each runs once; one that fails is
    reported as a :class:`RuntimeWarning` and the close goes on (a derived file is rebuilt when next needed)."""

    lock: threading.RLock

    def __init__(self) -> None:
        self._before_close: list[Callable[[], None]] = []
        self._after_close: list[Callable[[], None]] = []

    def on_close(self, before: Callable[[], None], after: Callable[[], None] | None = None) -> None:
        """Run ``before`` when the store closes, while it still holds the file, and ``after`` once it released it."""
        with self.lock:
            self._before_close.append(before)
            if after is not None:
                self._after_close.append(after)

    def _run_close_hooks(self, *, before: bool) -> None:
        if before:
            callbacks, self._before_close = self._before_close, []
        else:
            callbacks, self._after_close = self._after_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # closing must release the file whatever saving a cache does
                warnings.warn(f"While closing an agent file, saving a derived cache failed ({exc!r}); it is rebuilt "
                              "from the file when next needed.", RuntimeWarning, stacklevel=4)
