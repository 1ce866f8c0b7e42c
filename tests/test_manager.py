"""Several sessions in one agent: create, list, rename, delete, search across them, and forks that copy nothing."""

from __future__ import annotations

import pytest

from agentlab.errors import (
    ForkedHistoryError,
    InvalidArgumentError,
    InvalidNameError,
    UnknownMessageError,
    UnknownSessionError,
)
from agentlab.session._compact_function import is_compaction_message
from agentlab.session._manager import SessionInfo, SessionManager
from agentlab.session._session import Session
from agentlab.store._database import Store
from tests.helpers import msg


def ids(messages: list[dict]) -> list[str]:
    return [m["id"] if not is_compaction_message(m) else m["parts"][0]["text"] for m in messages]


@pytest.fixture
def manager(store):
    return SessionManager(store)


def count_rows(store: Store) -> int:
    return store.scalar("SELECT count(*) FROM messages")


class TestSessionRows:
    def test_create_get_and_list(self, manager):
        a = manager.create("first", model="claude", source="notebook")
        b = manager.create("second")
        assert isinstance(a, SessionInfo) and len(a.id) == 32
        assert (a.name, a.model, a.source, a.input_tokens, a.fork_message_id) == ("first", "claude", "notebook", 0, None)
        assert [s.id for s in manager.list()] == [b.id, a.id]
        assert manager.get(a.id) == a

    def test_activity_moves_a_session_to_the_top(self, manager):
        a = manager.create("a")
        b = manager.create("b")
        manager.session(a.id).append_message(msg("x"))
        assert [s.id for s in manager.list()] == [a.id, b.id]
        manager.rename(b.id, "b2")
        assert [(s.id, s.name) for s in manager.list()] == [(b.id, "b2"), (a.id, "a")]

    def test_unknown_sessions_and_bad_names_are_typed_errors(self, manager):
        with pytest.raises(UnknownSessionError):
            manager.get("nope")
        with pytest.raises(UnknownSessionError):
            manager.session("nope")
        with pytest.raises(UnknownSessionError):
            manager.rename("nope", "x")
        with pytest.raises(InvalidNameError):
            manager.create("")
        with pytest.raises(ValueError, match="exists"):
            manager.create("dup", session_id=manager.create("one").id)

    def test_session_sees_rows_written_by_another_manager_or_by_sql(self, manager, store):
        made_elsewhere = SessionManager(store).create("elsewhere")
        assert manager.session(made_elsewhere.id).session_id == made_elsewhere.id
        SessionManager(store).delete(made_elsewhere.id)
        with pytest.raises(UnknownSessionError):
            SessionManager(store).session(made_elsewhere.id)
        from agentlab.agent._sql import SqlRunner

        SqlRunner(lambda: store)("INSERT INTO sessions (id, seq, name) VALUES ('by-sql', 999999, 'typed in')")
        assert manager.session("by-sql").session_id == "by-sql"

    def test_usage_adds_up(self, manager):
        s = manager.create("s")
        manager.add_usage(s.id, input_tokens=10, output_tokens=5, estimated_cost=0.25)
        info = manager.add_usage(s.id, input_tokens=1, estimated_cost=0.25)
        assert (info.input_tokens, info.output_tokens, info.estimated_cost) == (11, 5, 0.5)

    def test_the_same_session_object_comes_back_configured(self, manager, store):
        configured = []
        managed = SessionManager(store, configure=lambda s: configured.append(s.session_id))
        s = manager.create("s")
        assert managed.session(s.id) is managed.session(s.id)
        assert configured == [s.id]
        assert managed.session("").session_id == ""


class TestDelete:
    def test_delete_removes_messages_overlays_and_the_row(self, manager, store):
        keep, gone = manager.create("keep"), manager.create("gone")
        manager.session(keep.id).append_message(msg("k"))
        doomed = manager.session(gone.id)
        doomed.append_messages([msg("g1"), msg("g2")])
        doomed.add_compaction("S", "g1", "g2")
        manager.delete(gone.id)
        assert [s.id for s in manager.list()] == [keep.id]
        assert store.scalar("SELECT count(*) FROM messages") == 1
        assert store.scalar("SELECT count(*) FROM compactions") == 0
        assert manager.search("g1") == []
        with pytest.raises(UnknownSessionError):
            manager.delete(gone.id)


class TestSearchAcrossSessions:
    def test_finds_every_session_with_all_words(self, manager):
        a, b = manager.create("a"), manager.create("b")
        manager.session(a.id).append_message(msg("x1", "coffee with milk"))
        manager.session(b.id).append_message(msg("x2", "milk and coffee"))
        manager.session(b.id).append_message(msg("x3", "only coffee"))
        hits = manager.search("coffee milk")
        assert sorted((h.id, h.session_id) for h in hits) == [("x1", a.id), ("x2", b.id)]
        assert manager.search("  ") == []


class TestFork:
    @pytest.fixture
    def parent(self, manager):
        info = manager.create("parent")
        session = manager.session(info.id)
        session.append_messages([msg(f"m{i}") for i in range(5)])
        return session

    def test_a_fork_copies_no_rows(self, manager, parent, store):
        before = count_rows(store)
        fork = manager.fork(parent.session_id, "m2", "what if")
        assert count_rows(store) == before
        assert (fork.parent_session_id, fork.fork_message_id, fork.is_fork) == (parent.session_id, "m2", True)
        child = manager.session(fork.id)
        assert ids(child.get_history()) == ["m0", "m1", "m2"]
        assert child.latest_leaf_id() == "m2"
        assert child.path_length() == 3

    def test_the_first_append_goes_under_the_fork_point(self, manager, parent, store):
        child = manager.session(manager.fork(parent.session_id, "m2", "f").id)
        assert child.append_message(msg("c1")).parent_id == "m2"
        child.append_message(msg("c2"))
        assert ids(child.get_history()) == ["m0", "m1", "m2", "c1", "c2"]
        assert count_rows(store) == 7

    def test_later_messages_of_either_side_stay_invisible(self, manager, parent):
        child = manager.session(manager.fork(parent.session_id, "m2", "f").id)
        child.append_message(msg("c1", "child secret"))
        parent.append_message(msg("p5", "parent secret"))
        assert ids(parent.get_history()) == ["m0", "m1", "m2", "m3", "m4", "p5"]
        assert "c1" not in [m["id"] for m in parent.get_branches("m2")]
        assert ids(child.get_branches("m2")) == ["c1"]
        assert child.get_message("m3") is None and child.get_message("p5") is None
        assert parent.get_message("c1") is None
        assert [h.id for h in child.search("secret", mode="any")] == ["c1"]
        assert [h.id for h in parent.search("secret", mode="any")] == ["p5"]
        assert [h.id for h in child.search("m1")] == ["m1"]  # the shared path is searchable from the fork

    def test_a_fork_cannot_hang_messages_under_the_parents_later_rows(self, manager, parent):
        child = manager.session(manager.fork(parent.session_id, "m2", "f").id)
        with pytest.raises(UnknownMessageError):
            child.append_message(msg("c"), "m3")
        child.append_message(msg("alt"), "m1")  # an earlier shared message is fine
        assert ids(child.get_history()) == ["m0", "m1", "alt"]

    def test_overlays_before_the_fork_are_inherited_later_ones_are_not(self, manager, parent):
        parent.add_compaction("early", "m0", "m1")
        child = manager.session(manager.fork(parent.session_id, "m3", "f").id)
        parent.add_compaction("late", "m0", "m2")
        assert ids(child.get_history()) == ["early", "m2", "m3"]
        assert ids(parent.get_history()) == ["late", "m3", "m4"]
        child.add_compaction("child only", "m0", "m3")
        assert ids(parent.get_history()) == ["late", "m3", "m4"]
        assert ids(child.get_history()) == ["child only"]

    def test_shared_rows_are_frozen_until_the_fork_goes(self, manager, parent):
        fork = manager.fork(parent.session_id, "m2", "f")
        with pytest.raises(ForkedHistoryError):
            parent.delete_messages(["m1"])
        with pytest.raises(ForkedHistoryError):
            parent.update_message(msg("m0", "edited"))
        with pytest.raises(ForkedHistoryError):
            parent.clear_messages()
        with pytest.raises(ForkedHistoryError):
            manager.delete(parent.session_id)
        assert parent.delete_messages(["m4"]) == 1  # not shared
        manager.delete(fork.id)
        assert parent.delete_messages(["m1"]) == 1

    def test_delete_with_forks_removes_the_whole_family(self, manager, parent, store):
        child = manager.fork(parent.session_id, "m2", "child")
        manager.session(child.id).append_message(msg("c1"))
        grandchild = manager.fork(child.id, "c1", "grandchild")
        manager.session(grandchild.id).append_message(msg("g1"))
        assert ids(manager.session(grandchild.id).get_history()) == ["m0", "m1", "m2", "c1", "g1"]
        manager.delete(parent.session_id, with_forks=True)
        assert manager.list() == [] and count_rows(store) == 0

    def test_forking_at_an_unknown_message_is_a_typed_error(self, manager, parent):
        with pytest.raises(UnknownMessageError):
            manager.fork(parent.session_id, "ghost", "f")

    def test_a_fork_survives_reopening_the_file(self, store_path):
        store = Store(store_path)
        manager = SessionManager(store)
        info = manager.create("p")
        manager.session(info.id).append_messages([msg("a"), msg("b"), msg("c")])
        fork = manager.fork(info.id, "b", "f")
        manager.session(fork.id).append_message(msg("x"))
        store.close()
        again = Store(store_path)
        try:
            assert ids(Session(again, fork.id).get_history()) == ["a", "b", "x"]
            assert ids(Session(again, info.id).get_history()) == ["a", "b", "c"]
        finally:
            again.close()


class TestUsageArguments:
    """add_usage refuses counts and costs its columns cannot hold, before changing anything."""

    @pytest.mark.parametrize("kwargs", [
        {"estimated_cost": float("nan")}, {"estimated_cost": float("inf")}, {"estimated_cost": -0.5},
        {"estimated_cost": "0.1"}, {"input_tokens": 10**30}, {"input_tokens": -5}, {"output_tokens": 1.5},
        {"output_tokens": float("nan")}, {"input_tokens": True},
    ], ids=repr)
    def test_a_bad_value_is_refused_and_nothing_changes(self, manager, kwargs):
        s = manager.create("s")
        manager.add_usage(s.id, input_tokens=3, output_tokens=2, estimated_cost=0.5)
        before = manager.get(s.id)
        with pytest.raises(InvalidArgumentError, match=next(iter(kwargs))):
            manager.add_usage(s.id, **kwargs)
        assert manager.get(s.id) == before

    def test_a_total_past_the_bigint_column_is_refused(self, manager):
        s = manager.create("s")
        manager.add_usage(s.id, input_tokens=2**63 - 1, estimated_cost=1e308)
        before = manager.get(s.id)
        with pytest.raises(InvalidArgumentError, match="input_tokens"):
            manager.add_usage(s.id, input_tokens=1)
        with pytest.raises(InvalidArgumentError, match="infinite"):
            manager.add_usage(s.id, estimated_cost=1e308)
        assert manager.get(s.id) == before

    def test_whole_numbers_of_any_integer_type_are_added(self, manager):
        import numpy as np

        s = manager.create("s")
        info = manager.add_usage(s.id, input_tokens=np.int64(7), output_tokens=0, estimated_cost=1)
        assert (info.input_tokens, info.output_tokens, info.estimated_cost) == (7, 0, 1.0)

    @pytest.mark.parametrize("field", ["model", "source", "parent_session_id", "session_id"])
    def test_create_refuses_text_with_a_lone_surrogate(self, manager, store, field):
        with pytest.raises(InvalidArgumentError, match=field):
            manager.create("s", **{field: "claude-\ud800"})
        assert store.scalar("SELECT count(*) FROM sessions") == 0


class TestTheSessionSearchTool:
    """Upstream's SessionManager.tools(): one tool, session_search, over every session."""

    def test_the_definition_is_upstreams(self, manager):
        assert manager.tools() == [{
            "name": "session_search",
            "description": "Search past conversations for relevant context. Searches across all sessions.",
            "input_schema": {"type": "object", "properties": {"query": {"type": "string",
                                                                        "description": "Search query"}},
                             "required": ["query"]},
        }]
        manager.tools()[0]["input_schema"]["required"].append("x")  # a copy each time
        assert manager.tools()[0]["input_schema"]["required"] == ["query"]

    def test_it_finds_messages_of_every_session_as_role_and_text(self, manager):
        a, b = manager.create("a"), manager.create("b")
        manager.session(a.id).append_messages([msg("a1", "Deploys happen on Friday"),
                                               msg("a2", "noted", role="assistant")])
        manager.session(b.id).append_message(msg("b1", "friday deploys are risky", role="assistant"))
        out = manager.run_tool("session_search", {"query": "deploys friday"})
        assert sorted(out.split("\n---\n")) == ["[assistant] friday deploys are risky",
                                               "[user] Deploys happen on Friday"]

    def test_at_most_ten_hits_and_no_results_said_plainly(self, manager):
        manager.session("").append_messages([msg(f"m{i}", f"apple number {i}") for i in range(15)])
        assert len(manager.run_tool("session_search", {"query": "apple"}).split("\n---\n")) == 10
        assert manager.run_tool("session_search", {"query": "pear"}) == "No results found."

    @pytest.mark.parametrize("name, data, expected", [
        ("session_search", {}, 'Error: Invalid input for session_search: "query" is required'),
        ("session_search", {"query": 3}, 'Error: Invalid input for session_search: "query" must be a string'),
        ("other", {"query": "x"}, 'Error: unknown tool "other". Available tools: session_search'),
    ])
    def test_bad_calls_are_error_results_never_exceptions(self, manager, name, data, expected):
        assert manager.run_tool(name, data) == expected
