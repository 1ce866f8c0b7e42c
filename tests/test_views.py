"""Headless tests of the notebook widgets: traits and messages, with no browser.

A recording comm stands in for the front end (``comm.create_comm`` is the documented extension
point): it keeps every message the kernel sends, and tests feed the kernel the messages a front
end would send (custom requests and trait updates), through the widget's real comm handler.
"""

from __future__ import annotations

import json
import threading
import time

import comm
import pytest
from comm.base_comm import BaseComm

from agentlab import Agent, get_agent
from agentlab.errors import DuplicateMessageWarning
from agentlab.views import BranchTree, ContextView, StateView
from agentlab.views._layout import build_plan, shown_indices, short_text


class RecordingComm(BaseComm):
    """A comm whose 'front end' is a list of the messages the kernel published."""

    def __init__(self, *args, **kwargs):
        self.published: list[tuple[str, dict]] = []
        super().__init__(*args, **kwargs)

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        self.published.append((msg_type, data or {}))


@pytest.fixture(autouse=True)
def recording_comms(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))


def custom_replies(widget) -> list[dict]:
    return [d["content"] for kind, d in widget.comm.published
            if kind == "comm_msg" and d.get("method") == "custom" and d["content"].get("kind") == "response"]


def frontend_request(widget, method: str, params: dict) -> dict:
    """Send a request as the front end does (a custom comm message) and return the kernel's reply."""
    before = len(custom_replies(widget))
    widget.comm.handle_msg({"content": {"comm_id": widget.comm.comm_id, "data": {
        "method": "custom", "content": {"kind": "request", "id": f"r{before}", "method": method, "params": params}}},
        "buffers": []})
    replies = custom_replies(widget)
    assert len(replies) == before + 1
    assert replies[-1]["id"] == f"r{before}"
    return replies[-1]


def frontend_update(widget, state: dict) -> None:
    """Write traits as the front end does (an ``update`` comm message)."""
    widget.comm.handle_msg({"content": {"comm_id": widget.comm.comm_id, "data": {
        "method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


def synced(widget, name: str):
    """The last value of trait ``name`` the kernel sent to the front end."""
    value = None
    for kind, data in widget.comm.published:
        state = data.get("state", {}) if kind in ("comm_open", "comm_msg") else {}
        if name in state:
            value = state[name]
    return value


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
        assert short_text({"parts": [{"type": "tool_use", "name": "search", "id": "t", "input": {}}]}) == "[tool search]"
        assert short_text({"parts": [{"type": "text", "text": "x" * 100}]}, 10) == "x" * 9 + "…"


# --- sessions -------------------------------------------------------------------------------------

from agentlab.session.session import Session  # noqa: E402
from agentlab.views import branch_tree as branch_tree_module  # noqa: E402
from agentlab.views import dashboard  # noqa: E402


class Quiet(Agent):
    """Keeps reported errors instead of warning."""

    def on_start(self):
        self.errors = []

    def on_error(self, error):
        self.errors.append(error)


def msg(mid, role="user", text=None):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}


def summarise_first_three(history):
    if len(history) < 4:
        return None
    return {"from_message_id": history[0]["id"], "to_message_id": history[2]["id"], "summary": "the opening"}


@pytest.fixture
def session():
    """m0 -> m1 -> m2 -> m3 -> m4, and a regenerated reply b3 under m2 (appended last: the current leaf)."""
    s = Session(get_agent(Quiet, "tree"))
    s.append_messages([msg("m0"), msg("m1", "assistant"), msg("m2"), msg("m3", "assistant"), msg("m4")],
                      parent_id=None)
    s.append_message(msg("b3", "assistant", "a regenerated reply"), parent_id="m2")
    return s


def drawn_ids(tree) -> list[list[str]]:
    return [[item["id"] for item in seg["items"] if "id" in item] for seg in tree.segments]


class TestBranchTreeDrawsTheTree:
    def test_segments_branch_points_and_the_current_leaf(self, session):
        tree = BranchTree(session)
        assert drawn_ids(tree) == [["m0", "m1", "m2"], ["m3", "m4"], ["b3"]]
        # The current branch reads straight down; the other reply is indented where it branches off.
        assert [(seg["p"], seg["d"], seg["n"]) for seg in tree.segments] == [(-1, 0, 3), (0, 1, 2), (0, 0, 1)]
        branch_point = tree.segments[0]["items"][2]
        assert (branch_point["id"], branch_point["k"], branch_point["r"]) == ("m2", 2, "user")
        assert tree.segments[2]["items"][0]["t"] == "a regenerated reply"
        assert (tree.current_leaf, tree.selected_leaf, tree.selected_id) == ("b3", "b3", "b3")
        assert tree.marks == {"current": [[0, 3], [2, 1]], "selected": [[0, 3], [2, 1]]}
        assert tree.stats | {"build_ms": 0} == {"session": "", "messages": 6, "segments": 3, "branch_points": 1,
                                                "leaves": 2, "compactions": 0, "build_ms": 0}

    def test_an_append_from_python_updates_the_tree_and_the_front_end(self, session):
        tree = BranchTree(session)
        session.append_message(msg("b4"))
        assert drawn_ids(tree)[2] == ["b3", "b4"]
        assert tree.current_leaf == "b4" and synced(tree, "current_leaf") == "b4"
        assert json.loads(synced(tree, "segments_json")) == tree.segments
        with pytest.warns(DuplicateMessageWarning):
            session.append_message(msg("b3"))  # a duplicate id changes nothing
        assert tree.stats["messages"] == 7

    def test_an_append_from_another_thread_arrives(self, session):
        tree = BranchTree(session)
        worker = threading.Thread(target=session.append_message, args=(msg("m5"),), kwargs={"parent_id": "m4"})
        worker.start()
        worker.join()
        # m5 is the new current leaf: its branch becomes the continuation, b3 the indented alternative.
        assert drawn_ids(tree) == [["m0", "m1", "m2"], ["b3"], ["m3", "m4", "m5"]]
        assert [seg["d"] for seg in tree.segments] == [0, 1, 0]

    def test_deletes_redraw_and_forget_cached_text(self, session):
        tree = BranchTree(session)
        session.update_message(msg("m4", text="edited"))
        assert tree.segments[1]["items"][1]["t"] == "edited"
        session.delete_messages(["b3"])
        assert drawn_ids(tree) == [["m0", "m1", "m2", "m3", "m4"]] and tree.current_leaf == "m4"

    def test_a_compaction_is_a_bracket_over_the_rows_it_covers(self, session):
        tree = BranchTree(session)
        session.on_compaction(summarise_first_three)
        session.compact("m4")
        assert len(tree.compactions) == 1
        overlay = tree.compactions[0]
        assert (overlay["from"], overlay["to"], overlay["count"], overlay["summary"]) == ("m0", "m2", 3, "the opening")
        assert overlay["pieces"] == [[0, 0, 3]]
        assert tree.stats["compactions"] == 1 and synced(tree, "compactions") == tree.compactions

    def test_a_long_run_is_collapsed_and_the_ends_of_a_compaction_stay_drawn(self):
        s = Session(get_agent(Quiet, "long"))
        s.append_messages([msg(f"c{i}") for i in range(10_000)], parent_id=None)
        s.add_compaction("middle", "c4000", "c4100")
        tree = BranchTree(s)
        items = tree.segments[0]["items"]
        assert [i.get("id", i.get("gap")) for i in items] == [
            "c0", "c1", "c2", [3, 4000], "c4000", [4001, 4100], "c4100", [4101, 9997], "c9997", "c9998", "c9999"]
        assert tree.compactions[0]["pieces"] == [[0, 4000, 4101]] and tree.compactions[0]["count"] == 101
        assert len(json.dumps(tree.segments)) < 2_000
        reply = frontend_request(tree, "expand", {"segment": 0, "start": 3, "stop": 4000})
        assert reply["result"] == {"revealed": branch_tree_module.EXPAND_STEP}
        assert [i.get("gap") for i in tree.segments[0]["items"] if "gap" in i][0] == [503, 4000]

    def test_a_large_tree_is_redrawn_on_a_timer_after_a_burst(self, monkeypatch):
        monkeypatch.setattr(branch_tree_module, "SYNC_LIMIT", 50)
        s = Session(get_agent(Quiet, "burst"))
        s.append_messages([msg(f"x{i}") for i in range(60)], parent_id=None)
        tree = BranchTree(s)
        for i in range(60, 65):
            s.append_message(msg(f"x{i}"))
        deadline = time.monotonic() + 5
        while tree.stats["messages"] != 65 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert tree.stats["messages"] == 65 and tree.current_leaf == "x64"

    def test_the_static_fallback_is_an_outline(self, session):
        html = BranchTree(session)._repr_mimebundle_()[0]["text/html"]
        assert "6 messages" in html and "a regenerated reply" in html and "● current" in html and "(2 branches)" in html


class TestBranchTreeSelection:
    def test_clicking_a_message_selects_the_newest_leaf_of_its_branch(self, session):
        tree = BranchTree(session)
        reply = frontend_request(tree, "select", {"id": "m3"})
        assert reply["result"] == {"id": "m3", "leaf": "m4"}
        assert (tree.selected_id, tree.selected_leaf) == ("m3", "m4")
        assert tree.marks["selected"] == [[0, 3], [1, 2]]
        assert synced(tree, "selected_leaf") == "m4"
        assert frontend_request(tree, "select", {"id": "m1"})["result"]["leaf"] == "b3"

    def test_the_selection_stays_while_the_tip_moves_until_it_is_released(self, session):
        tree = BranchTree(session)
        tree.select("m4")
        session.append_message(msg("b4"))
        assert (tree.selected_leaf, tree.current_leaf) == ("m4", "b4")
        assert tree.select(None) == "b4"
        session.append_message(msg("b5"))
        assert tree.selected_leaf == "b5"

    def test_a_notebook_continues_from_the_selected_leaf(self, session):
        tree = BranchTree(session)
        tree.select("m3")
        session.append_message(msg("m5"), parent_id=tree.selected_leaf)
        assert [m["id"] for m in session.get_history()] == ["m0", "m1", "m2", "m3", "m4", "m5"]
        assert tree.selected_leaf == "m5"  # the branch's newest leaf is now the new message

    def test_the_path_request_returns_the_branch_with_overlays_applied(self, session):
        tree = BranchTree(session)
        session.on_compaction(summarise_first_three)
        session.compact("m4")
        tree.select("m4")
        result = frontend_request(tree, "path", {"limit": 10})["result"]
        assert result["leaf"] == "m4" and result["total"] == 3
        assert [(m["role"], m["text"], m["compaction"]) for m in result["messages"]] == [
            ("assistant", "the opening", True), ("assistant", "text of m3", False), ("user", "text of m4", False)]

    def test_unknown_ids_answer_with_an_error_and_change_nothing(self, session):
        tree = BranchTree(session)
        reply = frontend_request(tree, "select", {"id": "nope"})
        assert "UnknownMessageError" in reply["error"] and tree.selected_leaf == "b3"
        assert "KeyError" in frontend_request(tree, "message", {"id": "nope"})["error"]
        assert frontend_request(tree, "message", {"id": "b3"})["result"]["text"] == "a regenerated reply"


class Text:
    """A provider whose text the test changes directly (writable if asked)."""

    def __init__(self, text=None, writable=False):
        self.text = text
        if writable:
            self.set = self._set

    def get(self):
        return self.text

    def _set(self, content):
        self.text = content


class Broken:
    def get(self):
        raise OSError("the disk is gone")


@pytest.fixture
def context_session():
    s = Session.create(get_agent(Quiet, "ctx"))
    return (s.with_context("soul", Text("You are helpful."))
             .with_context("memory", description="Facts", max_tokens=100)
             .with_context("empty", Text(None))
             .with_cached_prompt())


class TestContextView:
    def test_blocks_with_tag_usage_and_content_and_nothing_frozen_yet(self, context_session):
        context_session.context.set_block("memory", "User likes coffee.")
        view = ContextView(context_session)
        rows = {b["label"]: b for b in view.blocks}
        assert [b["label"] for b in view.blocks] == ["soul", "memory", "empty"]
        assert (rows["soul"]["tag"], rows["soul"]["max_tokens"], rows["soul"]["pct"]) == ("readonly", None, None)
        memory = rows["memory"]
        assert (memory["tag"], memory["tokens"], memory["max_tokens"], memory["pct"]) == ("writable", 5, 100, 5)
        assert memory["header"] == "MEMORY (Facts) [5% \u2014 5/100 tokens] [writable]"
        assert (memory["content"], memory["frozen"], memory["changed"]) == ("User likes coffee.", None, False)
        assert rows["empty"]["in_prompt"] is False
        assert view.frozen is False and context_session.context.prompt_store.get() is None  # looking never freezes

    def test_a_write_after_the_freeze_shows_as_changed_until_a_refresh(self, context_session):
        context_session.freeze_system_prompt()
        view = ContextView(context_session)
        assert view.frozen is True and view.summary["stale"] is False
        assert {b["label"]: b["frozen"] for b in view.blocks} == {
            "soul": "You are helpful.", "memory": "", "empty": None}
        context_session.context.set_block("memory", "User likes tea.")
        context_session.append_message(msg("u1"))  # any session event re-reads the providers
        memory = view.blocks[1]
        assert (memory["content"], memory["frozen"], memory["changed"]) == ("User likes tea.", "", True)
        assert view.summary["stale"] is True
        assert frontend_request(view, "refresh_prompt", {})["result"] == {"ok": True}
        assert (view.blocks[1]["frozen"], view.blocks[1]["changed"], view.summary["stale"]) == (
            "User likes tea.", False, False)
        assert "User likes tea." in context_session.system_prompt

    def test_a_compaction_refreshes_the_frozen_prompt_shown(self, context_session):
        context_session.freeze_system_prompt()
        view = ContextView(context_session)
        context_session.context.set_block("memory", "fact")
        context_session.append_messages([msg(f"u{i}") for i in range(5)])
        assert view.blocks[1]["changed"] is True
        context_session.on_compaction(summarise_first_three)
        context_session.compact()
        assert view.blocks[1]["frozen"] == "fact" and view.blocks[1]["changed"] is False

    def test_full_texts_come_on_request(self, context_session):
        context_session.context.set_block("memory", "y" * 350)
        view = ContextView(context_session)
        assert frontend_request(view, "block", {"label": "memory"})["result"] == {"text": "y" * 350}
        assert frontend_request(view, "prompt", {"which": "frozen"})["result"] == {"text": None}
        assert "y" * 350 in frontend_request(view, "prompt", {"which": "live"})["result"]["text"]

    def test_a_failing_provider_is_shown_with_its_error(self):
        agent = get_agent(Quiet, "broken")
        s = Session.create(agent).with_context("soul", Text("ok")).with_context("disk", Broken())
        view = ContextView(s)
        disk = view.blocks[1]
        assert (disk["label"], disk["tag"], disk["in_prompt"]) == ("disk", "failed", False)
        assert "the disk is gone" in disk["error"]
        assert "disk" in view._repr_mimebundle_()[0]["text/html"]


class TestDashboard:
    def test_a_session_dashboard_has_the_three_views(self, context_session):
        dash = dashboard.for_session(context_session)
        assert isinstance(dash.state, StateView) and isinstance(dash.tree, BranchTree)
        assert isinstance(dash.context, ContextView)
        html = dash._repr_mimebundle_()["text/html"]
        assert "State of ctx" in html and "Branch tree" in html and "Context blocks" in html

    def test_agent_show_includes_the_agents_session(self):
        class WithSession(Quiet):
            def on_start(self):
                super().on_start()
                self.session = Session.create(self)

        agent = get_agent(WithSession, "shown")
        dash = agent.show()
        assert dash.tree.session is agent.session and dash.state.agent is agent
        bare = get_agent(Quiet, "bare").show()
        assert (bare.tree, bare.context) == (None, None) and bare.state is not None
        dash.close()
        assert dash.state.connection.closed
