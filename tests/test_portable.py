"""Agent export to Parquet and exact restore (agentlab/portable.py)."""

from __future__ import annotations

import json
import os

import duckdb
import pytest

from agentlab.agent import Agent, get_agent
from agentlab.errors import ExportError
from agentlab.manager import SessionManager
from agentlab.portable import MANIFEST, export, import_, read_manifest
from agentlab.session import Session
from agentlab.usage import Usage, record_usage


class Notebook(Agent):
    initial_state = {"count": 0}


def tables(agent) -> dict[str, list[tuple]]:
    """Every table's rows in storage order."""
    names = [r[0] for r in agent.store.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()]
    return {name: agent.store.execute(f'SELECT * FROM "{name}"').fetchall() for name in names}


@pytest.fixture
def source(tmp_path):
    """An agent with something in every kind of table: branches, an overlay, a fork, state, a context block,
    vectors, usage, a compaction event and a table of the researcher's own."""
    agent = get_agent(Notebook, "alice", root=tmp_path / "home")
    s = Session(agent)
    s.append_messages([{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                        "parts": [{"type": "text", "text": f"message number {i} ünïcode 😀"}]} for i in range(6)])
    s.append_message({"id": "alt", "role": "assistant", "parts": [
        {"type": "thinking", "thinking": "hm", "signature": "c2lnbmF0dXJl"}, {"type": "text", "text": "other"}]},
        parent_id="m2")
    s.add_compaction("summary of the start", "m0", "m3")
    info = SessionManager(agent).fork("", "m1", "fork")
    Session(agent, info.id).append_message({"id": "f1", "role": "user", "parts": [{"type": "text", "text": "f"}]})
    s.on_compaction(lambda h: None)
    s.compact()
    agent.set_state({"count": 3, "nested": [1, 2.5, None]})
    agent.sql("INSERT INTO context_blocks (label, content) VALUES ('memory', 'likes tea')")
    agent.sql("INSERT INTO vector_namespaces VALUES ('notes', 'toy', 3, nextval('vector_generations'), now())")
    agent.sql("INSERT INTO vector_entries VALUES (nextval('vector_entry_ids'), 'notes', 'k', 'text', 'h', NULL, now())")
    agent.sql("INSERT INTO vector_embeddings VALUES ('toy', 'h', [0.5, -1.25, 3.0]::FLOAT[])")
    record_usage(agent.store, Usage(10, 5, 2, 1, 1), model="claude-x")
    agent.sql("CREATE TABLE my_labels (message_id VARCHAR, label VARCHAR, score DOUBLE)")
    agent.sql("INSERT INTO my_labels VALUES ('m1', 'greeting', 0.9)")
    yield agent
    agent.close()


class TestExportImportRoundTrip:
    def test_every_table_comes_back_row_for_row(self, source, tmp_path):
        before = tables(source)
        folder = source.export(tmp_path / "export")
        restored = import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert restored is not source and restored.path != source.path
        assert tables(restored) == before
        restored.close()

    def test_the_manifest_describes_the_agent(self, source, tmp_path):
        folder = export(source, tmp_path / "export")
        manifest = json.loads((folder / MANIFEST).read_text())
        assert manifest["agent"] == "alice" and manifest["class"] == "notebook"
        assert manifest["python_class"].endswith("Notebook")
        assert manifest["migrations"] == source.store.applied_migrations()
        assert manifest["tables"]["messages"]["rows"] == 8
        assert ["seq", "BIGINT"] in manifest["tables"]["messages"]["columns"]
        assert sorted(p.name for p in folder.glob("*.parquet")) == sorted(
            t["file"] for t in manifest["tables"].values())
        assert read_manifest(folder) == manifest

    def test_sequences_continue_where_the_original_stopped(self, source, tmp_path):
        restored = import_(source.export(tmp_path / "export"), Notebook, root=tmp_path / "elsewhere")
        new = {"id": "next", "role": "user", "parts": [{"type": "text", "text": "after"}]}
        a = Session(source).append_message(dict(new))
        b = Session(restored).append_message(dict(new))
        assert a.seq == b.seq
        restored.close()

    def test_the_restored_agent_reads_the_same_history_and_frames(self, source, tmp_path):
        restored = import_(source.export(tmp_path / "export"), Notebook, root=tmp_path / "elsewhere")
        ours, theirs = Session(source).get_history(), Session(restored).get_history()
        assert [m["id"] for m in ours] == [m["id"] for m in theirs]
        assert [m["parts"] for m in ours] == [m["parts"] for m in theirs]
        assert restored.state == source.state
        assert source.messages_df().equals(restored.messages_df())
        assert source.compactions_df().equals(restored.compactions_df())
        restored.close()

    def test_an_export_from_before_m060_gets_its_message_postings_back(self, source, tmp_path):
        # Rewrite a fresh export as the code before m060 wrote one: no search columns on messages, postings
        # in fulltext_docs under the namespace "messages", and no m060 in the migrations list.
        folder = source.export(tmp_path / "export")
        manifest = json.loads((folder / MANIFEST).read_text())
        messages, docs = (str(folder / manifest["tables"][t]["file"]) for t in ("messages", "fulltext_docs"))
        con = duckdb.connect()
        con.execute(f"COPY (SELECT 'messages' AS namespace, id AS doc_id, session_id AS grp, seq, "
                    f"length(search_tokens) - length(replace(search_tokens, ' ', '')) + 1 AS length, "
                    f"search_tokens AS tokens FROM read_parquet('{messages}') WHERE search_tokens IS NOT NULL "
                    f"UNION ALL SELECT * FROM read_parquet('{docs}')) TO '{docs}.new' (FORMAT parquet)")
        con.execute(f"COPY (SELECT * EXCLUDE (search_tokens, search_seq) FROM read_parquet('{messages}')) "
                    f"TO '{messages}.new' (FORMAT parquet)")
        con.close()
        for path in (messages, docs):
            os.replace(path + ".new", path)
        manifest["migrations"] = [m for m in manifest["migrations"] if m != "m060_message_search"]
        (folder / MANIFEST).write_text(json.dumps(manifest))
        restored = import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert [h.id for h in Session(restored).search("number", mode="any")] == \
            [h.id for h in Session(source).search("number", mode="any")]
        assert restored.sql("SELECT count(*) AS n FROM fulltext_docs WHERE namespace = 'messages'") == [{"n": 0}]
        restored.close()

    def test_a_new_name_is_recorded_in_the_file(self, source, tmp_path):
        restored = import_(source.export(tmp_path / "export"), Notebook, name="bob", root=tmp_path / "home")
        assert restored.name == "bob"
        assert restored.sql("SELECT value FROM agent_meta WHERE key = 'name'") == [{"value": "bob"}]
        assert len(restored.sql("SELECT * FROM messages")) == 8
        restored.close()

    def test_a_read_only_agent_can_be_exported(self, source, tmp_path):
        path_root = source.root
        source.close()
        reader = get_agent(Notebook, "alice", root=path_root, read_only=True)
        folder = reader.export(tmp_path / "export")
        assert read_manifest(folder)["tables"]["messages"]["rows"] == 8
        reader.close()


class TestImportRefusals:
    def test_an_existing_agent_is_not_overwritten_unless_asked(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        other = get_agent(Notebook, "alice", root=tmp_path / "second")
        Session(other).append_message({"id": "x", "role": "user", "parts": []})
        other.close()
        with pytest.raises(ExportError, match="already exists"):
            import_(folder, Notebook, root=tmp_path / "second")
        restored = import_(folder, Notebook, root=tmp_path / "second", overwrite=True)
        assert tables(restored) == tables(source)
        restored.close()

    def test_an_agent_open_in_this_process_is_refused(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        with pytest.raises(ExportError, match="open in this process"):
            import_(folder, Notebook, root=tmp_path / "home", overwrite=True)

    def test_an_export_from_a_newer_schema_is_refused_and_leaves_no_file(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        manifest = json.loads((folder / MANIFEST).read_text())
        manifest["migrations"].append("m999_future")
        (folder / MANIFEST).write_text(json.dumps(manifest))
        with pytest.raises(ExportError, match="newer agentlab"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not list(tmp_path.glob("elsewhere/**/*.duckdb"))

    def test_a_missing_parquet_file_or_manifest_is_reported(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        (folder / "messages.parquet").unlink()
        with pytest.raises(ExportError, match="messages.parquet"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        with pytest.raises(ExportError, match="manifest.json"):
            import_(tmp_path, Notebook, root=tmp_path / "elsewhere")

    def test_a_failed_restore_removes_the_half_written_file(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        (folder / "sessions.parquet").write_bytes(b"not parquet")
        with pytest.raises(Exception):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not list(tmp_path.glob("elsewhere/**/*.duckdb"))

    def test_export_refuses_a_folder_with_files_unless_overwriting(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        with pytest.raises(ExportError, match="not empty"):
            source.export(folder)
        assert source.export(folder, overwrite=True) == folder
