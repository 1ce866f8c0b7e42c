"""Headless tests of the notebook widgets (the state view, the tree's layout, the dashboard): traits and
messages, with no browser. A recording comm (``tests/helpers.py``) stands in for the front end."""

from __future__ import annotations

import threading

import pytest

from agentlab import Agent, get_agent
from agentlab.views import BranchTree, ContextView, StateView, show
from agentlab.views._layout import build_plan, shown_indices
from agentlab.views._messages import parts_json, short_text, tool_kind
from tests.helpers import frontend_request, frontend_update, record_comms, synced


@pytest.fixture(autouse=True)
def recording_comms(monkeypatch):
    record_comms(monkeypatch)


class Counter(Agent):
    initial_state = {"count": 0, "tags": ["a"]}

    def validate_state_change(self, next_state, source):
        if isinstance(next_state, dict) and next_state.get("count", 0) < 0:
            raise ValueError("count must not be negative")


@pytest.fixture
def agent():
    return get_agent(Counter, "views")


class TestStateViewFollowsTheAgent:
    def test_it_starts_with_the_stored_state_its_time_and_source(self, agent):
        view = StateView(agent)
        assert view.get_state(["value", "has_state", "source", "agent_name", "readonly", "error"]) == {
            "value": {"count": 0, "tags": ["a"]}, "has_state": True, "source": "server",
            "agent_name": "views", "readonly": False, "error": ""}
        assert view.updated_at.endswith("+00:00") and view.updated_at[:4].isdigit()

    def test_set_state_from_python_reaches_the_traits_and_the_front_end(self, agent):
        view = StateView(agent)
        revision = view.revision
        agent.set_state({"count": 5})
        assert view.value == {"count": 5}
        assert view.revision == revision + 1
        assert synced(view, "value") == {"count": 5}

    def test_a_change_from_another_thread_arrives(self, agent):
        view = StateView(agent)
        worker = threading.Thread(target=agent.set_state, args=({"count": 9},))
        worker.start()
        worker.join()
        assert view.value == {"count": 9}

    def test_reset_without_initial_state_shows_no_state(self):
        plain = get_agent(Agent, "plain")
        view = StateView(plain)
        assert (view.has_state, view.value) == (False, None)
        plain.set_state([1, 2])
        assert (view.has_state, view.value) == (True, [1, 2])
        plain.reset_state()
        assert (view.has_state, view.value, view.source) == (False, None, "")

    def test_the_static_fallback_shows_the_state(self, agent):
        data, _ = StateView(agent)._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in data
        assert "&quot;count&quot;: 0" in data["text/html"] and "by server" in data["text/html"]


class TestStateViewEdits:
    def test_an_edit_from_the_front_end_goes_through_the_connection(self, agent):
        view = StateView(agent)
        reply = frontend_request(view, "set_state", {"state": {"count": 3}})
        assert reply["result"] == {"ok": True}
        assert agent.state == {"count": 3}
        assert (view.value, view.source, view.error) == ({"count": 3}, "this view", "")
        assert agent.sql("SELECT source FROM agent_state")[0]["source"] == view.connection.id

    def test_a_rejected_edit_shows_the_validator_message_and_returns_to_the_stored_state(self, agent):
        view = StateView(agent)
        agent.set_state({"count": 2})
        reply = frontend_request(view, "set_state", {"state": {"count": -1}})
        assert reply["result"] == {"ok": False, "error": "State update rejected: count must not be negative"}
        assert view.error == "State update rejected: count must not be negative"
        assert agent.state == {"count": 2}
        assert view.value == {"count": 2}
        assert synced(view, "value") == {"count": 2}

    def test_a_front_end_write_of_the_value_trait_is_validated_too(self, agent):
        view = StateView(agent)
        frontend_update(view, {"value": {"count": -5}})
        assert agent.state == {"count": 0, "tags": ["a"]}
        assert view.value == {"count": 0, "tags": ["a"]}
        assert synced(view, "value") == {"count": 0, "tags": ["a"]}
        assert "count must not be negative" in view.error
        frontend_update(view, {"value": {"count": 4}})
        assert agent.state == {"count": 4} and view.error == ""

    def test_other_views_see_an_edit_and_the_error_clears_on_the_next_change(self, agent):
        editor, watcher = StateView(agent), StateView(agent)
        frontend_request(editor, "set_state", {"state": {"count": -1}})
        assert editor.error
        frontend_request(watcher, "set_state", {"state": {"count": 7}})
        assert editor.value == {"count": 7} and editor.error == ""
        assert editor.source.startswith("connection ")

    def test_a_readonly_view_refuses_edits(self, agent):
        view = StateView(agent, readonly=True)
        reply = frontend_request(view, "set_state", {"state": {"count": 1}})
        assert reply["result"] == {"ok": False, "error": "Connection is readonly"}
        assert agent.state == {"count": 0, "tags": ["a"]}
        assert (view.readonly, view.error, view.value) == (True, "Connection is readonly", {"count": 0, "tags": ["a"]})

    def test_unknown_requests_and_bad_params_answer_with_an_error(self, agent):
        view = StateView(agent)
        assert "Unknown request 'drop'" in frontend_request(view, "drop", {})["error"]
        assert "TypeError" in frontend_request(view, "set_state", {"wrong": 1})["error"]

    def test_closing_the_view_closes_its_connection(self, agent):
        view = StateView(agent)
        connection = view.connection
        view.close()
        assert connection.closed and connection not in agent.connections


class TestLayout:
    def test_a_chain_is_one_segment_drawn_as_head_gap_and_tail(self):
        plan = build_plan([(f"m{i}", f"m{i - 1}" if i else None, "user", i) for i in range(10_000)])
        assert [(len(s.ids), s.parent, s.depth) for s in plan.segments] == [(10_000, -1, 0)]
        assert shown_indices(10_000, {5000}, head=3, tail=3, collapse_over=12) == [0, 1, 2, 5000, 9997, 9998, 9999]

    def test_branch_points_start_new_segments_in_depth_first_order(self):
        nodes = [("a", None, "user", 1), ("b", "a", "assistant", 2), ("c", "b", "user", 3),
                 ("b2", "a", "assistant", 4), ("d", "c", "assistant", 5), ("e", "c", "assistant", 6)]
        plan = build_plan(nodes)
        # At a branch point the biggest subtree (ties: the oldest) continues at the same depth, after
        # the alternatives, which are indented.
        assert [(s.ids, s.parent, s.depth) for s in plan.segments] == [
            (["a"], -1, 0), (["b2"], 0, 1), (["b", "c"], 0, 0), (["e"], 2, 1), (["d"], 2, 0)]
        assert plan.branch_points == 2 and sorted(plan.leaves) == ["b2", "d", "e"]
        assert plan.newest_leaf_under("b") == "e" and plan.newest_leaf_under("a") == "e"
        assert plan.path_marks("d") == [[0, 1], [2, 2], [4, 1]]
        assert plan.cover("a", "d") == [[0, 0, 1], [2, 0, 2], [4, 0, 1]]
        preferring_e = build_plan(nodes, prefer="e")
        assert [(s.ids, s.depth) for s in preferring_e.segments][3:] == [(["d"], 1), (["e"], 0)]
        assert plan.cover("d", "a") is None and plan.cover("b2", "d") is None

    def test_short_text_summarises_parts(self):
        assert short_text({"parts": [{"type": "text", "text": "hello\n  world"}]}) == "hello world"
        call = {"parts": [{"type": "tool_use", "name": "search", "id": "t", "input": {}}]}
        assert short_text(call) == "[tool search]"
        assert short_text({"parts": [{"type": "text", "text": "x" * 100}]}, 10) == "x" * 9 + "…"


class TestMessageParts:
    def test_anthropic_blocks_become_text_calls_and_results(self):
        message = {"id": "m", "role": "assistant", "parts": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "porto"}},
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "found it"}],
             "is_error": True}]}
        parts, cut = parts_json(message, 1000)
        assert cut is False
        assert parts == [
            {"k": "thinking", "text": "hmm", "n": 3}, {"k": "text", "text": "Let me look.", "n": 12},
            {"k": "call", "name": "search", "id": "toolu_1", "input": '{"q": "porto"}', "n": 14},
            {"k": "result", "id": "toolu_1", "name": None, "text": "found it", "error": True, "n": 8}]
        assert short_text(message) == 'Let me look. [tool search] {"q": "porto"} [error] found it'
        assert tool_kind(message) == "call"

    def test_ai_sdk_tool_parts_carry_their_call_and_output(self):
        message = {"id": "m", "role": "assistant", "parts": [
            {"type": "tool-weather", "toolCallId": "c1", "state": "output-available", "input": {"city": "Porto"},
             "output": {"temp": 21}},
            {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "c2", "state": "output-error",
             "input": {}, "errorText": "timeout"}]}
        parts, _ = parts_json(message, 1000)
        assert [(p["k"], p.get("name"), p.get("text", p.get("input")), p.get("error")) for p in parts] == [
            ("call", "weather", '{"city": "Porto"}', None), ("result", "weather", '{"temp": 21}', False),
            ("call", "lookup", "{}", None), ("result", "lookup", "timeout", True)]

    def test_long_parts_are_cut_and_say_how_long_they_are(self):
        parts, cut = parts_json({"parts": [{"type": "text", "text": "y" * 700}]}, 600)
        assert cut is True and parts == [{"k": "text", "text": "y" * 600, "n": 700}]

    def test_a_message_that_only_answers_a_tool_is_a_result_row(self):
        answer = {"parts": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}
        assert (tool_kind(answer), short_text(answer)) == ("result", "[result] 42")
        assert tool_kind({"parts": [{"type": "text", "text": "hi"}]}) == ""


# --- sessions -------------------------------------------------------------------------------------

from agentlab.session._manager import SessionManager  # noqa: E402
from agentlab.session._session import Session  # noqa: E402


class Quiet(Agent):
    """Keeps reported errors instead of warning."""

    def on_start(self):
        self.errors = []

    def on_error(self, error):
        self.errors.append(error)


def say(mid, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": f"text of {mid}"}]}


class TestDashboard:
    def test_session_show_has_the_three_views(self):
        session = Session.create(get_agent(Quiet, "ctx")).with_context("memory", max_tokens=50)
        dash = show(session)
        assert isinstance(dash.state, StateView) and isinstance(dash.tree, BranchTree)
        assert isinstance(dash.context, ContextView) and dash.tree.session is session
        html = dash._repr_mimebundle_()["text/html"]
        assert "State of ctx" in html and "Branch tree" in html and "Context blocks" in html

    def test_agent_show_includes_the_agents_session(self):
        class WithSession(Quiet):
            def on_start(self):
                super().on_start()
                self.session = Session.create(self)

        agent = get_agent(WithSession, "shown")
        dash = show(agent)
        assert dash.tree.session is agent.session and dash.state.agent is agent and dash.picker is None
        dash.close()
        assert dash.state.connection.closed

    def test_a_plain_agent_without_sessions_shows_its_state_only(self):
        bare = show(get_agent(Quiet, "bare"))
        assert (bare.tree, bare.context, bare.picker) == (None, None, None) and bare.state is not None

    def test_a_plain_agent_shows_its_newest_session_with_a_picker(self):
        agent = get_agent(Quiet, "plain")
        default = Session.create(agent)
        default.append_messages([say("q1"), say("r1", "assistant")])
        manager = SessionManager(agent)
        named = manager.create("trip planning")
        manager.session(named.id).append_message(say("x1"))
        dash = show(agent)
        assert dash.picker.options == (
            ("trip planning (" + named.id[:8] + ")", named.id), ("default session ('')", ""))
        assert dash.tree.stats["messages"] == 1 and dash.tree.current_leaf == "x1"
        dash.picker.value = ""
        assert dash.session.session_id == "" and dash.tree.stats["messages"] == 2
        assert dash.children[-1] is dash.tree

    def test_its_tree_follows_writes_made_through_the_notebooks_own_session(self):
        agent = get_agent(Quiet, "follows")
        mine = Session.create(agent)
        mine.append_message(say("q1"))
        dash = show(agent)
        assert dash.session is not mine and dash.tree.current_leaf == "q1"
        mine.append_message(say("r1", "assistant"))
        assert dash.tree.current_leaf == "r1" and dash.tree.stats["messages"] == 2
        mine.update_message({"id": "q1", "role": "user", "parts": [{"type": "text", "text": "edited"}]})
        assert dash.tree.segments[0]["items"][0]["t"] == "edited"
        dash.close()
        mine.append_message(say("q2"))
        assert dash.tree.current_leaf == "r1"  # a closed dashboard no longer listens
