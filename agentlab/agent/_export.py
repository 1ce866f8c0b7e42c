"""Export an agent as a folder of Parquet files and a manifest (the writing half of :mod:`._portable`).

:func:`export` writes every table of an agent's DuckDB file to ``<folder>/<table>.parquet`` plus
``manifest.json``, under the store lock, in a temporary folder beside the destination that is swapped into place
whole (see :mod:`agentlab.agent._portable` for the format and its invariants).
"""


from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentlab.agent import _atomic
from agentlab.errors import ExportDiskFullError, ExportError
from agentlab.store import (
    Store,
    fsync_dir,
    fsync_file,
    sql_ident,
    sql_literal,
)

__all__ = ["FORMAT", "MANIFEST", "export"]

FORMAT = "agentlab-export/1"
MANIFEST = "manifest.json"

_TABLES = """
SELECT table_name FROM duckdb_tables()
WHERE database_name = current_database() AND schema_name = 'main' AND NOT temporary
ORDER BY table_name
"""
_SEQUENCES = """
SELECT sequence_name, last_value, start_value, increment_by FROM duckdb_sequences()
WHERE database_name = current_database() AND schema_name = 'main' AND NOT temporary
"""
_MIGRATIONS_TABLE = "_agentlab_migrations"
_PLAIN_TABLE = re.compile(r"[A-Za-z0-9_]{1,100}")


def _store_of(agent: Any) -> Store:
    store = agent if isinstance(agent, Store) else getattr(agent, "store", None)
    if not isinstance(store, Store):
        raise TypeError(f"export() needs an Agent or a Store, not {type(agent).__name__}.")
    return store


def export(agent: Any, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write every table of ``agent`` to Parquet files in the folder ``path``, with ``manifest.json``.

    The export is built in a temporary folder beside ``path`` and moved into place when it is complete, so a
    failed or killed export leaves ``path`` as it was. Temporary folders left by killed exports are removed by
    the next export to the same place.

    Args:
        agent: An :class:`~agentlab.agent.Agent` (read-only ones work too) or a :class:`~agentlab.store.Store`.
        path: The folder to create (or to fill, if it exists and is empty).
        overwrite: Replace an earlier export in that folder. Its Parquet files and manifest go; any other files
            in the folder are kept.

    Returns:
        The folder.

    Raises:
        ExportError: The folder holds files and ``overwrite`` is False, or it holds files but is not an export.
        ExportDiskFullError: The disk ran out of space (the folder is as it was).
    """
    store = _store_of(agent)
    folder = Path(path)
    dest = Path(os.path.realpath(folder))
    _atomic.recover_folder(dest, MANIFEST)
    keep = _kept_entries(dest, overwrite)
    work = _atomic.temp_path(dest, "export")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        work.mkdir()
        for entry in keep:
            _carry_over(entry, work / entry.name)
        manifest = _write_tables(store, agent, work)
        with open(work / MANIFEST, "w", encoding="utf-8") as out:  # last: a folder without it is no export
            out.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        fsync_dir(work)
        _atomic.put_folder_in_place(work, dest, MANIFEST)
    except BaseException as exc:
        _atomic.discard_folder(work, MANIFEST)
        if _atomic.disk_full(exc):
            raise ExportDiskFullError(str(dest), _atomic.detail(exc)) from exc
        raise
    return folder


def _file_name(table: str) -> str:
    """The Parquet file name of ``table``: the name itself when it is plain, else a slug and a hash of it.

    A plain name has only ASCII letters, digits and underscores; every other name gets ``<slug>-<hash>``, whose
    ``-`` no plain name has, so the two kinds never collide, and no name can make a path separator, ``..`` or a
    name too long for the file system. The table's real name is the manifest's key.
    """
    if _PLAIN_TABLE.fullmatch(table):
        return f"{table}.parquet"
    slug = re.sub(r"[^a-z0-9]+", "-", table.lower()).strip("-")[:40].strip("-") or "table"
    digest = hashlib.sha256(table.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{slug}-{digest}.parquet"


def _write_tables(store: Store, agent: Any, work: Path) -> dict[str, Any]:
    with store.lock:
        snapshot = store.transaction() if not store.read_only else nullcontext(store.conn)
        with snapshot as conn:
            tables: dict[str, Any] = {}
            used: dict[str, str] = {}
            for (table,) in conn.execute(_TABLES).fetchall():
                name = _file_name(table)
                if name in used:
                    raise ExportError(f"Tables {used[name]!r} and {table!r} map to the same file name {name}; "
                                      "rename one of them with agent.sql('ALTER TABLE ... RENAME TO ...').")
                used[name] = table
                file = work / name
                conn.execute(f"COPY (SELECT * FROM {sql_ident(table)}) TO {sql_literal(str(file))} (FORMAT parquet)")
                fsync_file(file)
                columns = conn.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                    "AND schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()
                rows = conn.execute(f"SELECT count(*) FROM {sql_ident(table)}").fetchall()[0][0]
                tables[table] = {"file": name, "rows": int(rows), "columns": [list(c) for c in columns]}
            sequences = {name: last for name, last, _, _ in conn.execute(_SEQUENCES).fetchall()}
            meta = dict(conn.execute("SELECT key, value FROM agent_meta").fetchall()) if "agent_meta" in tables \
                else {}
            migrations = [r[0] for r in conn.execute(
                f"SELECT name FROM {_MIGRATIONS_TABLE} ORDER BY applied_at, name").fetchall()]
    return {
        "format": FORMAT,
        "agent": meta.get("name"),
        "class": meta.get("class"),
        "python_class": f"{type(agent).__module__}.{type(agent).__qualname__}" if not isinstance(agent, Store)
        else None,
        "agentlab_version": _version(),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "migrations": migrations,
        "tables": tables,
        "sequences": sequences,
    }


def _kept_entries(dest: Path, overwrite: bool) -> list[Path]:
    """The entries of ``dest`` that an export into it keeps (everything but an earlier export's files).

    Raises:
        ExportError: ``dest`` is a file, or holds files and ``overwrite`` is False, or holds files but no
            manifest (it is not an earlier export; only ``.parquet`` leftovers of one are replaced then).
    """
    if not os.path.lexists(dest):
        return []
    if not dest.is_dir():
        raise ExportError(f"{dest} is a file, not a folder; choose a folder for the export.")
    entries = sorted(dest.iterdir())
    if not entries:
        return []
    if not overwrite:
        raise ExportError(f"{dest} is not empty; choose a new folder or pass overwrite=True.")
    ours = {e for e in entries if e.is_file() and (e.name == MANIFEST or e.suffix == ".parquet")}
    others = [e for e in entries if e not in ours]
    if others and not (dest / MANIFEST).is_file():
        raise ExportError(f"{dest} holds files but no {MANIFEST}, so it is not an earlier export and overwrite=True "
                          "does not replace it; choose a new or empty folder.")
    return others


def _carry_over(entry: Path, copy: Path) -> None:
    # Hard links where the file system has them: nothing is copied, and the old folder keeps its files until
    # the new one is in place.
    if entry.is_symlink():
        os.symlink(os.readlink(entry), copy)
    elif entry.is_dir():
        shutil.copytree(entry, copy, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(entry, copy)


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentlab")
    except PackageNotFoundError:
        return "0.0.0"
