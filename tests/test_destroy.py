"""Agent.destroy(): the agent's data and file are deleted, its clients let go, and later use is a typed error."""

from __future__ import annotations

import pytest

from agentlab import Agent, Session, get_agent, rpc
from agentlab.agent._agent import live_agent
from agentlab.errors import AgentClosedError, AgentDestroyedError, ConnectionClosedError, ReadOnlyAgentError
from agentlab.serve import AgentClient, start
from tests.helpers import msg


class Notes(Agent):
    initial_state = {"count": 0}

    @rpc()
    def add(self, n: int = 1) -> int:
        self.merge_state({"count": self.state["count"] + n})
        return self.state["count"]


@pytest.fixture
def agent():
    made = get_agent(Notes, "to-go")
    made.set_state({"count": 5})
    Session.create(made).append_messages([msg("m1"), msg("m2")])
    return made


class TestWhatIsDeleted:
    def test_the_file_and_its_log_are_gone_and_get_agent_makes_a_new_empty_agent(self, agent):
        path = agent.path
        agent.sql("CREATE TABLE notes (body VARCHAR)")
        agent.destroy()
        assert not path.exists() and not path.with_name(path.name + ".wal").exists()
        assert live_agent(Notes, "to-go") is None
        fresh = get_agent(Notes, "to-go")
        assert fresh is not agent and fresh.state == {"count": 0}
        assert Session.create(fresh).get_history() == [] and fresh.sql("SELECT * FROM information_schema.tables "
                                                                        "WHERE table_name = 'notes'") == []

    def test_the_search_index_folder_beside_the_file_goes_too(self, monkeypatch):
        from agentlab.session.duckdb import _index_state as index_state

        monkeypatch.setattr(index_state, "PERSIST_MIN_DOCS", 1)  # small indexes are written too
        made = get_agent(Notes, "indexed")
        session = Session.create(made)
        session.append_messages([msg(f"m{i}", f"note number {i}") for i in range(20)])
        assert [h.id for h in session.search("number 3")] == ["m3"]
        folder = made.path.with_name(made.path.name + ".search-index")
        made.close()
        assert folder.is_dir() and any(folder.iterdir())  # saved at close
        get_agent(Notes, "indexed").destroy()
        assert not folder.exists() and not made.path.exists()

    def test_destroying_twice_and_closing_after_are_fine(self, agent):
        agent.destroy()
        agent.destroy()
        agent.close()
        assert agent.destroyed and agent.closed


class TestLaterUse:
    @pytest.mark.parametrize("use", [
        lambda a, s: a.state, lambda a, s: a.sql("SELECT 1"), lambda a, s: a.set_state({"count": 1}),
        lambda a, s: a.connect(), lambda a, s: s.get_history(), lambda a, s: s.append_message(msg("m3")),
        lambda a, s: s.search("m1"), lambda a, s: s.latest_leaf_id(),
    ], ids=["state", "sql", "set_state", "connect", "history", "append", "search", "leaf"])
    def test_any_use_of_the_agent_or_its_sessions_raises_a_typed_error(self, agent, use):
        session = Session.create(agent)
        session.get_history()  # the tree is in memory: it must not answer for a deleted file
        agent.destroy()
        with pytest.raises(AgentDestroyedError, match="destroyed") as caught:
            use(agent, session)
        assert isinstance(caught.value, AgentClosedError)

    def test_a_plain_close_still_says_closed(self, agent):
        session = Session.create(agent)
        session.get_history()
        agent.close()
        with pytest.raises(AgentClosedError) as caught:
            session.get_history()
        assert not isinstance(caught.value, AgentDestroyedError)


class TestConnections:
    def test_open_connections_are_closed_and_told(self, agent):
        told = []
        connection = agent.connect()
        connection.on_dropped = lambda: told.append("gone")
        agent.destroy()
        assert connection.closed and told == ["gone"]
        with pytest.raises(ConnectionClosedError):
            connection.set_state({"count": 1})

    def test_a_served_client_is_disconnected_and_the_next_one_gets_a_new_agent(self, tmp_path):
        handle = start([Notes], root=tmp_path / "served")
        try:
            client = AgentClient(handle.url, Notes, "served")
            assert client.call("add", 3) == 3
            get_agent(Notes, "served", root=handle.app.root).destroy()
            assert client.wait_for(lambda c: c.closed) and client.close_code == 1012
            with AgentClient(handle.url, Notes, "served") as again:
                assert again.state == {"count": 0}
        finally:
            handle.stop()


class TestReadOnly:
    def test_a_read_only_agent_refuses_and_keeps_everything(self, agent):
        path = agent.path
        agent.close()
        reader = get_agent(Notes, "to-go", read_only=True)
        with pytest.raises(ReadOnlyAgentError):
            reader.destroy()
        assert path.exists() and reader.state == {"count": 5}
