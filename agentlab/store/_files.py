"""Opening and creating an agent's DuckDB file: typed errors for files that are not agents, and atomic creation.

Invariants:

* DuckDB never installs or loads an extension while opening a file.
* A file that is not an agentlab file (not DuckDB, truncated, a directory, another application's tables), or whose
  write-ahead log cannot be replayed (damaged, or another file's), raises :class:`~agentlab.errors.AgentFileError`
  and is left byte for byte as it was, its log too; one written by a newer schema raises
  :class:`~agentlab.errors.SchemaTooNewError` unless opened read-only.
* A new file appears complete or not at all: it is written under a temporary name in a folder beside its path,
  flushed to disk and linked into place, so a process that loses a race to create it opens the winner's file.
* A new file is a copy of the process's template: an empty DuckDB file to which the very migrations of the
  store were applied, built once per process (and per list of migrations). So a new file's schema is exactly
  that of an old file migrated to the same version, and creating an agent runs no DDL. New files use
  :data:`BLOCK_SIZE` blocks; files written with DuckDB's default 256 KiB blocks keep them and keep working.
* Pending migrations are applied each with its record in one transaction.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import duckdb

from agentlab.errors import (
    AgentFileError,
    AgentLockedError,
    DiskFullError,
    InvalidArgumentError,
    MigrationError,
    SchemaTooNewError,
)
from agentlab.store._migrations import Migration

__all__ = ["BLOCK_SIZE", "BLOCK_SIZES", "CONFIG", "DURABLE", "MEMORY", "SEARCH_INDEX_SUFFIX", "connect", "create_file",
           "is_disk_full", "migrate", "open_reason", "remove_database_files", "template_bytes"]

MEMORY = ":memory:"

_LOCK_DETAIL = re.compile(r"Conflicting lock is held in (.*)$", re.S)

# Never reach for the network or load code behind the user's back: a SQLite or Parquet file at an agent's path
# would otherwise make DuckDB try to download a scanner extension.
# checkpoint_threshold: DuckDB checkpoints by itself once its log holds this much. At its default (16 MB) a bulk
# import of 10,000-message batches checkpointed every other batch, and each checkpoint compressed the growing
# table's newest row groups again: 300,000 messages took 2.5 times as long to write as with checkpoints every
# 256 MB. A bigger log costs replay time only after a crash; a clean close checkpoints.
CONFIG: dict[str, str | bool] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "checkpoint_threshold": "256MB"}

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

# DuckDB's smallest block size, for new files. DuckDB gives each table's data, each string dictionary and its
# metadata blocks of their own, so with the default 256 KiB blocks an agent with twenty messages took 2.5 MB
# (sqlite3 with FTS5: 184 KB); with 16 KiB blocks it takes about 200 KB. The block size is stored in the file's
# header, so files made with other sizes open as they are.
BLOCK_SIZE = 16_384
BLOCK_SIZES = (16_384, 32_768, 65_536, 131_072, 262_144)  # what DuckDB 2 accepts for a new file

# Template files by migration list (names and functions): the bytes every new file of this process starts from.
_templates: dict[tuple[int, tuple[tuple[str, object], ...]], bytes] = {}
_templates_lock = threading.Lock()

def is_disk_full(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _NO_SPACE)


def connect(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Open ``path`` with agentlab's configuration, translating DuckDB's open errors into typed ones."""
    try:
        return duckdb.connect(path, read_only=read_only and path != MEMORY, config=dict(CONFIG))
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


def template_bytes(migrations: Sequence[Migration], work: Path, block_size: int = BLOCK_SIZE) -> bytes:
    """The bytes of a new, fully migrated agent file, built in ``work`` on first use and kept for the process.

    The template is an empty DuckDB file (with ``block_size`` blocks) to which ``migrations`` were applied
    by :func:`migrate`, exactly as for any older file; it holds no agent's data.

    Raises:
        MigrationError: A migration failed.
        DiskFullError, OSError: The template could not be written in ``work``.
    """
    key = (block_size, tuple((m.name, m.apply) for m in migrations))
    with _templates_lock:
        data = _templates.get(key)
        if data is not None:
            return data
        temp = work / f".template.{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.creating"
        try:
            try:
                conn = duckdb.connect(str(temp), config={**CONFIG, "default_block_size": str(block_size)})
                try:
                    conn.execute("SET enable_progress_bar = false")  # never print a bar in the caller's output
                    migrate(conn, str(temp), migrations, False)
                finally:
                    conn.close()  # checkpoints: every byte is in the file, and no WAL is left
            except duckdb.Error as exc:
                # OSError(ENOENT, ...) is a FileNotFoundError: the creator retries when another one removed the
                # emptied folder just as this template was started in it.
                code = (errno.ENOSPC if is_disk_full(exc) else errno.ENOENT if "No such file" in str(exc)
                        else errno.EIO)
                raise OSError(code, f"the template of new agent files cannot be built ({exc})") from exc
            if Path(str(temp) + ".wal").exists():
                raise OSError(errno.EIO, "the template of new agent files kept a write-ahead log after closing")
            data = _templates[key] = temp.read_bytes()
            return data
        finally:
            _remove_quietly(temp)


def _write_durably(temp: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``temp`` and flush it to disk (a crash never leaves a linked half file)."""
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def create_file(path: Path, migrations: Sequence[Migration], block_size: int = BLOCK_SIZE) -> bool:
    """Create the migrated file at ``path`` atomically: write a copy of the template, then link it in.

    If another process creates ``path`` first, its file is kept and this one discarded.

    Returns:
        Whether this call's copy was linked into place (False: another process created ``path`` first).

    Raises:
        InvalidArgumentError: ``block_size`` is not one DuckDB accepts; nothing is created.
    """
    if block_size not in BLOCK_SIZES:
        raise InvalidArgumentError(f"block_size {block_size!r} is not one DuckDB accepts; use one of "
                                   f"{', '.join(f'{b:,}' for b in BLOCK_SIZES)} (bytes).")
    # Temporary files live in a folder of their own beside the agents, so that sweeping the leftovers of killed
    # creations lists a handful of files, not every agent of the class; the folder goes once it is empty.
    work = path.parent / _CREATING
    temp = work / f".{path.name}.{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.creating"
    try:
        for attempt in range(5):
            work.mkdir(exist_ok=True)
            _sweep_stale_creations(work)
            try:
                _write_durably(temp, template_bytes(migrations, work, block_size))
                break
            except FileNotFoundError:
                if attempt < 4:
                    continue  # another creator removed the emptied folder just now
                raise
        try:
            os.link(temp, path)
            return True
        except FileExistsError:
            return False  # another process won the race; open its file
        except OSError:
            # File systems without hard links: rename, which cannot refuse an existing target, so look first.
            if path.exists():
                return False
            os.replace(temp, path)
            return True
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(str(path), "creating it") from exc
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise AgentFileError(str(path), f"it cannot be created here ({exc.strerror})") from exc
        if exc.errno == errno.EIO:
            raise AgentFileError(str(path), f"it cannot be created in {path.parent} ({exc.strerror})") from exc
        raise
    finally:
        _remove_quietly(temp)
        try:
            work.rmdir()  # only once empty: other creations may still be under way
        except OSError:
            pass


SEARCH_INDEX_SUFFIX = ".search-index"
"""The folder beside an agent's file that holds its message search index (derived from the file, rebuilt when
missing), named ``<file><suffix>``."""


def remove_database_files(path: Path) -> None:
    """Remove a DuckDB file with its log (``.wal``), its spill folder (``.tmp``) and its search index folder,
    ignoring what is not there."""
    for leftover in (path, *(path.with_name(path.name + suffix) for suffix in (".wal", ".tmp", SEARCH_INDEX_SUFFIX))):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
            continue
        try:
            leftover.unlink(missing_ok=True)
        except OSError:
            pass
