"""Whether a store's file is fully checkpointed, and what a store does when DuckDB cannot checkpoint it.

A commit is durable once DuckDB's write-ahead log has it; folding the log into the file (a checkpoint) can still
fail afterwards, on a full disk. Then the write stands, the store warns once with
:class:`~agentlab.errors.CheckpointWarning`, reopens its connection (DuckDB invalidated it) and reports the problem
in ``store.health`` until a checkpoint succeeds again, which it tries by itself at most every few seconds.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from agentlab.errors import CheckpointWarning
from agentlab.store.files import MEMORY

__all__ = ["CheckpointHealth", "StoreHealth"]


@dataclass(frozen=True)
class StoreHealth:
    """Whether the store's file is fully checkpointed, and what went wrong if not.

    Attributes:
        ok: False while the last automatic checkpoint failed and no checkpoint has succeeded since. Every
            committed write is still durable (in DuckDB's write-ahead log) and readable.
        error: DuckDB's message for the failed checkpoint, or None.
        since: When the store became unhealthy (UTC), or None.
        reopened: How many times the store reopened its connection after DuckDB invalidated it.
    """

    ok: bool = True
    error: str | None = None
    since: datetime | None = None
    reopened: int = 0



class CheckpointHealth:
    """The checkpoint side of :class:`~agentlab.store.Store` (mixed into it)."""

    lock: threading.RLock
    path: str
    _depth: int
    _conn: Any
    _health: StoreHealth
    _last_checkpoint_try: float
    conn: Any
    _reopen: Callable[[], None]
    flush: Callable[[], None]

    @property
    def health(self) -> StoreHealth:
        """Whether the file is fully checkpointed (see :class:`StoreHealth`)."""
        return self._health

    def _mark_unhealthy(self, exc: BaseException) -> None:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if self._health.ok:
            self._health = replace(self._health, ok=False, error=message, since=datetime.now(UTC))
            warnings.warn(
                f"{self.path}: the write was stored, but DuckDB's checkpoint failed ({message}). Every committed "
                "write is safe in the write-ahead log; free disk space and the store checkpoints again by itself "
                "(see store.health).",
                CheckpointWarning,
                stacklevel=4,
            )
        self._reopen()

    def _after_durable_commit(self, *, may_checkpoint: bool = True) -> None:
        """While unhealthy, notice (or try, at most every few seconds) a checkpoint that succeeds again.

        ``may_checkpoint`` is False where a statement's result is still to be read: a CHECKPOINT would discard it.
        """
        if self._health.ok or self.path == MEMORY or self._conn is None:
            return
        wal = Path(self.path + ".wal")
        if not wal.exists() or wal.stat().st_size == 0:
            self._health = replace(self._health, ok=True, error=None, since=None)
            return
        if not may_checkpoint:
            return
        now = time.monotonic()
        if now - self._last_checkpoint_try < 5.0:
            return
        self._last_checkpoint_try = now
        self.checkpoint()

    def checkpoint(self) -> bool:
        """Write the WAL into the file now; returns whether it worked and updates :attr:`health`.

        A failed checkpoint (a full disk) changes no data: the store reopens its connection and stays
        readable and writable for whatever the disk can still hold.
        """
        with self.lock:
            if self._depth:
                return False
            self.flush()
            try:
                self.conn.execute("CHECKPOINT")
            except duckdb.Error as exc:
                self._mark_unhealthy(exc)
                return False
            self._health = replace(self._health, ok=True, error=None, since=None)
            return True

