"""The message tree: appends, parents, branches, the latest leaf, deletes, byte windows (spec 3, 16 cases 1-4, 19)."""

from __future__ import annotations

import json

import pytest

from agentlab.errors import (
    DuplicateMessageWarning,
    HistoryTruncatedWarning,
    InvalidMessageError,
    ReadOnlyAgentError,
    UnknownLeafWarning,
    UnknownMessageError,
)
from agentlab.session._messages import UNSET, Appended, RowStat
from agentlab.session._session import Session
from agentlab.session.duckdb._tree import tree_of
from agentlab.store._database import Store
from tests.helpers import ids


def msg(mid: str, text: str | None = None, role: str = "user") -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": mid if text is None else text}],
            "created_at": "2026-01-01T00:00:00.000Z"}


@pytest.fixture
def session(store):
    return Session(store)


class TestAppendIsIdempotent:
    def test_a_repeated_id_keeps_the_first_content(self, session):  # spec 16 case 1
        first = session.append_message(msg("m1", "First"))
        with pytest.warns(DuplicateMessageWarning, match="'m1' is already stored with different content"):
            again = session.append_message(msg("m1", "Duplicate"))
        assert first == Appended("m1", None, first.seq, False)
        assert again == Appended("m1", None, first.seq, True)
        history = session.get_history()
        assert len(history) == 1
        assert history[0]["parts"] == [{"type": "text", "text": "First"}]

    def test_a_duplicate_in_a_bulk_import_is_skipped_and_the_chain_goes_on(self, session):
        session.append_message(msg("a"))
        with pytest.warns(DuplicateMessageWarning) as caught:
            results = session.append_messages([msg("a", "other"), msg("b"), msg("b", "again"), msg("c")])
        assert ["'a'" in str(w.message) for w in caught] == [True, False]
        assert [(r.id, r.duplicate) for r in results] == [("a", True), ("b", False), ("b", True), ("c", False)]
        assert ids(session.get_history()) == ["a", "b", "c"]
        assert session.get_message("b")["parts"][0]["text"] == "b"

    def test_reimporting_the_same_list_changes_nothing(self, session):
        batch = [msg(f"m{i}") for i in range(5)]
        session.append_messages(batch)
        again = session.append_messages(batch)
        assert all(r.duplicate for r in again)
        assert tree_of(session.store).count("") == 5

    def test_an_id_of_another_session_is_refused(self, store):
        Session(store, "a").append_message(msg("x"))
        with pytest.raises(InvalidMessageError, match="already used by session 'a'"):
            Session(store, "b").append_message(msg("x"))
        assert Session(store, "b").get_history() == []


class TestParents:
    def test_none_makes_a_root_and_omitted_means_the_latest_leaf(self, session):  # spec 16 case 2
        session.append_message(msg("m1"))
        session.append_message(msg("m2"))
        session.append_message(msg("m3"), None)
        assert ids(session.get_branches("m2")) == []
        assert ids(session.get_history("m3")) == ["m3"]

    def test_an_omitted_parent_chains_after_the_leaf(self, session):
        session.append_message(msg("m1"))
        session.append_message(msg("m2"))
        session.append_message(msg("m3"))
        assert ids(session.get_branches("m2")) == ["m3"]
        assert ids(session.get_history("m3")) == ["m1", "m2", "m3"]

    def test_an_unknown_parent_id_is_a_typed_error_and_stores_nothing(self, session):
        session.append_message(msg("m1"))
        with pytest.raises(UnknownMessageError) as info:
            session.append_message(msg("m2"), "nope")
        assert info.value.id == "nope"
        assert isinstance(info.value, KeyError)
        assert session.get_message("m2") is None
        assert session.path_length() == 1

    def test_a_parent_in_another_session_is_unknown_here(self, store):
        Session(store, "a").append_message(msg("pa"))
        with pytest.raises(UnknownMessageError):
            Session(store, "b").append_message(msg("pb"), "pa")

    def test_a_bulk_item_can_carry_its_own_parent_id(self, session):
        session.append_message(msg("root"))
        session.append_messages([msg("a1"), msg("a2"), {**msg("b1"), "parent_id": "root"}, msg("b2"),
                                 {**msg("c1"), "parent_id": "a1"}])
        assert ids(session.get_history("b2")) == ["root", "b1", "b2"]
        assert ids(session.get_history("c1")) == ["root", "a1", "c1"]
        assert "parent_id" not in session.get_message("b1")

    def test_a_bulk_import_with_none_starts_a_new_root(self, session):
        session.append_message(msg("old"))
        session.append_messages([msg("n1"), msg("n2")], parent_id=None)
        assert ids(session.get_history()) == ["n1", "n2"]

    def test_a_bulk_import_with_a_bad_parent_stores_nothing(self, session):
        session.append_message(msg("r"))
        with pytest.raises(UnknownMessageError):
            session.append_messages([msg("x1"), {**msg("x2"), "parent_id": "ghost"}])
        assert session.get_message("x1") is None

    def test_a_bulk_parent_may_only_point_backwards_in_the_list(self, session):
        with pytest.raises(UnknownMessageError):
            session.append_messages([{**msg("x1"), "parent_id": "x2"}, msg("x2")])
        assert session.path_length() == 0

    def test_unset_is_the_default_marker(self, session):
        session.append_message(msg("a"))
        assert session.append_message(msg("b"), UNSET).parent_id == "a"


class TestBranchingAndTheTip:
    def test_a_regenerated_reply_becomes_the_latest_leaf(self, session):  # spec 16 case 3
        session.append_message(msg("m1"))
        session.append_message(msg("m2a"), "m1")
        session.append_message(msg("m2b"), "m1")
        assert ids(session.get_branches("m1")) == ["m2a", "m2b"]
        assert session.latest_leaf_id() == "m2b"
        assert session.latest_leaf()["id"] == "m2b"
        assert ids(session.get_history("m2a")) == ["m1", "m2a"]
        assert ids(session.get_history("m2b")) == ["m1", "m2b"]

    def test_a_branch_append_moves_the_tip(self, session):
        session.append_message(msg("root"))
        session.append_message(msg("a"))
        session.append_message(msg("b"), "root")
        assert ids(session.get_history()) == ["root", "b"]

    def test_same_timestamp_ties_are_broken_by_sequence(self, session):
        for name in ["r", "x", "y", "z"]:
            session.append_message(msg(name), "r" if name != "r" else None)
        assert ids(session.get_branches("r")) == ["x", "y", "z"]
        assert session.latest_leaf_id() == "z"

    def test_an_interior_message_can_be_a_history_start(self, session):
        session.append_messages([msg("a"), msg("b"), msg("c")])
        assert ids(session.get_history("b")) == ["a", "b"]
        assert session.path_length("b") == 2

    def test_an_unknown_leaf_gives_an_empty_history_and_empty_string_means_latest(self, session):
        session.append_messages([msg("a"), msg("b")])
        with pytest.warns(UnknownLeafWarning, match="No message 'nope'"):
            assert session.get_history("nope") == []
        assert ids(session.get_history("")) == ["a", "b"]

    def test_an_empty_session_has_no_leaf(self, session):
        assert session.latest_leaf() is None
        assert session.get_history() == []
        assert session.path_length() == 0


class TestDeletes:
    def test_deleting_the_tip_falls_back_to_its_parent(self, session):  # spec 16 case 4
        session.append_messages([msg("m0"), msg("m1"), msg("m2")])
        assert session.delete_messages(["m2"]) == 1
        assert session.latest_leaf_id() == "m1"

    def test_deleting_an_interior_message_keeps_the_tip_and_cuts_the_path(self, session):
        session.append_messages([msg("m0"), msg("m1"), msg("m2")])
        session.delete_messages(["m0"])
        assert session.latest_leaf_id() == "m2"
        assert ids(session.get_history()) == ["m1", "m2"]

    def test_unknown_ids_are_ignored(self, session):
        session.append_message(msg("a"))
        assert session.delete_messages(["zz", "a", "a"]) == 1
        assert session.get_history() == []

    def test_clear_removes_the_session_only(self, store):
        one, two = Session(store, "one"), Session(store, "two")
        one.append_messages([msg("a"), msg("b")])
        two.append_message(msg("c"))
        one.add_compaction("s", "a", "b")
        one.clear_messages()
        assert one.get_history() == [] and one.get_compactions() == []
        assert ids(two.get_history()) == ["c"]
        assert store.scalar("SELECT count(*) FROM messages") == 1

    def test_a_deleted_id_can_be_appended_again(self, session):
        session.append_messages([msg("a"), msg("b")])
        session.delete_messages(["b"])
        assert not session.append_message(msg("b", "new")).duplicate
        assert session.get_message("b")["parts"][0]["text"] == "new"

    def test_a_reused_id_adopts_its_old_children_again(self, session):
        session.append_messages([msg("a"), msg("b"), msg("c")])
        session.delete_messages(["b"])
        assert ids(session.get_history()) == ["c"]
        session.append_message(msg("b"), "a")
        assert session.latest_leaf_id() == "c"
        assert ids(session.get_history()) == ["a", "b", "c"]

    def test_reusing_a_deleted_interior_id_cannot_make_a_cycle(self, session):
        session.append_messages([msg("a"), msg("b")])
        session.delete_messages(["a"])
        with pytest.raises(InvalidMessageError, match="cycle"):
            session.append_message(msg("a"), "b")

    def test_nor_can_a_bulk_import_through_a_message_of_the_same_batch(self, session):
        # Found by the storage conformance suite: the cycle check did not follow the batch's own new messages.
        session.append_messages([msg("a"), msg("b")])
        session.delete_messages(["a"])
        with pytest.raises(InvalidMessageError, match="cycle"):
            session.append_messages([msg("x"), msg("a")])  # x under b (the tip), then a under x: a -> x -> b -> a
        assert ids(session.get_history()) == ["b"] and session.get_message("x") is None


class TestUpdates:
    def test_update_rewrites_content_but_not_the_tree(self, session):
        session.append_messages([msg("a"), msg("b")])
        session.update_message(msg("a", "edited"))
        assert session.get_message("a")["parts"][0]["text"] == "edited"
        assert ids(session.get_history()) == ["a", "b"]

    def test_updating_an_unknown_message_is_a_typed_error(self, session):
        with pytest.raises(UnknownMessageError):
            session.update_message(msg("nope"))


class TestBadMessages:
    @pytest.mark.parametrize("bad", [
        {"role": "user", "parts": []},
        {"id": "", "role": "user", "parts": []},
        {"id": 3, "role": "user", "parts": []},
        {"id": "x", "parts": []},
        {"id": "x", "role": None, "parts": []},
        {"id": "x", "role": "user"},
        {"id": "x", "role": "user", "parts": "hello"},
        {"id": "x", "role": "user", "parts": ["hello"]},
        {"id": "x", "role": "user", "parts": [{"type": "text", "text": {1, 2}}]},
        {"id": "x", "role": "user", "parts": [{"type": "text", "text": b"bytes"}]},
        {"id": "x", "role": "user", "parts": [{"type": "x", "v": float("nan")}]},
        {"id": "x", "role": "user", "parts": [{"type": "text", "text": "\ud800"}]},
        {"id": "x", "role": "user", "parts": [], "created_at": 5},
        "not a dict",
    ])
    def test_is_refused_and_nothing_is_stored(self, session, bad):
        with pytest.raises(InvalidMessageError):
            session.append_message(bad)
        with pytest.raises(InvalidMessageError):
            session.append_messages([msg("ok"), bad])
        assert session.path_length() == 0

    def test_a_circular_part_is_refused(self, session):
        part = {"type": "text", "text": "loop"}
        part["self"] = part
        with pytest.raises(InvalidMessageError, match="not JSON"):
            session.append_message({"id": "x", "role": "user", "parts": [part]})

    def test_the_error_message_says_what_to_fix(self, session):
        with pytest.raises(InvalidMessageError, match="'parts' as a list of dicts"):
            session.append_message({"id": "x", "role": "user", "parts": "hi"})


class TestContentRoundTrips:
    BLOCKS = [
        {"type": "thinking", "thinking": "Let me think… 🤔 about \"quotes\"", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"},
        {"type": "text", "text": "Héllo\u2028wörld\n\t", "citations": None},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Zürich", "n": 1.5e-7}},
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "12°C"}],
         "is_error": False},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "tool-search", "toolCallId": "c1", "state": "output-available", "input": {}, "output": [1, None]},
    ]

    def test_every_block_reads_back_byte_for_byte(self, session):
        message = {"id": "a1", "role": "assistant", "parts": self.BLOCKS, "created_at": "2026-05-01T10:00:00Z",
                   "metadata": {"model": "claude"}}
        session.append_message(message)
        back = session.get_message("a1")
        assert json.dumps(back, ensure_ascii=False) == json.dumps(message, ensure_ascii=False)
        assert session.get_history()[0] == message

    def test_the_stored_text_is_compact_json_of_the_message(self, session, store):
        message = {"id": "a1", "role": "assistant", "parts": self.BLOCKS[:1], "created_at": "x"}
        session.append_message(message)
        stored = store.scalar("SELECT content FROM messages WHERE id = 'a1'")
        assert stored == json.dumps(message, ensure_ascii=False, separators=(",", ":"))

    def test_created_at_is_filled_in_when_missing_and_the_input_is_not_changed(self, session):
        message = {"id": "a", "role": "user", "parts": []}
        session.append_message(message)
        assert "created_at" not in message
        assert session.get_message("a")["created_at"].endswith("Z")

    def test_rows_that_do_not_parse_are_skipped(self, session, store):
        session.append_messages([msg("a"), msg("b"), msg("c")])
        store.execute("UPDATE messages SET content = '{broken' WHERE id = 'b'")
        store.execute("UPDATE messages SET content = '{\"id\": 1}' WHERE id = 'c'")
        assert ids(session.get_history("c")) == ["a"]


    def test_rows_that_do_not_parse_are_skipped_on_long_paths_too(self, session, store):
        session.append_messages([msg(f"m{i}") for i in range(100)])
        store.execute("UPDATE messages SET content = '{broken' WHERE id = 'm50'")
        store.execute("UPDATE messages SET content = '1,2' WHERE id = 'm60'")
        history = ids(session.get_history())
        assert history == [f"m{i}" for i in range(100) if i not in (50, 60)]


class TestPersistence:
    def test_a_reopened_file_has_the_same_tree(self, store_path):
        first = Store(store_path)
        Session(first).append_messages([msg("a"), msg("b")])
        Session(first).append_message(msg("c"), "a")
        first.close()
        again = Store(store_path)
        try:
            session = Session(again)
            assert session.latest_leaf_id() == "c"
            assert ids(session.get_branches("a")) == ["b", "c"]
            assert ids(session.get_history("b")) == ["a", "b"]
        finally:
            again.close()

    def test_orphans_and_branches_survive_reopening(self, store_path):
        first = Store(store_path)
        Session(first).append_messages([msg("a"), msg("b"), msg("c")])
        Session(first).delete_messages(["b"])
        first.close()
        again = Store(store_path)
        try:
            session = Session(again)
            assert ids(session.get_history()) == ["c"]
            with pytest.raises(InvalidMessageError, match="cycle"):
                session.append_message(msg("b"), "c")
            session.append_message(msg("d"), "a")
            session.append_message(msg("b"), "a")
            assert session.latest_leaf_id() == "d"  # c is older than d, and b now has a child
            assert ids(session.get_history("c")) == ["a", "b", "c"]
            assert ids(session.get_branches("a")) == ["d", "b"]
        finally:
            again.close()

    def test_a_read_only_open_reads_and_refuses_writes(self, store_path):
        first = Store(store_path)
        Session(first).append_messages([msg("a", "hello"), msg("b")])
        first.close()
        reader = Store(store_path, read_only=True)
        try:
            session = Session(reader)
            assert ids(session.get_history()) == ["a", "b"]
            assert [h.id for h in session.search("hello")] == ["a"]
            with pytest.raises(ReadOnlyAgentError):
                session.append_message(msg("c"))
            assert session.latest_leaf_id() == "b"
        finally:
            reader.close()

    def test_rollback_leaves_map_and_file_equal(self, session, store):
        session.append_messages([msg("a"), msg("b")])
        with pytest.raises(RuntimeError), store.transaction():
            session.append_message(msg("c"))
            assert session.latest_leaf_id() == "c"  # read-your-writes inside the transaction
            raise RuntimeError("boom")
        assert session.latest_leaf_id() == "b"
        assert session.get_message("c") is None
        assert session.append_message(msg("c")).parent_id == "b"


class TestRecentHistory:
    def test_min_recent_wins_over_the_budget(self, session):  # spec 16 case 19
        session.append_messages([msg(f"m{i}", "x" * 1000) for i in range(10)])
        window = session.get_recent_history(2048, 4)
        assert ids(window.messages) == ["m6", "m7", "m8", "m9"]
        assert window.truncated
        assert window.total_content_bytes == sum(s.bytes for s in session.get_history_row_stats())

    def test_one_huge_message_still_comes_back(self, session):
        session.append_messages([msg("small", "s"), msg("huge", "h" * 50_000)])
        window = session.get_recent_history(1024)
        assert ids(window.messages) == ["huge"] and window.truncated

    def test_a_short_path_fits_entirely(self, session):
        session.append_messages([msg("a"), msg("b"), msg("c")])
        window = session.get_recent_history(1, 10)
        assert ids(window.messages) == ["a", "b", "c"] and not window.truncated

    def test_row_stats_count_utf8_bytes_of_the_stored_json(self, session):
        session.append_message(msg("é", "ü"))
        stored = json.dumps(session.get_message("é"), ensure_ascii=False, separators=(",", ":"))
        assert session.get_history_row_stats() == [RowStat("é", "user", len(stored.encode()))]


class TestDepth:
    def test_a_deep_chain_is_read_whole(self, session):  # upstream's CTE would stop at 10,000
        session.append_messages([msg(f"m{i}") for i in range(10_500)])
        assert session.path_length() == 10_500
        history = session.get_history()
        assert history[0]["id"] == "m0" and history[-1]["id"] == "m10499"

    def test_the_depth_cap_keeps_the_leaf_side(self, store):
        Session(store).append_messages([msg(f"m{i}") for i in range(50)])
        capped = Session(store, max_depth=10)
        with pytest.warns(HistoryTruncatedWarning, match="max_depth=10"):
            history = capped.get_history()
        assert ids(history) == [f"m{i}" for i in range(40, 50)] and history.truncated
