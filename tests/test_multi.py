"""Querying many agent files at once (agentlab/multi.py)."""

from __future__ import annotations

import hashlib

import pytest

from agentlab.agent._agent import Agent, get_agent
from agentlab.context._tokens import estimate_message_tokens
from agentlab.errors import ExportError
from agentlab.frames._multi import open_many
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS
from agentlab.store._naming import agent_path


class Helper(Agent):
    pass


def make(root, name: str, n: int, cls=Agent) -> None:
    agent = get_agent(cls, name, root=root)
    Session(agent).append_messages([{"id": f"{name}-{i}", "role": "user" if i % 2 == 0 else "assistant",
                                     "parts": [{"type": "text", "text": f"{name} says {i}"}]} for i in range(n)])
    agent.close()


@pytest.fixture
def root(tmp_path):
    make(tmp_path, "alice", 3)
    make(tmp_path, "bob", 5)
    make(tmp_path, "o'brien", 2)
    make(tmp_path, "alice", 1, cls=Helper)
    return tmp_path


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.duckdb"))}


class TestOpenMany:
    def test_a_glob_attaches_every_matching_file(self, root):
        with open_many(str(root / "agent" / "*.duckdb")) as many:
            assert len(many) == 3
            assert sorted(many.agents["agent"]) == ["alice", "bob", "o'brien"]
            assert "messages" in many.tables and "agents" not in many.tables

    def test_a_folder_or_a_list_of_files_works_too(self, root):
        with open_many(root) as many:
            assert len(many) == 4
            assert sorted(zip(many.agents["agent"], many.agents["agent_class"])) == [
                ("alice", "agent"), ("alice", "helper"), ("bob", "agent"), ("o'brien", "agent")]
        files = [agent_path("Agent", "bob", root), agent_path("Helper", "alice", root)]
        with open_many(files) as many:
            assert sorted(many.agents["agent"]) == ["alice", "bob"]

    def test_one_query_aggregates_over_all_agents_with_an_agent_column(self, root):
        with open_many(root / "agent") as many:
            df = many.sql("SELECT agent, count(*) AS n, max(seq) AS last FROM messages GROUP BY agent ORDER BY agent")
            assert df.values.tolist() == [["alice", 3, 3], ["bob", 5, 5], ["o'brien", 2, 2]]
            assert many.sql.rows("SELECT count(*) AS n FROM messages WHERE role = ?", "user") == [{"n": 6}]
            assert many.sql.arrow("SELECT * FROM messages").column_names[:2] == ["agent", "agent_class"]

    def test_messages_df_adds_parts_text_and_tokens(self, root):
        with open_many(root / "agent") as many:
            df = many.messages_df()
        assert list(df.columns) == ["agent", "agent_class", "session_id", "seq", "id", "parent_id", "role",
                                    "created_at", "n_parts", "part_kinds", "text", "tokens"]
        assert len(df) == 10
        row = df[df["id"] == "bob-4"].iloc[0]
        assert row["agent"] == "bob" and row["text"] == "bob says 4"
        assert row["tokens"] == estimate_message_tokens([{"parts": [{"type": "text", "text": "bob says 4"}]}])

    def test_a_file_with_an_older_schema_adds_no_rows_to_missing_tables(self, root, tmp_path):
        old = Store(tmp_path / "agent" / "old.duckdb", migrations=MIGRATIONS[:1])
        old.execute("INSERT INTO agent_meta VALUES ('name', 'old'), ('class', 'agent')")
        old.close()
        with open_many(root / "agent") as many:
            assert len(many) == 4
            assert many.sql("SELECT count(*) AS n FROM messages")["n"].tolist() == [10]
            assert sorted(many.sql("SELECT agent FROM agent_meta WHERE key = 'name'")["agent"]) == [
                "alice", "bob", "o'brien", "old"]

    def test_nothing_is_written_and_close_releases_the_files(self, root):
        before = digest(root)
        many = open_many(root)
        many.sql("SELECT count(*) FROM messages")
        many.close()
        many.close()
        assert digest(root) == before
        agent = get_agent(Agent, "bob", root=root)  # read-write again once released
        Session(agent).append_message({"id": "new", "role": "user", "parts": []})
        agent.close()
        with pytest.raises(ExportError, match="closed"):
            many.sql("SELECT 1")


class TestOpenManyRefusals:
    def test_a_live_agent_of_this_process_is_named_or_skipped(self, root):
        live = get_agent(Agent, "bob", root=root)
        with pytest.raises(ExportError, match="open in this process"):
            open_many(root / "agent")
        with open_many(root / "agent", skip_locked=True) as many:
            assert len(many) == 2 and many.skipped == [str(live.path)]
        live.close()

    def test_a_missing_file_is_reported(self, root):
        with pytest.raises(FileNotFoundError, match=r"nope\.duckdb"):
            open_many([root / "nope.duckdb"])


class TestOpenManyReadsInBatches:
    def test_batches_give_the_same_tables_as_one_read(self, root, monkeypatch):
        with open_many(root) as many:
            whole = many.sql("SELECT agent, agent_class, _alias, id FROM messages ORDER BY _alias, seq")
            listing = many.agents
        from agentlab.frames import _multi as multi

        monkeypatch.setattr(multi, "BATCH", 1)
        with open_many(root) as many:
            assert many.sql("SELECT agent, agent_class, _alias, id FROM messages ORDER BY _alias, seq").equals(whole)
            assert many.agents.equals(listing)
        assert sorted(listing["alias"]) == [f"agent_{i}" for i in range(4)]

    def test_a_later_batch_with_another_schema_adds_columns_holding_null_for_the_rest(self, root, tmp_path,
                                                                                       monkeypatch):
        from agentlab.frames import _multi as multi

        old = Store(tmp_path / "agent" / "zz-old.duckdb", migrations=MIGRATIONS[:1])
        old.execute("INSERT INTO agent_meta VALUES ('name', 'old'), ('class', 'agent')")
        old.execute("CREATE TABLE notes (body VARCHAR)")
        old.execute("INSERT INTO notes VALUES ('kept')")
        old.close()
        newest = get_agent(Agent, "newest", root=root)
        newest.sql("CREATE TABLE notes (body VARCHAR, stars INTEGER)")
        newest.sql("INSERT INTO notes VALUES ('shiny', 5)")
        newest.close()
        monkeypatch.setattr(multi, "BATCH", 1)
        with open_many(root / "agent") as many:
            notes = many.sql("SELECT agent, body, stars FROM notes ORDER BY agent").values.tolist()
        assert [row[:2] for row in notes] == [["newest", "shiny"], ["old", "kept"]]
        assert notes[0][2] == 5 and notes[1][2] != notes[1][2]  # NaN: the old file has no stars column

    def test_the_files_are_free_for_writers_once_open_many_returns(self, root):
        with open_many(root / "agent") as many:
            agent = get_agent(Agent, "bob", root=root)  # would raise if open_many still held the file
            Session(agent).append_message({"id": "later", "role": "user", "parts": []})
            agent.close()
            assert many.sql("SELECT count(*) AS n FROM messages WHERE agent = 'bob'")["n"].tolist() == [5]

    def test_one_worker_reads_the_same_and_queries_get_duckdbs_threads_back(self, root, monkeypatch):
        import duckdb

        from agentlab.frames import _multi as multi

        with open_many(root) as many:
            whole = many.sql("SELECT agent, _alias, id FROM messages ORDER BY _alias, seq")
            threads = many.sql("SELECT current_setting('threads') AS t")["t"].tolist()
        monkeypatch.setattr(multi, "WORKERS", 1)
        with open_many(root) as many:
            assert many.sql("SELECT agent, _alias, id FROM messages ORDER BY _alias, seq").equals(whole)
        assert threads == [duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]]

    def test_a_progress_bar_shows_when_asked_and_not_otherwise(self, root, capsys):
        open_many(root, progress=True).close()
        assert "reading agent files" in capsys.readouterr().err
        open_many(root, progress=False).close()
        open_many(root).close()  # four files: below PROGRESS_FROM
        assert "reading agent files" not in capsys.readouterr().err


class TestOpenManyReadsTablesWhenFirstNamed:
    """open_many reads the listing and `tables` (default: messages) at once; any other table on first use."""

    def test_a_table_not_read_at_open_is_read_when_a_query_names_it(self, root):
        with open_many(root / "agent") as many:
            assert "sessions" in many.tables and "messages" in many.tables
            # bob's agent is free for writers: a session created now is seen by the first query naming sessions,
            # while messages, read at open, stay as they were
            agent = get_agent(Agent, "bob", root=root)
            SessionManager(agent).create("later")
            Session(agent).append_message({"id": "after-open", "role": "user", "parts": []})
            agent.close()
            assert many.sql("SELECT agent, name FROM sessions").values.tolist() == [["bob", "later"]]
            assert many.sql("SELECT count(*) AS n FROM messages WHERE agent = 'bob'")["n"].tolist() == [5]

    def test_all_reads_every_table_at_open(self, root):
        with open_many(root / "agent", tables="all") as many:
            agent = get_agent(Agent, "bob", root=root)
            SessionManager(agent).create("later")
            agent.close()
            assert many.sql("SELECT count(*) AS n FROM sessions")["n"].tolist() == [0]

    def test_named_tables_are_read_at_open_and_one_name_may_be_a_string(self, root):
        with open_many(root / "agent", tables="sessions") as many:
            agent = get_agent(Agent, "bob", root=root)
            SessionManager(agent).create("later")
            Session(agent).append_message({"id": "after-open", "role": "user", "parts": []})
            agent.close()
            assert many.sql("SELECT count(*) AS n FROM sessions")["n"].tolist() == [0]
            assert many.sql("SELECT count(*) AS n FROM messages WHERE agent = 'bob'")["n"].tolist() == [6]

    def test_a_table_the_parser_cannot_see_is_read_when_duckdb_reports_it_missing(self, root):
        with open_many(root / "agent", tables=()) as many:
            assert len(many) == 3 and sorted(many.agents["agent"]) == ["alice", "bob", "o'brien"]
            # several statements: the table-name lookup declines them, DuckDB names the missing table
            rows = many.sql("SELECT 1; SELECT agent, count(*) AS n FROM messages GROUP BY agent ORDER BY agent")
            assert rows.values.tolist() == [["alice", 3], ["bob", 5], ["o'brien", 2]]
            with pytest.raises(Exception, match="nope"):
                many.sql("SELECT * FROM nope")

    def test_a_file_locked_when_a_later_table_is_read_is_named_or_skipped(self, root):
        with open_many(root / "agent") as many:
            live = get_agent(Agent, "bob", root=root)
            with pytest.raises(ExportError, match="open in this process"):
                many.sql("SELECT * FROM sessions")
            live.close()
        with open_many(root / "agent", skip_locked=True) as many:
            live = get_agent(Agent, "bob", root=root)
            SessionManager(live).create("unseen")
            assert many.sql("SELECT count(*) AS n FROM agent_meta WHERE key = 'name'")["n"].tolist() == [2]
            assert many.skipped == [str(live.path)]
            live.close()
            assert many.sql("SELECT count(*) AS n FROM messages")["n"].tolist() == [10]  # read at open: kept
