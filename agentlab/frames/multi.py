"""Many agents at once: attach their DuckDB files read-only in one connection and query them as one database.

``open_many("agentlab-data/chat-agent/*.duckdb")`` attaches every file (``ATTACH ... (READ_ONLY)``) to one
in-memory DuckDB connection. Each table name becomes a view that stacks that table from every file (``UNION ALL``,
or ``UNION ALL BY NAME`` where files differ in columns), with three leading columns: ``agent`` (the agent's name,
from its ``agent_meta``), ``agent_class`` and ``_alias`` (which attached file: ``agent_<i>``, ``i`` the file's
position in the list, so two files holding the same name are told apart). A ``agents`` table lists the files.
One SQL statement then runs over thousands of users' agents::

    with open_many("agentlab-data/chat-agent/*.duckdb") as many:
        many.sql("SELECT agent, count(*) AS messages FROM messages GROUP BY agent")

The cost grows linearly with the number of files. Two connections attach files side by side (reading a file's
catalog is most of the work), with a ``tqdm.auto`` bar from :data:`PROGRESS_FROM` files on; agent names are read
:data:`BATCH` files per query; and views are created when a query first names them, since a query usually needs
one or two of the sixteen tables.

Invariants: nothing is ever written (files are attached read-only, views live in the in-memory catalog); a file
missing a table (an older schema) simply adds no rows to that view; the files stay locked for reading until
:meth:`MultiAgent.close`, so no process can write them meanwhile.
"""

from __future__ import annotations

import glob as _glob
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentlab.errors import AgentLockedError, ExportError

__all__ = ["BATCH", "PROGRESS_FROM", "MultiAgent", "open_many"]

BATCH = 256
"""Files per statement when reading agent names (one statement over thousands of files binds superlinearly)."""

PROGRESS_FROM = 500
"""Show a progress bar while attaching from this many files on (unless ``progress`` says otherwise)."""

_ATTACHERS = 2  # connections attaching files side by side

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r'"((?:[^"]|"")+)"')

_CATALOG = """
SELECT database_name, table_name, list(column_name ORDER BY column_index) AS columns
FROM duckdb_columns()
WHERE schema_name = 'main' AND NOT internal AND starts_with(database_name, 'agent_')
GROUP BY database_name, table_name
"""


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _expand(paths_or_glob: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(paths_or_glob, (str, os.PathLike)):
        text = os.fspath(paths_or_glob)
        if Path(text).is_dir():
            found = sorted(Path(text).rglob("*.duckdb"))
        elif _glob.has_magic(text):
            found = sorted(Path(p) for p in _glob.glob(text, recursive=True))
        else:
            found = [Path(text)]
    else:
        found = [Path(p) for p in paths_or_glob]
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"No agent file at {missing[0]}" + (f" (and {len(missing) - 1} more)"
                                                                     if len(missing) > 1 else ""))
    return list(dict.fromkeys(p.resolve() for p in found))


class _Sql:
    """``many.sql(query, *params)`` -> DataFrame, ``many.sql.arrow(...)`` -> pyarrow Table, ``.rows(...)``."""

    def __init__(self, owner: MultiAgent) -> None:
        self._owner = owner

    def __call__(self, query: str, *params: Any) -> Any:
        """Run ``query`` over the attached agents; return a pandas DataFrame."""
        return self.arrow(query, *params).to_pandas()

    def arrow(self, query: str, *params: Any) -> Any:
        """Run ``query``; return a pyarrow Table (no copy through pandas)."""
        with self._owner._lock:
            self._owner._ensure_views(query)
            rel = self._owner._connection().sql(query, params=list(params) if params else None)
            if rel is None:
                import pyarrow as pa

                return pa.table({})
            return rel.to_arrow_table()

    def rows(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run ``query``; return the rows as dicts."""
        return self.arrow(query, *params).to_pylist()


class MultiAgent:
    """Agent files attached read-only to one DuckDB connection. Create with :func:`open_many`.

    Attributes:
        sql: Runs SQL over the stacked views (``many.sql(q)``, ``many.sql.arrow(q)``, ``many.sql.rows(q)``).
        tables: The table names that have a stacked view.
    """

    def __init__(self, paths: list[Path], *, skip_locked: bool = False, progress: bool | None = None) -> None:
        import duckdb

        self._lock = threading.RLock()
        self._conn: Any = duckdb.connect()
        self.sql = _Sql(self)
        self.skipped: list[str] = []
        self._files: list[dict[str, Any]] = []
        try:
            self._attach(paths, skip_locked, len(paths) >= PROGRESS_FROM if progress is None else progress)
            self.tables = self._create_views()
        except BaseException:
            self.close()
            raise

    def _attach(self, paths: list[Path], skip_locked: bool, progress: bool) -> None:
        """Attach ``paths`` as ``agent_<i>`` from two connections at once; keep the files' order."""
        import duckdb
        from tqdm.auto import tqdm  # imported here: tqdm.auto may pull in IPython widgets

        outcomes: list[Exception | None] = [None] * len(paths)
        bar = tqdm(total=len(paths), desc="attaching agent files", unit="file", disable=not progress)
        bar_lock = threading.Lock()

        def attach(first: int) -> None:
            cursor = self._conn.cursor()
            try:
                for i in range(first, len(paths), _ATTACHERS):
                    try:
                        cursor.execute(f"ATTACH {_literal(str(paths[i]))} AS agent_{i} (READ_ONLY)")
                    except duckdb.Error as exc:
                        outcomes[i] = exc
                    with bar_lock:
                        bar.update(1)
            finally:
                cursor.close()

        workers = [threading.Thread(target=attach, args=(k,), daemon=True) for k in range(1, _ATTACHERS)]
        try:
            for worker in workers:
                worker.start()
            attach(0)
        finally:
            for worker in workers:
                worker.join()
            bar.close()
        for i, (path, failure) in enumerate(zip(paths, outcomes)):
            if failure is None:
                self._files.append({"alias": f"agent_{i}", "path": str(path)})
            elif skip_locked:
                self.skipped.append(str(path))
            else:
                raise self._attach_error(path, failure) from None

    @staticmethod
    def _attach_error(path: Path, exc: Exception) -> Exception:
        text = str(exc)
        if "already attached" in text or "file handle conflict" in text:
            return ExportError(f"{path} is open in this process (a live agent); close() it first, or pass "
                               "skip_locked=True to leave it out.")
        if "lock" in text.lower():
            return AgentLockedError(str(path), text.split("\n")[0])
        return exc

    def _create_views(self) -> list[str]:
        # Catalog and names are read with one query each, not one per file: with a thousand files attached,
        # every catalog function walks all of them, so per-file lookups would cost quadratic time.
        aliases = {f["alias"]: f for f in self._files}
        shapes: dict[str, dict[tuple[str, ...], list[str]]] = {}
        for alias, table, columns in self._conn.execute(_CATALOG).fetchall():
            if alias in aliases:
                shapes.setdefault(table, {}).setdefault(tuple(columns), []).append(alias)
        for f in self._files:
            f["agent"] = f["agent_class"] = None
        with_meta = [a for shape in shapes.get("agent_meta", {}).values() for a in shape]
        for start in range(0, len(with_meta), BATCH):
            names = " UNION ALL ".join(f"SELECT {_literal(a)}, key, value FROM {a}.agent_meta "
                                       "WHERE key IN ('name', 'class')" for a in with_meta[start:start + BATCH])
            for alias, key, value in self._conn.execute(names).fetchall():
                aliases[alias]["agent" if key == "name" else "agent_class"] = value
        import pyarrow as pa

        listing = pa.table({key: pa.array([f[key] for f in self._files], pa.string())
                            for key in ("alias", "agent", "agent_class", "path")})
        self._conn.register("_agentlab_listing", listing)  # one insert, not a thousand (executemany is slow)
        self._conn.execute("CREATE TEMP TABLE agents AS SELECT * FROM _agentlab_listing")
        self._conn.unregister("_agentlab_listing")
        self._shapes = {t: g for t, g in shapes.items() if t != "agents"}  # "agents" is the listing above
        self._aliases = aliases
        self._made: set[str] = set()
        return sorted(self._shapes)

    def _ensure_views(self, query: str) -> None:
        """Create the stacked views that ``query`` names (a word matching a table name is enough)."""
        wanted = {w.lower() for w in _WORD.findall(query)} | set(_QUOTED.findall(query))
        for table in sorted(wanted.intersection(self._shapes) - self._made):
            groups, aliases = self._shapes[table], self._aliases
            branches = [f"SELECT {_literal(aliases[a]['agent'] or '')} AS agent, "
                        f"{_literal(aliases[a]['agent_class'] or '')} AS agent_class, {_literal(a)} AS _alias, * "
                        f"FROM {a}.{_ident(table)}" for shape in groups.values() for a in shape]
            # Plain UNION ALL binds much faster; BY NAME only when files disagree on the columns (older schemas).
            glue = "\nUNION ALL\n" if len(groups) == 1 else "\nUNION ALL BY NAME\n"
            self._connection().execute(f"CREATE TEMP VIEW {_ident(table)} AS " + glue.join(branches))
            self._made.add(table)

    def _connection(self) -> Any:
        if self._conn is None:
            raise ExportError("This MultiAgent is closed; call open_many() again.")
        return self._conn

    # -- convenience frames ------------------------------------------------------------------------------------

    @property
    def agents(self) -> Any:
        """One row per attached file: ``alias``, ``agent``, ``agent_class``, ``path`` (a DataFrame)."""
        return self.sql("SELECT * FROM agents ORDER BY alias")

    def messages_df(self, *, arrow: bool = False) -> Any:
        """Every message of every agent: ``agent``, ``agent_class``, ``session_id``, ``seq``, ``id``,
        ``parent_id``, ``role``, ``created_at``, ``n_parts``, ``part_kinds``, ``text`` and ``tokens``.

        Tree columns (depth, branches, compaction coverage) need each agent's own tree: use
        ``session.messages_df()`` for those.
        """
        from agentlab.frames import columns as core

        if "messages" not in self.tables:
            raise ExportError("None of the attached files has a messages table.")
        sql = f"""
            WITH m AS (
                SELECT agent, agent_class, _alias, session_id, seq, id, parent_id, role, created_at, content,
                       json_transform(content, '{core.PARTS_SCHEMA}').parts AS parts
                FROM messages
            )
            SELECT agent, agent_class, _alias, session_id, seq, id, parent_id, role, created_at,
                   {core.PARTS} AS _parts, {core.TEXT_NULL} AS _text_null
            FROM m ORDER BY agent, _alias, seq
        """
        with self._lock:
            table = self.sql.arrow(sql)
            aliases, seqs = table.column("_alias"), table.column("seq")

            def contents(rows: list[int]) -> list[str]:
                self._ensure_views("messages")
                return [self._connection().execute(
                    "SELECT content FROM messages WHERE _alias = ? AND seq = ?",
                    [aliases[i].as_py(), seqs[i].as_py()]).fetchone()[0] for i in rows]

            columns = core.part_columns(table.column("_parts"), table.column("_text_null"), contents)
        table = table.drop_columns(["_alias", "_parts", "_text_null"])
        for name, values in columns.items():
            table = table.append_column(name, values)
        if arrow:
            return table
        from agentlab.frames.frames import _to_pandas

        return _to_pandas(table)

    # -- life cycle --------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"<MultiAgent {len(self._files)} agents{' closed' if self._conn is None else ''}>"

    def __enter__(self) -> MultiAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Detach every file (releasing the read locks). Safe to call twice."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None


def open_many(
    paths_or_glob: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    skip_locked: bool = False,
    progress: bool | None = None,
) -> MultiAgent:
    """Attach many agent files read-only to one DuckDB connection, to query them together.

    Args:
        paths_or_glob: A glob (``"agentlab-data/chat-agent/*.duckdb"``, ``**`` allowed), a folder (every
            ``*.duckdb`` below it), one file, or an iterable of files.
        skip_locked: Leave out files that cannot be attached (open for writing elsewhere, or in this process)
            and list them in ``MultiAgent.skipped``, instead of raising.
        progress: Show a ``tqdm.auto`` bar while attaching; by default from :data:`PROGRESS_FROM` files on.

    Returns:
        A :class:`MultiAgent`; close it (or use ``with``) to release the files.

    Raises:
        FileNotFoundError: A listed file does not exist.
        AgentLockedError: Another process holds a file open for writing.
        ExportError: A file is open in this process (a live agent); close it first.
    """
    return MultiAgent(_expand(paths_or_glob), skip_locked=skip_locked, progress=progress)
