"""What a :class:`~agentlab.store.Store` hands back besides DuckDB's cursors: a write's rows read out before the commit
that followed it, and typed errors for statements DuckDB rejected."""

from __future__ import annotations

from typing import Any

from agentlab.errors import AgentlabError, DiskFullError, ReadOnlyAgentError, SqlError
from agentlab.store._files import is_disk_full

__all__ = ["Fetched", "invalidated", "statement_error"]


class Fetched:
    """A statement's rows, read before the commit that followed it (which replaced DuckDB's own result).

    Answers what callers ask of a DuckDB cursor after a write: ``fetchall``, ``fetchone`` and ``description``.
    """

    def __init__(self, cursor: Any) -> None:
        self.description = cursor.description
        self._rows: list[tuple[Any, ...]] = cursor.fetchall() if cursor.description is not None else []

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None


def statement_error(path: str, exc: Any, query: str) -> AgentlabError:
    """The typed error for a statement DuckDB rejected on the store of ``path``."""
    if "read-only mode" in str(exc) or "read only mode" in str(exc):
        return ReadOnlyAgentError(f"{path} is open read-only; reopen it with read_only=False to write.")
    if is_disk_full(exc):
        return DiskFullError(path, "running a statement")
    return SqlError(query, exc)


def invalidated(exc: BaseException) -> bool:
    """Whether DuckDB gave up on the connection's database: a fatal error, or a failed checkpoint of a database
    opened with ATTACH (a spare instance's), which DuckDB reports as an IO error."""
    import duckdb

    return isinstance(exc, duckdb.FatalException) or (isinstance(exc, duckdb.Error) and "invalidated" in str(exc))
