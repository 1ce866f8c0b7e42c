"""What a :class:`~agentlab.store.Store` hands back besides DuckDB's own cursors: results already read out."""

from __future__ import annotations

from typing import Any

__all__ = ["Fetched", "Materialised"]


class Materialised:
    """A query result already copied out of DuckDB, as Arrow, convertible to pandas."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def to_arrow_table(self) -> Any:
        return self._table

    def df(self) -> Any:
        import pandas as pd

        if self._table is None:
            return pd.DataFrame()
        return self._table.to_pandas()


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
