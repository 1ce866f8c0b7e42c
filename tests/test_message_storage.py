"""How messages are stored since m060: one row per message carrying its search tokens, seqs from the session
clock, a read cache of stored texts, and caches dropped after SQL from outside."""

from __future__ import annotations

import json

import pytest

from agentlab import Agent, get_agent
from agentlab.search._fulltext import FullTextIndex
from agentlab.search._postings import arrow_optional_strings
from agentlab.search._tokenizer import tokenize
from agentlab.session._manager import SessionManager
from agentlab.session._session import Session
from agentlab.session.duckdb._contents import ContentCache
from agentlab.session.duckdb._tree import tree_of
from agentlab.store._clock import clock_of
from agentlab.store._database import Store
from agentlab.store._migrations import MIGRATIONS


def msg(mid: str, text: str, role: str = "user", created_at: str = "2026-01-01T00:00:00.000Z") -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}], "created_at": created_at}


TEXTS = {"a": "apples and pears", "b": "apple pie recipe", "c": "nothing to see", "d": "pear cider, apple cider"}


def _old_file(path) -> dict[str, float]:
    """A file as the code before m060 wrote it: sequence-numbered rows, postings in fulltext_docs."""
    before_m060 = MIGRATIONS[:[m.name for m in MIGRATIONS].index("m060_message_search")]
    old = Store(path, migrations=before_m060)
    fts = FullTextIndex(old, "messages")
    parent = None
    for mid, text in TEXTS.items():
        content = json.dumps(msg(mid, text), separators=(",", ":"))
        old.execute("INSERT INTO messages (id, session_id, parent_id, role, content) VALUES (?, '', ?, 'user', ?)",
                    [mid, parent, content])
        fts.index(mid, text)
        parent = mid
    old.execute("SELECT nextval('session_seq') FROM range(5)").fetchall()  # the sequence ran ahead of the rows
    scores = {h.doc_id: h.score for h in fts.search("apple pear", mode="any")}
    old.close()
    return scores


class TestMigration:
    def test_old_postings_move_into_the_rows_and_rank_the_same(self, store_path):
        before = _old_file(store_path)
        store = Store(store_path)
        assert store.scalar("SELECT count(*) FROM fulltext_docs WHERE namespace = 'messages'") == 0
        rows = dict(store.execute("SELECT id, search_tokens FROM messages").fetchall())
        assert rows == {mid: " ".join(tokenize(text)) for mid, text in TEXTS.items()}
        after = {h.id: h.score for h in Session(store).search("apple pear", mode="any")}
        assert after == pytest.approx(before)
        assert set(after) == {"a", "b", "d"}
        store.close()

    def test_the_rebuilt_table_keeps_every_row_and_the_tree(self, store_path):
        _old_file(store_path)
        store = Store(store_path)
        history = Session(store).get_history()
        assert [m["id"] for m in history] == list(TEXTS)
        assert history[1] == msg("b", TEXTS["b"])
        store.close()

    def test_new_seqs_start_above_old_rows_and_the_sequence(self, store_path):
        _old_file(store_path)
        store = Store(store_path)
        highest_row = store.scalar("SELECT max(seq) FROM messages")
        sequence = store.scalar("SELECT last_value FROM duckdb_sequences() WHERE sequence_name = 'session_seq'")
        assert sequence > highest_row
        appended = Session(store).append_message(msg("e", "a new one"))
        assert appended.seq == sequence + 1
        store.close()


class TestSeqClock:
    def test_one_clock_orders_writes_across_tables(self, store):
        manager = SessionManager(store)
        info = manager.create("main")
        session = manager.session(info.id)
        first = session.append_message(msg("m1", "hello")).seq
        record = session.tree.add_compaction(info.id, "summary", "m1", "m1")
        fork = manager.fork(info.id, "m1", "fork")
        second = session.append_message(msg("m2", "again")).seq
        assert info.seq < first < record.seq < fork.seq < second

    def test_a_rolled_back_write_leaves_no_row_and_later_seqs_stay_unique(self, store):
        session = Session(store)
        session.append_message(msg("m1", "kept"))
        with pytest.raises(RuntimeError), store.transaction():
            session.append_message(msg("m2", "lost"))
            raise RuntimeError("abort")
        assert [m["id"] for m in session.get_history()] == ["m1"]
        session.append_message(msg("m3", "after"))
        seqs = [r[0] for r in store.execute("SELECT seq FROM messages ORDER BY seq").fetchall()]
        assert len(seqs) == len(set(seqs)) == 2

    def test_the_clock_reads_the_file_again_after_outside_sql(self, store):
        session = Session(store)
        session.append_message(msg("m1", "one"))
        store.execute("INSERT INTO messages (seq, id, session_id, role, content) "
                      "VALUES (1000, 'x', 'other', 'user', '{}')")
        store.note_outside_write()
        assert clock_of(store).take() == 1001


class TestContentCache:
    def test_reads_return_fresh_objects(self, store):
        session = Session(store)
        session.append_messages([msg(f"m{i}", f"text {i}") for i in range(100)])
        first = session.get_history()
        first[0]["parts"][0]["text"] = "changed by the caller"
        first.pop()
        again = session.get_history()
        assert len(again) == 100 and again[0]["parts"][0]["text"] == "text 0"

    def test_a_cold_read_fills_the_cache_and_a_warm_read_equals_it(self, store_path):
        writer = Store(store_path)
        Session(writer).append_messages([msg(f"m{i}", f"text {i}") for i in range(300)])
        writer.close()
        store = Store(store_path)
        session = Session(store)
        tree = tree_of(store)
        assert len(tree.contents) == 0
        cold = session.get_history()
        assert len(tree.contents) == 300
        assert session.get_history() == cold
        store.close()

    def test_a_row_that_is_not_a_message_is_skipped_and_not_cached(self, store):
        session = Session(store)
        session.append_message(msg("m1", "one"))
        store.execute("INSERT INTO messages (seq, id, session_id, parent_id, role, content) "
                      "VALUES (500, 'bad', '', 'm1', 'user', '{\"id\": \"bad\"')")  # not JSON
        store.note_outside_write()
        assert [m["id"] for m in session.get_history("bad")] == ["m1"]
        assert tree_of(store).contents.lookup([500]) == [None]

    def test_the_bound_empties_the_cache_instead_of_growing(self):
        cache = ContentCache(limit=10)
        cache.put(1, "abcd")
        cache.put(2, "efgh")
        assert cache.chars == 8
        cache.put(3, "ijkl")  # would pass 10: everything goes, then the new text
        assert cache.lookup([1, 2, 3]) == [None, None, "ijkl"] and cache.chars == 4
        cache.put(4, "x" * 11)  # larger than the bound: not kept
        assert cache.lookup([3, 4]) == [None, None]


class TestOutsideSql:
    def test_history_and_search_see_an_update_made_with_agent_sql(self):
        agent = get_agent(Agent, "outside-sql")
        session = Session(agent)
        session.append_message(msg("m1", "apples"))
        assert session.get_history()[0]["parts"][0]["text"] == "apples"
        assert [h.id for h in session.search("apples")] == ["m1"]
        changed = json.dumps(msg("m1", "bananas"), separators=(",", ":"))
        agent.sql("UPDATE messages SET content = ?, search_tokens = ? WHERE id = 'm1'", changed, "banana")
        assert session.get_history()[0]["parts"][0]["text"] == "bananas"
        assert [h.id for h in session.search("bananas")] == ["m1"]
        assert session.search("apples") == []

    def test_a_select_keeps_the_caches(self):
        agent = get_agent(Agent, "outside-select")
        session = Session(agent)
        session.append_message(msg("m1", "apples"))
        session.get_history()
        tree = tree_of(agent.store)
        generation = tree.generation
        agent.sql("SELECT count(*) FROM messages")
        agent.sql.df("WITH x AS (SELECT 1) SELECT * FROM x")
        assert tree.generation == generation and len(tree.contents) == 1

    def test_state_rewritten_with_agent_sql_is_read_back(self):
        agent = get_agent(Agent, "outside-state")
        agent.set_state({"n": 1})
        assert agent.state == {"n": 1}
        agent.sql("UPDATE agent_state SET state = ?", json.dumps({"n": 2}))
        assert agent.state == {"n": 2}

    def test_a_repeated_id_written_by_sql_reads_as_its_first_row(self):
        agent = get_agent(Agent, "outside-duplicate")
        session = Session(agent)
        session.append_message(msg("m1", "first"))
        later = json.dumps(msg("m1", "second"), separators=(",", ":"))
        agent.sql("INSERT INTO messages (seq, id, session_id, role, content) VALUES (99, 'm1', '', 'user', ?)", later)
        assert [m["parts"][0]["text"] for m in session.get_history()] == ["first"]


class TestCreatedAt:
    @pytest.mark.parametrize("created", [
        "2026-11-02T12:00:00.000Z", "2026-11-02 12:00+02:00", "2026-11-02T12:00:00.123456-05:30",  # fast path
        "2026-11-02T12:00:00", "2026-11-02", "2026-13-02T12:00:00Z", "next tuesday",  # left to DuckDB
    ])
    def test_one_append_stores_the_time_duckdb_reads_from_the_text(self, store, created):
        session = Session(store)
        session.append_message(msg("m1", "x", created_at=created))
        stored = store.scalar("SELECT created_at FROM messages WHERE id = 'm1'")
        expected = store.scalar("SELECT TRY_CAST(? AS TIMESTAMPTZ)", [created])
        if expected is None:  # unreadable: the time it was stored
            assert stored is not None
        else:
            assert stored == expected
        session.append_messages([msg("m2", "y", created_at=created)])
        bulk = store.scalar("SELECT created_at FROM messages WHERE id = 'm2'")
        assert (bulk == stored) if expected is not None else bulk is not None


def test_optional_strings_keep_nulls_where_they_were():
    array = arrow_optional_strings(["a", None, "ccc", None, "é"])
    assert array.to_pylist() == ["a", None, "ccc", None, "é"]
    assert array.null_count == 2
    assert arrow_optional_strings(["x", "y"]).null_count == 0


def test_an_append_outside_a_transaction_is_durable_on_return(store_path):
    store = Store(store_path)
    Session(store).append_message(msg("m1", "durable"))
    other = store.conn.cursor()  # a second connection sees committed rows only
    assert other.execute("SELECT id FROM messages").fetchall() == [("m1",)]
    other.close()
    store.close()


class TestCompression:
    def test_message_texts_and_tokens_are_stored_with_zstd(self, store_path):
        store = Store(store_path)
        Session(store).append_messages([msg(f"m{i}", f"message number {i} about apples") for i in range(3000)])
        store.close()
        import duckdb

        conn = duckdb.connect(str(store_path), read_only=True)
        found = dict(conn.execute(
            "SELECT column_name, string_agg(DISTINCT compression, ',') FROM pragma_storage_info('messages') "
            "WHERE segment_type = 'VARCHAR' AND column_name IN ('content', 'search_tokens') GROUP BY ALL").fetchall())
        conn.close()
        assert found == {"content": "ZSTD", "search_tokens": "ZSTD"}
