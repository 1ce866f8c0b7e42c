"""The store: one DuckDB file (or an in-memory database), its migrations, transactions and locking.

This is the bottom layer; everything else reads and writes through a :class:`Store`.

Invariants:

* One :class:`Store` owns one DuckDB connection. DuckDB connections are not safe to share between
  threads, so every use goes through ``Store.lock`` (re-entrant): statements from several threads
  are serialised, never interleaved inside a transaction.
* :meth:`Store.transaction` is all-or-nothing. Nested calls join the outer transaction, so a
  higher layer can wrap several lower-layer writes in one atomic unit.
* A file held read-write by another process raises :class:`AgentLockedError`, never DuckDB's raw
  IO error. A read-only store refuses writes with :class:`ReadOnlyAgentError`.
* Pending migrations are applied at open, each with its record, in one transaction.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from .errors import (
    AgentClosedError,
    AgentLockedError,
    AgentlabError,
    MigrationError,
    ReadOnlyAgentError,
    SqlError,
)
from .migrations import MIGRATIONS, Migration

MEMORY = ":memory:"

T = TypeVar("T")

_LOCK_DETAIL = re.compile(r"Conflicting lock is held in (.*)$", re.S)

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS _agentlab_migrations (
    name       VARCHAR PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


class _Materialised:
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


class Store:
    """An open DuckDB database with agentlab's schema applied.

    Args:
        path: A file path, or ``":memory:"`` for a throwaway database (tests, evaluation).
        read_only: Open without write access. Several read-only processes may share a file.
        migrations: The schema steps to apply (defaults to :data:`agentlab.migrations.MIGRATIONS`).

    Raises:
        AgentLockedError: Another process holds the file read-write.
        MigrationError: A migration failed (the file keeps its previous schema), or a read-only
            open found pending migrations.
    """

    def __init__(
        self,
        path: str | Path = MEMORY,
        *,
        read_only: bool = False,
        migrations: Sequence[Migration] | None = None,
    ) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.lock = threading.RLock()
        self._depth = 0
        # Callbacks for in-memory caches derived from the file (parent maps, postings, FAISS):
        # they run after the outermost COMMIT, or after a ROLLBACK, so a cache never holds a
        # change the file does not have.
        self._after_commit: list[Callable[[], None]] = []
        self._after_rollback: list[Callable[[], None]] = []
        # Callbacks that drop every derived cache: run after SQL that agentlab did not write itself
        # (agent.sql) may have changed the file, so no cache outlives a change made behind its back.
        self._outside_write: list[Callable[[], None]] = []
        self._derived: dict[str, Any] = {}
        if read_only and self.path != MEMORY and not Path(self.path).exists():
            raise FileNotFoundError(
                f"No agent file at {self.path}; open it once without read_only=True to create it."
            )
        try:
            self._conn: duckdb.DuckDBPyConnection | None = duckdb.connect(
                self.path, read_only=read_only and self.path != MEMORY
            )
        except duckdb.IOException as exc:
            match = _LOCK_DETAIL.search(str(exc))
            if match or "lock" in str(exc).lower():
                raise AgentLockedError(self.path, match.group(1).strip() if match else "") from None
            raise
        try:
            self._migrate(MIGRATIONS if migrations is None else migrations)
        except BaseException:
            self.close()
            raise

    # -- connection ----------------------------------------------------------------------------

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The raw DuckDB connection. Hold :attr:`lock` while using it."""
        if self._conn is None:
            raise AgentClosedError(f"The store {self.path} is closed; open the agent again with get_agent().")
        return self._conn

    @property
    def closed(self) -> bool:
        return self._conn is None

    def close(self) -> None:
        """Close the connection and release the file lock. Safe to call twice."""
        with self.lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Run a block atomically; nested uses join the outermost transaction.

        Raises:
            ReadOnlyAgentError: The store is read-only.
        """
        self.require_writable()
        with self.lock:
            conn = self.conn
            if self._depth:
                self._depth += 1
                try:
                    yield conn
                finally:
                    self._depth -= 1
                return
            conn.execute("BEGIN TRANSACTION")
            self._depth = 1
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                self._depth = 0
                callbacks, self._after_rollback = self._after_rollback, []
                self._after_commit = []
                if self._conn is not None:
                    try:
                        conn.execute("ROLLBACK")
                    except duckdb.Error:
                        pass  # the failed COMMIT already ended the transaction
                for callback in callbacks:
                    callback()
                raise
            self._depth = 0
            callbacks, self._after_commit = self._after_commit, []
            self._after_rollback = []
            for callback in callbacks:
                callback()

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction commits (at once if none is open).

        Used to update in-memory caches only with changes that reached the file.
        """
        with self.lock:
            if self._depth:
                self._after_commit.append(callback)
                return
        callback()

    def after_rollback(self, callback: Callable[[], None]) -> None:
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
        from the file when next needed.
        """
        with self.lock:
            for callback in list(self._outside_write):
                callback()

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyAgentError(
                f"{self.path} is open read-only; reopen it with read_only=False to write."
            )

    # -- statements ----------------------------------------------------------------------------

    def execute(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """Execute one statement with bound parameters and return the DuckDB cursor.

        Raises:
            SqlError: DuckDB rejected the statement (carries the query).
            ReadOnlyAgentError: The statement writes to a read-only store.
        """
        with self.lock:
            conn = self.conn
            try:
                return conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                raise self._translate(exc, query) from exc

    def relation(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run a query and return a materialised result that converts to pandas or Arrow.

        DuckDB's relation API converts without the extra row copy of a DB-API cursor. The result is
        materialised under the lock, so it is safe to convert from any thread afterwards.
        """
        with self.lock:
            try:
                rel = self.conn.sql(query, params=list(params) if params else None)
                return _Materialised(rel.to_arrow_table() if rel is not None else None)
            except duckdb.Error as exc:
                raise self._translate(exc, query) from exc

    def _translate(self, exc: duckdb.Error, query: str) -> AgentlabError:
        if "read-only mode" in str(exc) or "read only mode" in str(exc):
            return ReadOnlyAgentError(f"{self.path} is open read-only; reopen it with read_only=False to write.")
        return SqlError(query, exc)

    def rows(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Execute a query and return its rows as dicts (column name -> value)."""
        with self.lock:
            cursor = self.execute(query, params)
            if cursor.description is None:
                return []
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def scalar(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Execute a query and return the first column of the first row (or None)."""
        with self.lock:
            cursor = self.execute(query, params)
            row = cursor.fetchone()
            # DuckDB 2 keeps a partly fetched result open, and register() then refuses to run
            # ("unfinished result"); drain it so the connection is free for any next call.
            cursor.fetchall()
            return None if row is None else row[0]

    # -- migrations ----------------------------------------------------------------------------

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this file, in the order they were applied."""
        return [r[0] for r in self.conn.execute(
            "SELECT name FROM _agentlab_migrations ORDER BY applied_at, name"
        ).fetchall()]

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        conn = self.conn
        has_table = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = '_agentlab_migrations'"
        ).fetchone()[0]
        applied = set(self.applied_migrations()) if has_table else set()
        pending = [m for m in migrations if m.name not in applied]
        if not pending:
            return
        if self.read_only:
            raise MigrationError(
                f"{self.path} needs schema migrations {[m.name for m in pending]}; "
                "open it once read-write (read_only=False) to upgrade it."
            )
        if not has_table:
            conn.execute(_MIGRATIONS_TABLE)
        for migration in pending:
            conn.execute("BEGIN TRANSACTION")
            try:
                migration.apply(conn)
                conn.execute("INSERT INTO _agentlab_migrations (name) VALUES (?)", [migration.name])
            except BaseException as exc:
                conn.execute("ROLLBACK")
                raise MigrationError(f"Migration {migration.name} failed and was rolled back: {exc}") from exc
            conn.execute("COMMIT")
