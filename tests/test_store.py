"""The store: migrations (blank, old, failing, rerun) and transactions."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.errors import MigrationError, ReadOnlyAgentError, SqlError
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS, Migration
from agentlab.store._naming import MAX_NAME_LENGTH, agent_path


def _create_a(conn):
    conn.execute("CREATE TABLE a (x INTEGER)")


def _create_b(conn):
    conn.execute("CREATE TABLE b (y INTEGER)")


def _fails_halfway(conn):
    conn.execute("CREATE TABLE c (z INTEGER)")
    raise RuntimeError("boom")


class TestMigrations:
    def test_a_blank_database_gets_every_migration_recorded(self, store_path):
        store = Store(store_path)
        assert store.applied_migrations() == [m.name for m in MIGRATIONS]
        store.close()

    def test_reopening_an_up_to_date_file_applies_nothing(self, store_path):
        Store(store_path, migrations=[Migration("a", _create_a)]).close()
        calls = []
        again = Store(store_path, migrations=[Migration("a", lambda c: calls.append(c))])
        assert calls == [] and again.applied_migrations() == ["a"]
        again.close()

    def test_an_old_database_gets_only_the_new_steps(self, store_path):
        Store(store_path, migrations=[Migration("a", _create_a)]).close()
        store = Store(store_path, migrations=[Migration("a", _create_a), Migration("b", _create_b)])
        assert store.applied_migrations() == ["a", "b"]
        assert store.rows("SELECT count(*) AS n FROM b") == [{"n": 0}]
        store.close()

    def test_a_failing_migration_rolls_back_with_its_record(self, store_path):
        Store(store_path, migrations=[Migration("a", _create_a)]).close()
        with pytest.raises(MigrationError, match="c_fails"):
            Store(store_path, migrations=[Migration("a", _create_a), Migration("c_fails", _fails_halfway)])
        conn = duckdb.connect(str(store_path))
        tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        names = [r[0] for r in conn.execute("SELECT name FROM _agentlab_migrations").fetchall()]
        conn.close()
        assert "c" not in tables and names == ["a"]

    def test_read_only_open_with_pending_migrations_says_how_to_upgrade(self, store_path):
        Store(store_path, migrations=[Migration("a", _create_a)]).close()
        with pytest.raises(MigrationError, match="read-write"):
            Store(store_path, read_only=True, migrations=[Migration("a", _create_a), Migration("b", _create_b)])


class TestTransactions:
    def test_an_exception_rolls_everything_back(self, store):
        store.execute("CREATE TABLE t (x INTEGER)")
        with pytest.raises(ValueError), store.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            with store.transaction() as inner:  # nested joins the outer one
                inner.execute("INSERT INTO t VALUES (2)")
            raise ValueError("abort")
        assert store.rows("SELECT * FROM t") == []

    def test_commit_hooks_run_only_after_commit(self, store):
        store.execute("CREATE TABLE t (x INTEGER)")
        log = []
        with store.transaction() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            store.after_commit(lambda: log.append("committed"))
            store.after_rollback(lambda: log.append("never"))
            assert log == []
        with pytest.raises(RuntimeError), store.transaction():
            store.after_commit(lambda: log.append("never"))
            store.after_rollback(lambda: log.append("rolled back"))
            raise RuntimeError
        assert log == ["committed", "rolled back"]

    def test_sql_errors_carry_the_query(self, store):
        with pytest.raises(SqlError) as info:
            store.execute("SELECT * FROM missing_table")
        assert info.value.query == "SELECT * FROM missing_table"

    def test_read_only_store_refuses_transactions(self, store_path):
        Store(store_path).close()
        ro = Store(store_path, read_only=True)
        with pytest.raises(ReadOnlyAgentError), ro.transaction():
            pass
        ro.close()


names = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=MAX_NAME_LENGTH
)


class TestNameToFileProperty:
    @settings(max_examples=300, deadline=None)
    @given(st.lists(names, min_size=2, max_size=6, unique=True))
    def test_distinct_names_never_share_a_file_and_stay_inside_the_root(self, tmp_path_factory, batch):
        root = tmp_path_factory.getbasetemp() / "names-root"
        paths = [agent_path("ChatAgent", n, root) for n in batch]
        assert len(set(paths)) == len(paths)
        folder = (root / "chat-agent").resolve()
        for path in paths:
            assert path.parent == folder
            assert path.resolve().parent == folder
            assert len(path.name.encode()) < 255
            assert path.name.endswith(".duckdb") and "/" not in path.name and path.name not in {".", ".."}
