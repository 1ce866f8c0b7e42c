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
* A new file's agent name may be held (:meth:`Store.defer`, :mod:`agentlab.store.deferred`): visible to every
  read of the store at once, durable with its next commit, at close, or half a second later.
* A write that committed returns normally. When DuckDB's automatic checkpoint fails after a durable
  commit (a full disk), the store reopens its connection, warns with :class:`CheckpointWarning` and
  reports it in :attr:`Store.health` until a checkpoint succeeds again. A write that did not commit
  because the disk is full raises :class:`DiskFullError` and stores nothing.
* The store is made of parts it holds: its derived caches' callbacks (:mod:`agentlab.store.caches`), its close
  hooks (:mod:`agentlab.store.close_hooks`), its checkpoint health (:mod:`agentlab.store.health`), its held writes
  and the file's stamp (:mod:`agentlab.store.stamp`); it forwards the methods callers use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from agentlab.errors import (
    AgentClosedError,
    AgentDestroyedError,
    AgentFileError,
    AgentlabError,
    DiskFullError,
    ReadOnlyAgentError,
)
from agentlab.store import instances, registry
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
from agentlab.store.materialised import Materialised
from agentlab.store.migrations import MIGRATIONS, Migration
from agentlab.store.results import invalidated, statement_error
from agentlab.store.stamp import FileStamper

T = TypeVar("T")


class Store:
    """An open DuckDB database with agentlab's schema applied.

    Args:
        path: A file path, or ``":memory:"`` for a throwaway database (tests, evaluation).
        read_only: Open without write access. Several read-only processes may share a file.
        migrations: The schema steps to apply (defaults to :data:`agentlab.store.migrations.MIGRATIONS`).
        block_size: DuckDB's block size for a file this call creates (default
            :data:`agentlab.store.files.BLOCK_SIZE`); an existing file keeps the size it was made with.

    Attributes:
        fresh: True while the file is one this store just created from the template, with nothing committed since
            and no SQL of the user run on it: its tables are as the template left them, and writes may be held.
        outside_writes: How many times :meth:`note_outside_write` was called (derived files compare it).
        opened_stamp: The file's :meth:`stamp` when the store opened it.

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
        self._checks = CheckpointHealth(self.path)
        self._caches = DerivedCaches(self.lock)
        self._hooks = CloseHooks(self.lock)
        self._held = HeldWrites(self)
        self._held_back: Callable[[], None] | None = None  # hold_back(): a higher layer's write, run before the next
        self.fresh = False
        self._in_spare = False  # opened in a spare instance (agentlab.store.instances), for tests
        self.outside_writes, self._stamper = 0, FileStamper(None)
        self.opened_stamp: str | None = None
        # What a higher layer verified the file holds (an agent's name): kept across a clean close and a reopen
        # that proves the file unchanged since, so the check need not read the file again. None: not verified.
        self.identity: str | None = None
        steps = MIGRATIONS if migrations is None else migrations
        self._schema = tuple(m.name for m in steps)
        if self.path == MEMORY:
            self._conn = connect(self.path, False)
            self._migrate_or_close(steps)
            return
        registry.claim(self.path, self)
        try:
            self._open_file(steps, block_size)
        except BaseException:
            registry.release(self.path, self)
            self._stamper.close()
            raise

    def _open_file(self, steps: Sequence[Migration], block_size: int) -> None:
        file = Path(self.path)
        if self.read_only and not file.exists():
            raise FileNotFoundError(f"No agent file at {self.path}; open it once without read_only=True to create it.")
        created = not self.read_only and not file.exists() and create_file(file, steps, block_size)
        self._stamper = FileStamper(self.path)  # before DuckDB locks the file, closed after it lets go
        if created:
            # The file is this process's template, fully migrated: no checks to run, and a spare DuckDB
            # instance (started ahead) opens it without the 10 ms a new instance costs.
            instances.start(CONFIG)
            spare = instances.open_new(self.path)
            self._conn = spare or connect(self.path, False)
            self.fresh, self._in_spare = True, spare is not None
        elif not self.read_only and registry.closed_clean(self.path, self._stamper.stamp(), self._schema):
            # This process closed the file fully checkpointed and no one has written it since (a hibernated
            # agent waking): its schema is known, and a spare instance opens it in about 3 ms instead of 14.
            instances.start(CONFIG)
            spare = instances.open_known(self.path)
            if spare is not None and registry.closed_clean(self.path, self._stamper.stamp(), self._schema):
                self._conn, self._in_spare = spare, True
                self.identity = registry.clean_identity(self.path)
            else:  # no spare ready, or a write slipped in before the file was locked
                if spare is not None:
                    spare.close()
                self._conn = connect(self.path, self.read_only)
                self._migrate_or_close(steps)
        else:
            self._conn = connect(self.path, self.read_only)
            self._migrate_or_close(steps)
        registry.forget_clean(self.path)
        self.opened_stamp = self.stamp()

    def _migrate_or_close(self, migrations: Sequence[Migration]) -> None:
        try:
            migrate(self.conn, self.path, migrations, self.read_only)
        except duckdb.Error as exc:  # the header was readable, its catalog or tables are not
            self.close()
            raise AgentFileError(self.path, open_reason(self.path, str(exc))) from exc
        except BaseException:
            self.close()
            raise

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The raw DuckDB connection. Hold :attr:`lock` while using it."""
        if self._conn is None:
            if self._destroyed:
                raise AgentDestroyedError(f"The agent file {self.path} was destroyed; get_agent() makes a new one.")
            if self._closed_by_user:
                raise AgentClosedError(f"The store {self.path} is closed; open the agent again with get_agent().")
            self._reopen(raise_errors=True)  # an earlier reopen failed: try again now
        assert self._conn is not None
        return self._conn

    @property
    def closed(self) -> bool:
        return self._closed_by_user

    @property
    def health(self) -> StoreHealth:
        """Whether the file is fully checkpointed (see :class:`~agentlab.store.health.StoreHealth`)."""
        return self._checks.state

    def close(self) -> None:
        """Commit held writes, close the connection and release the file lock. Safe to call twice.

        Callbacks of :meth:`on_close` run around it; one that fails is reported as a warning and the close goes on.

        Raises:
            DiskFullError: Held writes (a new agent's name) could not be committed; the file is closed without them
                (the name is written again when the agent next opens).
        """
        with self.lock:
            try:
                self.flush()
            finally:
                self._close_connection()

    def _close_connection(self) -> None:
        with self.lock:
            if not self._closed_by_user and self._conn is not None:
                self._hooks.run(before=True)
            self._closed_by_user = True
            self._held.cancel()
            if self._conn is not None:
                try:
                    self._conn.close()
                except duckdb.Error:
                    pass  # an invalidated instance cannot checkpoint; its WAL is replayed at the next open
                else:
                    self._remember_clean_close()
                finally:
                    self._conn = None
            self._stamper.close()
        if self.path != MEMORY:
            registry.release(self.path, self)
        self._hooks.run(before=False)

    def _remember_clean_close(self) -> None:
        """Record the file's stamp after a close that checkpointed everything, so that reopening it is quick."""
        if self.path == MEMORY or self.read_only or self._destroyed:
            return
        stamp = self._stamper.stamp()  # None if the close left commits in the log
        if stamp is not None:
            registry.remember_clean(self.path, stamp, self._schema, self.identity)

    def on_close(self, before: Callable[[], None], after: Callable[[], None] | None = None) -> None:
        """Run ``before`` when the store closes, while it still holds the file, and ``after`` once it released it."""
        self._hooks.add(before, after)

    def stamp(self) -> str | None:
        """:func:`~agentlab.store.stamp.file_stamp` of the file now (None in memory, or with commits in the log)."""
        return self._stamper.stamp()

    def destroy(self) -> None:
        """Close the store and delete its file with the files DuckDB keeps beside it; later use raises
        :class:`~agentlab.errors.AgentDestroyedError`. Safe to call twice."""
        with self.lock:
            self._destroyed = True
            self._held_back = None
            self._close_connection()  # held writes go with the file
        if self.path != MEMORY:
            from agentlab.store.files import remove_database_files

            registry.forget_clean(self.path)
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
        self._checks.reopened()
        try:
            self._conn = connect(self.path, self.read_only)
        except AgentlabError:
            if raise_errors:
                raise
            return
        if self._held:
            self._held.rehold(self._conn)  # they were in the old connection's open transaction
        # Objects registered on the old connection are gone: let every derived cache rebuild from the file.
        self._caches.outside_write()

    def _mark_unhealthy(self, exc: BaseException) -> None:
        self._checks.failed(exc)
        self._reopen()

    def _after_durable_commit(self, *, may_checkpoint: bool = True) -> None:
        """While unhealthy, notice (or try, at most every few seconds) a checkpoint that succeeds again."""
        if self._conn is not None and self._checks.should_checkpoint(may_checkpoint=may_checkpoint):
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
            self._checks.recovered()
            return True

    # -- transactions and derived caches ---------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Run a block atomically; nested uses join the outermost transaction. Held writes commit with it.

        Raises:
            ReadOnlyAgentError: The store is read-only.
            DiskFullError: The commit failed for lack of disk space; nothing was stored.
        """
        self.require_writable()
        with self.lock:
            if not self._depth:
                self.write_held_back()
            conn = self.conn
            if self._depth:
                self._depth += 1
                try:
                    yield conn
                finally:
                    self._depth -= 1
                return
            if not self._held.carry(conn):  # else the open transaction holding a new agent's name carries this one
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
                if self._conn is not None:
                    try:
                        conn.execute("ROLLBACK")
                    except duckdb.Error:
                        pass  # the failed COMMIT already ended the transaction
                    if self._held and not invalidated(exc):
                        self._held.rehold(conn)
                self._caches.rolled_back()
                if invalidated(exc):
                    self._reopen()
                if isinstance(exc, duckdb.Error) and is_disk_full(exc):
                    raise DiskFullError(self.path, "committing a write") from exc
                raise
            self._depth = 0
            self._held.committed()
            self.fresh = False
            self._caches.committed()
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
                self._caches.add_after_commit(callback)
                return
        callback()

    def after_rollback(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` if the current transaction rolls back (never if none is open).

        Used to drop caches that were updated optimistically inside the transaction.
        """
        with self.lock:
            if self._depth:
                self._caches.add_after_rollback(callback)

    def derived(self, key: str, make: Callable[[], T], *, reset: Callable[[T], None] | None = None) -> T:
        """The store's one ``key`` object (a cache derived from the file), made by ``make()`` on first use.

        ``reset(obj)`` runs at every :meth:`note_outside_write`. The object lives as long as the store, so it
        should refer back to the store weakly.
        """
        return self._caches.derived(key, make, reset=reset)

    def on_outside_write(self, callback: Callable[[], None]) -> None:
        """Register ``callback`` to drop a derived cache whenever :meth:`note_outside_write` is called."""
        self._caches.on_outside_write(callback)

    def note_outside_write(self) -> None:
        """Say that statements agentlab did not write (``agent.sql``) may have changed the file.

        Every derived cache (message map and texts, search views, FAISS indexes) is dropped and rebuilt
        from the file when next needed. The callbacks run under :attr:`lock`, so they must take no other lock.
        """
        with self.lock:
            self.fresh = False
            self.outside_writes += 1
            self._caches.outside_write()

    def defer(self, query: str, params: Sequence[Any] = ()) -> None:
        """Run a write; on a new file with nothing committed yet, commit it with the store's next commit.

        Only for writes that a crash may lose because they are written again (a new agent's name, which reaches the
        disk with its first write). Every read of this store sees the write at once; it is committed by the next
        transaction or write of the store, :meth:`flush`, :meth:`close`, user SQL, or
        :data:`agentlab.store.deferred.DELAY` seconds later. On any other store it is an ordinary write.

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
                    raise statement_error(self.path, exc, query) from exc
                return
            with self.transaction() as conn:
                conn.execute(query, list(params)).fetchall()

    def flush(self) -> None:
        """Commit the writes held by :meth:`defer` now (nothing happens when none are held).

        Raises:
            DiskFullError: The commit failed for lack of disk space; the writes stay held.
        """
        with self.lock:
            if not self._depth and not self._closed_by_user:
                self.write_held_back()
            if self._held and not self._depth and not self._closed_by_user and self._conn is not None:
                with self.transaction():
                    pass

    def hold_back(self, write: Callable[[], None]) -> None:
        """Hold a higher layer's write back until just before this store's next statement or transaction (group
        commit: a server holds the state of several turns and stores only the last).

        ``write()`` runs once, under :attr:`lock`, before the next :meth:`execute`, :meth:`relation` or outermost
        :meth:`transaction`, at :meth:`flush` and :meth:`close`, or when :meth:`write_held_back` is called; a second
        call replaces a write not yet run. So every statement, whoever sends it, runs after the writes of the
        turns before it, and a crash can lose only writes nothing after them depends on. The holder keeps whatever
        it must not announce until the write is done (a server, the frames of the turns).
        """
        with self.lock:
            self._held_back = write

    def write_held_back(self) -> bool:
        """Run the write :meth:`hold_back` holds now, if any; returns whether there was one.

        Raises:
            What the write raises (it is not held any more).
        """
        with self.lock:
            write, self._held_back = self._held_back, None
            if write is None:
                return False
            write()
            return True

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyAgentError(f"{self.path} is open read-only; reopen it with read_only=False to write.")

    # -- statements ----------------------------------------------------------------------------

    def execute(self, query: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """Execute one statement with bound parameters and return the DuckDB cursor.

        Raises:
            SqlError: DuckDB rejected the statement (carries the query).
            DiskFullError: The statement's commit failed for lack of disk space; nothing was stored.
            ReadOnlyAgentError: The statement writes to a read-only store.
        """
        with self.lock:
            if not self._depth:
                self.write_held_back()
            conn = self.conn
            if self._held and not self._depth:
                held = self._held.execute(query, params)
                if held is not None:
                    return held
            try:
                cursor = conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                if DURABLE in str(exc) and not self._depth:
                    # An autocommitted statement that is stored; only the checkpoint after it failed.
                    self._mark_unhealthy(exc)
                    return self.conn.execute("SELECT NULL WHERE false")
                if invalidated(exc):
                    self._reopen()
                raise statement_error(self.path, exc, query) from exc
            if not self._depth and not self._checks.state.ok:
                self._after_durable_commit(may_checkpoint=False)
            return cursor

    def relation(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """Run a query and return a materialised result that converts to pandas or Arrow.

        DuckDB's relation API converts without the extra row copy of a DB-API cursor. The result is
        materialised under the lock, so it is safe to convert from any thread afterwards.
        """
        with self.lock:
            if not self._depth:
                self.write_held_back()
            try:
                rel = self.conn.sql(query, params=list(params) if params else None)
                return Materialised(rel.to_arrow_table() if rel is not None else None)
            except duckdb.Error as exc:
                if DURABLE in str(exc) and not self._depth:
                    self._mark_unhealthy(exc)
                    return Materialised(None)
                if invalidated(exc):
                    self._reopen()
                elif self._held and not self._depth:
                    self._held.rehold(self.conn)  # the error aborted their transaction
                raise statement_error(self.path, exc, query) from exc

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

    def applied_migrations(self) -> list[str]:
        """Names of the migrations recorded in this file, in the order they were applied."""
        return [r[0] for r in self.conn.execute(
            "SELECT name FROM _agentlab_migrations ORDER BY applied_at, name"
        ).fetchall()]
