"""Agents as folders of Parquet files: export one, restore it exactly elsewhere.

:func:`export` writes every table of an agent's DuckDB file (messages, compactions, sessions, context blocks,
vectors, usage, full-text postings, and any table a researcher created with ``agent.sql``) to
``<folder>/<table>.parquet``, plus ``manifest.json``: the agent's name and class, the schema migrations the file
had, each table's columns and row count, and the last value of every sequence. :func:`import_` builds a new agent
file from such a folder.

Invariants:

* Round trip: after ``import_(export(agent))`` every table holds the same rows, column for column, including
  ``seq`` values, and the sequences continue after the values they had, so new rows get the same seqs they
  would have got in the original.
* An export is one consistent state: it is written under the store lock, inside a transaction when the agent is
  writable.
* An import never overwrites an existing agent file unless asked, refuses an export made by a newer schema
  (unknown migrations), and writes everything in one transaction: a failed import leaves no half-filled agent.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import ExportError
from .migrations import MIGRATIONS
from .naming import agent_path, kebab_case, resolve_root, validate_name
from .store import Store

__all__ = ["FORMAT", "MANIFEST", "export", "import_", "read_manifest"]

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


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _store_of(agent: Any) -> Store:
    store = agent if isinstance(agent, Store) else getattr(agent, "store", None)
    if not isinstance(store, Store):
        raise TypeError(f"export() needs an Agent or a Store, not {type(agent).__name__}.")
    return store


def export(agent: Any, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write every table of ``agent`` to Parquet files in the folder ``path``, with ``manifest.json``.

    Args:
        agent: An :class:`~agentlab.agent.Agent` (read-only ones work too) or a :class:`~agentlab.store.Store`.
        path: The folder to create (or to fill, if it exists and is empty).
        overwrite: Replace the Parquet files and manifest of an earlier export in that folder.

    Returns:
        The folder.

    Raises:
        ExportError: The folder holds files and ``overwrite`` is False.
    """
    store = _store_of(agent)
    folder = Path(path)
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise ExportError(f"{folder} is not empty; choose a new folder or pass overwrite=True.")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    with store.lock:
        snapshot = store.transaction() if not store.read_only else nullcontext(store.conn)
        with snapshot as conn:
            tables: dict[str, Any] = {}
            for (table,) in conn.execute(_TABLES).fetchall():
                file = folder / f"{table}.parquet"
                conn.execute(f"COPY (SELECT * FROM {_ident(table)}) TO {_literal(str(file))} (FORMAT parquet)")
                columns = conn.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
                    "AND schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()
                rows = conn.execute(f"SELECT count(*) FROM {_ident(table)}").fetchone()[0]
                tables[table] = {"file": file.name, "rows": int(rows), "columns": [list(c) for c in columns]}
            sequences = {name: last for name, last, _, _ in conn.execute(_SEQUENCES).fetchall()}
            meta = dict(conn.execute("SELECT key, value FROM agent_meta").fetchall()) if "agent_meta" in tables \
                else {}
            migrations = [r[0] for r in conn.execute(
                f"SELECT name FROM {_MIGRATIONS_TABLE} ORDER BY applied_at, name").fetchall()]
    manifest = {
        "format": FORMAT,
        "agent": meta.get("name"),
        "class": meta.get("class"),
        "python_class": f"{type(agent).__module__}.{type(agent).__qualname__}" if not isinstance(agent, Store)
        else None,
        "agentlab_version": _version(),
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "migrations": migrations,
        "tables": tables,
        "sequences": sequences,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentlab")
    except PackageNotFoundError:
        return "0.0.0"


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of an export folder.

    Raises:
        ExportError: No manifest, not JSON, or not an agentlab export.
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
    return manifest


def import_(
    path: str | os.PathLike[str],
    cls: type | None = None,
    *,
    name: str | None = None,
    root: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> Any:
    """Restore an agent from a folder written by :func:`export` and return it, open (through ``get_agent``).

    Args:
        path: The export folder.
        cls: The :class:`~agentlab.agent.Agent` subclass to open it as (default ``Agent``); the file goes to
            that class's folder under ``root``.
        name: The agent's name (default: the exported name). A different name is recorded in ``agent_meta``.
        root: Where agents live (default ``$AGENTLAB_HOME``, else ``./agentlab-data``).
        overwrite: Replace an existing agent file of that class and name (it must not be open in this process).

    Returns:
        The restored agent.

    Raises:
        ExportError: Not an export, a Parquet file is missing, the export comes from a newer schema, or the agent
            already exists and ``overwrite`` is False.
    """
    from .agent import Agent, _registry, get_agent

    cls = Agent if cls is None else cls
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise TypeError(f"import_ needs an Agent subclass as cls, not {cls!r}.")
    folder = Path(path)
    manifest = read_manifest(folder)
    name = validate_name(name if name is not None else manifest.get("agent") or "")
    known = {m.name for m in MIGRATIONS}
    unknown = [m for m in manifest.get("migrations", []) if m not in known]
    if unknown:
        raise ExportError(f"The export was made by a newer agentlab (migrations {unknown} are unknown here); "
                          "upgrade agentlab to import it.")
    tables: dict[str, Any] = manifest.get("tables", {})
    missing = [t["file"] for t in tables.values() if not (folder / t["file"]).exists()]
    if missing:
        raise ExportError(f"The export in {folder} lacks {missing}; export the agent again.")
    resolved = resolve_root(root)
    target = agent_path(cls.__name__, name, resolved)
    live = _registry.get(os.path.realpath(target))
    if live is not None and not live.closed:
        raise ExportError(f"Agent {name!r} is open in this process; close() it before importing over it.")
    if target.exists():
        if not overwrite:
            raise ExportError(f"An agent {name!r} of class {cls.__name__} already exists at {target}; "
                              "pass overwrite=True to replace it, or name=... to import it beside it.")
        for leftover in (target, target.with_name(target.name + ".wal")):
            leftover.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _restore(Store(target), folder, manifest, name, kebab_case(cls.__name__))
    except BaseException:
        for leftover in (target, target.with_name(target.name + ".wal")):
            leftover.unlink(missing_ok=True)
        raise
    return get_agent(cls, name, root=resolved)


def _restore(store: Store, folder: Path, manifest: dict[str, Any], name: str, class_name: str) -> None:
    try:
        with store.transaction() as conn:
            existing = {r[0] for r in conn.execute(_TABLES).fetchall()}
            for table, info in manifest["tables"].items():
                file = str(folder / info["file"])
                if table == _MIGRATIONS_TABLE:
                    # Keep the record of migrations this file got at creation that the export lacked.
                    conn.execute(f"DELETE FROM {_MIGRATIONS_TABLE} WHERE name IN "
                                 f"(SELECT name FROM read_parquet({_literal(file)}))")
                elif table in existing:
                    conn.execute(f"DELETE FROM {_ident(table)}")
                else:  # a researcher's own table: recreated from the Parquet schema
                    conn.execute(f"CREATE TABLE {_ident(table)} AS SELECT * FROM read_parquet({_literal(file)}) "
                                 "LIMIT 0")
                conn.execute(f"INSERT INTO {_ident(table)} BY NAME SELECT * FROM read_parquet({_literal(file)})")
            if manifest.get("agent") != name:
                conn.execute("UPDATE agent_meta SET value = ? WHERE key = 'name'", [name])
            if manifest.get("class") not in (None, class_name):
                conn.execute("UPDATE agent_meta SET value = ? WHERE key = 'class'", [class_name])
            if "m060_message_search" not in manifest.get("migrations", []):
                _adopt_old_message_postings(conn)
            _advance_sequences(conn, manifest.get("sequences", {}))
    finally:
        store.close()


def _adopt_old_message_postings(conn: Any) -> None:
    # An export from before m060 kept message postings in fulltext_docs; since m060 they live in the rows.
    conn.execute(
        """
        UPDATE messages SET search_tokens = d.tokens, search_seq = messages.seq
        FROM fulltext_docs AS d
        WHERE d.namespace = 'messages' AND d.doc_id = messages.id AND messages.search_tokens IS NULL
        """
    )
    conn.execute("DELETE FROM fulltext_docs WHERE namespace = 'messages'")


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
            conn.execute(f"SELECT max(nextval({_literal(sequence)})) FROM range(?)", [calls])
