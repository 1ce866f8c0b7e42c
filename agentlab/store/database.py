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
* A new file's first writes may be held (:meth:`Store.defer`, :mod:`agentlab.store.deferred`): visible to every
  read of the store at once, durable with its next commit, at close, or half a second later.
* A write that committed returns normally. When DuckDB's automatic checkpoint fails after a durable
  commit (a full disk), the store reopens its connection, warns with :class:`CheckpointWarning` and
  reports it in :attr:`Store.health` until a checkpoint succeeds again. A write that did not commit
  because the disk is full raises :class:`DiskFullError` and stores nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb

from agentlab.errors import (
    AgentClosedError,
    AgentDestroyedError,
    AgentFileError,
    AgentlabError,
    DiskFullError,
    ReadOnlyAgentError,
    SqlError,
    StoreInUseError,
)
from agentlab.store import instances
from agentlab.store.caches import DerivedCaches
from agentlab.store.close_hooks import CloseHooks
from agentlab.store.deferred import HeldWrites
from agentlab.store.files import (
    BLOCK_SIZE,
    CONFIG,
    DURABLE,
    MEMORY,
    connect,
    create_file,
    is_disk_full,
    migrate,
    open_reason,
)
from agentlab.store.health import CheckpointHealth, StoreHealth
from agentlab.store.migrations import MIGRATIONS, Migration
from agentlab.store.results import Fetched, Materialised
from agentlab.store.stamp import FileStamper

_WRITES = (duckdb.StatementType.INSERT, duckdb.StatementType.UPDATE, duckdb.StatementType.DELETE)


def _invalidated(exc: BaseException) -> bool:
    """Whether DuckDB gave up on the connection's database: a fatal error, or a failed checkpoint of a database
    opened with ATTACH (a spare instance's), which DuckDB reports as an IO error."""
    return isinstance(exc, duckdb.FatalException) or (isinstance(exc, duckdb.Error) and "invalidated" in str(exc))


# One live store per file in this process, keyed by the file's real path.
_open_files: weakref.WeakValueDictionary[str, Store] = weakref.WeakValueDictionary()
_open_files_lock = threading.Lock()


def _file_key(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


class Store(DerivedCaches, CheckpointHealth, CloseHooks):
    """An open DuckDB database with agentlab's schema applied.

    Args:
        path: A file path, or ``":memory:"`` for a throwaway database (tests, evaluation).
        read_only: Open without write access. Several read-only processes may share a file.
        migrations: The schema steps to apply (defaults to :data:`agentlab.store.migrations.MIGRATIONS`).
        block_size: DuckDB's block size for a file this call creates (default
            :data:`agentlab.store.files.BLOCK_SIZE`); an existing file keeps the size it was made with.

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
        block_size: int = BLOCK_SIZE,
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
        DerivedCaches.__init__(self)
        # Derived files beside the file (a search index) are saved around close (CloseHooks.on_close) and compare
        # outside_writes (note_outside_write calls) and opened_stamp (the file's stamp at open) with theirs.
        CloseHooks.__init__(self)
        self.outside_writes, self._stamper = 0, FileStamper(None)
        self.opened_stamp: str | None = None
        self._held = HeldWrites(self.flush)
        # True while the file is one this store just created from the template, with nothing committed since and
        # no SQL of the user run on it: its tables are as the template left them (empty), and writes may be held.
        self.fresh = False
        self._in_spare = False  # opened in a spare instance (agentlab.store.instances), for tests
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
            created = not read_only and not file.exists() and create_file(file, steps, block_size)
            self._stamper = FileStamper(self.path)  # before DuckDB locks the file, closed after it lets go
            if created:
                # The file is this process's template, fully migrated: no checks to run, and a spare DuckDB
                # instance (started ahead) opens it without the 10 ms a new instance costs.
                instances.start(CONFIG)
                spare = instances.open_new(self.path)
                self._conn = spare or connect(self.path, False)
                self.fresh, self._in_spare = True, spare is not None
            else:
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

    def close(self) -> None:
        """Commit held writes, close the connection and release the file lock. Safe to call twice.

        Raises:
            DiskFullError: Held writes (a new agent's first ones) could not be committed; the file is closed
                without them.
        """
        with self.lock:
            try:
                self.flush()
            finally:
                self._close_connection()

    def _close_connection(self) -> None:
        with self.lock:
            if not self._closed_by_user and self._conn is not None:
                self._run_close_hooks(before=True)
            self._closed_by_user = True
            self._held.cancel()
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
            self._close_connection()  # held writes go with the file
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
        if self._held:
            self._rehold(self._conn)  # they were in the old connection's open transaction
        # Objects registered on the old connection are gone: let every derived cache rebuild from the file.
        for callback in list(self._outside_write):
            callback()

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
            if not self._held:  # else the open transaction holding a new file's first writes carries this one
                conn.execute("BEGIN TRANSACTION")
            self._depth = 1
            durable_failure: BaseException | None = None
            try:
                yield conn
                try:
                    conn.execute("COMMIT")
                except duckdb.Error as exc:
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
                    if self._held and not _invalidated(exc):
                        self._rehold(conn)
                for callback in callbacks:
                    callback()
                if _invalidated(exc):
                    self._reopen()
                if isinstance(exc, duckdb.Error) and is_disk_full(exc):
                    raise DiskFullError(self.path, "committing a write") from exc
                raise
            self._depth = 0
            self._held.committed()
            self.fresh = False
            callbacks, self._after_commit = self._after_commit, []
            self._after_rollback = []
            for callback in callbacks:
                callback()
            if durable_failure is not None:
                self._mark_unhealthy(durable_failure)
            else:
                self._after_durable_commit()

    def defer(self, query: str, params: Sequence[Any] = ()) -> None:
        """Run a write; on a new file with nothing committed yet, commit it with the store's next commit.

        A new agent's name and first session are written this way, so that they reach the disk in the same
        commit as the first message (one durable commit instead of three). Every read of this store sees the
        write at once. It is committed by the next transaction or write of the store, by :meth:`flush`,
        :meth:`close`, user SQL, or :data:`agentlab.store.deferred.DELAY` seconds later; a crash before that
        loses it. On any other store (or inside a transaction) it is an ordinary write.

        Raises:
            ReadOnlyAgentError: The store is read-only.
            SqlError: DuckDB rejected the statement (nothing is held).
        """
        self.require_writable()
        with self.lock:
            if self.fresh and not self._depth:
                try:
                    self._held.add(self.conn, query, params)
                except duckdb.Error as exc:
                    raise self._translate(exc, query) from exc
                return
            with self.transaction() as conn:
                conn.execute(query, list(params)).fetchall()

    def flush(self) -> None:
        """Commit the writes held by :meth:`defer` now (nothing happens when none are held).

        Raises:
            DiskFullError: The commit failed for lack of disk space; the writes stay held.
        """
        with self.lock:
            if self._held and not self._depth and not self._closed_by_user and self._conn is not None:
                with self.transaction():
                    pass

    def _rehold(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Run the held writes again after a rollback or a new connection dropped them (dropped if that fails)."""
        try:
            self._held.rolled_back(conn)
        except duckdb.Error:
            self.fresh = False  # held writes lost; the name is written again at the next open

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
            if self._held and not self._depth:
                held = self._execute_held(query, params)
                if held is not None:
                    return held
            try:
                cursor = conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                if DURABLE in str(exc) and not self._depth:
                    # An autocommitted statement that is stored; only the checkpoint after it failed.
                    self._mark_unhealthy(exc)
                    return self.conn.execute("SELECT NULL WHERE false")
                if _invalidated(exc):
                    self._reopen()
                raise self._translate(exc, query) from exc
            if not self._depth and not self._health.ok:
                self._after_durable_commit(may_checkpoint=False)
            return cursor

    def _execute_held(self, query: str, params: Sequence[Any] | dict[str, Any] | None) -> Any | None:
        """A statement while writes are held: a query runs in their transaction, one INSERT, UPDATE or DELETE
        commits with them; anything else commits them first and returns None (the caller runs it as usual)."""
        try:
            kinds = [statement.type for statement in duckdb.extract_statements(query)]
        except duckdb.Error:
            kinds = []
        conn = self.conn
        if kinds and all(kind == duckdb.StatementType.SELECT for kind in kinds):
            try:
                return conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                self._rehold(conn)  # the error aborted their transaction
                raise self._translate(exc, query) from exc
        if len(kinds) == 1 and kinds[0] in _WRITES:
            try:
                with self.transaction() as conn:
                    # read the statement's rows (an UPDATE ... RETURNING) before COMMIT replaces the result
                    return Fetched(conn.execute(query, params) if params is not None else conn.execute(query))
            except duckdb.Error as exc:
                raise self._translate(exc, query) from exc
        self.flush()
        return None

    def relation(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run a query and return a materialised result that converts to pandas or Arrow.

        DuckDB's relation API converts without the extra row copy of a DB-API cursor. The result is
        materialised under the lock, so it is safe to convert from any thread afterwards.
        """
        with self.lock:
            try:
                rel = self.conn.sql(query, params=list(params) if params else None)
                return Materialised(rel.to_arrow_table() if rel is not None else None)
            except duckdb.Error as exc:
                if DURABLE in str(exc) and not self._depth:
                    self._mark_unhealthy(exc)
                    return Materialised(None)
                if _invalidated(exc):
                    self._reopen()
                elif self._held and not self._depth:
                    self._rehold(self.conn)  # the error aborted their transaction
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
