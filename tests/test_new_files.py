"""New agent files (copies of the process's template, small blocks) and files written with the old layout."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from agentlab import Agent, get_agent
from agentlab.errors import InvalidArgumentError, MigrationError
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.store import _files as files
from agentlab.store._database import Store
from agentlab.store._files import BLOCK_SIZE, create_file, migrate
from agentlab.store._migrations import MIGRATIONS, Migration
from agentlab.store._naming import agent_path

OLD_BLOCK_SIZE = 262_144  # DuckDB's default, which every file made before the template had

CATALOG = {
    "tables": "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = current_database() ORDER BY 1",
    "columns": "SELECT table_name, column_index, column_name, data_type, column_default, is_nullable "
               "FROM duckdb_columns() WHERE database_name = current_database() ORDER BY 1, 2",
    "constraints": "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() "
                   "WHERE database_name = current_database() ORDER BY ALL",
    "indexes": "SELECT index_name, table_name, sql FROM duckdb_indexes() WHERE database_name = current_database() "
               "ORDER BY 1",
    "sequences": "SELECT sequence_name, start_value, increment_by, min_value, max_value, last_value "
                 "FROM duckdb_sequences() WHERE database_name = current_database() ORDER BY 1",
    "views": "SELECT view_name, sql FROM duckdb_views() WHERE database_name = current_database() AND NOT internal "
             "ORDER BY 1",
    "migrations": "SELECT name FROM _agentlab_migrations ORDER BY applied_at, name",
}


def catalog(path: Path) -> dict[str, list[tuple]]:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return {kind: conn.execute(query).fetchall() for kind, query in CATALOG.items()}
    finally:
        conn.close()


def block_size(path: Path) -> int:
    conn = duckdb.connect(str(path), read_only=True)
    try:
        row = conn.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        assert row is not None
        return row[0]
    finally:
        conn.close()


def old_file(path: Path, migrations: list[Migration]) -> Path:
    """A file as agentlab made them before the template: default blocks, each migration run on the file itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect(str(path))
    migrate(conn, str(path), migrations, False)
    conn.close()
    return path


class Notes(Agent):
    initial_state = {"visits": 0}


class TestNewFilesHaveTheMigratedSchema:
    def test_a_new_file_equals_an_empty_file_migrated_step_by_step(self, tmp_path):
        create_file(tmp_path / "new.duckdb", MIGRATIONS)
        migrated = old_file(tmp_path / "old.duckdb", MIGRATIONS)
        assert catalog(tmp_path / "new.duckdb") == catalog(migrated)

    @pytest.mark.parametrize("applied", [1, 3, len(MIGRATIONS) - 1])
    def test_a_new_file_equals_an_old_file_upgraded_from_an_earlier_version(self, tmp_path, applied):
        old = old_file(tmp_path / "old.duckdb", MIGRATIONS[:applied])
        Store(old).close()  # opening it applies the remaining migrations
        create_file(tmp_path / "new.duckdb", MIGRATIONS)
        assert catalog(tmp_path / "new.duckdb") == catalog(old)

    def test_the_template_follows_the_migration_list_it_is_given(self, tmp_path):
        extra = [*MIGRATIONS, Migration("m999_extra", lambda conn: conn.execute("CREATE TABLE extra (x INTEGER)"))]
        other = [*MIGRATIONS, Migration("m999_extra", lambda conn: conn.execute("CREATE TABLE other (y INTEGER)"))]
        create_file(tmp_path / "a.duckdb", extra)
        create_file(tmp_path / "b.duckdb", other)
        tables_a = {t for t, _ in catalog(tmp_path / "a.duckdb")["tables"]}
        tables_b = {t for t, _ in catalog(tmp_path / "b.duckdb")["tables"]}
        assert "extra" in tables_a and "other" not in tables_a
        assert "other" in tables_b and "extra" not in tables_b

    def test_a_new_file_uses_small_blocks_and_holds_no_agent_data(self, tmp_path):
        create_file(tmp_path / "new.duckdb", MIGRATIONS)
        assert block_size(tmp_path / "new.duckdb") == BLOCK_SIZE < OLD_BLOCK_SIZE
        conn = duckdb.connect(str(tmp_path / "new.duckdb"), read_only=True)
        assert conn.execute("SELECT count(*) FROM agent_meta").fetchone()[0] == 0
        conn.close()
        assert not (tmp_path / ".agentlab-creating").exists()

    def test_agents_made_from_one_template_are_separate(self, tmp_path):
        first, second = get_agent(Notes, "first", root=tmp_path), get_agent(Notes, "second", root=tmp_path)
        first.set_state({"visits": 3})
        Session(first).append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        assert second.state == {"visits": 0} and Session(second).get_history() == []
        assert second.sql("SELECT value FROM agent_meta WHERE key = 'name'") == [{"value": "second"}]
        first.close()
        second.close()

    def test_a_twenty_message_agent_stays_small(self, tmp_path):
        agent = get_agent(Notes, "small", root=tmp_path)
        manager = SessionManager(agent)
        session = manager.session(manager.create("chat").id)
        agent.set_state({"visits": 1})
        for i in range(20):
            session.append_message({"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                                    "parts": [{"type": "text", "text": f"message {i} " + "words " * 60}]})
        path = agent.path
        agent.close()
        assert path.stat().st_size <= 400 * 1024
        assert not Path(str(path) + ".wal").exists()


class TestFilesWithTheOldLayout:
    def test_an_old_layout_file_opens_and_accepts_writes(self, tmp_path):
        path = old_file(agent_path("Notes", "veteran", tmp_path), MIGRATIONS)
        assert block_size(path) == OLD_BLOCK_SIZE
        agent = get_agent(Notes, "veteran", root=tmp_path)
        agent.merge_state({"visits": 5})
        Session(agent).append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "still here"}]})
        agent.close()
        again = get_agent(Notes, "veteran", root=tmp_path)
        assert again.state == {"visits": 5}
        assert [m["id"] for m in Session(again).get_history()] == ["m1"]
        again.close()
        assert block_size(path) == OLD_BLOCK_SIZE  # a file keeps the block size it was made with

    def test_an_old_layout_file_at_an_earlier_version_is_upgraded_in_place(self, tmp_path):
        path = old_file(tmp_path / "agent.duckdb", MIGRATIONS[:4])
        store = Store(path)
        assert store.applied_migrations() == [m.name for m in MIGRATIONS]
        store.execute("INSERT INTO agent_meta VALUES ('name', 'upgraded')")
        store.close()
        create_file(tmp_path / "new.duckdb", MIGRATIONS)
        assert block_size(path) == OLD_BLOCK_SIZE
        assert catalog(path)["tables"] == catalog(tmp_path / "new.duckdb")["tables"]


class TestTemplateFailures:
    def test_a_failing_migration_creates_no_file(self, tmp_path):
        def broken(conn):
            conn.execute("CREATE TABLE half (x INTEGER)")
            raise RuntimeError("boom")

        with pytest.raises(MigrationError, match="m999_broken"):
            Store(tmp_path / "agent.duckdb", migrations=[*MIGRATIONS, Migration("m999_broken", broken)])
        assert not (tmp_path / "agent.duckdb").exists()
        assert list(tmp_path.iterdir()) == []

    def test_the_template_is_built_once_per_migration_list(self, tmp_path, monkeypatch):
        steps = [Migration("m001_only", lambda conn: conn.execute("CREATE TABLE agent_meta (key VARCHAR, "
                                                                  "value VARCHAR)"))]
        calls = []
        real = files.migrate
        monkeypatch.setattr(files, "migrate", lambda *args: calls.append(args[1]) or real(*args))
        for i in range(3):
            create_file(tmp_path / f"a{i}.duckdb", steps)
        assert len(calls) == 1 and calls[0].endswith(".creating")


class BigHistory(Agent):
    block_size = 262_144


class TestBlockSizes:
    def test_a_class_chooses_the_block_size_of_its_new_files(self, tmp_path):
        small, big = get_agent(Notes, "small", root=tmp_path), get_agent(BigHistory, "big", root=tmp_path)
        small.close()
        big.close()
        assert block_size(small.path) == BLOCK_SIZE and block_size(big.path) == 262_144
        # a file keeps the size it was made with, whatever class opens it later
        old_file(agent_path("BigHistory", "veteran", tmp_path), MIGRATIONS)
        get_agent(BigHistory, "veteran", root=tmp_path).close()
        assert block_size(agent_path("BigHistory", "veteran", tmp_path)) == OLD_BLOCK_SIZE

    def test_a_block_size_duckdb_refuses_is_a_clear_error_and_creates_nothing(self, tmp_path):
        with pytest.raises(InvalidArgumentError, match="block_size 1000 is not one DuckDB accepts"):
            Store(tmp_path / "agent.duckdb", block_size=1000)
        assert list(tmp_path.iterdir()) == []

    def test_an_import_of_a_large_history_gets_big_blocks(self, tmp_path, monkeypatch):
        from agentlab.agent import _portable as portable

        monkeypatch.setattr(portable, "LARGE_IMPORT", 3)
        for name, count in (("short", 2), ("long", 3)):
            agent = get_agent(Notes, name, root=tmp_path / "from")
            Session(agent).append_messages([{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "x"}]}
                                            for i in range(count)])
            agent.export(tmp_path / f"{name}-export")
            agent.close()
            portable.import_(tmp_path / f"{name}-export", Notes, root=tmp_path / "to").close()
        assert block_size(agent_path("Notes", "short", tmp_path / "to")) == BLOCK_SIZE
        assert block_size(agent_path("Notes", "long", tmp_path / "to")) == 262_144
