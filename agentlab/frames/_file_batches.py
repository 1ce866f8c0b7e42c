"""Reading agent files in batches: attach a batch read-only, copy the wanted tables' rows into memory, detach.

One :class:`BatchReader` per worker thread of :class:`~agentlab.frames.MultiAgent`; each has its own cursor
and its own stacked tables (``_parts.<table>_<worker>``), so two workers never write one table. A pass over the
files reads a set of tables (or all of them); the first pass also reads each file's listing row (its agent's name
and class, from ``agent_meta``) and which tables it has.

Cost per file, a small agent (20-50 messages, 17 tables, CPU on this project's VM): ATTACH 0.9-1.1 ms (reading the
catalog), the batch's table list 0.2, the names 0.2, each non-empty table copied 0.3-0.5, DETACH 0.4. So a pass
copies only the tables it is asked for, and a table no file has rows in costs nothing but its shape.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from agentlab.errors import ExportError
from agentlab.store import sql_ident, sql_literal

__all__ = ["LEADING", "LISTING", "BatchReader"]

LISTING = "agents"  # the table that lists the files; a file's own table of that name is left out
LEADING = ("agent", "agent_class", "_alias")  # columns every stacked table starts with; a file's own are left out

# One row per table of the attached files: its row count (an upper bound; 0 means empty) and its CREATE statement,
# which stands for its shape (DESCRIBE reads the columns once per distinct statement).
_TABLES = """
SELECT database_name, table_name, estimated_size, sql FROM duckdb_tables()
WHERE schema_name = 'main' AND starts_with(database_name, 'agent_')
"""


class BatchReader:
    """One worker: attaches batches of files with its own cursor, appends the wanted tables' rows to its own
    stacked tables and detaches the batch again.

    Attributes:
        columns: Stacked table -> its columns and their types, in order (the tables this worker created).
        files: Position in the list -> the file's listing row (``alias``, ``path``, ``agent``, ``agent_class``);
            filled by a pass that reads the listing.
        seen: Every table name met in an attached file (read or not).
        failures: Position in the list -> the error attaching it, in the current pass.
    """

    def __init__(self, conn: Any, worker: int) -> None:
        self.cursor = conn.cursor()
        self.worker = worker
        self.columns: dict[str, dict[str, str]] = {}
        self.files: dict[int, dict[str, Any]] = {}
        self.seen: set[str] = set()
        self.shapes: dict[str, tuple[tuple[str, str], ...]] = {}  # a table's CREATE statement -> its columns
        self.failures: dict[int, Exception] = {}

    def part(self, table: str) -> str:
        return f"_parts.{sql_ident(f'{table}_{self.worker}')}"

    def read(self, paths: list[Path], positions: list[int], wanted: Collection[str] | None,
             listing: dict[int, dict[str, Any]] | None) -> None:
        """Read the files at ``positions``: the tables in ``wanted`` (lower-case names; None for every table).

        ``listing`` gives the files' listing rows when an earlier pass read them; None reads them now (from each
        file's ``agent_meta``) into :attr:`files`.
        """
        import duckdb

        attached: list[dict[str, Any]] = []
        for i in positions:
            try:
                self.cursor.execute(f"ATTACH {sql_literal(str(paths[i]))} AS agent_{i} (READ_ONLY)")
            except duckdb.Error as exc:
                self.failures[i] = exc
                continue
            row = listing[i] if listing is not None else {
                "alias": f"agent_{i}", "path": str(paths[i]), "agent": None, "agent_class": None}
            attached.append(row)
        try:
            self._copy(attached, wanted, names=listing is None)
        finally:
            for f in attached:
                self.cursor.execute(f"DETACH {f['alias']}")
        if listing is None:
            for f in attached:
                self.files[int(str(f["alias"]).removeprefix("agent_"))] = f

    def _copy(self, attached: list[dict[str, Any]], wanted: Collection[str] | None, *, names: bool) -> None:
        """Append the wanted tables' rows of the attached batch to the stacked tables (one statement per table)."""
        import duckdb

        if not attached:
            return
        by_alias = {f["alias"]: f for f in attached}
        shapes: dict[str, dict[tuple[tuple[str, str], ...], list[str]]] = {}
        rows: dict[tuple[str, str], int] = {}
        for alias, table, size, sql in self.cursor.execute(_TABLES).fetchall():
            if alias not in by_alias or table == LISTING:
                continue
            self.seen.add(table)
            rows[(alias, table)] = size
            if wanted is not None and table.lower() not in wanted:
                continue
            shape = self.shapes.get(sql)
            if shape is None:
                described = self.cursor.execute(f"DESCRIBE {alias}.{sql_ident(table)}").fetchall()
                shape = self.shapes[sql] = tuple((r[0], r[1]) for r in described if r[0] not in LEADING)
            shapes.setdefault(table, {}).setdefault(shape, []).append(alias)
        if names:
            self._names(by_alias, [a for a in by_alias if rows.get((a, "agent_meta"))])
        for table, groups in sorted(shapes.items()):
            for shape, aliases in groups.items():
                self._ensure_table(table, shape)
                filled = [a for a in aliases if rows.get((a, table))]
                if not filled:
                    continue
                columns = ", ".join(sql_ident(name) for name, _ in shape)
                branches = " UNION ALL ".join(
                    f"SELECT {sql_literal(by_alias[a]['agent'] or '')}, "
                    f"{sql_literal(by_alias[a]['agent_class'] or '')}, {sql_literal(a)}, {columns} "
                    f"FROM {a}.{sql_ident(table)}" for a in filled)
                try:
                    self.cursor.execute(f"INSERT INTO {self.part(table)} (agent, agent_class, _alias, "
                                        f"{columns}) {branches}")
                except duckdb.Error as exc:
                    raise ExportError(f"The files' {table} tables cannot be stacked (their columns disagree in "
                                      f"type): {str(exc).splitlines()[0]}") from exc

    def _names(self, by_alias: dict[str, dict[str, Any]], with_meta: list[str]) -> None:
        """Fill each attached file's ``agent`` and ``agent_class`` from its ``agent_meta`` (one statement)."""
        if not with_meta:
            return
        query = " UNION ALL ".join(f"SELECT {sql_literal(a)}, key, value FROM {a}.agent_meta "
                                   "WHERE key IN ('name', 'class')" for a in with_meta)
        for alias, key, value in self.cursor.execute(query).fetchall():
            by_alias[alias]["agent" if key == "name" else "agent_class"] = value

    def _ensure_table(self, table: str, shape: tuple[tuple[str, str], ...]) -> None:
        """Create this worker's ``table``, or add the columns of ``shape`` it lacks (a file of another schema)."""
        known = self.columns.get(table)
        if known is None:
            columns = ", ".join(f"{sql_ident(name)} {kind}" for name, kind in shape)
            self.cursor.execute(f"CREATE TABLE {self.part(table)} "
                                f"(agent VARCHAR, agent_class VARCHAR, _alias VARCHAR, {columns})")
            self.columns[table] = dict(shape)
            return
        for name, kind in shape:
            if name not in known:
                self.cursor.execute(f"ALTER TABLE {self.part(table)} ADD COLUMN {sql_ident(name)} {kind}")
                known[name] = kind
