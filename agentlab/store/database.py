"""The store: one DuckDB file (or an in-memory database), its migrations, transactions and locking.

This is the bottom layer; everything else reads and writes through a :class:`Store`.

Invariants:

* One :class:`Store` owns one DuckDB connection, and one file has at most one live store in a process
  (a second one raises :class:`StoreInUseError`: two stores on one file would hand out the same seqs).
  DuckDB connections are not safe to share between threads, so every use goes through ``Store.lock``
  (re-entrant): statements from several threads are serialised, never interleaved inside a transaction.
  The lock is the only lock a store's readers and writers take for its data, so there is one lock order.
* :meth:`Store.transaction` is all-or-nothing. Nested calls join the outer transaction, so a
  higher layer can wrap several lower-layer writes in one atomic unit.
* Opening follows :mod:`agentlab.store.files`: a new file appears complete or not at all, a file that is not
  an agentlab file raises :class:`AgentFileError` unchanged, one from a newer schema raises
  :class:`SchemaTooNewError` unless opened read-only, and pending migrations are applied at open. A file held
  read-write by another process raises :class:`AgentLockedError`, never DuckDB's raw IO error. A read-only
  store refuses writes with :class:`ReadOnlyAgentError`.
* A write that committed returns normally. When DuckDB's automatic checkpoint fails after a durable
  commit (a full disk), the store reopens its connection, warns with :class:`CheckpointWarning` and
  reports it in :attr:`Store.health` until a checkpoint succeeds again. A write that did not commit
  because the disk is full raises :class:`DiskFullError` and stores nothing.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from agentlab.errors import (
    AgentClosedError,
    AgentDestroyedError,
    AgentFileError,
    AgentlabError,
    CheckpointWarning,
    DiskFullError,
    ReadOnlyAgentError,
    SqlError,
    StoreInUseError,
)
from agentlab.store.close_hooks import CloseHooks
from agentlab.store.files import DURABLE, MEMORY, connect, create_file, is_disk_full, migrate, open_reason
from agentlab.store.materialised import Materialised as _Materialised
from agentlab.store.migrations import MIGRATIONS, Migration
from agentlab.store.stamp import FileStamper

T = TypeVar("T")

# One live store per file in this process, keyed by the file's real path.
_open_files: weakref.WeakValueDictionary[str, Store] = weakref.WeakValueDictionary()
_open_files_lock = threading.Lock()


def _file_key(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


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


class Store(CloseHooks):
    """An open DuckDB database with agentlab's schema applied.

    Args:
        path: A file path, or ``":memory:"`` for a throwaway database (tests, evaluation).
        read_only: Open without write access. Several read-only processes may share a file.
        migrations: The schema steps to apply (defaults to :data:`agentlab.store.migrations.MIGRATIONS`).

    Raises:
        AgentLockedError: Another process holds the file read-write.
        StoreInUseError: This process already has a live store on the file.
        AgentFileError: The file is not an agentlab file (nothing in it was changed).
        SchemaTooNewError: A newer agentlab wrote the file (open it with ``read_only=True`` to read it).
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
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._closed_by_user = False
        self._destroyed = False
        self._health = StoreHealth()
        self._last_checkpoint_try = 0.0
        # Callbacks for in-memory caches derived from the file (parent maps, postings, FAISS):
        # they run after the outermost COMMIT, or after a ROLLBACK, so a cache never holds a
        # change the file does not have.
        self._after_commit: list[Callable[[], object]] = []
        self._after_rollback: list[Callable[[], object]] = []
        # Callbacks that drop every derived cache: run after SQL that agentlab did not write itself
        # (agent.sql) may have changed the file, so no cache outlives a change made behind its back.
        self._outside_write: list[Callable[[], None]] = []
        self._derived: dict[str, Any] = {}
        # Derived files beside the file (a search index) are saved around close (CloseHooks.on_close) and compare
        # outside_writes (note_outside_write calls) and opened_stamp (the file's stamp at open) with theirs.
        CloseHooks.__init__(self)
        self.outside_writes, self.opened_stamp, self._stamper = 0, None, FileStamper(None)
        steps = MIGRATIONS if migrations is None else migrations
        if self.path == MEMORY:
            self._conn = connect(self.path, False)
            self._migrate_or_close(steps)
            return
        key = _file_key(self.path)
        with _open_files_lock:
            other = _open_files.get(key)
            if other is not None and not other.closed:
                raise StoreInUseError(self.path)
            _open_files[key] = self
        try:
            file = Path(self.path)
            if read_only and not file.exists():
                raise FileNotFoundError(
                    f"No agent file at {self.path}; open it once without read_only=True to create it."
                )
            if not read_only and not file.exists():
                create_file(file, steps)
            self._stamper = FileStamper(self.path)  # before DuckDB locks the file, closed after it lets go
            self._conn = connect(self.path, read_only)
            self._migrate_or_close(steps)
            self.opened_stamp = self.stamp()
        except BaseException:
            with _open_files_lock:
                if _open_files.get(key) is self:
                    del _open_files[key]
            self._stamper.close()
            raise

    def _migrate_or_close(self, migrations: Sequence[Migration]) -> None:
        try:
            migrate(self.conn, self.path, migrations, self.read_only)
        except duckdb.Error as exc:  # the header was readable, its catalog or tables are not
            self.close()
            raise AgentFileError(self.path, open_reason(self.path, str(exc))) from exc
        except BaseException:
            self.close()
            raise

    # -- connection ----------------------------------------------------------------------------

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The raw DuckDB connection. Hold :attr:`lock` while using it."""
        if self._conn is None:
            if self._destroyed:
                raise AgentDestroyedError(f"The agent file {self.path} was destroyed; get_agent() makes a new one.")
            if self._closed_by_user:
                raise AgentClosedError(
                    f"The store {self.path} is closed; open the agent again with get_agent()."
                )
            self._reopen(raise_errors=True)  # an earlier reopen failed: try again now
        assert self._conn is not None
        return self._conn

    @property
    def closed(self) -> bool:
        return self._closed_by_user

    @property
    def health(self) -> StoreHealth:
        """Whether the file is fully checkpointed (see :class:`StoreHealth`)."""
        return self._health

    def close(self) -> None:
        """Close the connection and release the file lock. Safe to call twice.

        Callbacks of :meth:`on_close` run around it; one that fails is reported as a warning and the close goes on.
        """
        with self.lock:
            if not self._closed_by_user and self._conn is not None:
                self._run_close_hooks(before=True)
            self._closed_by_user = True
            if self._conn is not None:
                try:
                    self._conn.close()
                except duckdb.Error:
                    pass  # an invalidated instance cannot checkpoint; its WAL is replayed at the next open
                finally:
                    self._conn = None
            self._stamper.close()
        if self.path != MEMORY:
            with _open_files_lock:
                key = _file_key(self.path)
                if _open_files.get(key) is self:
                    del _open_files[key]
        self._run_close_hooks(before=False)

    def stamp(self) -> str | None:
        """:func:`~agentlab.store.stamp.file_stamp` of the file now (None in memory, or with commits in the log)."""
        return self._stamper.stamp()

    def destroy(self) -> None:
        """Close the store and delete its file with the files DuckDB keeps beside it; later use raises
        :class:`~agentlab.errors.AgentDestroyedError`. Safe to call twice."""
        with self.lock:
            self._destroyed = True
            self.close()
        if self.path != MEMORY:
            from agentlab.store.files import remove_database_files

            remove_database_files(Path(self.path))

    def _reopen(self, *, raise_errors: bool = False) -> None:
        """Replace a connection DuckDB invalidated (after a failed checkpoint) by a fresh one on the same file.

        If the file cannot be opened now, the store stays without a connection and tries again on next use.
        """
        old, self._conn = self._conn, None
        if old is not None:
            try:
                old.close()
            except duckdb.Error:
                pass
        self._health = replace(self._health, reopened=self._health.reopened + 1)
        try:
            self._conn = connect(self.path, self.read_only)
        except AgentlabError:
            if raise_errors:
                raise
            return
        # Objects registered on the old connection are gone: let every derived cache rebuild from the file.
        for callback in list(self._outside_write):
            callback()

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
            try:
                self.conn.execute("CHECKPOINT")
            except duckdb.Error as exc:
                self._mark_unhealthy(exc)
                return False
            self._health = replace(self._health, ok=True, error=None, since=None)
            return True

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Run a block atomically; nested uses join the outermost transaction.

        Raises:
            ReadOnlyAgentError: The store is read-only.
            DiskFullError: The commit failed for lack of disk space; nothing was stored.
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
            durable_failure: BaseException | None = None
            try:
                yield conn
                try:
                    conn.execute("COMMIT")
                except duckdb.FatalException as exc:
                    if DURABLE not in str(exc):
                        raise
                    durable_failure = exc
            except BaseException as exc:
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
                if isinstance(exc, duckdb.FatalException):
                    self._reopen()
                if isinstance(exc, duckdb.Error) and is_disk_full(exc):
                    raise DiskFullError(self.path, "committing a write") from exc
                raise
            self._depth = 0
            callbacks, self._after_commit = self._after_commit, []
            self._after_rollback = []
            for callback in callbacks:
                callback()
            if durable_failure is not None:
                self._mark_unhealthy(durable_failure)
            else:
                self._after_durable_commit()

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
            self.outside_writes += 1
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
            DiskFullError: The statement's commit failed for lack of disk space; nothing was stored.
            ReadOnlyAgentError: The statement writes to a read-only store.
        """
        with self.lock:
            conn = self.conn
            try:
                cursor = conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.FatalException) and DURABLE in str(exc) and not self._depth:
                    # An autocommitted statement that is stored; only the checkpoint after it failed.
                    self._mark_unhealthy(exc)
                    return self.conn.execute("SELECT NULL WHERE false")
                if isinstance(exc, duckdb.FatalException):
                    self._reopen()
                raise self._translate(exc, query) from exc
            if not self._depth and not self._health.ok:
                self._after_durable_commit(may_checkpoint=False)
            return cursor

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
                if isinstance(exc, duckdb.FatalException) and DURABLE in str(exc) and not self._depth:
                    self._mark_unhealthy(exc)
                    return _Materialised(None)
                if isinstance(exc, duckdb.FatalException):
                    self._reopen()
                raise self._translate(exc, query) from exc

    def _translate(self, exc: duckdb.Error, query: str) -> AgentlabError:
        if "read-only mode" in str(exc) or "read only mode" in str(exc):
            return ReadOnlyAgentError(f"{self.path} is open read-only; reopen it with read_only=False to write.")
        if is_disk_full(exc):
            return DiskFullError(self.path, "running a statement")
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
