"""A new agent file's name held in one open transaction until the store's next durable commit.

A new agent's first steps each wrote a row of their own: its name (``agent_meta``), then its first session or
message, two durable commits of about 2 ms each where one does. :meth:`Store.defer <agentlab.store.Store.defer>`
runs such a write at once, inside a transaction it leaves open, and the next commit of the store (the first message,
session, state or context block) carries it; closing the store, running user SQL or :data:`DELAY` seconds passing
commit it too. Only writes that are written again after a loss may be held: a write that returns normally is
durable, so sessions, messages and state are never held.

Invariants:

* Only a store whose file it has just created, with nothing committed to it since and no SQL of the user run on it,
  holds writes; any other store commits a deferred write at once, as it always did. A process that exits
  normally commits every store's held writes, closed or not.
* Every read of the store (same connection) sees held writes; other processes cannot open the file (DuckDB's lock),
  and the store's second connections (the search index's) read committed rows only, as ever. Code that opens a
  transaction on the connection itself commits held writes first (:meth:`Store.flush`).
* A transaction or statement that fails inside the held transaction rolls back its own work only: the held writes
  are run again in a fresh transaction, so they are neither lost nor doubled.
* A crash before the commit loses the held writes: the agent's name and class, at most :data:`DELAY` seconds old,
  written again when the agent next opens (``open_many`` lists such a file with no name until then).
* The timer is one daemon thread for the process: it never keeps a process alive, holds stores weakly (a store
  nobody refers to is not kept open by it), and a forked child starts without it.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["DELAY", "HeldWrites"]

_WRITES = ("INSERT", "UPDATE", "DELETE")  # names of duckdb.StatementType members (duckdb is imported lazily)

DELAY = 0.5
"""Seconds after which held writes are committed even if nothing else is written."""

# One thread commits the held writes of every store whose DELAY has passed (a thread per store would cost half a
# millisecond to start, a twentieth of creating an agent).
_due: dict[int, tuple[float, weakref.ReferenceType[HeldWrites]]] = {}
_state: dict[str, Any] = {"thread": None, "condition": threading.Condition()}


def _schedule(held: HeldWrites) -> None:
    condition = _state["condition"]
    with condition:
        _due[id(held)] = (time.monotonic() + DELAY, weakref.ref(held))
        if _state["thread"] is None:
            thread = _state["thread"] = threading.Thread(target=_run, name="agentlab-held-writes", daemon=True)
            thread.start()
        condition.notify()


def _unschedule(held: HeldWrites) -> None:
    with _state["condition"]:
        _due.pop(id(held), None)


def _run() -> None:
    condition = _state["condition"]
    while True:
        with condition:
            while not _due:
                condition.wait()
            now = time.monotonic()
            first = min(deadline for deadline, _ in _due.values())
            if first > now:
                condition.wait(first - now)
                continue
            ready = [ref for key, (deadline, ref) in list(_due.items()) if deadline <= now and _due.pop(key)]
        for ref in ready:
            held = ref()
            if held is not None:
                held.due()


def _forget_after_fork() -> None:
    _due.clear()
    _state.update(thread=None, condition=threading.Condition())


def _flush_all() -> None:
    """At exit: commit what every store still holds (a script that never closes its agents keeps its writes)."""
    with _state["condition"]:
        refs = [ref for _, ref in _due.values()]
        _due.clear()
    for ref in refs:
        held = ref()
        if held is not None:
            held.due()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_flush_all)


class HeldWrites:
    """The statements a store holds in its open transaction, to run again after a rollback (one per store)."""

    def __init__(self, store: Any) -> None:
        self.statements: list[tuple[str, list[Any]]] = []
        self._store = weakref.ref(store)  # the timer thread must not keep a store alive

    def __bool__(self) -> bool:
        return bool(self.statements)

    def add(self, conn: Any, query: str, params: Sequence[Any]) -> None:
        """Run ``query`` in the open transaction (beginning it for the first write) and remember it.

        If it fails, the transaction holds exactly the earlier writes again before the error propagates.
        """
        if not self.statements:
            conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(query, list(params)).fetchall()
        except BaseException:
            self.rolled_back(conn)
            raise
        if not self.statements:
            _schedule(self)
        self.statements.append((query, list(params)))

    def carry(self, conn: Any) -> bool:
        """Whether a transaction beginning now runs inside the held one (which it then commits).

        Code that ran a failing statement on the connection itself left the held transaction aborted: the held
        writes are run again in a new one first, so the caller's write does not fail for it.
        """
        import duckdb

        if not self.statements:
            return False
        try:
            conn.execute("SELECT 1").fetchall()
        except duckdb.Error:
            self.rehold(conn)
        return bool(self.statements)

    def execute(self, query: str, params: Any) -> Any | None:
        """A statement of the store while writes are held: a query runs in their transaction, one INSERT, UPDATE
        or DELETE commits with them; anything else commits them first and returns None (the store runs it as
        usual). Errors are the store's typed ones."""
        import duckdb

        from agentlab.store.results import Fetched, statement_error

        store: Any = self._store()  # the store calling this method: alive
        try:
            kinds = [statement.type for statement in duckdb.extract_statements(query)]
        except duckdb.Error:
            kinds = []
        conn = store.conn
        if kinds and all(kind == duckdb.StatementType.SELECT for kind in kinds):
            try:
                return conn.execute(query, params) if params is not None else conn.execute(query)
            except duckdb.Error as exc:
                self.rehold(conn)  # the error aborted their transaction
                raise statement_error(store.path, exc, query) from exc
        if len(kinds) == 1 and kinds[0].name in _WRITES:
            try:
                with store.transaction() as conn:
                    # read the statement's rows (an UPDATE ... RETURNING) before COMMIT replaces the result
                    return Fetched(conn.execute(query, params) if params is not None else conn.execute(query))
            except duckdb.Error as exc:
                raise statement_error(store.path, exc, query) from exc
        store.flush()
        return None

    def due(self) -> None:
        """:data:`DELAY` has passed: commit (on the scheduling thread; a failure leaves the writes held for the next
        commit or the close, which report it)."""
        store = self._store()
        if store is not None:
            try:
                store.flush()
            except Exception:  # nobody to tell here; the writes stay held
                pass

    def committed(self) -> None:
        """The open transaction committed: the writes are durable."""
        self.statements = []
        _unschedule(self)

    def rehold(self, conn: Any) -> None:
        """Run the held writes again after a rollback or a new connection dropped them; if that fails they are
        dropped, and the store is no longer fresh (the agent's name is written again when it next opens)."""
        import duckdb

        try:
            self.rolled_back(conn)
        except duckdb.Error:
            store = self._store()
            if store is not None:
                store.fresh = False
                store.identity = None  # a held name was dropped: the next open reads (and writes) it again

    def rolled_back(self, conn: Any) -> None:
        """Roll back the open transaction (if still open) and run the held writes again in a new one.

        A write that cannot be run again (it never can fail twice in a row: it ran once already) is dropped with
        the rest, and the error propagates.
        """
        import duckdb

        try:
            conn.execute("ROLLBACK")
        except duckdb.Error:
            pass  # already ended by DuckDB (a failed COMMIT) or never begun
        pending, self.statements = self.statements, []
        if not pending:
            self.committed()
            return
        conn.execute("BEGIN TRANSACTION")
        try:
            for query, params in pending:
                conn.execute(query, params).fetchall()
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except duckdb.Error:
                pass
            self.committed()
            raise
        self.statements = pending

    def cancel(self) -> None:
        """Forget the writes (their connection is gone) and stop the timer."""
        self.committed()
