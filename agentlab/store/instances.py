"""Spare DuckDB instances, started ahead so that opening a new agent file does not wait for DuckDB to start.

Starting a DuckDB instance costs about 10 ms of CPU on this project's VM whatever its configuration (it builds the
catalog of built-in functions): most of what creating an agent costs. Once this process has created an agent file,
a background thread keeps :data:`SPARES` unused in-memory instances ready, and :func:`open_new` opens a file the
process has just created in one of them: ATTACH the file under the name ``duckdb.connect(path)`` would give it, USE
it, DETACH the in-memory database and point the spill folder beside the file. The instance then holds that file
alone, as ``duckdb.connect(path)`` would (about 1.4 ms instead of 10-12 for a new file, 2.7 ms instead of 14 for
one with a few tables of data).

Invariants:

* An instance serves one file for its whole life and is closed with it. Spares are never shared or reused, and no
  statement but the opening ones runs on a spare before it is handed out, so one agent's SQL can never reach
  another's file or settings through an instance.
* Only files this process has just created from its template, or closed itself fully checkpointed and nobody has
  written since (a hibernated agent's, :func:`agentlab.store.registry.closed_clean`), are opened this way; any
  other open goes through ``duckdb.connect``. A spare that fails to open its file (another process holds it, say)
  is closed, and the caller opens the file the usual way, which reports the problem with its typed errors.
* A child process started by ``fork`` forgets its parent's spares (their threads did not survive the fork); the
  spares of a process are closed when it exits.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from agentlab.store.quoting import sql_ident, sql_literal

__all__ = ["SPARES", "open_known", "open_new", "ready", "spare_count", "start"]

SPARES = 1
"""Instances kept ready once the process has created an agent file (0 turns spares off). A spare takes starting an
instance off the creation of an agent when a core is free (on this project's 2-core VM, p50 17-21 ms instead of 29
for a new agent, its first session and first message); it costs the same CPU and 2-5 ms more per agent, so a
machine whose cores are all busy is better off with 0."""

_lock = threading.Condition()
_spares: list[Any] = []
_state: dict[str, Any] = {"thread": None, "stopping": False, "config": None, "waiting": False}

WAIT = 0.25
"""Seconds an open waits for the spare the thread is starting before it starts an instance itself."""


def _fill() -> None:
    import duckdb

    while True:
        with _lock:
            while not _state["stopping"] and len(_spares) >= SPARES:
                _lock.wait()
            if _state["stopping"]:
                return
            config = dict(_state["config"])
        try:
            spare = duckdb.connect(":memory:", config=config)
        except duckdb.Error:  # nothing to keep ready; callers start their own instances
            with _lock:
                _lock.notify_all()  # a caller waiting for this spare stops waiting
            return
        with _lock:
            if _state["stopping"]:
                spare.close()
                return
            _spares.append(spare)
            _lock.notify_all()


def start(config: dict[str, Any]) -> None:
    """Keep :data:`SPARES` instances with ``config`` ready from now on (a daemon thread; idempotent)."""
    with _lock:
        if SPARES <= 0 or _state["stopping"]:
            return
        _state["config"] = dict(config)
        thread = _state["thread"]
        if thread is None or not thread.is_alive():
            thread = _state["thread"] = threading.Thread(target=_fill, name="agentlab-spare-duckdb", daemon=True)
            thread.start()
        _lock.notify_all()


def spare_count() -> int:
    """How many spares are ready now."""
    with _lock:
        return len(_spares)


def ready(timeout: float = 10.0) -> bool:
    """Wait until a spare is ready (for tests and benchmarks); returns whether one is."""
    with _lock:
        return _lock.wait_for(lambda: bool(_spares) or _state["thread"] is None, timeout) and bool(_spares)


def open_new(path: str) -> Any | None:
    """Open ``path`` (a file this process just created) in a spare instance; None when no spare is ready, nor
    ready within :data:`WAIT` seconds while the thread starts one (only one caller at a time waits).

    Raises nothing: a spare that cannot open the file is closed and None returned, so the caller's own open
    reports the problem with its usual typed errors.
    """
    import duckdb

    with _lock:
        if SPARES <= 0:
            return None
        thread = _state["thread"]
        if not _spares and not _state["waiting"] and thread is not None and thread.is_alive():
            # The thread is starting the next spare right now: waiting for it costs at most what starting an
            # instance here would, and less as it is under way. One caller waits; others start their own rather
            # than queue behind it (a burst of opens then uses both cores).
            _state["waiting"] = True
            try:
                _lock.wait_for(lambda: bool(_spares) or _state["stopping"] or not thread.is_alive(), WAIT)
            finally:
                _state["waiting"] = False
        if not _spares:
            _lock.notify_all()
            return None
        spare = _spares.pop()
        _lock.notify_all()  # the thread starts the next one
    # The name duckdb.connect(path) gives the file's database: its file name up to the first dot.
    name = os.path.basename(path).split(".")[0]
    try:
        if name and name != "memory":  # one call: each execute() crosses into DuckDB and back
            spare.execute(f"ATTACH {sql_literal(path)} AS {sql_ident(name)}; USE {sql_ident(name)}; DETACH memory; "
                          f"SET temp_directory = {sql_literal(path + '.tmp')}")
        else:
            spare.execute(f"ATTACH {sql_literal(path)}")
            name = spare.execute("SELECT database_name FROM duckdb_databases() "
                                 "WHERE NOT internal AND database_name <> 'memory'").fetchall()[0][0]
            spare.execute(f"USE {sql_ident(name)}; DETACH memory; SET temp_directory = {sql_literal(path + '.tmp')}")
    except duckdb.Error:
        try:
            spare.close()
        except duckdb.Error:
            pass
        return None
    return spare


open_known = open_new
"""Open a file this process closed cleanly, unchanged since, in a spare (the same steps as :func:`open_new`)."""


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Condition()
    _spares.clear()  # not closed: their threads are gone in the child
    _state.update(thread=None, stopping=False, waiting=False)


def _stop() -> None:
    with _lock:
        _state["stopping"] = True
        spares, _spares[:] = list(_spares), []
        thread = _state["thread"]
        _lock.notify_all()
    if thread is not None:
        thread.join(timeout=2)
    for spare in spares:
        try:
            spare.close()
        except Exception:
            pass


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_stop)
