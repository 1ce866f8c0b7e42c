"""Agent export to Parquet and exact restore (agentlab/portable.py)."""

from __future__ import annotations

import json
import os

import duckdb
import pytest

from agentlab import frames
from agentlab.agent._agent import Agent, get_agent
from agentlab.agent._portable import MANIFEST, export, import_, read_manifest
from agentlab.chat._usage import Usage, record_usage
from agentlab.errors import ExportError, ExportMismatchError
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session


class Notebook(Agent):
    initial_state = {"count": 0}


def tables(agent) -> dict[str, list[tuple]]:
    """Every table's rows in storage order."""
    names = [r[0] for r in agent.store.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY 1").fetchall()]
    return {name: agent.store.execute('SELECT * FROM "' + name.replace('"', '""') + '"').fetchall() for name in names}


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
        assert frames.messages(source).equals(frames.messages(restored))
        assert frames.compactions(source).equals(frames.compactions(restored))
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
        for table, path in (("messages", messages), ("fulltext_docs", docs)):
            os.replace(path + ".new", path)
            # an old export's manifest described its own files: their columns and row counts
            manifest["tables"][table]["rows"] = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0]
            manifest["tables"][table]["columns"] = [
                list(r[:2]) for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()]
        con.close()
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
        with pytest.raises(ExportError, match=r"messages.parquet"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        with pytest.raises(ExportError, match=r"manifest.json"):
            import_(tmp_path, Notebook, root=tmp_path / "elsewhere")

    def test_a_failed_restore_removes_the_half_written_file(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        (folder / "sessions.parquet").write_bytes(b"not parquet")
        with pytest.raises(ExportError):  # the Parquet file cannot be read
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not list(tmp_path.glob("elsewhere/**/*.duckdb"))

    def test_export_refuses_a_folder_with_files_unless_overwriting(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        with pytest.raises(ExportError, match="not empty"):
            source.export(folder)
        assert source.export(folder, overwrite=True) == folder


class TestTableNamesBecomeSafeFileNames:
    NAMES = ["../../escaped", "sub/dir", "/abs", "..", ".", "manifest.json", 'quote"d', "ünïcode 😀", "x" * 300,
             "back\\slash", "Spaces and CAPS"]

    def test_every_table_name_round_trips_and_no_file_leaves_the_folder(self, source, tmp_path):
        for i, name in enumerate(self.NAMES):
            quoted = '"' + name.replace('"', '""') + '"'
            source.sql(f"CREATE TABLE {quoted} (x INTEGER, y VARCHAR)")
            source.sql(f"INSERT INTO {quoted} VALUES (?, ?), (?, NULL)", i, name, -i)
        before = tables(source)
        work = tmp_path / "deep" / "er"
        work.mkdir(parents=True)
        folder = source.export(work / "export")
        written = [p for p in tmp_path.rglob("*") if p.is_file() and tmp_path / "home" not in p.parents]
        assert written and all(p.parent == folder for p in written)
        manifest = read_manifest(folder)
        files = [t["file"] for t in manifest["tables"].values()]
        assert len(set(files)) == len(files)
        assert all(os.path.basename(f) == f and f.endswith(".parquet") and len(f) < 100 for f in files)
        assert sorted(p.name for p in folder.iterdir()) == sorted([*files, MANIFEST])
        restored = import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert tables(restored) == before
        restored.close()

    def test_plain_names_keep_their_file_names(self, source, tmp_path):
        manifest = read_manifest(source.export(tmp_path / "export"))
        assert manifest["tables"]["messages"]["file"] == "messages.parquet"
        assert manifest["tables"]["my_labels"]["file"] == "my_labels.parquet"


class TestImportChecksTheManifest:
    def _rewrite(self, folder, change):
        manifest = json.loads((folder / MANIFEST).read_text())
        change(manifest)
        (folder / MANIFEST).write_text(json.dumps(manifest))

    @pytest.mark.parametrize("entry", ["/etc/passwd", "../outside.parquet", "..", "a/../../b.parquet", ""])
    def test_a_file_entry_that_leaves_the_folder_is_refused(self, source, tmp_path, entry):
        folder = source.export(tmp_path / "export")
        # a real, matching Parquet file outside the folder, so only the refusal can stop the read
        (tmp_path / "outside.parquet").write_bytes((folder / "my_labels.parquet").read_bytes())
        self._rewrite(folder, lambda m: m["tables"]["my_labels"].update(file=entry))
        with pytest.raises(ExportError, match="not a plain file name"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not (tmp_path / "elsewhere").exists()

    def test_an_absolute_path_to_a_matching_file_is_refused(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        outside = tmp_path / "outside.parquet"
        outside.write_bytes((folder / "my_labels.parquet").read_bytes())
        self._rewrite(folder, lambda m: m["tables"]["my_labels"].update(file=str(outside)))
        with pytest.raises(ExportError, match="my_labels"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not (tmp_path / "elsewhere").exists()

    def test_a_link_to_a_file_outside_is_refused(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        outside = tmp_path / "outside.parquet"
        os.replace(folder / "my_labels.parquet", outside)
        os.symlink(outside, folder / "my_labels.parquet")
        with pytest.raises(ExportError, match="outside"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not (tmp_path / "elsewhere").exists()

    def test_a_messages_file_cut_to_one_row_is_refused_naming_the_counts(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        messages = folder / "messages.parquet"
        con = duckdb.connect()
        con.execute(f"COPY (SELECT * FROM read_parquet('{messages}') LIMIT 1) TO '{messages}.cut' (FORMAT parquet)")
        con.close()
        os.replace(f"{messages}.cut", messages)
        with pytest.raises(ExportMismatchError, match=r"'messages'.*rows 8.*holds 1") as info:
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert (info.value.table, info.value.what, info.value.expected, info.value.found) == ("messages", "rows", 8, 1)
        assert not (tmp_path / "elsewhere").exists()

    def test_a_file_with_other_columns_is_refused(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        labels = folder / "my_labels.parquet"
        con = duckdb.connect()
        con.execute(f"COPY (SELECT message_id, label FROM read_parquet('{labels}')) TO '{labels}.new' (FORMAT parquet)")
        con.close()
        os.replace(f"{labels}.new", labels)
        with pytest.raises(ExportMismatchError, match="my_labels") as info:
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert info.value.found == ["message_id", "label"]

    def test_an_unreadable_file_is_a_typed_error_naming_the_table(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        (folder / "sessions.parquet").write_bytes(b"not parquet")
        with pytest.raises(ExportError, match=r"'sessions'.*not a readable Parquet file"):
            import_(folder, Notebook, root=tmp_path / "elsewhere")

    @pytest.mark.parametrize("change", [
        lambda m: m.update(tables=[]),
        lambda m: m["tables"]["messages"].pop("rows"),
        lambda m: m["tables"]["messages"].update(rows="8"),
        lambda m: m["tables"]["messages"].update(columns=None),
        lambda m: m["tables"]["messages"].update(file=None),
        lambda m: m["tables"].update(messages=5),
    ], ids=["tables not a dict", "no row count", "row count a string", "no columns", "no file", "entry a number"])
    def test_an_incomplete_manifest_is_refused(self, source, tmp_path, change):
        folder = source.export(tmp_path / "export")
        self._rewrite(folder, change)
        with pytest.raises(ExportError):
            import_(folder, Notebook, root=tmp_path / "elsewhere")
        assert not (tmp_path / "elsewhere").exists()


class TestExportReplacesAFolderWhole:
    def test_overwrite_replaces_the_export_and_keeps_other_files(self, source, tmp_path):
        folder = source.export(tmp_path / "export")
        (folder / "notes.txt").write_text("mine")
        (folder / "figures").mkdir()
        (folder / "figures" / "plot.png").write_bytes(b"png")
        (folder / "stale.parquet").write_bytes(b"left by an old export")
        source.sql("INSERT INTO my_labels VALUES ('m2', 'second', 0.5)")
        source.export(folder, overwrite=True)
        assert (folder / "notes.txt").read_text() == "mine"
        assert (folder / "figures" / "plot.png").read_bytes() == b"png"
        assert not (folder / "stale.parquet").exists()
        assert read_manifest(folder)["tables"]["my_labels"]["rows"] == 2
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    def test_overwrite_does_not_replace_a_folder_that_is_no_export(self, source, tmp_path):
        folder = tmp_path / "papers"
        folder.mkdir()
        (folder / "draft.tex").write_text("precious")
        with pytest.raises(ExportError, match="not an earlier export"):
            source.export(folder, overwrite=True)
        assert [p.name for p in folder.iterdir()] == ["draft.tex"]

    def test_without_an_atomic_swap_the_old_folder_is_replaced_by_two_renames(self, source, tmp_path, monkeypatch):
        from agentlab.agent import _atomic

        folder = source.export(tmp_path / "export")
        monkeypatch.setattr(_atomic, "exchange", lambda a, b: False)
        source.sql("INSERT INTO my_labels VALUES ('m2', 'second', 0.5)")
        source.export(folder, overwrite=True)
        assert read_manifest(folder)["tables"]["my_labels"]["rows"] == 2
        assert [p.name for p in tmp_path.iterdir()] == ["export", "home"]


@pytest.mark.slow
def test_a_50_mib_message_and_a_100000_part_message_round_trip(tmp_path):
    agent = get_agent(Notebook, "big", root=tmp_path / "home")
    s = Session(agent)
    s.append_message({"id": "huge", "role": "user", "parts": [{"type": "text", "text": "lorem ipsum " * (50 * 2**20 // 12)}]})
    s.append_message({"id": "parts", "role": "user", "parts": [{"type": "text", "text": f"p{i}"} for i in range(100_000)]})
    restored = import_(agent.export(tmp_path / "export"), Notebook, root=tmp_path / "elsewhere")
    assert tables(restored) == tables(agent)
    restored.close()
    agent.close()
