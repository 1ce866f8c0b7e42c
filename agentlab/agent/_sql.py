"""``agent.sql``: bound-parameter SQL on an agent's DuckDB file, as rows, DataFrames or Arrow.

Invariant: parameters are always bound (``?`` placeholders), never interpolated into the query text; any
statement that may write drops every cache agentlab derived from the file, so sessions, searches and state read
what the SQL changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from agentlab.store import Store

__all__ = ["SqlRunner"]


class SqlRunner:
    """``agent.sql(query, *params)`` and its DataFrame/Arrow variants.

    Parameters are always bound (``?`` placeholders), never interpolated into the query text.
    """

    def __init__(self, store_of: Callable[[], Store]) -> None:
        self._store_of = store_of  # the agent's open store (raises AgentClosedError once it is closed)

    def __call__(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run ``query`` with bound ``params``; return the rows as dicts ([] for statements).

        Any statement but a plain SELECT (EXPLAIN ANALYZE runs its statement; PRAGMA, SET and CALL may write)
        makes agentlab drop its in-memory caches afterwards, so sessions and searches see what the SQL changed.

        Raises:
            SqlError: DuckDB rejected the query (the error carries it).
            ReadOnlyAgentError: The query writes to a read-only agent.
        """
        store = self._store_of()
        with self._watch(store, query):
            return store.rows(query, list(params))

    def df(self, query: str, *params: Any) -> Any:
        """Like calling the runner, but return a pandas DataFrame."""
        store = self._store_of()
        with self._watch(store, query):
            return store.relation(query, list(params)).df()

    def arrow(self, query: str, *params: Any) -> Any:
        """Like calling the runner, but return a pyarrow Table (no copy through pandas)."""
        store = self._store_of()
        with self._watch(store, query):
            return store.relation(query, list(params)).to_arrow_table()

    @staticmethod
    @contextmanager
    def _watch(store: Store, query: str) -> Iterator[None]:
        store.flush()  # a new agent's held first writes are committed before any SQL of the user runs
        writes = not store.read_only and _may_write(query)
        try:
            yield
        finally:
            if writes:
                store.note_outside_write()


_READS = frozenset({duckdb.StatementType.SELECT})


def _may_write(query: str) -> bool:
    """Whether ``query`` holds a statement that could change the file.

    Only a plain SELECT counts as a read: ``EXPLAIN ANALYZE`` executes the statement it explains, and
    unparsable text counts as a write too, so a cache is dropped whenever in doubt.
    """
    try:
        return any(statement.type not in _READS for statement in duckdb.extract_statements(query))
    except (duckdb.Error, TypeError):
        return True
