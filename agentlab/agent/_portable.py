"""Agents as folders of Parquet files: export one, restore it exactly elsewhere.

:func:`export` writes every table of an agent's DuckDB file (messages, compactions, sessions, context blocks,
vectors, usage, full-text postings, and any table a researcher created with ``agent.sql``) to
``<folder>/<table>.parquet``, plus ``manifest.json``: the agent's name and class, the schema migrations the file
had, each table's file, columns and row count, and the last value of every sequence. A table whose name is not
plain (letters, digits, underscores) gets a file name made of a slug and a hash of its name; the manifest keeps
the real name. :func:`import_` builds a new agent file from such a folder.

Invariants:

* Round trip: after ``import_(export(agent))`` every table holds the same rows, column for column, including
  ``seq`` values, and the sequences continue after the values they had, so new rows get the same seqs they
  would have got in the original.
* An export is one consistent state: it is written under the store lock, inside a transaction when the agent is
  writable.
* Nothing is ever half-written at a destination, even if the process is killed: an export is built in a
  temporary folder beside its destination, with the manifest written last, and swapped into place whole; an
  import builds the agent file under a temporary name beside its place and renames it there when complete.
  A failure (a full disk included) leaves the destination as it was, and the next run removes the temporary
  files of killed ones.
* No file name leaves the folder: an export's file names are plain names inside it, and an import refuses a
  manifest naming anything else (absolute paths, ``..``, links to outside files).
* An import checks every file's columns and row count against the manifest before writing anything, never
  overwrites an existing agent file unless asked, and refuses an export made by a newer schema (unknown
  migrations).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb

from agentlab.agent import _atomic
from agentlab.agent._export import _MIGRATIONS_TABLE, _SEQUENCES, _TABLES, FORMAT, MANIFEST, export
from agentlab.errors import AgentLockedError, ExportDiskFullError, ExportError, ExportMismatchError
from agentlab.store import (
    MIGRATIONS,
    Store,
    adopt_old_message_postings,
    agent_path,
    fsync_dir,
    fsync_file,
    kebab_case,
    remove_database_files,
    resolve_root,
    sql_ident,
    sql_literal,
    validate_name,
)

__all__ = ["FORMAT", "LARGE_IMPORT", "MANIFEST", "export", "import_", "import_block_size", "read_manifest"]

def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of an export folder, checked for shape: every table has a file, a row count and columns,
    and every file is a plain name inside the folder.

    Raises:
        ExportError: No manifest, not JSON, not an agentlab export, incomplete, or naming a file outside the
            folder.
    """
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(f"No {MANIFEST} in {path}; is this a folder written by agent.export()?") from None
    except ValueError as exc:
        raise ExportError(f"{file} is not valid JSON ({exc}); export the agent again.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportError(f"{file} is not an {FORMAT} manifest; export the agent again with this agentlab.")
    tables = manifest.get("tables")
    if not isinstance(tables, dict) or not isinstance(manifest.get("migrations", []), list) \
            or not isinstance(manifest.get("sequences", {}), dict):
        raise ExportError(f"{file} lacks its table list, migrations or sequences; export the agent again.")
    for table, info in tables.items():
        info = info if isinstance(info, dict) else {}
        columns, rows = info.get("columns"), info.get("rows")
        if not (isinstance(info.get("file"), str) and isinstance(rows, int) and not isinstance(rows, bool)
                and rows >= 0 and isinstance(columns, list)
                and all(isinstance(c, list) and c and isinstance(c[0], str) for c in columns)):
            raise ExportError(f"{file} describes table {table!r} incompletely (it needs a file, a row count and "
                              "columns); export the agent again.")
        name = info["file"]
        if name in ("", ".", "..") or os.path.basename(name) != name or any(c in name for c in "/\\\x00"):
            raise ExportError(f"{file} gives table {table!r} the file {name!r}, which is not a plain file name "
                              "inside the export folder; it is refused so that nothing outside is read.")
    return manifest


def _check_files(folder: Path, tables: dict[str, Any]) -> None:
    """Check every table's Parquet file against the manifest before anything is written.

    Raises:
        ExportError: A file is missing, unreadable, or a link to a file outside the folder.
        ExportMismatchError: A file's columns or row count differ from the manifest's.
    """
    missing = [info["file"] for info in tables.values() if not (folder / info["file"]).is_file()]
    if missing:
        raise ExportError(f"The export in {folder} lacks {missing}; export the agent again.")
    base = os.path.realpath(folder)
    con = duckdb.connect()
    try:
        for table, info in tables.items():
            file = folder / info["file"]
            if os.path.dirname(os.path.realpath(file)) != base:
                raise ExportError(f"{file} (table {table!r}) links to a file outside {folder}; it is refused so "
                                  "that nothing outside the export is read.")
            source = f"read_parquet({sql_literal(str(file))})"
            try:
                columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
                rows = con.execute(f"SELECT count(*) FROM {source}").fetchall()[0][0]
            except duckdb.Error as exc:
                raise ExportError(f"{file} (table {table!r}) is not a readable Parquet file ({_atomic.detail(exc)}); "
                                  "export the agent again.") from None
            expected = [c[0] for c in info["columns"]]
            if columns != expected:
                raise ExportMismatchError(table, info["file"], "columns", expected, columns)
            if rows != info["rows"]:
                raise ExportMismatchError(table, info["file"], "rows", info["rows"], rows)
    finally:
        con.close()


def import_(
    path: str | os.PathLike[str],
    cls: type | None = None,
    *,
    name: str | None = None,
    root: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> Any:
    """Restore an agent from a folder written by :func:`export` and return it, open (through ``get_agent``).

    Every file is checked against the manifest first. The agent file is built under a temporary name beside
    its place and renamed into place when complete, so a failed or killed import leaves no agent file (and,
    with ``overwrite``, the old one as it was); temporary files of killed imports are removed by the next.

    Args:
        path: The export folder.
        cls: The :class:`~agentlab.agent.Agent` subclass to open it as (default ``Agent``); the file goes to
            that class's folder under ``root``, with the class's ``block_size``, or 256 KiB blocks for an
            export of :data:`LARGE_IMPORT` messages or more.
        name: The agent's name (default: the exported name). A different name is recorded in ``agent_meta``.
        root: Where agents live (default ``$AGENTLAB_HOME``, else ``./agentlab-data``).
        overwrite: Replace an existing agent file of that class and name (it must not be open anywhere).

    Returns:
        The restored agent.

    Raises:
        ExportError: Not an export, a file is missing, outside the folder or unreadable, the export comes from
            a newer schema, or the agent already exists and ``overwrite`` is False.
        ExportMismatchError: A Parquet file's rows or columns differ from the manifest.
        ExportDiskFullError: The disk ran out of space (no agent file was created or changed).
        AgentLockedError: ``overwrite`` and another process has the agent open.
    """
    from agentlab.agent._agent import Agent, _registry, get_agent

    cls = Agent if cls is None else cls
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise TypeError(f"import_ needs an Agent subclass as cls, not {cls!r}.")
    folder = Path(path)
    _atomic.recover_folder(Path(os.path.realpath(folder)), MANIFEST)
    manifest = read_manifest(folder)
    name = validate_name(name if name is not None else manifest.get("agent") or "")
    known = {m.name for m in MIGRATIONS}
    unknown = [m for m in manifest.get("migrations", []) if m not in known]
    if unknown:
        raise ExportError(f"The export was made by a newer agentlab (migrations {unknown} are unknown here); "
                          "upgrade agentlab to import it.")
    _check_files(folder, manifest["tables"])
    resolved = resolve_root(root)
    target = agent_path(cls.__name__, name, resolved)
    live = _registry.get(os.path.realpath(target))
    if live is not None and not live.closed:
        raise ExportError(f"Agent {name!r} is open in this process; close() it before importing over it.")
    exists = ExportError(f"An agent {name!r} of class {cls.__name__} already exists at {target}; "
                         "pass overwrite=True to replace it, or name=... to import it beside it.")
    for stale in _atomic.leftovers(target, "import"):
        _remove_database(stale)
    if os.path.lexists(target) and not overwrite:
        raise exists
    work = _atomic.temp_path(target, "import")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _restore(Store(work, block_size=import_block_size(manifest, cls.block_size)), folder, manifest, name,
                 kebab_case(cls.__name__))
        if os.path.lexists(_wal(work)):
            raise ExportError(f"DuckDB kept a log beside {work} after closing it, so the import is not complete; "
                              "try again.")
        fsync_file(work)
        if overwrite and os.path.lexists(target):
            _settle(target)
            os.replace(work, target)
        else:
            try:
                _atomic.rename_noreplace(work, target)
            except FileExistsError:
                raise exists from None
        fsync_dir(target.parent)
    except BaseException as exc:
        _remove_database(work)
        if _atomic.disk_full(exc):
            raise ExportDiskFullError(str(target), _atomic.detail(exc)) from exc
        raise
    return get_agent(cls, name, root=resolved)


LARGE_IMPORT = 10_000
"""From this many stored messages on, :func:`import_` builds the agent's file with 256 KiB blocks."""


def import_block_size(manifest: dict[str, Any], block_size: int) -> int:
    """The block size of an imported agent's new file: the class's, or 256 KiB for a large history.

    Small blocks keep small agents' files small, but DuckDB compresses strings block by block, so a large
    history's import and every later checkpoint of it cost several times the CPU with them (see BENCHMARKS.md,
    "Many small agents"); a file's block size is fixed when it is created.
    """
    messages = manifest.get("tables", {}).get("messages", {}).get("rows", 0)
    return max(block_size, 262_144) if isinstance(messages, int) and messages >= LARGE_IMPORT else block_size


def _wal(database: Path) -> Path:
    return database.with_name(database.name + ".wal")


_remove_database = remove_database_files


def _settle(target: Path) -> None:
    """Make sure no process has ``target`` open and no log of its own lies beside it, so it can be replaced.

    DuckDB refuses to open a file whose ``.wal`` belongs to another file, so an old file's log must not outlive
    it: opening and closing the old file folds its log in. A file DuckDB cannot open at all loses its log.

    Raises:
        AgentLockedError: Another process has the file open.
    """
    try:
        duckdb.connect(str(target)).close()
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise AgentLockedError(str(target), "") from None
        _wal(target).unlink(missing_ok=True)


def _restore(store: Store, folder: Path, manifest: dict[str, Any], name: str, class_name: str) -> None:
    try:
        with store.transaction() as conn:
            existing = {r[0] for r in conn.execute(_TABLES).fetchall()}
            for table, info in manifest["tables"].items():
                file = str(folder / info["file"])
                if table == _MIGRATIONS_TABLE:
                    # Keep the record of migrations this file got at creation that the export lacked.
                    conn.execute(f"DELETE FROM {_MIGRATIONS_TABLE} WHERE name IN "
                                 f"(SELECT name FROM read_parquet({sql_literal(file)}))")
                elif table in existing:
                    conn.execute(f"DELETE FROM {sql_ident(table)}")
                else:  # a researcher's own table: recreated from the Parquet schema
                    conn.execute(f"CREATE TABLE {sql_ident(table)} AS SELECT * FROM read_parquet({sql_literal(file)}) "
                                 "LIMIT 0")
                insert = f"INSERT INTO {sql_ident(table)} BY NAME SELECT * FROM read_parquet({sql_literal(file)})"
                inserted = conn.execute(insert).fetchall()[0][0]
                if inserted != info["rows"]:  # the file changed since it was checked
                    raise ExportMismatchError(table, info["file"], "rows", info["rows"], inserted)
            if manifest.get("agent") != name:
                conn.execute("UPDATE agent_meta SET value = ? WHERE key = 'name'", [name])
            if manifest.get("class") not in (None, class_name):
                conn.execute("UPDATE agent_meta SET value = ? WHERE key = 'class'", [class_name])
            if "m060_message_search" not in manifest.get("migrations", []):
                adopt_old_message_postings(conn)
            _advance_sequences(conn, manifest.get("sequences", {}))
        store.execute("CHECKPOINT")  # write everything into the file now, where a full disk is reported
    finally:
        store.close()

def _advance_sequences(conn: Any, wanted: dict[str, Any]) -> None:
    # DuckDB cannot restart a sequence that a column default uses, so it is moved forward with nextval().
    current = {r[0]: (r[1], r[2], r[3]) for r in conn.execute(_SEQUENCES).fetchall()}
    for sequence, last in wanted.items():
        if last is None or sequence not in current:
            continue
        now, start, step = current[sequence]
        position = now if now is not None else start - step
        calls = (int(last) - int(position)) // int(step or 1)
        if calls > 0:
            conn.execute(f"SELECT max(nextval({sql_literal(sequence)})) FROM range(?)", [calls])
