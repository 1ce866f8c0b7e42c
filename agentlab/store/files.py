"""Opening and creating an agent's DuckDB file: typed errors for files that are not agents, and atomic creation.

Invariants:

* DuckDB never installs or loads an extension while opening a file.
* A file that is not an agentlab file (not DuckDB, truncated, a directory, another application's tables), or whose
  write-ahead log cannot be replayed (damaged, or another file's), raises :class:`~agentlab.errors.AgentFileError`
  and is left byte for byte as it was, its log too; one written by a newer schema raises
  :class:`~agentlab.errors.SchemaTooNewError` unless opened read-only.
* A new file appears complete or not at all: it is built and migrated under a temporary name in a folder beside
  its path and linked into place, so a process that loses a race to create it opens the winner's file.
* Pending migrations are applied each with its record in one transaction.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path

import duckdb

from agentlab.errors import (
    AgentFileError,
    AgentLockedError,
    DiskFullError,
    MigrationError,
    SchemaTooNewError,
)
from agentlab.store.migrations import Migration

__all__ = ["DURABLE", "MEMORY", "connect", "create_file", "is_disk_full", "migrate", "open_reason",
           "remove_database_files"]

MEMORY = ":memory:"

_LOCK_DETAIL = re.compile(r"Conflicting lock is held in (.*)$", re.S)

# Never reach for the network or load code behind the user's back: a SQLite or Parquet file at an agent's path
# would otherwise make DuckDB try to download a scanner extension.
_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}

_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS _agentlab_migrations (
    name       VARCHAR PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""

# Catalog objects a user can create; a brand-new DuckDB file has none of them.
_OBJECTS = """
SELECT
    (SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary)
  + (SELECT count(*) FROM duckdb_views() WHERE database_name = current_database() AND NOT temporary
                                             AND NOT internal)
  + (SELECT count(*) FROM duckdb_sequences() WHERE database_name = current_database() AND NOT temporary)
"""
_HAS_MIGRATIONS = """
SELECT count(*) FROM duckdb_tables()
WHERE database_name = current_database() AND schema_name = 'main' AND table_name = '_agentlab_migrations'
"""

# DuckDB's messages for a commit that is durable in the WAL although the checkpoint after it failed, for a
# database instance invalidated by an earlier fatal error, and for a full disk.
DURABLE = "COMMIT succeeded and is durable"
_INVALIDATED = "database has been invalidated"
_NO_SPACE = ("No space left on device", "Disk quota exceeded", "not enough space")

# The folder, beside an agent file, where new files are built before they are linked into place.
_CREATING = ".agentlab-creating"

def is_disk_full(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _NO_SPACE)


def connect(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Open ``path`` with agentlab's configuration, translating DuckDB's open errors into typed ones."""
    try:
        return duckdb.connect(path, read_only=read_only and path != MEMORY, config=dict(_CONFIG))
    except duckdb.Error as exc:
        text = str(exc)
        match = _LOCK_DETAIL.search(text)
        if match or "Could not set lock" in text:
            raise AgentLockedError(path, match.group(1).strip() if match else "") from None
        if isinstance(exc, duckdb.IOException) and is_disk_full(exc):
            raise DiskFullError(path, "opening it") from exc
        # Whatever else DuckDB says while opening (a bad header, a damaged log: some of these are its base
        # ``duckdb.Error``) is about the file, never about the caller's arguments.
        raise AgentFileError(path, open_reason(path, text)) from exc


def open_reason(path: str, text: str) -> str:
    if os.path.isdir(path):
        return "it is a directory"
    if "WAL" in text:
        detail = text.split('": ', 1)[-1].splitlines()[0].rstrip(".")  # DuckDB's words after the log's path
        return (f"its write-ahead log {path}.wal cannot be replayed ({detail}); moving that .wal aside opens the "
                "file as of its last checkpoint, without the writes logged after it")
    for marker, reason in (("Read-only file system", "its file system is read-only"),
                           ("Permission denied", "this process may not write it")):
        if marker in text:
            return f"{reason}; open it with read_only=True to read it"
    try:
        size = os.path.getsize(path)
    except OSError:
        size = -1
    if size == 0:
        return "it is an empty file (perhaps an interrupted creation by an older agentlab)"
    try:
        with open(path, "rb") as handle:
            magic = handle.read(16)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if magic.startswith(b"SQLite format 3"):
        return "it is a SQLite database, not DuckDB"
    if magic.startswith(b"PAR1"):
        return "it is a Parquet file, not DuckDB"
    if "Could not read enough bytes" in text:
        return "it is truncated (shorter than its own header says)"
    if "not a valid DuckDB database file" in text:
        return "it is not a DuckDB database file"
    return text.splitlines()[0] if text else "DuckDB could not open it"


def _check_ownership(conn: duckdb.DuckDBPyConnection, path: str) -> bool:
    """Whether the file already carries agentlab's schema table; refuse another application's DuckDB file."""
    if conn.execute(_HAS_MIGRATIONS).fetchall()[0][0]:
        return True
    if conn.execute(_OBJECTS).fetchall()[0][0]:
        raise AgentFileError(
            path, "it is a DuckDB database of another application (it has tables but no agentlab schema)"
        )
    return False


def migrate(conn: duckdb.DuckDBPyConnection, path: str, migrations: Sequence[Migration], read_only: bool) -> None:
    has_table = _check_ownership(conn, path)
    applied = [r[0] for r in conn.execute(
        "SELECT name FROM _agentlab_migrations ORDER BY applied_at, name"
    ).fetchall()] if has_table else []
    known = {m.name for m in migrations}
    unknown = [name for name in applied if name not in known]
    if unknown and not read_only:
        raise SchemaTooNewError(path, file_version=applied[-1], known_version=migrations[-1].name
                                if migrations else "none", unknown=unknown)
    done = set(applied)
    pending = [m for m in migrations if m.name not in done]
    if not pending:
        return
    if read_only:
        raise MigrationError(
            f"{path} needs schema migrations {[m.name for m in pending]}; "
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
            if isinstance(exc, duckdb.Error) and is_disk_full(exc):
                raise DiskFullError(path, f"applying migration {migration.name}") from exc
            raise MigrationError(f"Migration {migration.name} failed and was rolled back: {exc}") from exc
        conn.execute("COMMIT")


def _remove_quietly(path: Path) -> None:
    for candidate in (path, path.with_name(path.name + ".wal")):
        try:
            candidate.unlink()
        except OSError:
            pass  # already gone, or a file system that refuses writes (then nothing was created either)


def _sweep_stale_creations(folder: Path) -> None:
    """Remove temporary files of creations whose process died (on this host) before linking them into place."""
    pattern = re.compile(rf"^\..+\.{re.escape(socket.gethostname())}-(\d+)-[0-9a-f]{{8}}\.creating(\.wal)?$")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for stale in entries:
        match = pattern.match(stale.name)
        if match is None:
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            try:
                stale.unlink()
            except OSError:
                pass
        except (PermissionError, ValueError, OverflowError):
            continue


def create_file(path: Path, migrations: Sequence[Migration]) -> None:
    """Create the migrated file at ``path`` atomically: build it under a temporary name, then link it in.

    If another process creates ``path`` first, its file is kept and this one discarded.
    """
    # Temporary files live in a folder of their own beside the agents, so that sweeping the leftovers of killed
    # creations lists a handful of files, not every agent of the class; the folder goes once it is empty.
    work = path.parent / _CREATING
    temp = work / f".{path.name}.{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.creating"
    try:
        for attempt in range(5):
            work.mkdir(exist_ok=True)
            _sweep_stale_creations(work)
            try:
                conn = connect(str(temp), False)
                break
            except (AgentFileError, DiskFullError) as exc:
                if isinstance(exc, DiskFullError):
                    raise DiskFullError(str(path), "creating it") from None
                if not work.exists() and attempt < 4:
                    continue  # another creator removed the emptied folder just now
                raise AgentFileError(str(path), f"it cannot be created in {path.parent} ({exc.reason})") from None
        try:
            migrate(conn, str(path), migrations, False)
        finally:
            conn.close()  # checkpoints: the file is complete and no WAL is left
        try:
            os.link(temp, path)
        except FileExistsError:
            pass  # another process won the race; open its file
        except OSError:
            # File systems without hard links: rename, which cannot refuse an existing target, so look first.
            if not path.exists():
                os.replace(temp, path)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError(str(path), "creating it") from exc
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise AgentFileError(str(path), f"it cannot be created here ({exc.strerror})") from exc
        raise
    finally:
        _remove_quietly(temp)
        try:
            work.rmdir()  # only once empty: other creations may still be under way
        except OSError:
            pass


def remove_database_files(path: Path) -> None:
    """Remove a DuckDB file with its log (``.wal``) and its spill folder (``.tmp``), ignoring what is not there."""
    for leftover in (path, path.with_name(path.name + ".wal"), path.with_name(path.name + ".tmp")):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
            continue
        try:
            leftover.unlink(missing_ok=True)
        except OSError:
            pass
