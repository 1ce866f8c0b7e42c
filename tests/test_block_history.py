"""The memory timeline: every write to a writable context block is stored as a row (who, when, old -> new), in the
write's transaction; migration m080 adds the table; frames export it; the seq clock orders it with messages."""

from __future__ import annotations

import pytest

import agentlab
from agentlab import Agent, get_agent
from agentlab.chat._chat_agent import ChatAgent
from agentlab.chat._offline import OfflineClaude
from agentlab.context import block_history, writing_as
from agentlab.context._block_history import current_writer, watch_blocks
from agentlab.context._providers import AgentContextProvider
from agentlab.errors import BlockBudgetError
from agentlab.session._session import Session
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS


def timeline(store, session_id=None):
    """(label, writer, writer_id, old, new) of every write, oldest first."""
    return [(w.label, w.writer, w.writer_id, w.old, w.new) for w in reversed(block_history(store, session_id))]


class Remembers(ChatAgent):
    def configure_session(self, session):
        return session.with_context("memory", description="Facts about the user", max_tokens=200)


class TestEveryWriteIsARow:
    def test_python_writes_and_tool_calls_are_told_apart(self, store):
        session = Session(store, "s").with_context("memory", max_tokens=100)
        session.set_block("memory", "likes tea")
        session.append_to_block("memory", "lives in Porto")
        session.run_tool("set_context", {"label": "memory", "content": "likes coffee"})
        assert timeline(store) == [
            ("memory", "python", None, "", "likes tea"),
            ("memory", "python", None, "likes tea", "likes tea\nlives in Porto"),
            ("memory", "tool", None, "likes tea\nlives in Porto", "likes coffee")]

    def test_a_chat_turn_names_the_tool_call_that_wrote(self):
        agent = get_agent(Remembers, "chat").use_client(OfflineClaude().client())
        turn = agent.ask("Remember that I take my coffee black.")
        (write,) = block_history(agent.store, agent.session.session_id)
        calls = [p for m in agent.session.get_history() for p in m["parts"] if p.get("type") == "tool_use"]
        assert (write.writer, write.writer_id, write.new) == ("tool", calls[0]["id"], "I take my coffee black.")
        seqs = agent.session.messages_df().set_index("id")["seq"]
        assert seqs[turn.start_id] < write.seq  # the store's clock orders the write after the question
        assert agent.session.blocks_history_df()["writer_id"].tolist() == [calls[0]["id"]]

    def test_a_write_made_while_serving_a_client_is_the_clients(self):
        agent = get_agent(Agent, "served")
        session = Session(agent).with_context("memory")
        connection = agent.connect()
        with connection.acting():
            session.set_block("memory", "from an RPC")
        assert timeline(agent.store) == [("memory", "client", connection.id, "", "from an RPC")]
        assert current_writer() == ("python", None)

    def test_writing_as_names_a_writer_and_refuses_unknown_ones(self, store):
        session = Session(store).with_context("memory")
        with writing_as("tool", "toolu_9"):
            session.run_tool("set_context", {"label": "memory", "content": "x"})  # keeps the outer id
        assert timeline(store)[-1][1:3] == ("tool", "toolu_9")
        with pytest.raises(ValueError, match="writer must be one of"), writing_as("robot"):
            pass

    def test_each_session_has_its_own_timeline(self, store):
        Session(store, "a").with_context("memory").set_block("memory", "a's")
        Session(store, "b").with_context("memory").set_block("memory", "b's")
        assert [w[4] for w in timeline(store, "a")] == ["a's"]
        assert [w[4] for w in timeline(store)] == ["a's", "b's"]
        assert [w.new for w in block_history(store, "b", label="nope")] == []


class TestAFailedWriteLeavesNoRow:
    def test_a_refused_write_stores_nothing(self, store):
        session = Session(store).with_context("memory", max_tokens=5)
        with pytest.raises(BlockBudgetError):
            session.set_block("memory", "word " * 50)
        assert timeline(store) == []

    def test_a_rolled_back_transaction_takes_its_rows_with_it(self, store):
        session = Session(store).with_context("memory")
        heard = []
        watch_blocks(store, "", lambda sid, label: heard.append(label))
        with pytest.raises(RuntimeError), store.transaction():
            session.set_block("memory", "never committed")
            raise RuntimeError("boom")
        assert timeline(store) == [] and heard == []
        session.set_block("memory", "committed")
        assert heard == ["memory"] and [w[4] for w in timeline(store)] == ["committed"]

    def test_a_provider_that_fails_to_store_leaves_no_row(self, store):
        class Failing:
            def get(self):
                return "old"

            def set(self, content):
                raise OSError("read-only disk")

        session = Session(store).with_context("notes", Failing())
        with pytest.raises(OSError):
            session.set_block("notes", "new")
        assert timeline(store) == []

    def test_a_read_only_file_records_nothing_but_an_outside_provider_still_writes(self, store_path):
        class Outside:
            text = "old"

            def get(self):
                return self.text

            def set(self, content):
                self.text = content

        Store(store_path).close()
        reader = Store(store_path, read_only=True)
        outside = Outside()
        Session(reader).with_context("notes", outside).set_block("notes", "new")
        assert outside.text == "new" and timeline(reader) == []
        reader.close()

    def test_a_broken_watcher_never_breaks_the_write(self, store, caplog):
        session = Session(store).with_context("memory")
        unwatch = watch_blocks(store, None, lambda sid, label: 1 / 0)
        session.set_block("memory", "stored anyway")
        assert [w[4] for w in timeline(store)] == ["stored anyway"] and "a block watcher failed" in caplog.text
        unwatch()


class TestTheTableAndItsExports:
    def test_an_old_file_gets_the_table_at_open_and_a_rerun_changes_nothing(self, store_path):
        old = Store(store_path, migrations=[m for m in MIGRATIONS if m.name != "m080_block_history"])
        assert "context_block_history" not in {r[0] for r in old.execute("SHOW TABLES").fetchall()}
        AgentContextProvider(old, "memory").set("before the timeline existed")  # as the code before m080 wrote it
        old.close()
        store = Store(store_path)
        assert "m080_block_history" in store.applied_migrations() and timeline(store) == []
        Session(store).with_context("memory").set_block("memory", "after")
        assert timeline(store) == [("memory", "python", None, "before the timeline existed", "after")]
        store.close()
        again = Store(store_path)
        assert again.applied_migrations().count("m080_block_history") == 1 and len(timeline(again)) == 1
        again.close()

    def test_the_clock_starts_above_the_timeline_after_a_reopen(self, store_path):
        store = Store(store_path)
        session = Session(store).with_context("memory")
        session.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        session.set_block("memory", "after m1")
        last = block_history(store)[0].seq
        store.close()
        store = Store(store_path)
        Session(store).append_message({"id": "m2", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        seqs = dict(store.execute("SELECT id, seq FROM messages").fetchall())
        assert seqs["m1"] < last < seqs["m2"]
        store.close()

    def test_the_frames_list_every_write_oldest_first_with_tokens(self):
        agent = get_agent(Agent, "frames")
        Session(agent, "x").with_context("memory").set_block("memory", "Hello world")
        Session(agent, "y").with_context("notes").set_block("notes", "x" * 400)
        frame = Session(agent, "x").blocks_history_df()
        assert list(frame.columns) == ["seq", "written_at", "session_id", "label", "writer", "writer_id",
                                       "old_content", "new_content", "old_tokens", "new_tokens"]
        assert frame[["label", "new_content", "old_tokens", "new_tokens"]].values.tolist() == [
            ["memory", "Hello world", 0, 3]]
        everything = agentlab.frames.blocks_history(agent)  # a plain Agent: the frame function
        assert everything.column("session_id").to_pylist() == ["x", "y"]
        assert everything.column("new_tokens").to_pylist() == [3, 100]

    def test_export_and_import_keep_the_timeline(self, tmp_path):
        agent = get_agent(Agent, "exported")
        Session(agent).with_context("memory").set_block("memory", "kept")
        agent.export(tmp_path / "out")
        restored = agentlab.import_(tmp_path / "out", name="restored")
        assert timeline(restored.store) == [("memory", "python", None, "", "kept")]
