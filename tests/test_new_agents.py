"""Creating an agent: a new file's first writes held until its first commit, and spare DuckDB instances."""

from __future__ import annotations

import multiprocessing
import time

import duckdb
import pytest

from agentlab import Agent, get_agent
from agentlab.errors import AgentlabError, SqlError
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.store import _database as database
from agentlab.store import _deferred as deferred
from agentlab.store import _files as files
from agentlab.store import _instances as instances
from agentlab.store import agent_path
from tests.helpers import msg


class Notes(Agent):
    pass


class _Counting:
    """A DuckDB connection that counts durable commits: COMMITs, and writes run outside any transaction."""

    def __init__(self, conn):
        self._conn = conn
        self.durable = 0
        self._open = False

    def execute(self, query, *args, **kwargs):
        head = query.lstrip().split(None, 1)[0].upper() if isinstance(query, str) and query.strip() else ""
        result = self._conn.execute(query, *args, **kwargs)
        if head == "BEGIN":
            self._open = True
        elif head in ("COMMIT", "ROLLBACK"):
            self.durable += head == "COMMIT"
            self._open = False
        elif head in ("INSERT", "UPDATE", "DELETE") and not self._open:
            self.durable += 1
        return result

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.fixture
def commits(monkeypatch):
    """Every connection a store opens from now on counts its durable commits; yields the counters."""
    made: list[_Counting] = []

    def wrap(opener):
        def opened(*args, **kwargs):
            conn = opener(*args, **kwargs)
            if conn is None:
                return None
            made.append(_Counting(conn))
            return made[-1]
        return opened

    monkeypatch.setattr(database, "connect", wrap(database.connect))
    monkeypatch.setattr(instances, "open_new", wrap(instances.open_new))
    monkeypatch.setattr(instances, "open_known", wrap(instances.open_known))
    return made


def committed(agent, query):
    """``query``'s rows as a second connection sees them: committed rows only."""
    cursor = agent.store.conn.cursor()
    try:
        return cursor.execute(query).fetchall()
    finally:
        cursor.close()


def first_steps(name="alice"):
    agent = get_agent(Notes, name)
    return agent, SessionManager(agent)


def name_on_disk(path):
    """The agent name a file holds, read by DuckDB itself (the file closed), or None."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        rows = conn.execute("SELECT value FROM agent_meta WHERE key = 'name'").fetchall()
    finally:
        conn.close()
    return rows[0][0] if rows else None


class TestANewAgentCommitsOnce:
    def test_its_name_and_first_message_reach_the_disk_in_one_commit(self, commits):
        agent, _ = first_steps()
        Session(agent).append_message(msg("m1"))
        assert sum(c.durable for c in commits) == 1
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("alice",)]
        assert committed(agent, "SELECT id, session_id FROM messages") == [("m1", "")]

    def test_a_session_is_durable_when_created_and_carries_the_name_with_it(self, commits):
        agent, manager = first_steps()
        info = manager.create("first chat")
        assert sum(c.durable for c in commits) == 1
        assert committed(agent, "SELECT name FROM sessions") == [("first chat",)]
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("alice",)]
        manager.session(info.id).append_message(msg("m1"))
        assert sum(c.durable for c in commits) == 2

    def test_an_agent_that_exists_commits_each_write_as_before(self, commits):
        first_steps()[0].close()
        agent = get_agent(Notes, "alice")
        manager = SessionManager(agent)
        manager.session(manager.create("second chat").id).append_message(msg("m1"))
        assert commits[-1].durable == 2
        assert not agent.store.fresh

    def test_every_read_sees_the_held_name_before_it_is_committed(self):
        agent, manager = first_steps()
        assert committed(agent, "SELECT count(*) FROM agent_meta") == [(0,)]
        assert agent.store.scalar("SELECT value FROM agent_meta WHERE key = 'name'") == "alice"
        assert manager.list() == []

    def test_close_user_sql_and_the_delay_commit_it(self, monkeypatch):
        agent, _ = first_steps("closed")
        agent.close()
        assert name_on_disk(agent.path) == "closed"
        agent, _ = first_steps("sql")
        agent.sql("SELECT 1")
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("sql",)]
        monkeypatch.setattr(deferred, "DELAY", 0.05)
        agent, _ = first_steps("waits")
        deadline = time.monotonic() + 5
        while committed(agent, "SELECT count(*) FROM agent_meta") != [(2,)] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("waits",)]

    def test_a_script_that_exits_without_closing_keeps_it(self, tmp_path):
        import subprocess
        import sys

        script = ("from agentlab import Agent, get_agent\n"
                  "from agentlab.store import _deferred as deferred\n"
                  "deferred.DELAY = 3600\n"
                  "class Notes(Agent):\n    pass\n"
                  f"agent = get_agent(Notes, 'quitter', root={str(tmp_path)!r})\n")
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        assert name_on_disk(agent_path("Notes", "quitter", tmp_path)) == "quitter"

    def test_a_failed_write_keeps_the_held_name_once(self):
        agent, manager = first_steps()
        store = agent.store
        with pytest.raises(RuntimeError), store.transaction() as conn:
            conn.execute("INSERT INTO agent_state VALUES ('cf_state_row_id', '1', 'server', now())")
            raise RuntimeError("the caller gave up")
        with pytest.raises(SqlError):
            store.execute("SELECT * FROM no_such_table")
        manager.create("a chat")
        assert committed(agent, "SELECT count(*) FROM agent_meta") == [(2,)]
        assert committed(agent, "SELECT count(*) FROM agent_state") == [(0,)]
        assert committed(agent, "SELECT name FROM sessions") == [("a chat",)]

    def test_a_statement_that_failed_on_the_connection_itself_does_not_fail_the_next_write(self):
        agent, _ = first_steps()
        with pytest.raises(duckdb.Error):  # DuckDB aborts the open (held) transaction
            agent.store.conn.execute("SELECT error('a reader gave up')")
        agent.set_state({"step": 1})
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("alice",)]
        assert committed(agent, "SELECT count(*) FROM agent_state") == [(1,)]

    def test_a_write_that_returns_rows_still_returns_them(self):
        agent, _ = first_steps()
        rows = agent.store.execute("UPDATE agent_meta SET value = 'v' WHERE key = 'class' RETURNING key").fetchall()
        assert rows == [("class",)]
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'class'") == [("v",)]

    def test_a_vector_search_opens_its_read_transaction_beside_the_held_name(self):
        from agentlab.search._embedders import HashEmbedder
        from agentlab.search._vectors import VectorStore

        agent, _ = first_steps()
        assert agent.store.fresh
        assert VectorStore(agent.store, "kb", HashEmbedder()).search("anything") == []
        assert committed(agent, "SELECT value FROM agent_meta WHERE key = 'name'") == [("alice",)]

    def test_seqs_stay_above_rows_written_by_user_sql_on_a_new_file(self):
        agent = get_agent(Notes, "bob")
        agent.sql("INSERT INTO messages (seq, id, session_id, role, content) VALUES (50, 'x', '', 'user', '{}')")
        assert SessionManager(agent).create("after").seq == 51


class TestSpareInstances:
    def test_a_new_agent_opens_in_a_spare_that_looks_like_its_own_instance(self, tmp_path):
        instances.start(files.CONFIG)
        assert instances.ready()
        spared = get_agent(Notes, "spared")
        assert spared.store._in_spare
        own = duckdb.connect(str(tmp_path / "own.duckdb"))
        for conn, path in ((spared.store.conn, spared.path), (own, tmp_path / "own.duckdb")):
            names = sorted(r[0] for r in conn.execute("SELECT database_name FROM duckdb_databases()").fetchall())
            assert names == sorted([path.name.split(".")[0], "system", "temp"])
            assert conn.execute("SELECT current_database()").fetchone()[0] == path.name.split(".")[0]
            assert conn.execute("SELECT current_setting('temp_directory')").fetchone()[0] == f"{path}.tmp"
        own.close()

    def test_no_two_agents_share_an_instance_and_a_closed_one_is_not_reused(self):
        instances.start(files.CONFIG)
        assert instances.ready()
        first = get_agent(Notes, "first")
        first.sql("SET threads = 1")
        first.sql("CREATE MACRO leak() AS 42")
        assert instances.ready()
        second = get_agent(Notes, "second")
        assert first.store._in_spare and second.store._in_spare
        assert second.sql("SELECT current_setting('threads') AS t")[0]["t"] != 1
        with pytest.raises(SqlError, match="leak"):
            second.sql("SELECT leak()")
        conn = first.store.conn
        first.close()
        with pytest.raises(duckdb.ConnectionException):
            conn.execute("SELECT 1")

    def test_with_no_spares_a_new_agent_opens_its_own_instance(self, monkeypatch):
        monkeypatch.setattr(instances, "SPARES", 0)
        agent = get_agent(Notes, "alone")
        assert not agent.store._in_spare
        Session(agent).append_message(msg("m1"))
        assert agent.sql("SELECT count(*) AS n FROM messages")[0]["n"] == 1

    def test_an_open_waits_for_the_spare_being_started_rather_than_start_its_own(self, monkeypatch):
        instances.start(files.CONFIG)
        assert instances.ready()
        real = duckdb.connect

        def slow_start(*args, **kwargs):  # the thread's next instance takes 50 ms more to start (well within WAIT)
            time.sleep(0.05)
            return real(*args, **kwargs)

        monkeypatch.setattr(duckdb, "connect", slow_start)
        own = []
        monkeypatch.setattr(database, "connect", lambda *a: own.append(a) or files.connect(*a))
        get_agent(Notes, "takes-the-spare")  # the thread starts the next one now
        waited = get_agent(Notes, "waits")
        assert waited.store._in_spare and own == []

    def test_a_forked_child_creates_agents_without_its_parents_spares(self, tmp_path):
        instances.start(files.CONFIG)
        assert instances.ready()
        context = multiprocessing.get_context("fork")
        child = context.Process(target=_create_in_child, args=(str(tmp_path / "forked"),))
        child.start()
        child.join(60)
        assert child.exitcode == 0


def _create_in_child(root: str) -> None:
    agent = get_agent(Notes, "child", root=root)
    Session(agent).append_message(msg("m1"))
    assert agent.sql("SELECT count(*) AS n FROM messages")[0]["n"] == 1
    agent.close()


class TestReopeningAFileThisProcessClosed:
    """A file closed fully checkpointed, and unchanged since, reopens in a spare without the migration checks."""

    def _closed(self, name: str) -> tuple[Agent, str]:
        agent = get_agent(Notes, name)
        Session(agent).append_message(msg("m1"))
        path = str(agent.path)
        agent.close()
        return agent, path

    def test_it_reopens_in_a_spare_with_its_data(self):
        _, _path = self._closed("again")
        assert instances.ready()
        again = get_agent(Notes, "again")
        assert again.store._in_spare and not again.store.fresh
        assert [m["id"] for m in Session(again).get_history()] == ["m1"]
        Session(again).append_message(msg("m2", parent_id="m1"))  # and writes as any open file does
        again.close()
        assert [m["id"] for m in Session(get_agent(Notes, "again")).get_history()] == ["m1", "m2"]

    def test_a_write_by_anyone_else_since_the_close_sends_it_through_the_usual_open(self):
        _, path = self._closed("touched")
        outside = duckdb.connect(path)
        outside.execute("CREATE TABLE notes_by_hand (x INTEGER)")
        outside.close()
        assert instances.ready()
        again = get_agent(Notes, "touched")
        assert not again.store._in_spare
        assert again.sql("SELECT count(*) AS n FROM notes_by_hand")[0]["n"] == 0

    def test_other_migrations_are_checked_and_applied(self, tmp_path):
        path = tmp_path / "plain.duckdb"
        database.Store(path).close()
        from agentlab.store._migrations import MIGRATIONS, Migration

        steps = [*MIGRATIONS, Migration("9999_test_extra", lambda conn: conn.execute("CREATE TABLE extra_step (x INT)"))]
        assert instances.ready()
        store = database.Store(path, migrations=steps)
        assert not store._in_spare and store.applied_migrations()[-1] == "9999_test_extra"
        store.close()
        assert instances.ready()
        store = database.Store(path, migrations=steps)  # now closed clean with these steps
        assert store._in_spare and store.scalar("SELECT count(*) FROM extra_step") == 0
        store.close()

    def test_the_name_checked_before_the_close_is_not_read_again_and_a_changed_file_is_checked(self):
        _, path = self._closed("named")
        assert instances.ready()
        again = get_agent(Notes, "named")
        assert again.store._in_spare and again.store.identity == "named"
        again.close()
        outside = duckdb.connect(path)  # renames the agent behind this process's back (a new stamp)
        outside.execute("UPDATE agent_meta SET value = 'someone-else' WHERE key = 'name'")
        outside.close()
        with pytest.raises(AgentlabError, match="belongs to the agent 'someone-else'"):
            get_agent(Notes, "named")

    def test_a_store_opened_without_an_agent_carries_no_name_to_trust(self, tmp_path):
        path = tmp_path / "plain.duckdb"
        database.Store(path).close()
        assert instances.ready()
        store = database.Store(path)
        assert store._in_spare and store.identity is None
        store.close()

    def test_a_destroyed_and_recreated_agent_is_a_new_file(self):
        _agent, _ = self._closed("gone")
        get_agent(Notes, "gone").destroy()
        fresh = get_agent(Notes, "gone")
        assert fresh.store.fresh and Session(fresh).get_history() == []

    def test_a_close_that_leaves_commits_in_the_log_is_not_remembered(self, tmp_path, monkeypatch):
        path = tmp_path / "logged.duckdb"
        database.Store(path).close()
        store = database.Store(path)
        store.execute("CREATE TABLE t (x INTEGER)")
        monkeypatch.setattr(store._stamper, "stamp", lambda: None)  # as when the closing checkpoint fails
        store.close()
        assert instances.ready()
        again = database.Store(path)
        assert not again._in_spare and again.scalar("SELECT count(*) FROM t") == 0
        again.close()
