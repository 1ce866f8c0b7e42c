"""Many agents at once: read their DuckDB files into one in-memory database and query them as one.

``open_many("agentlab-data/chat-agent/*.duckdb")`` reads the files (attached read-only, :data:`BATCH` files at a
time) into one in-memory DuckDB connection. Each table name becomes one table stacking that table's rows from every
file, with three leading columns: ``agent`` (the agent's name, from its ``agent_meta``), ``agent_class`` and
``_alias`` (which file: ``agent_<i>``, ``i`` the file's position in the list, so two files holding the same name
are told apart). Where files differ in columns (older schemas), the table has every column and rows lacking one
hold NULL in it. A ``agents`` table lists the files. One SQL statement then runs over thousands of users' agents::

    with open_many("agentlab-data/chat-agent/*.duckdb") as many:
        many.sql("SELECT agent, count(*) AS messages FROM messages GROUP BY agent")

**Only the tables that are used are read.** ``open_many`` reads the listing, which tables each file has, and the
tables named in ``tables`` (by default ``messages``; ``"all"`` for every table). A query that names another table
reads it from the files first, in one more pass over them (the query's table names come from DuckDB's parser; a
name it cannot see, inside ``query_table('x')`` for instance, is read when DuckDB reports it missing). Copying a
table costs about as much as attaching the file, so reading five tables where a query needs one tripled the cost.

Cost grows linearly with the files and their rows: a batch is attached (by two connections side by side, since
reading a file's catalog is most of the work), its rows are copied with one statement per table, and it is detached
again, so memory holds the rows, not thousands of catalogs. A ``tqdm.auto`` bar shows the progress from
:data:`PROGRESS_FROM` files on. Copying suits many small agents; a few large ones are better read one at a time
(``agent.sql``, ``session.messages_df()``), since their rows would be held in memory.

Invariants: nothing is ever written (files are attached read-only; the tables live in memory); a file missing a
table (an older schema) simply adds no rows to it; no file stays locked between passes, so agents can be opened for
writing while the result is used. The tables read in one pass are a snapshot of the files as they were then: those
read by ``open_many`` together, a table read later as the files are at that later pass. A file that cannot be read
at a later pass (locked by a writer, removed) raises as at the first one, or with ``skip_locked=True`` adds no rows
to that table and is listed in ``skipped``.
"""

from __future__ import annotations

import glob as _glob
import os
import re
import threading
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from agentlab.errors import AgentLockedError, ExportError
from agentlab.frames._file_batches import LISTING, BatchReader
from agentlab.store import sql_ident

__all__ = ["BATCH", "DEFAULT_TABLES", "PROGRESS_FROM", "WORKERS", "MultiAgent", "open_many"]

BATCH = 32
"""Files attached at a time by each worker. Each attached file's catalog costs about 0.4 MB, and with fewer files
attached at a time a file costs less CPU to read (2.35-2.5 ms at 16-32 files a batch, 2.9 ms at 256, 3.1 ms at
512; peak memory 390 MB, 730 MB and 1.2 GB at 2,000 files)."""

PROGRESS_FROM = 500
"""Show a progress bar from this many files on (unless ``progress`` says otherwise)."""

DEFAULT_TABLES = ("messages",)
"""The tables :func:`open_many` reads at once unless told otherwise; any other table is read when a query names it."""

WORKERS = 2
"""Connections reading batches side by side. On this project's 2-core VM two read small agents in 60-75 % of one's
wall time when a core is free, and use 7-28 % more CPU (they contend for DuckDB's catalog and the GIL), so on a
machine whose cores are all busy one is faster: set ``agentlab.frames._multi.WORKERS = 1`` there."""
_MISSING = re.compile(r"Table with name (.+?) does not exist")


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
        """Run ``query``; return a pyarrow Table (no copy through pandas). Tables it names are read first."""
        import duckdb

        owner = self._owner
        with owner._lock:
            conn = owner._connection()
            owner._read_tables(owner._named(query))
            while True:
                try:
                    rel = conn.sql(query, params=list(params) if params else None)
                    break
                except duckdb.CatalogException as exc:
                    # A table the parser could not see in the query (query_table('x'), a second statement).
                    match = _MISSING.search(str(exc))
                    name = match.group(1).lower() if match else None
                    if name is None or name not in owner._unread():
                        raise
                    owner._read_tables({name})
            if rel is None:
                import pyarrow as pa

                return pa.table({})
            return rel.to_arrow_table()

    def rows(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run ``query``; return the rows as dicts."""
        return self.arrow(query, *params).to_pylist()


class MultiAgent:
    """The rows of many agent files in one in-memory DuckDB connection. Create with :func:`open_many`.

    Attributes:
        sql: Runs SQL over the stacked tables (``many.sql(q)``, ``many.sql.arrow(q)``, ``many.sql.rows(q)``),
            reading the tables it names first.
        tables: The names of the files' tables (read already or not).
        skipped: Files left out because they could not be attached (with ``skip_locked=True``).
    """

    def __init__(self, paths: list[Path], *, tables: Collection[str] | str = DEFAULT_TABLES,
                 skip_locked: bool = False, progress: bool | None = None) -> None:
        import duckdb

        self._lock = threading.RLock()
        self._conn: Any = duckdb.connect()
        self.sql = _Sql(self)
        self.skipped: list[str] = []
        self._paths = paths
        self._skip_locked = skip_locked
        self._progress = len(paths) >= PROGRESS_FROM if progress is None else progress
        self._files: list[dict[str, Any]] = []
        self._read: set[str] = set()  # lower-case names of the tables read so far
        self.tables: list[str] = []
        try:
            # DuckDB checkpoints even an in-memory database (compressing every row group) each time 16 MB of rows
            # were added: at 10,000 small agents two such pauses of 1.7-1.9 s made up the excess time per file.
            self._conn.execute("SET checkpoint_threshold = '1TB'")
            self._conn.execute("CREATE SCHEMA _parts")
            self._readers = [BatchReader(self._conn, k) for k in range(WORKERS)]
            names = [tables] if isinstance(tables, str) else list(tables)
            wanted = None if names == ["all"] else {str(t).lower() for t in names}
            self._pass(list(range(len(paths))), wanted, listing=None)
            for i in range(len(paths)):
                row = next((r.files[i] for r in self._readers if i in r.files), None)
                if row is not None:
                    self._files.append(row)
            seen = {t for r in self._readers for t in r.seen}
            self.tables = sorted(seen)
            self._read = {t.lower() for t in seen} if wanted is None else wanted & {t.lower() for t in seen}
            self._merge()
            self._list_files()
        except BaseException:
            self.close()
            raise

    def _pass(self, positions: list[int], wanted: set[str] | None, listing: dict[int, dict[str, Any]] | None) -> None:
        """Read the files at ``positions`` in batches, two workers side by side (DuckDB works without the GIL)."""
        from tqdm.auto import tqdm  # imported here: tqdm.auto may pull in IPython widgets

        desc = "reading agent files" if listing is None else f"reading {', '.join(sorted(wanted or ()))}"
        bar = tqdm(total=len(positions), desc=desc, unit="file", disable=not self._progress)
        bar_lock = threading.Lock()
        errors: list[BaseException] = []
        for reader in self._readers:
            reader.failures = {}

        def work(reader: BatchReader, first: int) -> None:
            try:
                for start in range(first * BATCH, len(positions), len(self._readers) * BATCH):
                    if errors:
                        return
                    batch = positions[start:start + BATCH]
                    reader.read(self._paths, batch, wanted, listing)
                    with bar_lock:
                        bar.update(len(batch))
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(self._readers[k], k), daemon=True)
                   for k in range(1, len(self._readers))]
        # Each copy is small: DuckDB's own threads cost more in handing work around than they save (about a
        # fifth of the CPU), so they sit out the reading; queries afterwards get them back.
        self._conn.execute("SET threads = 1")
        try:
            for thread in threads:
                thread.start()
            work(self._readers[0], 0)
        finally:
            for thread in threads:
                thread.join()
            bar.close()
            self._conn.execute("RESET threads")
        if errors:
            raise errors[0]
        for i in positions:
            failure = next((r.failures[i] for r in self._readers if i in r.failures), None)
            if failure is None:
                continue
            if not self._skip_locked:
                raise self._attach_error(self._paths[i], failure) from None
            self.skipped.append(str(self._paths[i]))

    def _named(self, query: str) -> set[str]:
        """The unread tables ``query`` names, as DuckDB's parser sees them (nothing for what it cannot parse)."""
        unread = self._unread()
        if not unread:
            return set()
        try:
            names = self._connection().get_table_names(query, qualified=False)
        except Exception:  # several statements, a syntax error: running the query says what is wrong
            return set()
        return {n.lower() for n in names} & unread

    def _unread(self) -> set[str]:
        return {t.lower() for t in self.tables} - self._read

    def _read_tables(self, names: set[str]) -> None:
        """Read the tables ``names`` from the files listed at open, in one pass."""
        if not names:
            return
        listing = {int(f["alias"].removeprefix("agent_")): f for f in self._files}
        skipped = set(self.skipped)
        positions = [i for i in sorted(listing) if str(self._paths[i]) not in skipped]
        self._pass(positions, names, listing)
        self._read |= names
        self._merge()

    def _merge(self) -> None:
        """Make each table read so far one view over its per-worker parts."""
        for table in sorted({t for r in self._readers for t in r.columns}):
            parts = [f"SELECT * FROM {r.part(table)}" for r in self._readers if table in r.columns]
            self._conn.execute(f"CREATE OR REPLACE TEMP VIEW {sql_ident(table)} AS "
                               + " UNION ALL BY NAME ".join(parts))

    @staticmethod
    def _attach_error(path: Path, exc: Exception) -> Exception:
        text = str(exc)
        if "already attached" in text or "file handle conflict" in text:
            return ExportError(f"{path} is open in this process (a live agent); close() it first, or pass "
                               "skip_locked=True to leave it out.")
        if "lock" in text.lower():
            return AgentLockedError(str(path), text.split("\n")[0])
        if not path.exists():
            return FileNotFoundError(f"No agent file at {path} any more (it was there when open_many began)")
        return exc

    def _list_files(self) -> None:
        import pyarrow as pa

        listing = pa.table({key: pa.array([f[key] for f in self._files], pa.string())
                            for key in ("alias", "agent", "agent_class", "path")})
        self._conn.register("_agentlab_listing", listing)  # one insert, not a thousand (executemany is slow)
        self._conn.execute(f"CREATE TEMP TABLE {LISTING} AS SELECT * FROM _agentlab_listing")
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
        from agentlab.session import frame_to_pandas, many_messages

        if "messages" not in self.tables:
            raise ExportError("None of the attached files has a messages table.")
        with self._lock:
            table = many_messages(self.sql.arrow, self._connection)
        return table if arrow else frame_to_pandas(table)

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
        """Free the rows held in memory; later queries raise :class:`ExportError`. Safe to call twice."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None


def open_many(
    paths_or_glob: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    tables: Collection[str] | str = DEFAULT_TABLES,
    skip_locked: bool = False,
    progress: bool | None = None,
) -> MultiAgent:
    """Read many agent files (attached read-only, in batches) into one in-memory DuckDB connection, to query
    them together.

    Args:
        paths_or_glob: A glob (``"agentlab-data/chat-agent/*.duckdb"``, ``**`` allowed), a folder (every
            ``*.duckdb`` below it), one file, or an iterable of files.
        tables: The tables to read now (default :data:`DEFAULT_TABLES`, ``messages``); ``"all"`` reads every
            table, ``()`` only the listing. Any other table is read when a query first names it.
        skip_locked: Leave out files that cannot be attached (open for writing elsewhere, or in this process)
            and list them in ``MultiAgent.skipped``, instead of raising.
        progress: Show a ``tqdm.auto`` bar while reading; by default from :data:`PROGRESS_FROM` files on.

    Returns:
        A :class:`MultiAgent`; close it (or use ``with``) to free its memory.

    Raises:
        FileNotFoundError: A listed file does not exist.
        AgentLockedError: Another process holds a file open for writing.
        ExportError: A file is open in this process (a live agent); close it first.
    """
    return MultiAgent(_expand(paths_or_glob), tables=tables, skip_locked=skip_locked, progress=progress)
