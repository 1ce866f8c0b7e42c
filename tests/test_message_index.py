"""The message index in segments beside the file, with sqlite3 FTS5 as the oracle through every kind of change.

Small thresholds (a flush every few documents, merges past three segments) make a few hundred messages go through
the in-memory buffer, bulk batches, persisted segments, merges, deletions and reopening; after every step the
hits and scores must equal FTS5's ``bm25()`` on the same documents.
"""

from __future__ import annotations

import random
import shutil
import sqlite3

import duckdb
import pytest

from agentlab.search._index_files import IndexFiles, index_folder
from agentlab.search._tokenizer import tokenize
from agentlab.session._session import Session
from agentlab.session.duckdb import _index_state as index_state
from agentlab.session.duckdb._tree import tree_of
from agentlab.store._database import Store
from tests.helpers import msg

WORDS = ["alpha", "beta", "gamma", "delta", "deploy", "deploying", "friday", "server", "the", "on", "naïve"]
QUERIES = ["alpha", "on", "friday server", "deploy deploying", "alpha alpha beta", "the alpha", "gamma delta friday",
           "beta-gamma", "server on", "naive"]


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    monkeypatch.setattr(index_state, "PERSIST_MIN_DOCS", 1)
    monkeypatch.setattr(index_state, "FLUSH_DOCS", 7)
    monkeypatch.setattr(index_state, "MAX_SEGMENTS", 3)
    monkeypatch.setattr(index_state, "MERGE_AT_ONCE", 2)
    monkeypatch.setattr(index_state, "BUILD_DOCS", 4)  # bulk batches of 4 or more build on the builder thread


def _quote(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


class Oracle:
    """The same documents in an FTS5 table; rowids in indexing order, as search_seq is."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(mid UNINDEXED, content, tokenize='porter unicode61')")
        self.rowid = 0

    def put(self, mid: str, text: str) -> None:
        self.drop([mid])
        if not text:  # a message without text is not indexed (upstream)
            return
        self.rowid += 1
        self.db.execute("INSERT INTO t(rowid, mid, content) VALUES (?, ?, ?)", [self.rowid, mid, text])

    def rewrite_in_place(self, mid: str, text: str) -> None:
        """New text under the same rowid (what SQL from outside that keeps search_seq amounts to)."""
        rowid = self.db.execute("SELECT rowid FROM t WHERE mid = ?", [mid]).fetchone()[0]
        self.drop([mid])
        self.db.execute("INSERT INTO t(rowid, mid, content) VALUES (?, ?, ?)", [rowid, mid, text])

    def drop(self, mids: list[str]) -> None:
        self.db.executemany("DELETE FROM t WHERE mid = ?", [(m,) for m in mids])

    def search(self, query: str, mode: str) -> list[tuple[str, float]]:
        if mode == "phrase":
            match = _quote(query)
        else:
            match = (" OR " if mode == "any" else " ").join(_quote(w) for w in query.split())
        return self.db.execute("SELECT mid, -bm25(t) FROM t WHERE t MATCH ? ORDER BY rank, rowid LIMIT 100",
                               [match]).fetchall()


def check_all(store: Store, oracle: Oracle) -> None:
    index = tree_of(store).fts
    for query in QUERIES:
        for mode in ("any", "all", "phrase"):
            if not any(tokenize(w) for w in query.split()):
                continue
            hits = index.search(query, mode=mode, limit=100)
            got = [(h.doc_id, h.score) for h in hits]
            want = oracle.search(query, mode)
            stored = dict(store.execute("SELECT id, content FROM messages").fetchall())
            assert [h.content for h in hits] == [stored[h.doc_id] for h in hits], (query, mode)
            assert [m for m, _ in got] == [m for m, _ in want], (query, mode)
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12, abs=1e-15), (query, mode)


def text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(0, 12)))


class TestAgreesWithFts5ThroughChanges:
    def test_appends_bulk_imports_updates_deletes_clears_and_reopens(self, store_path):
        rng = random.Random(11)
        oracle = Oracle()
        store = Store(store_path)
        sessions = {"": Session(store), "b": Session(store, "b")}
        alive: dict[str, str] = {}  # id -> session
        counter = 0
        for _ in range(160):
            sid = rng.choice(list(sessions))
            session = sessions[sid]
            action = rng.random()
            if action < 0.35:
                counter += 1
                body = text(rng)
                session.append_message(msg(f"m{counter}", body))
                oracle.put(f"m{counter}", body)
                alive[f"m{counter}"] = sid
            elif action < 0.55:
                batch = []
                for _ in range(rng.randint(1, 12)):
                    counter += 1
                    batch.append(msg(f"m{counter}", text(rng)))
                session.append_messages(batch)
                for m in batch:
                    oracle.put(m["id"], m["parts"][0]["text"])
                    alive[m["id"]] = sid
            elif action < 0.7 and alive:
                mid = rng.choice(sorted(alive))
                body = text(rng)
                sessions[alive[mid]].update_message(msg(mid, body))
                oracle.put(mid, body)
            elif action < 0.82 and alive:
                doomed = rng.sample(sorted(alive), k=min(len(alive), rng.randint(1, 4)))
                for mid in doomed:
                    sessions[alive.pop(mid)].delete_messages([mid])
                oracle.drop(doomed)
            elif action < 0.86:
                sessions["b"].clear_messages()
                gone = [m for m, s in alive.items() if s == "b"]
                for mid in gone:
                    del alive[mid]
                oracle.drop(gone)
            elif action < 0.93:
                store.close()
                store = Store(store_path)
                sessions = {"": Session(store), "b": Session(store, "b")}
            check_all(store, oracle)
        state = tree_of(store).fts._state
        assert len(state.persisted) > 1 or state.memory  # the run went through segments, not only the buffer
        store.close()

    def test_a_search_between_a_delete_and_a_merge_sees_the_delete(self, store_path):
        oracle = Oracle()
        store = Store(store_path)
        session = Session(store)
        session.append_messages([msg(f"m{i}", "alpha beta" if i % 2 else "alpha") for i in range(30)])
        for i in range(30):
            oracle.put(f"m{i}", "alpha beta" if i % 2 else "alpha")
        session.delete_messages([f"m{i}" for i in range(0, 30, 3)])
        oracle.drop([f"m{i}" for i in range(0, 30, 3)])
        check_all(store, oracle)
        tree_of(store).fts.flush()  # merges the segments that hold the deleted documents
        check_all(store, oracle)
        store.close()
        store = Store(store_path)
        check_all(store, oracle)
        store.close()


@pytest.fixture
def saved(store_path):
    """A file with 40 messages whose index was saved by a clean close, and its oracle."""
    oracle = Oracle()
    store = Store(store_path)
    rng = random.Random(3)
    batch = [msg(f"m{i}", text(rng)) for i in range(40)]
    Session(store).append_messages(batch)
    for m in batch:
        oracle.put(m["id"], m["parts"][0]["text"])
    store.close()
    return store_path, oracle


def reconciles(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = index_state.IndexState.reconcile

    def counting(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(index_state.IndexState, "reconcile", counting)
    return calls


class TestTrust:
    def test_a_cleanly_closed_index_is_used_as_it_is(self, saved, monkeypatch):
        path, oracle = saved
        calls = reconciles(monkeypatch)
        store = Store(path)
        assert IndexFiles(str(path)).read_meta()["stamp"] == store.opened_stamp
        check_all(store, oracle)
        assert calls == []
        store.close()

    def test_sql_from_outside_is_reconciled(self, saved, monkeypatch):
        path, oracle = saved
        store = Store(path)
        check_all(store, oracle)
        calls = reconciles(monkeypatch)
        store.execute("UPDATE messages SET search_tokens = ? WHERE id = 'm3'", [" ".join(tokenize("server friday"))])
        store.execute("DELETE FROM messages WHERE id = 'm4'")
        store.note_outside_write()
        oracle.rewrite_in_place("m3", "server friday")  # same search_seq kept: only the hash tells
        oracle.drop(["m4"])
        check_all(store, oracle)
        assert calls == [1]
        store.close()

    def test_a_content_rewritten_from_outside_is_returned_new(self, saved):
        path, oracle = saved
        store = Store(path)
        check_all(store, oracle)
        store.execute("UPDATE messages SET content = replace(content, '\"role\":\"user\"', '\"role\":\"bot\"') "
                      "WHERE id = 'm7'")
        store.note_outside_write()
        check_all(store, oracle)  # compares every hit's content with the file's
        store.close()

    def test_another_program_writing_the_file_is_noticed(self, saved, monkeypatch):
        path, oracle = saved
        conn = duckdb.connect(str(path))
        conn.execute("DELETE FROM messages WHERE id IN ('m1', 'm2')")
        conn.close()
        oracle.drop(["m1", "m2"])
        calls = reconciles(monkeypatch)
        store = Store(path)
        check_all(store, oracle)
        assert calls == [1]
        store.close()

    def test_an_index_beside_another_file_is_foreign(self, saved, tmp_path, monkeypatch):
        path, _ = saved
        other = tmp_path / "other.duckdb"
        store = Store(other)
        Session(store).append_messages([msg("x1", "gamma delta"), msg("x2", "friday")])
        store.close()
        shutil.rmtree(index_folder(str(other)))
        shutil.copyfile(other, path)  # the old index of `path` stays beside the new contents
        oracle = Oracle()
        oracle.put("x1", "gamma delta")
        oracle.put("x2", "friday")
        calls = reconciles(monkeypatch)
        store = Store(path)
        check_all(store, oracle)
        assert calls == [1]
        store.close()

    @pytest.mark.parametrize("damage", ["flip a byte", "truncate", "garbage meta", "delete the folder",
                                        "remove a segment"])
    def test_a_damaged_or_missing_index_is_rebuilt(self, saved, damage):
        path, oracle = saved
        folder = index_folder(str(path))
        segments = sorted(folder.glob("seg-*.sec"))
        if damage == "flip a byte":
            raw = bytearray(segments[0].read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            segments[0].write_bytes(bytes(raw))
        elif damage == "truncate":
            segments[0].write_bytes(segments[0].read_bytes()[:100])
        elif damage == "garbage meta":
            (folder / "meta.json").write_text("{not json")
        elif damage == "delete the folder":
            shutil.rmtree(folder)
        else:
            segments[0].unlink()
        store = Store(path)
        check_all(store, oracle)
        store.close()
        store = Store(path)  # and the rebuilt index was saved
        check_all(store, oracle)
        store.close()


class TestReadOnly:
    def test_a_read_only_store_searches_a_stale_index_right_and_writes_nothing(self, saved):
        path, oracle = saved
        conn = duckdb.connect(str(path))
        conn.execute("UPDATE messages SET search_tokens = 'alpha' WHERE id = 'm5'")
        conn.close()
        oracle.rewrite_in_place("m5", "alpha")
        folder = index_folder(str(path))
        before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
        store = Store(path, read_only=True)
        check_all(store, oracle)
        store.close()
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before

    def test_a_store_in_memory_has_no_folder_and_agrees(self, store):
        oracle = Oracle()
        session = Session(store)
        for i in range(20):
            session.append_message(msg(f"m{i}", WORDS[i % len(WORDS)] + " on"))
            oracle.put(f"m{i}", WORDS[i % len(WORDS)] + " on")
        check_all(store, oracle)


class TestAFullDisk:
    def test_a_failed_index_write_keeps_the_write_and_searches_right(self, store_path, monkeypatch):
        from agentlab.errors import SearchIndexWarning
        from agentlab.search import _index_files as index_files

        def no_space(*args, **kwargs):
            raise OSError(28, "No space left on device")

        oracle = Oracle()
        store = Store(store_path)
        session = Session(store)
        monkeypatch.setattr(index_files, "write_sections", no_space)
        with pytest.warns(SearchIndexWarning, match="could not be written"):
            session.append_messages([msg(f"m{i}", "alpha beta" if i % 2 else "gamma") for i in range(20)])
        for i in range(20):
            oracle.put(f"m{i}", "alpha beta" if i % 2 else "gamma")
        assert store.scalar("SELECT count(*) FROM messages") == 20  # the write stands
        check_all(store, oracle)
        monkeypatch.undo()
        store.close()
        store = Store(store_path)  # the next opener rebuilds what could not be saved
        check_all(store, oracle)
        store.close()


class TestTheBuilderThread:
    def test_batches_built_meanwhile_are_searched_in_order_and_saved(self, store_path):
        oracle = Oracle()
        store = Store(store_path)
        session = Session(store)
        rng = random.Random(5)
        for b in range(6):
            batch = [msg(f"b{b}-{i}", text(rng)) for i in range(5)]
            session.append_messages(batch)
            for m in batch:
                oracle.put(m["id"], m["parts"][0]["text"])
        state = tree_of(store).fts._state
        check_all(store, oracle)  # waits for the builds, then agrees with FTS5 (ties follow the write order)
        assert not state.building
        store.close()
        store = Store(store_path)
        check_all(store, oracle)
        assert tree_of(store).fts._state.exact  # saved at close with every batch in it
        store.close()

    def test_a_build_that_fails_leaves_its_rows_to_the_file(self, store_path, monkeypatch):
        monkeypatch.setattr(index_state, "FLUSH_DOCS", 1000)  # no flush: only the builder thread builds
        oracle = Oracle()
        store = Store(store_path)
        session = Session(store)
        session.append_message(msg("first", "alpha beta"))
        oracle.put("first", "alpha beta")
        real = index_state.build_segment

        def failing(table, lexicon, hashes=None):
            raise MemoryError("no room for this build")

        monkeypatch.setattr(index_state, "build_segment", failing)
        batch = [msg(f"m{i}", "gamma delta friday" if i % 2 else "alpha server") for i in range(6)]
        session.append_messages(batch)  # the write commits; only the index build fails
        monkeypatch.setattr(index_state, "build_segment", real)
        for m in batch:
            oracle.put(m["id"], m["parts"][0]["text"])
        check_all(store, oracle)  # the failed batch was read back from the file
        store.close()


    def test_a_child_started_by_fork_does_not_wait_for_the_parents_build(self, store_path, monkeypatch):
        import os
        import signal
        import threading

        monkeypatch.setattr(index_state, "FLUSH_DOCS", 1000)
        release = threading.Event()
        real = index_state.build_segment

        def slow(table, lexicon, hashes=None):
            release.wait(10)
            return real(table, lexicon, hashes)

        monkeypatch.setattr(index_state, "build_segment", slow)
        store = Store(store_path)
        Session(store).append_messages([msg(f"m{i}", "alpha beta") for i in range(6)])
        state = tree_of(store).fts._state
        assert state.building and not state.building[0].future.done()
        pid = os.fork()
        if pid == 0:  # the child: its copy of the build can never finish here
            signal.alarm(5)
            state._settle()
            os._exit(0 if not state.exact and not state.building else 1)
        _, status = os.waitpid(pid, 0)
        release.set()
        assert os.waitstatus_to_exitcode(status) == 0
        check = Oracle()
        for i in range(6):
            check.put(f"m{i}", "alpha beta")
        check_all(store, check)  # the parent's build finished and is used
        store.close()


class TestSegmentsFromCodedTokens:
    def test_coded_tokens_build_the_same_segment_as_token_strings(self):
        import numpy as np
        import pyarrow as pa

        from agentlab.search._lexicon import Lexicon
        from agentlab.search._postings import arrow_ints, arrow_strings
        from agentlab.search._segment import build_segment
        from agentlab.search._token_arrays import token_array

        rng = random.Random(3)
        texts = [text(rng) for _ in range(40)] + ["", "Ünïcode naïve café", "  runs   of  spaces  "]
        found = token_array(texts)
        table = pa.table({"doc_id": arrow_strings([f"m{i}" for i in range(len(texts))]),
                          "grp": arrow_strings(["" if i % 3 else "b" for i in range(len(texts))]),
                          "seq": arrow_ints(np.arange(len(texts))), "search_seq": arrow_ints(np.arange(len(texts))),
                          "length": arrow_ints(found.lengths), "tokens": found.joined,
                          "content": arrow_strings(texts)})
        # Two batches, as two bulk writes arrive: each carries its own dictionary of terms.
        halves = [table.slice(0, 20), table.slice(20)]
        coded = pa.concat_tables([h.append_column("token_codes", token_array(texts[h_start:h_start + h.num_rows]).coded())
                                  for h, h_start in zip(halves, (0, 20))])
        plain, from_codes = Lexicon(), Lexicon()
        want, got = build_segment(table, plain), build_segment(coded, from_codes)
        assert [from_codes.term(i) for i in range(len(from_codes))] == [plain.term(i) for i in range(len(plain))]
        for name, array in want.arrays().items():
            assert np.array_equal(got.arrays()[name], array), name
