"""Whether a store's file is fully checkpointed, and when a store should try to checkpoint it again.

A commit is durable once DuckDB's write-ahead log has it; folding the log into the file (a checkpoint) can still
fail afterwards, on a full disk. Then the write stands, the store warns once with
:class:`~agentlab.errors.CheckpointWarning`, reopens its connection (DuckDB invalidated it) and reports the problem
in ``store.health`` until a checkpoint succeeds again, which it tries by itself at most every few seconds.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from agentlab.errors import CheckpointWarning
from agentlab.store._files import MEMORY

__all__ = ["RETRY_EVERY", "CheckpointHealth", "StoreHealth"]

RETRY_EVERY = 5.0
"""Seconds between a store's own checkpoint attempts while its file is not fully checkpointed."""


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
    """The checkpoint state of one store's file (:attr:`state`), and when to try a checkpoint again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.state = StoreHealth()
        self._last_try = 0.0

    def failed(self, exc: BaseException) -> None:
        """A checkpoint failed: become unhealthy (warning once, until :meth:`recovered`)."""
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if self.state.ok:
            self.state = replace(self.state, ok=False, error=message, since=datetime.now(UTC))
            warnings.warn(
                f"{self.path}: the write was stored, but DuckDB's checkpoint failed ({message}). Every committed "
                "write is safe in the write-ahead log; free disk space and the store checkpoints again by itself "
                "(see store.health).",
                CheckpointWarning,
                stacklevel=5,
            )

    def reopened(self) -> None:
        self.state = replace(self.state, reopened=self.state.reopened + 1)

    def recovered(self) -> None:
        self.state = replace(self.state, ok=True, error=None, since=None)

    def should_checkpoint(self, *, may_checkpoint: bool) -> bool:
        """After a durable commit: whether to try a checkpoint now (at most every :data:`RETRY_EVERY` seconds while
        unhealthy); an empty log means some checkpoint succeeded, and the state recovers without one.

        ``may_checkpoint`` is False where a statement's result is still to be read: a CHECKPOINT would discard it.
        """
        if self.state.ok or self.path == MEMORY:
            return False
        wal = Path(self.path + ".wal")
        if not wal.exists() or wal.stat().st_size == 0:
            self.recovered()
            return False
        now = time.monotonic()
        if not may_checkpoint or now - self._last_try < RETRY_EVERY:
            return False
        self._last_try = now
        return True
