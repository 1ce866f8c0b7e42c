"""Named agents on DuckDB files: identity, files, SQL, locking, closing, threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from agentlab import Agent, get_agent
from agentlab.errors import (
    AgentClassConflictError,
    AgentClosedError,
    AgentlabError,
    InvalidNameError,
    ReadOnlyAgentError,
    SqlError,
)
from agentlab.store._naming import agent_path, kebab_case


class ChatAgent(Agent):
    pass


class CounterAgent(Agent):
    initial_state = {"count": 0}


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=60
    )


class TestAgentsByName:
    def test_same_class_and_name_give_the_same_live_instance(self, tmp_path):
        a = get_agent(ChatAgent, "user-42", root=tmp_path)
        assert get_agent(ChatAgent, "user-42", root=tmp_path) is a
        assert get_agent(ChatAgent, "user-43", root=tmp_path) is not a

    def test_file_lives_under_the_kebab_case_class_folder(self, tmp_path):
        agent = get_agent(ChatAgent, "user-42", root=tmp_path)
        assert agent.path.parent == tmp_path.resolve() / "chat-agent"
        assert agent.path.suffix == ".duckdb" and agent.path.exists()

    def test_root_defaults_to_agentlab_home(self, agentlab_home):
        agent = get_agent(ChatAgent, "x")
        assert agent.path.is_relative_to(agentlab_home.resolve())

    def test_root_falls_back_to_agentlab_data_in_the_working_directory(self, tmp_path, monkeypatch):
        monkeypatch.delenv("AGENTLAB_HOME")
        monkeypatch.chdir(tmp_path)
        agent = get_agent(ChatAgent, "x")
        assert agent.path.is_relative_to(tmp_path.resolve() / "agentlab-data")

    def test_reopening_after_close_gives_a_new_instance_on_the_same_file(self, tmp_path):
        a = get_agent(ChatAgent, "u", root=tmp_path)
        a.sql("CREATE TABLE t (x INTEGER)")
        a.sql("INSERT INTO t VALUES (?)", 7)
        a.close()
        b = get_agent(ChatAgent, "u", root=tmp_path)
        assert b is not a
        assert b.sql("SELECT x FROM t") == [{"x": 7}]

    def test_kebab_case_follows_upstream(self):
        assert kebab_case("ChatAgent") == "chat-agent"
        assert kebab_case("MY_AGENT") == "my-agent"
        assert kebab_case("Agent") == "agent"
        assert kebab_case("my_Agent") == "my--agent"  # upstream maps "_" and each capital separately

    def test_get_agent_refuses_classes_that_are_not_agents(self, tmp_path) -> None:
        with pytest.raises(TypeError):
            get_agent(dict, "x", root=tmp_path)  # type: ignore[type-var]


def _cell(source: str) -> dict:
    """Run ``source`` the way a notebook cell runs: its classes belong to the ``__main__``-like module ``cell``."""
    namespace: dict = {"__name__": "cell"}
    exec(textwrap.dedent(source), namespace)
    return namespace


class TestOneLiveAgentPerFile:
    NOTES = """
        from agentlab import Agent

        class Notes(Agent):
            initial_state = {"v": 0}

            def version(self):
                return VERSION
    """

    def test_a_class_defined_again_takes_over_the_live_agent(self, tmp_path):
        from agentlab.session._session import Session

        first = _cell("VERSION = 1\n" + textwrap.dedent(self.NOTES))["Notes"]
        agent = get_agent(first, "u", root=tmp_path)
        session = Session.create(agent)
        session.append_message({"id": "b0", "role": "user", "parts": [{"type": "text", "text": "first"}]})
        second = _cell("VERSION = 2\n" + textwrap.dedent(self.NOTES))["Notes"]  # the cell, run again
        again = get_agent(second, "u", root=tmp_path)
        assert again is agent and isinstance(again, second) and again.version() == 2
        Session.create(again).append_message(
            {"id": "b1", "role": "user", "parts": [{"type": "text", "text": "second"}]})
        rows = again.sql("SELECT id, seq FROM messages ORDER BY seq")
        assert [r["id"] for r in rows] == ["b0", "b1"] and len({r["seq"] for r in rows}) == 2
        again.close()
        reopened = Session.create(get_agent(second, "u", root=tmp_path))
        assert reopened.get_message("b0")["parts"][0]["text"] == "first"
        assert [m["id"] for m in reopened.get_history()] == ["b0", "b1"]

    def test_two_classes_whose_names_kebab_alike_cannot_share_a_live_file(self, tmp_path):
        spaced = _cell("from agentlab import Agent\nclass CHAT_AGENT(Agent):\n    pass\n")["CHAT_AGENT"]
        assert kebab_case("CHAT_AGENT") == kebab_case("ChatAgent")
        agent = get_agent(ChatAgent, "u", root=tmp_path)
        agent.sql("CREATE TABLE t (x INTEGER)")
        with pytest.raises(AgentClassConflictError, match="same file"):
            get_agent(spaced, "u", root=tmp_path)
        assert agent.sql("SELECT count(*) AS n FROM t") == [{"n": 0}]
        agent.close()
        other = get_agent(spaced, "u", root=tmp_path)  # free once the first is closed
        assert other.sql("SELECT count(*) AS n FROM t") == [{"n": 0}]


class TestHostileNames:
    @pytest.mark.parametrize("name", ["../x", "a/b", ".", "..", "a\\b", "/etc/passwd", "~root", "x" * 512, "CON", "nul"])
    def test_names_never_leave_the_class_folder(self, tmp_path, name):
        agent = get_agent(ChatAgent, name, root=tmp_path)
        assert agent.path.parent == tmp_path.resolve() / "chat-agent"
        assert agent.name == name

    def test_case_only_differences_get_distinct_files(self, tmp_path):
        assert agent_path("ChatAgent", "Alice", tmp_path) != agent_path("ChatAgent", "alice", tmp_path)

    @pytest.mark.parametrize("name", ["", "a\x00b", "tab\there", "new\nline", "\x7f", "x" * 513])
    def test_unusable_names_are_rejected_and_create_nothing(self, tmp_path, name):
        with pytest.raises(InvalidNameError):
            get_agent(ChatAgent, name, root=tmp_path)
        assert not (tmp_path / "chat-agent").exists() or not any((tmp_path / "chat-agent").iterdir())

    def test_a_file_recorded_under_another_name_is_refused(self, tmp_path):
        a = get_agent(ChatAgent, "alice", root=tmp_path)
        path = a.path
        a.close()
        other = agent_path("ChatAgent", "bob", tmp_path)
        path.rename(other)
        with pytest.raises(AgentlabError, match="belongs to the agent 'alice'"):
            get_agent(ChatAgent, "bob", root=tmp_path)


class TestSql:
    def test_rows_come_back_as_dicts(self, tmp_path):
        agent = get_agent(ChatAgent, "u", root=tmp_path)
        agent.sql("CREATE TABLE notes (id INTEGER, body VARCHAR)")
        assert agent.sql("INSERT INTO notes VALUES (?, ?)", 1, "hello") == [{"Count": 1}]
        assert agent.sql("SELECT * FROM notes WHERE id = ?", 1) == [{"id": 1, "body": "hello"}]

    def test_dataframe_and_arrow_variants(self, tmp_path):
        agent = get_agent(ChatAgent, "u", root=tmp_path)
        frame = agent.sql.df("SELECT ? AS a, ? AS b", 1, "x")
        assert list(frame.columns) == ["a", "b"] and frame.iloc[0].tolist() == [1, "x"]
        table = agent.sql.arrow("SELECT 42 AS answer")
        assert table.column("answer").to_pylist() == [42]

    def test_injection_attempts_are_bound_as_values(self, tmp_path):
        agent = get_agent(ChatAgent, "u", root=tmp_path)
        agent.sql("CREATE TABLE notes (body VARCHAR)")
        evil = "x'); DROP TABLE notes; --"
        agent.sql("INSERT INTO notes VALUES (?)", evil)
        assert agent.sql("SELECT body FROM notes WHERE body = ?", evil) == [{"body": evil}]
        assert agent.sql("SELECT count(*) AS n FROM notes WHERE body = ?", "' OR '1'='1") == [{"n": 0}]

    def test_explain_analyze_of_a_write_drops_the_caches_it_made_stale(self, tmp_path):
        from agentlab.session._session import Session

        agent = get_agent(ChatAgent, "u", root=tmp_path)
        session = Session.create(agent)
        for i in range(3):
            session.append_message({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"t{i}"}]})
        agent.set_state({"n": 1})
        assert [m["id"] for m in session.get_history()] == ["m0", "m1", "m2"]
        agent.sql("EXPLAIN ANALYZE DELETE FROM messages WHERE id = 'm2'")
        agent.sql("EXPLAIN ANALYZE UPDATE agent_state SET state = '{\"n\": 5}'")
        assert [m["id"] for m in session.get_history()] == ["m0", "m1"]
        session.append_message({"id": "m3", "role": "user", "parts": [{"type": "text", "text": "t3"}]})
        assert [m["id"] for m in session.get_history()] == ["m0", "m1", "m3"]
        assert agent.merge_state({"k": 1}) == {"n": 5, "k": 1}

    def test_syntax_errors_raise_sql_error_carrying_the_query(self, tmp_path):
        agent = get_agent(ChatAgent, "u", root=tmp_path)
        agent.sql("CREATE TABLE t (x INTEGER)")
        agent.sql("INSERT INTO t VALUES (1)")
        with pytest.raises(SqlError) as info:
            agent.sql("SELEC x FROM t")
        assert info.value.query == "SELEC x FROM t"
        assert agent.sql("SELECT x FROM t") == [{"x": 1}]


class TestLockingAndClosing:
    def test_another_process_gets_a_typed_lock_error_naming_the_file(self, tmp_path):
        agent = get_agent(ChatAgent, "locked", root=tmp_path)
        code = """
            import sys
            from agentlab import Agent, get_agent
            from agentlab.errors import AgentLockedError
            class ChatAgent(Agent): pass
            try:
                get_agent(ChatAgent, "locked", root=sys.argv[1])
            except AgentLockedError as exc:
                print("LOCKED", exc)
        """
        result = run_python(code, str(tmp_path))
        assert result.stdout.startswith("LOCKED"), result.stderr
        assert str(agent.path) in result.stdout and "read_only=True" in result.stdout
        agent.close()
        result = run_python(textwrap.dedent(code) + "else:\n    print('OPENED')", str(tmp_path))
        assert "OPENED" in result.stdout and "LOCKED" not in result.stdout, result.stderr

    def test_read_only_agents_refuse_writes_and_keep_data(self, tmp_path):
        with get_agent(CounterAgent, "ro", root=tmp_path) as agent:
            agent.set_state({"count": 3})
            agent.sql("CREATE TABLE t (x INTEGER)")
        reader = get_agent(CounterAgent, "ro", root=tmp_path, read_only=True)
        assert reader.state == {"count": 3}
        with pytest.raises(ReadOnlyAgentError):
            reader.set_state({"count": 4})
        with pytest.raises(ReadOnlyAgentError):
            reader.sql("INSERT INTO t VALUES (1)")
        assert reader.sql("SELECT count(*) AS n FROM t") == [{"n": 0}]
        assert reader.state == {"count": 3}

    def test_read_only_open_of_a_missing_agent_says_how_to_create_it(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="read_only=True"):
            get_agent(ChatAgent, "nobody", root=tmp_path, read_only=True)

    def test_a_closed_agent_raises_a_typed_error(self, tmp_path):
        agent = get_agent(CounterAgent, "c", root=tmp_path)
        agent.close()
        agent.close()  # twice is fine
        with pytest.raises(AgentClosedError):
            agent.sql("SELECT 1")
        with pytest.raises(AgentClosedError):
            agent.set_state({"count": 1})
        with pytest.raises(AgentClosedError):
            _ = agent.state

    def test_context_manager_releases_the_file(self, tmp_path):
        with get_agent(ChatAgent, "cm", root=tmp_path) as agent:
            path = agent.path
        assert agent.closed
        result = run_python(
            "import duckdb, sys; duckdb.connect(sys.argv[1]).close(); print('ok')", str(path)
        )
        assert result.stdout.strip() == "ok", result.stderr


class TestThreads:
    def test_eight_threads_of_sql_inserts_lose_nothing(self, tmp_path):
        agent = get_agent(ChatAgent, "threads", root=tmp_path)
        agent.sql("CREATE TABLE hits (worker INTEGER, i INTEGER)")

        def work(worker: int) -> None:
            for i in range(50):
                agent.sql("INSERT INTO hits VALUES (?, ?)", worker, i)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = agent.sql("SELECT worker, count(*) AS n, count(DISTINCT i) AS d FROM hits GROUP BY worker ORDER BY worker")
        assert rows == [{"worker": w, "n": 50, "d": 50} for w in range(8)]

    def test_eight_threads_merging_state_lose_no_update(self, tmp_path):
        agent = get_agent(CounterAgent, "merge", root=tmp_path)
        seen: list[int] = []
        agent.connect(on_state=lambda s: seen.append(len(s)))

        def work(worker: int) -> None:
            for i in range(25):
                agent.merge_state({f"w{worker}-{i}": i})

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(agent.state) == 1 + 8 * 25
        assert seen == sorted(seen), "broadcasts arrived out of storage order"
        agent.close()
        assert len(get_agent(CounterAgent, "merge", root=tmp_path).state) == 201
