"""Where context blocks are stored: one row per (session, label), so no two sessions ever share a block, and
files written when blocks were stored as f"{label}_{session_id}" keep every block (migration m070)."""

from __future__ import annotations

import itertools

import agentlab
from agentlab.agent._portable import export
from agentlab.context._providers import AgentContextProvider
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS

OLD_MIGRATIONS = [m for m in MIGRATIONS if m.name != "m070_context_block_sessions"]


def text(session: Session, label: str) -> str:
    session.context.load()
    block = session.get_context_block(label)
    assert block is not None, label
    return block.content


def rows(store: Store) -> list[tuple]:
    return sorted(store.execute("SELECT session_id, label, content FROM context_blocks").fetchall(),
                  key=lambda r: (r[0] is None, r[0] or "", r[1]))


class TestSessionsNeverShareABlock:
    def test_a_label_ending_in_a_session_id_is_not_that_sessions_block(self, store):
        b = Session(store, "b").with_context("memory_a")
        a_b = Session(store, "a_b").with_context("memory")
        b.set_block("memory_a", "b's note")
        assert text(a_b, "memory") == ""
        a_b.set_block("memory", "a_b's note")
        assert text(Session(store, "b").with_context("memory_a"), "memory_a") == "b's note"
        assert text(Session(store, "a_b").with_context("memory"), "memory") == "a_b's note"
        assert rows(store) == [("a_b", "memory", "a_b's note"), ("b", "memory_a", "b's note")]

    def test_a_cached_prompt_is_not_a_default_session_block_named_after_it(self, store):
        chat = Session(store, "p").with_context("memory").with_cached_prompt()
        chat.set_block("memory", "secret")
        prompt = chat.freeze_system_prompt()
        default = Session(store).with_context("_system_prompt_p")
        assert text(default, "_system_prompt_p") == ""
        default.set_block("_system_prompt_p", "overwrite?")
        assert Session(store, "p").with_context("memory").with_cached_prompt().freeze_system_prompt() == prompt

    def test_every_pair_of_sessions_and_labels_keeps_its_own_text(self, store_path):
        session_ids = ["", "a", "b", "a_b", "b_a", "x_a_b", "_", "a_"]
        labels = ["memory", "memory_a", "memory_a_b", "memory_b", "m", "m_", "_system_prompt", "_system_prompt_a"]
        store = Store(store_path)
        for sid, label in itertools.product(session_ids, labels):
            AgentContextProvider(store, label, session_id=sid).set(f"{sid}|{label}")
        store.close()
        store = Store(store_path)  # read back from the file, not from the cache
        for sid in session_ids:
            session = Session(store, sid)
            for label in labels:
                session.with_context(label)
            session.context.load()
            assert [b.content for b in session.get_context_blocks()] == [f"{sid}|{label}" for label in labels]
        assert store.scalar("SELECT count(*) FROM context_blocks") == len(session_ids) * len(labels)
        store.close()

    def test_blocks_df_shows_when_each_sessions_own_row_was_written(self, store):
        Session(store, "b").with_context("memory_a").set_block("memory_a", "x")
        frame = Session(store, "a_b").with_context("memory").blocks_df()
        assert frame["updated_at"].isna().tolist() == [True]
        mine = Session(store, "b").with_context("memory_a").blocks_df()
        assert mine["updated_at"].notna().tolist() == [True]


def old_file(path) -> None:
    """A file as the code before m070 wrote it: block rows named f"{label}_{session_id}"."""
    old = Store(path, migrations=OLD_MIGRATIONS)
    manager = SessionManager(old)
    manager.create("chat", session_id="chat-123")
    manager.create("b", session_id="b")
    Session(old, "a_b").append_message({"id": "q", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    for label, content in [
        ("memory", "default memory"),                   # the default session: plain label
        ("_system_prompt", "default prompt"),
        ("memory_chat-123", "chat memory"),              # a session with a row
        ("_system_prompt_chat-123", "chat prompt"),
        ("memory_a_b", "shared by two sessions"),        # sessions "b" (memory_a) and "a_b" (memory) both exist
        ("notes_ghost", "a session that left no trace"),
    ]:
        old.execute("INSERT INTO context_blocks (label, content) VALUES (?, ?)", [label, content])
    old.close()


class TestMigratingAnOldFile:
    def test_rows_move_to_their_sessions_and_ambiguous_names_stay_as_legacy_rows(self, store_path):
        old_file(store_path)
        store = Store(store_path)
        assert rows(store) == [
            ("", "memory", "default memory"),
            ("a_b", "memory", "shared by two sessions"),
            ("b", "memory_a", "shared by two sessions"),
            ("chat-123", "_system_prompt", "chat prompt"),
            ("chat-123", "memory", "chat memory"),
            (None, "_system_prompt", "default prompt"),  # could also be session "prompt"'s block "_system"
            (None, "_system_prompt_chat-123", "chat prompt"),
            (None, "memory_a_b", "shared by two sessions"),
            (None, "memory_chat-123", "chat memory"),
            (None, "notes_ghost", "a session that left no trace"),
        ]
        store.close()

    def test_every_session_reads_what_it_read_before(self, store_path):
        old_file(store_path)
        store = Store(store_path)
        expected = {("", "memory"): "default memory", ("chat-123", "memory"): "chat memory",
                    ("a_b", "memory"): "shared by two sessions", ("b", "memory_a"): "shared by two sessions",
                    ("ghost", "notes"): "a session that left no trace",
                    ("", "notes_ghost"): "a session that left no trace", ("", "memory_chat-123"): "chat memory"}
        for (sid, label), content in expected.items():
            assert text(Session(store, sid).with_context(label), label) == content, (sid, label)
        assert Session(store, "chat-123").with_cached_prompt().freeze_system_prompt() == "chat prompt"
        assert Session(store).with_cached_prompt().freeze_system_prompt() == "default prompt"
        store.close()

    def test_after_migrating_a_write_reaches_only_the_writer(self, store_path):
        old_file(store_path)
        store = Store(store_path)
        Session(store, "ghost").with_context("notes").set_block("notes", "ghost's own")
        Session(store, "b").with_context("memory_a").set_block("memory_a", "b's own")
        assert text(Session(store, "ghost").with_context("notes"), "notes") == "ghost's own"
        assert text(Session(store).with_context("notes_ghost"), "notes_ghost") == "a session that left no trace"
        assert text(Session(store, "a_b").with_context("memory"), "memory") == "shared by two sessions"
        store.close()
        reopened = Store(store_path)
        assert text(Session(reopened, "ghost").with_context("notes"), "notes") == "ghost's own"
        reopened.close()

    def test_an_export_made_before_the_migration_imports_with_every_block(self, store_path, tmp_path):
        old_file(store_path)
        old = Store(store_path, migrations=OLD_MIGRATIONS)
        export(old, tmp_path / "old-export")
        old.close()
        agent = agentlab.import_(tmp_path / "old-export", name="restored")
        assert text(Session(agent, "chat-123").with_context("memory"), "memory") == "chat memory"
        assert text(Session(agent).with_context("memory"), "memory") == "default memory"
        assert text(Session(agent, "ghost").with_context("notes"), "notes") == "a session that left no trace"
        assert text(Session(agent, "x").with_context("memory"), "memory") == ""
        agent.close()

    def test_a_blank_file_gets_the_new_table_and_a_rerun_changes_nothing(self, store_path):
        store = Store(store_path)
        columns = [r[0] for r in store.execute("SELECT column_name FROM duckdb_columns() "
                                               "WHERE table_name = 'context_blocks' ORDER BY column_index").fetchall()]
        assert columns == ["session_id", "label", "content", "updated_at"]
        AgentContextProvider(store, "memory", session_id="s").set("kept")
        store.close()
        store = Store(store_path)
        assert rows(store) == [("s", "memory", "kept")]
        assert "m070_context_block_sessions" in store.applied_migrations()
        store.close()
