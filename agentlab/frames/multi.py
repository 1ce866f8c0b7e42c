"""Many agents at once: read their DuckDB files into one in-memory database and query them as one.

``open_many("agentlab-data/chat-agent/*.duckdb")`` reads every file (attached read-only, :data:`BATCH` files at a
time) into one in-memory DuckDB connection. Each table name becomes one table stacking that table's rows from every
file, with three leading columns: ``agent`` (the agent's name, from its ``agent_meta``), ``agent_class`` and
``_alias`` (which file: ``agent_<i>``, ``i`` the file's position in the list, so two files holding the same name
are told apart). Where files differ in columns (older schemas), the table has every column and rows lacking one
hold NULL in it. A ``agents`` table lists the files. One SQL statement then runs over thousands of users' agents::

    with open_many("agentlab-data/chat-agent/*.duckdb") as many:
        many.sql("SELECT agent, count(*) AS messages FROM messages GROUP BY agent")

Cost grows linearly with the files and their rows: a batch is attached (by two connections side by side, since
reading a file's catalog is most of the work), its rows are copied with one statement per table, and it is detached
again, so memory holds the rows, not thousands of catalogs. A ``tqdm.auto`` bar shows the progress from
:data:`PROGRESS_FROM` files on. Copying suits many small agents; a few large ones are better read one at a time
(``agent.sql``, ``session.messages_df()``), since their rows would be held in memory.

Invariants: nothing is ever written (files are attached read-only; the tables live in memory); a file missing a
table (an older schema) simply adds no rows to it; the result is a snapshot of the files as they were read, and no
file stays locked after :func:`open_many` returns, so agents can be opened for writing while it is used.
"""

from __future__ import annotations

import glob as _glob
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentlab.errors import AgentLockedError, ExportError

__all__ = ["BATCH", "PROGRESS_FROM", "MultiAgent", "open_many"]

BATCH = 256
"""Files attached at a time. A statement over thousands of files binds superlinearly, and each attached file's
catalog costs about 0.4 MB, so files are read in batches of this size."""

PROGRESS_FROM = 500
"""Show a progress bar from this many files on (unless ``progress`` says otherwise)."""

_WORKERS = 2  # connections reading batches side by side
_LISTING = "agents"  # the table that lists the files; a file's own table of that name is left out
_LEADING = ("agent", "agent_class", "_alias")  # columns every stacked table starts with; a file's own are left out

# One row per table of the attached files: its row count (an upper bound; 0 means empty) and its CREATE statement,
# which stands for its shape (DESCRIBE reads the columns once per distinct statement).
_TABLES = """
SELECT database_name, table_name, estimated_size, sql FROM duckdb_tables()
WHERE schema_name = 'main' AND starts_with(database_name, 'agent_')
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
        """Run ``query`` over the agents' rows; return a pandas DataFrame."""
        return self.arrow(query, *params).to_pandas()

    def arrow(self, query: str, *params: Any) -> Any:
        """Run ``query``; return a pyarrow Table (no copy through pandas)."""
        with self._owner._lock:
            rel = self._owner._connection().sql(query, params=list(params) if params else None)
            if rel is None:
                import pyarrow as pa

                return pa.table({})
            return rel.to_arrow_table()

    def rows(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run ``query``; return the rows as dicts."""
        return self.arrow(query, *params).to_pylist()


class _Reader:
    """One worker of :class:`MultiAgent`: attaches batches of files with its own connection, appends their rows to
    its own tables (``_parts.<table>_<worker>``, so two workers never change one table) and detaches them again."""

    def __init__(self, conn: Any, worker: int) -> None:
        self.cursor = conn.cursor()
        self.worker = worker
        self.columns: dict[str, dict[str, str]] = {}  # stacked table -> its columns and their types, in order
        self.files: dict[int, dict[str, Any]] = {}  # position in the list -> the file's listing row
        self.shapes: dict[str, tuple[tuple[str, str], ...]] = {}  # a table's CREATE statement -> its columns
        self.failures: dict[int, Exception] = {}

    def part(self, table: str) -> str:
        return f"_parts.{_ident(f'{table}_{self.worker}')}"

    def read(self, paths: list[Path], start: int, stop: int) -> None:
        import duckdb

        attached: list[dict[str, Any]] = []
        for i in range(start, stop):
            try:
                self.cursor.execute(f"ATTACH {_literal(str(paths[i]))} AS agent_{i} (READ_ONLY)")
            except duckdb.Error as exc:
                self.failures[i] = exc
                continue
            attached.append({"alias": f"agent_{i}", "path": str(paths[i]), "agent": None, "agent_class": None})
        try:
            self._copy(attached)
        finally:
            for f in attached:
                self.cursor.execute(f"DETACH {f['alias']}")
        for f in attached:
            self.files[int(str(f["alias"]).removeprefix("agent_"))] = f

    def _copy(self, attached: list[dict[str, Any]]) -> None:
        """Append every table's rows of the attached batch to the stacked tables (one statement per table)."""
        import duckdb

        if not attached:
            return
        by_alias = {f["alias"]: f for f in attached}
        shapes: dict[str, dict[tuple[tuple[str, str], ...], list[str]]] = {}
        rows: dict[tuple[str, str], int] = {}
        for alias, table, size, sql in self.cursor.execute(_TABLES).fetchall():
            if alias not in by_alias or table == _LISTING:
                continue
            shape = self.shapes.get(sql)
            if shape is None:
                described = self.cursor.execute(f"DESCRIBE {alias}.{_ident(table)}").fetchall()
                shape = self.shapes[sql] = tuple((r[0], r[1]) for r in described if r[0] not in _LEADING)
            shapes.setdefault(table, {}).setdefault(shape, []).append(alias)
            rows[(alias, table)] = size
        with_meta = [a for shape in shapes.get("agent_meta", {}).values() for a in shape if rows.get((a, "agent_meta"))]
        if with_meta:
            names = " UNION ALL ".join(f"SELECT {_literal(a)}, key, value FROM {a}.agent_meta "
                                       "WHERE key IN ('name', 'class')" for a in with_meta)
            for alias, key, value in self.cursor.execute(names).fetchall():
                by_alias[alias]["agent" if key == "name" else "agent_class"] = value
        for table, groups in sorted(shapes.items()):
            for shape, aliases in groups.items():
                self._ensure_table(table, shape)
                filled = [a for a in aliases if rows.get((a, table))]
                if not filled:
                    continue
                columns = ", ".join(_ident(name) for name, _ in shape)
                branches = " UNION ALL ".join(
                    f"SELECT {_literal(by_alias[a]['agent'] or '')}, {_literal(by_alias[a]['agent_class'] or '')}, "
                    f"{_literal(a)}, {columns} FROM {a}.{_ident(table)}" for a in filled)
                try:
                    self.cursor.execute(f"INSERT INTO {self.part(table)} (agent, agent_class, _alias, "
                                        f"{columns}) {branches}")
                except duckdb.Error as exc:
                    raise ExportError(f"The files' {table} tables cannot be stacked (their columns disagree in "
                                      f"type): {str(exc).splitlines()[0]}") from exc

    def _ensure_table(self, table: str, shape: tuple[tuple[str, str], ...]) -> None:
        """Create this worker's ``table``, or add the columns of ``shape`` it lacks (a file of another schema)."""
        known = self.columns.get(table)
        if known is None:
            columns = ", ".join(f"{_ident(name)} {kind}" for name, kind in shape)
            self.cursor.execute(f"CREATE TABLE {self.part(table)} "
                                f"(agent VARCHAR, agent_class VARCHAR, _alias VARCHAR, {columns})")
            self.columns[table] = dict(shape)
            return
        for name, kind in shape:
            if name not in known:
                self.cursor.execute(f"ALTER TABLE {self.part(table)} ADD COLUMN {_ident(name)} {kind}")
                known[name] = kind


class MultiAgent:
    """The rows of many agent files in one in-memory DuckDB connection. Create with :func:`open_many`.

    Attributes:
        sql: Runs SQL over the stacked tables (``many.sql(q)``, ``many.sql.arrow(q)``, ``many.sql.rows(q)``).
        tables: The names of the stacked tables.
        skipped: Files left out because they could not be attached (with ``skip_locked=True``).
    """

    def __init__(self, paths: list[Path], *, skip_locked: bool = False, progress: bool | None = None) -> None:
        import duckdb

        self._lock = threading.RLock()
        self._conn: Any = duckdb.connect()
        self.sql = _Sql(self)
        self.skipped: list[str] = []
        self._files: list[dict[str, Any]] = []
        try:
            readers = self._read(paths, len(paths) >= PROGRESS_FROM if progress is None else progress)
            for i, path in enumerate(paths):
                failure = next((r.failures[i] for r in readers if i in r.failures), None)
                if failure is None:
                    self._files.append(next(r.files[i] for r in readers if i in r.files))
                elif skip_locked:
                    self.skipped.append(str(path))
                else:
                    raise self._attach_error(path, failure) from None
            self.tables = self._merge(readers)
            self._list_files()
        except BaseException:
            self.close()
            raise

    def _read(self, paths: list[Path], progress: bool) -> list[_Reader]:
        """Read the files in batches, two workers side by side (DuckDB works without the GIL)."""
        from tqdm.auto import tqdm  # imported here: tqdm.auto may pull in IPython widgets

        self._conn.execute("CREATE SCHEMA _parts")
        readers = [_Reader(self._conn, k) for k in range(_WORKERS)]
        bar = tqdm(total=len(paths), desc="reading agent files", unit="file", disable=not progress)
        bar_lock = threading.Lock()
        errors: list[BaseException] = []

        def work(reader: _Reader, first: int) -> None:
            try:
                for start in range(first * BATCH, len(paths), _WORKERS * BATCH):
                    if errors:
                        return
                    reader.read(paths, start, min(start + BATCH, len(paths)))
                    with bar_lock:
                        bar.update(min(BATCH, len(paths) - start))
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(readers[k], k), daemon=True) for k in range(1, _WORKERS)]
        try:
            for thread in threads:
                thread.start()
            work(readers[0], 0)
        finally:
            for thread in threads:
                thread.join()
            bar.close()
        if errors:
            raise errors[0]
        return readers

    def _merge(self, readers: list[_Reader]) -> list[str]:
        """Make each table one view over its per-worker parts; return the table names."""
        tables = sorted({t for r in readers for t in r.columns})
        for table in tables:
            parts = [f"SELECT * FROM {r.part(table)}" for r in readers if table in r.columns]
            self._conn.execute(f"CREATE TEMP VIEW {_ident(table)} AS " + " UNION ALL BY NAME ".join(parts))
        return tables

    @staticmethod
    def _attach_error(path: Path, exc: Exception) -> Exception:
        text = str(exc)
        if "already attached" in text or "file handle conflict" in text:
            return ExportError(f"{path} is open in this process (a live agent); close() it first, or pass "
                               "skip_locked=True to leave it out.")
        if "lock" in text.lower():
            return AgentLockedError(str(path), text.split("\n")[0])
        return exc

    def _list_files(self) -> None:
        import pyarrow as pa

        listing = pa.table({key: pa.array([f[key] for f in self._files], pa.string())
                            for key in ("alias", "agent", "agent_class", "path")})
        self._conn.register("_agentlab_listing", listing)  # one insert, not a thousand (executemany is slow)
        self._conn.execute(f"CREATE TEMP TABLE {_LISTING} AS SELECT * FROM _agentlab_listing")
        self._conn.unregister("_agentlab_listing")

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
