"""The Session facade: overlays on read, search, events and agent frames (spec 4, 6.1, 11, 16 cases 5-8)."""

from __future__ import annotations

import pytest

from agentlab.agent._agent import Agent, get_agent
from agentlab.errors import UnknownMessageError
from agentlab.session._session import SearchHit, Session
from tests.helpers import ids, msg, texts


@pytest.fixture
def session(store):
    return Session(store)


class TestOverlaysOnRead:
    def test_an_overlay_replaces_its_range(self, session):  # spec 16 case 5
        session.append_messages([msg(f"m{i}") for i in range(6)])
        record = session.add_compaction("Summary of m1-m3", "m1", "m3")
        history = session.get_history()
        assert ids(history) == ["m0", f"compaction_{record.id}", "m4", "m5"]
        assert history[1]["role"] == "assistant"
        assert history[1]["parts"] == [{"type": "text", "text": "Summary of m1-m3"}]

    def test_originals_are_untouched(self, session, store):
        session.append_messages([msg(f"m{i}") for i in range(4)])
        session.add_compaction("S", "m1", "m2")
        assert store.scalar("SELECT count(*) FROM messages") == 4
        assert session.get_message("m1") == session.tree.read(["m1"])[0]

    def test_a_later_overlay_supersedes_an_earlier_one(self, session):  # spec 16 case 6
        session.append_messages([msg(f"m{i}") for i in range(10)])
        session.add_compaction("S1", "m1", "m7")
        assert texts(session.get_history()) == ["m0", "S1", "m8", "m9"]
        session.append_messages([msg(f"m{i}") for i in range(10, 15)])
        session.add_compaction("S2", "m1", "m12")
        assert texts(session.get_history()) == ["m0", "S2", "m13", "m14"]
        assert len(session.get_compactions()) == 2

    def test_insertion_order_breaks_a_same_time_tie(self, session):  # spec 16 case 7
        session.append_messages([msg(f"m{i}") for i in range(4)])
        session.add_compaction("Old summary", "m0", "m1")
        session.add_compaction("New summary", "m0", "m2")
        assert texts(session.get_history("m3")) == ["New summary", "m3"]

    def test_sibling_branch_overlays_never_leak(self, session):  # spec 16 case 8
        session.append_messages([msg("m0"), msg("m1"), msg("a2"), msg("a3"), msg("a4")])
        session.append_messages([msg("b2"), msg("b3")], parent_id="m1")
        session.add_compaction("Branch A summary 1", "m0", "a2")
        session.add_compaction("Branch B summary", "m0", "b2")
        session.add_compaction("Branch A summary 2", "m0", "a3")
        assert texts(session.get_history("a4")) == ["Branch A summary 2", "a4"]
        assert texts(session.get_history("b3")) == ["Branch B summary", "b3"]

    def test_an_overlay_whose_end_is_off_the_branch_does_not_apply(self, session):
        session.append_messages([msg("r"), msg("a")])
        session.append_message(msg("b"), "r")
        session.add_compaction("S", "r", "a")
        assert ids(session.get_history("b")) == ["r", "b"]

    def test_overlay_ids_must_be_messages_of_the_session(self, session):
        session.append_message(msg("a"))
        with pytest.raises(UnknownMessageError):
            session.add_compaction("S", "a", "ghost")

    def test_recent_history_applies_overlays_only_inside_the_window(self, session):
        session.append_messages([msg(f"m{i}", "x" * 100) for i in range(6)])
        session.add_compaction("S", "m1", "m4")
        assert ids(session.get_recent_history(10**6).messages)[1].startswith("compaction_")
        window = session.get_recent_history(300, 2)
        assert ids(window.messages) == ["m4", "m5"]

    def test_micro_compaction_shrinks_older_text_only_on_read(self, session):
        session.append_messages([msg("old", "y" * 50), msg("new", "z" * 50)])
        view = session.get_micro_compacted_history(keep_recent=1, max_text_chars=10)
        assert view[0]["parts"][0]["text"] == "y" * 10 + "... [truncated 50 chars]"
        assert view[1]["parts"][0]["text"] == "z" * 50
        assert session.get_message("old")["parts"][0]["text"] == "y" * 50


class TestSearch:
    @pytest.fixture
    def chat(self, session):
        session.append_messages([
            msg("u1", "The deployment is on Friday"),
            msg("a1", "deployment Friday works for me", role="assistant"),
            msg("u2", "We are deploying the new build"),
        ])
        session.append_message(msg("u2b", "Let us talk about the deployment plan instead"), "a1")
        return session

    def test_phrase_is_the_default_mode(self, chat):
        assert [h.id for h in chat.search("deployment Friday")] == ["a1"]

    def test_all_and_any_modes(self, chat):
        assert sorted(h.id for h in chat.search("deployment Friday", mode="all")) == ["a1", "u1"]
        assert {h.id for h in chat.search("friday plan", mode="any")} == {"u1", "a1", "u2b"}

    def test_stemming_follows_porter(self, chat):
        assert [h.id for h in chat.search("deploy")] == ["u2"]  # "deployment" stems elsewhere

    def test_hits_carry_role_text_snippet_and_branch(self, chat):
        hit = {h.id: h for h in chat.search("deployment", mode="any")}
        assert isinstance(hit["a1"], SearchHit)
        assert hit["a1"].role == "assistant"
        assert hit["a1"].text == "deployment Friday works for me"
        assert "deployment" in hit["a1"].snippet.lower()
        assert hit["u2b"].on_current_branch and hit["a1"].on_current_branch
        assert not hit["u2"].on_current_branch if "u2" in hit else True
        assert hit["u1"].session_id == ""

    def test_the_current_branch_follows_the_tip(self, session):
        session.append_messages([msg("r", "alpha"), msg("a", "alpha")])
        assert {h.id: h.on_current_branch for h in session.search("alpha")} == {"r": True, "a": True}
        session.append_message(msg("b", "alpha"), "r")
        assert {h.id: h.on_current_branch for h in session.search("alpha")} == {"r": True, "a": False, "b": True}
        session.append_message(msg("c", "alpha"))
        assert {h.id: h.on_current_branch for h in session.search("alpha")} == {
            "r": True, "a": False, "b": True, "c": True}
        session.delete_messages(["c", "b"])
        assert {h.id: h.on_current_branch for h in session.search("alpha")} == {"r": True, "a": True}

    def test_role_and_branch_filters(self, chat):
        assert [h.id for h in chat.search("deployment", mode="any", role="assistant")] == ["a1"]
        assert sorted(h.id for h in chat.search("the", mode="any", branch="u2")) == ["u1", "u2"]

    @pytest.mark.parametrize("query", ["", "   ", "\n\t"])
    def test_an_empty_query_finds_nothing(self, chat, query):
        assert chat.search(query) == []

    @pytest.mark.parametrize("query", ['"deployment', "deploy*", "title:deployment", "(deployment", "NEAR deployment",
                                       "deployment AND", "-deployment", "^deployment"])
    def test_fts_syntax_is_plain_text(self, chat, query):
        assert isinstance(chat.search(query, mode="any"), list)

    def test_a_search_right_after_an_append_finds_it(self, chat):
        chat.append_message(msg("n1", "zanzibar rendezvous"))
        assert [h.id for h in chat.search("zanzibar")] == ["n1"]

    def test_updates_and_deletes_reach_the_index(self, chat):
        chat.update_message(msg("u1", "The launch is on Monday"))
        assert "u1" not in [h.id for h in chat.search("Friday", mode="any")]
        assert [h.id for h in chat.search("launch")] == ["u1"]
        chat.delete_messages(["u1"])
        assert chat.search("launch") == []

    def test_thinking_and_tool_parts_are_not_indexed(self, session):
        session.append_message({"id": "t", "role": "assistant", "parts": [
            {"type": "thinking", "thinking": "secretword", "signature": "sig"},
            {"type": "tool_use", "id": "x", "name": "secretword", "input": {"q": "secretword"}},
            {"type": "text", "text": "visible"}]})
        assert session.search("secretword") == []
        assert [h.id for h in session.search("visible")] == ["t"]

    def test_a_session_finds_only_its_own_messages_unless_asked(self, store):
        one, two = Session(store, "one"), Session(store, "two")
        one.append_message(msg("x1", "shared word"))
        two.append_message(msg("x2", "shared word"))
        assert [h.id for h in one.search("shared")] == ["x1"]
        assert sorted((h.id, h.session_id) for h in one.search("shared", all_sessions=True)) == [
            ("x1", "one"), ("x2", "two")]

    def test_limit_is_respected(self, session):
        session.append_messages([msg(f"m{i}", "same words here") for i in range(30)])
        assert len(session.search("same")) == 20
        assert len(session.search("same", limit=5)) == 5

    def test_bad_mode_is_a_value_error(self, session):
        with pytest.raises(ValueError, match="mode"):
            session.search("x", mode="fuzzy")


class TestEvents:
    def test_append_emits_an_event_with_the_estimate(self, session):
        events = []
        unsubscribe = session.subscribe(events.append)
        session.append_message(msg("a", "Hello world"))
        assert events == [{"type": "appended", "session_id": "", "tokenEstimate": 7, "tokenThreshold": None,
                           "ids": ["a"], "new_ids": ["a"], "duplicate": False}]
        unsubscribe()
        session.append_message(msg("b"))
        assert len(events) == 1

    def test_the_estimate_grows_incrementally_and_matches_a_full_count(self, session):
        events = []
        session.subscribe(events.append)
        for i in range(5):
            session.append_message(msg(f"m{i}", "Hello world"))
        assert [e["tokenEstimate"] for e in events] == [7, 14, 21, 28, 35]
        assert session.estimate_tokens() == 35

    def test_duplicates_updates_deletes_and_clears_emit_too(self, session):
        events = []
        session.subscribe(events.append)
        session.append_message(msg("a"))
        session.append_message(msg("a"))
        session.update_message(msg("a", "x"))
        session.delete_messages(["a"])
        session.clear_messages()
        assert [e["type"] for e in events] == ["appended", "appended", "updated", "deleted", "cleared"]
        assert events[1]["duplicate"] is True

    def test_events_wait_for_the_outer_commit(self, session, store):
        events = []
        session.subscribe(events.append)
        with store.transaction():
            session.append_message(msg("a"))
            assert events == []
        assert [e["type"] for e in events] == ["appended"]

    def test_a_failing_subscriber_does_not_break_the_append(self, session, caplog):
        session.subscribe(lambda event: 1 / 0)
        session.append_message(msg("a"))
        assert session.get_message("a") is not None
        assert "ZeroDivisionError" in caplog.text


class Chat(Agent):
    pass


class TestAgentFrames:
    def test_frames_go_to_every_connection(self):
        agent = get_agent(Chat, "frames")
        frames = []
        agent.connect(on_message=frames.append)
        session = Session.create(agent)
        session.append_message(msg("a", "Hello world"))
        session_frames = [f for f in frames if f["type"] == "cf_agent_session"]
        assert session_frames == [{"type": "cf_agent_session", "phase": "idle", "tokenEstimate": 7,
                                   "tokenThreshold": None}]

    def test_without_connections_no_estimate_is_computed(self):
        agent = get_agent(Chat, "quiet")
        session = Session(agent)
        session.append_message(msg("a"))
        assert session.compaction.estimate_cache is None

    def test_a_session_on_an_agent_shares_its_file(self):
        agent = get_agent(Chat, "shared")
        Session(agent, "s").append_message(msg("a"))
        assert agent.sql("SELECT id, session_id FROM messages") == [{"id": "a", "session_id": "s"}]

    def test_session_needs_an_agent_or_store(self):
        with pytest.raises(TypeError):
            Session("not an agent")
