"""Headless tests of BranchTree: the outline fetched a page at a time, live updates, selection, search, messages
with their tool calls, branch comparison and compactions. A recording comm (``tests/helpers.py``) stands in for
the front end."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agentlab import get_agent
from agentlab.errors import DuplicateMessageWarning, InvalidSearchError, SessionError, UnknownMessageError
from agentlab.session import InMemorySessionStorage
from agentlab.session._session import Session
from agentlab.views import BranchTree
from agentlab.views import _branch_tree as branch_tree_module
from tests.helpers import Quiet, frontend_request, record_comms, summarise_first_three, synced
from tests.helpers import role_msg as msg


@pytest.fixture(autouse=True)
def recording_comms(monkeypatch):
    record_comms(monkeypatch)


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


def all_rows(tree) -> list[dict]:
    """Every outline row, fetched as the front end does (pages of rows)."""
    rows: list[dict] = []
    while len(rows) < tree.row_count:
        reply = frontend_request(tree, "rows", {"start": len(rows), "stop": len(rows) + 100})["result"]
        assert reply["version"] == tree.version and reply["start"] == len(rows)
        rows += reply["rows"]
    return rows


def row(tree, mid) -> dict:
    return next(r for r in all_rows(tree) if r.get("id") == mid)


class TestBranchTreeDrawsTheTree:
    def test_segments_branch_points_and_the_current_leaf(self, session):
        tree = BranchTree(session)
        assert drawn_ids(tree) == [["m0", "m1", "m2"], ["m3", "m4"], ["b3"]]
        # The current branch reads straight down; the other reply is indented where it branches off.
        assert [(seg["p"], seg["d"], seg["n"]) for seg in tree.segments] == [(-1, 0, 3), (0, 1, 2), (0, 0, 1)]
        branch_point = tree.segments[0]["items"][2]
        assert (branch_point["id"], branch_point["k"], branch_point["r"]) == ("m2", 2, "user")
        assert (tree.current_leaf, tree.selected_leaf, tree.selected_id) == ("b3", "b3", "b3")
        assert (tree.row_count, tree.current_row, tree.selected_row) == (6, 5, 5)
        assert tree.stats | {"build_ms": 0} == {"session": "", "messages": 6, "segments": 3, "rows": 6,
                                                "branch_points": 1, "leaves": 2, "compactions": 0, "build_ms": 0,
                                                "changes": 0}

    def test_rows_come_on_request_with_the_flags_to_draw_them(self, session):
        tree = BranchTree(session)
        rows = all_rows(tree)
        assert [r["id"] for r in rows] == ["m0", "m1", "m2", "m3", "m4", "b3"]
        assert [(r["t"], r["d"], r.get("c", 0), r.get("v", 0)) for r in rows] == [
            ("text of m0", 0, 1, 1), ("text of m1", 0, 1, 1), ("text of m2", 0, 1, 1),
            ("text of m3", 1, 0, 0), ("text of m4", 1, 0, 0), ("a regenerated reply", 0, 1, 1)]
        assert {k: rows[5][k] for k in ("cl", "sl", "si")} == {"cl": 1, "sl": 1, "si": 1}
        assert rows[2]["k"] == 2 and "cl" not in rows[4]
        page = frontend_request(tree, "rows", {"start": 4, "stop": 99})["result"]["rows"]
        assert [r["id"] for r in page] == ["m4", "b3"]

    def test_only_the_first_page_of_rows_travels_with_the_widget(self, session):
        session.append_messages([msg(f"x{i}", text=f"secret number {i}") for i in range(2000)], parent_id="m2")
        tree = BranchTree(session, collapse_over=5000)  # every message drawn: 2,006 rows
        first = json.loads(tree.first_page)
        assert first == {"version": tree.version, "start": 0, "rows": all_rows(tree)[:100]}
        state = json.dumps({k: v for k, v in tree.get_state().items() if k not in ("_esm", "_css", "first_page")})
        assert "secret number" not in state and len(state) < 3_000 and tree.row_count == 2006
        assert "secret number 1999" in json.dumps(all_rows(tree))
        session.append_message(msg("later"))
        tree.refresh()  # over SYNC_LIMIT messages the event's refresh runs on a timer; run it now
        assert json.loads(tree.first_page)["version"] != tree.version  # set once: later rows come on request

    def test_an_append_from_python_updates_the_tree_and_the_front_end(self, session):
        tree = BranchTree(session)
        version = tree.version
        session.append_message(msg("b4"))
        assert drawn_ids(tree)[2] == ["b3", "b4"]
        assert tree.current_leaf == "b4" and synced(tree, "current_leaf") == "b4"
        assert synced(tree, "version") == tree.version > version and synced(tree, "row_count") == 7
        assert row(tree, "b4").get("cl") == 1 and "cl" not in row(tree, "b3")
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

    def test_edits_and_deletes_redraw_and_forget_cached_text(self, session):
        tree = BranchTree(session)
        assert row(tree, "m4")["t"] == "text of m4"
        session.update_message(msg("m4", text="edited"))
        assert row(tree, "m4")["t"] == "edited"
        session.delete_messages(["b3"])
        assert drawn_ids(tree) == [["m0", "m1", "m2", "m3", "m4"]] and tree.current_leaf == "m4"

    def test_a_long_run_is_collapsed_and_the_ends_of_a_compaction_stay_drawn(self):
        s = Session(get_agent(Quiet, "long"))
        s.append_messages([msg(f"c{i}") for i in range(10_000)], parent_id=None)
        s.add_compaction("middle", "c4000", "c4100")
        tree = BranchTree(s)
        items = tree.segments[0]["items"]
        assert [i.get("id", i.get("gap")) for i in items] == [
            "c0", "c1", "c2", [3, 4000], "c4000", [4001, 4100], "c4100", [4101, 9997], "c9997", "c9998", "c9999"]
        rows = all_rows(tree)
        assert [r.get("g") for r in rows[3:7]] == [None, [[0, 1, 0]], [[0, 0, 0]], [[0, 2, 0]]]
        assert rows[4]["cs"] == [0] and rows[5]["gap"] == [4001, 4100]
        reply = frontend_request(tree, "expand", {"segment": 0, "start": 3, "stop": 4000})
        assert reply["result"] == {"revealed": branch_tree_module.EXPAND_STEP}
        assert next(i["gap"] for i in tree.segments[0]["items"] if "gap" in i) == [503, 4000]

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

    def test_a_session_on_the_in_memory_storage_is_drawn_and_searched_the_same(self):
        s = Session(InMemorySessionStorage())
        s.append_messages([msg("m0"), msg("m1", "assistant"), msg("m2", text="coffee please")], parent_id=None)
        s.append_message(msg("b2", text="tea please"), parent_id="m1")
        tree = BranchTree(s)
        assert drawn_ids(tree) == [["m0", "m1"], ["m2"], ["b2"]] and tree.current_leaf == "b2"
        assert tree.find("coffee") == ["m2"] and tree.compare("m2", "b2")["fork"]["id"] == "m1"

    def test_a_storage_that_cannot_list_its_tree_says_so(self):
        class NoOutline(InMemorySessionStorage):
            nodes = None

        with pytest.raises(SessionError, match="NoOutline cannot list its tree"):
            BranchTree(Session(NoOutline()))

    def test_the_static_fallback_is_an_outline(self, session):
        html = BranchTree(session)._repr_mimebundle_()[0]["text/html"]
        assert "6 messages" in html and "a regenerated reply" in html and "● current" in html and "(2 branches)" in html


class TestBranchTreeSelection:
    def test_clicking_a_message_selects_the_newest_leaf_of_its_branch(self, session):
        tree = BranchTree(session)
        reply = frontend_request(tree, "select", {"id": "m3"})
        assert reply["result"] == {"id": "m3", "leaf": "m4", "row": 3}
        assert (tree.selected_id, tree.selected_leaf) == ("m3", "m4")
        assert tree.marks["selected"] == [[0, 3], [1, 2]]
        assert synced(tree, "selected_leaf") == "m4"
        assert [r.get("v", 0) for r in all_rows(tree)] == [1, 1, 1, 1, 1, 0]
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

    def test_a_message_hidden_in_a_gap_is_revealed_to_jump_to_it(self):
        s = Session(get_agent(Quiet, "reveal"))
        s.append_messages([msg(f"c{i}") for i in range(100)], parent_id=None)
        tree = BranchTree(s)
        assert "c50" not in [r.get("id") for r in all_rows(tree)]
        reply = frontend_request(tree, "reveal", {"id": "c50"})["result"]
        assert all_rows(tree)[reply["row"]]["id"] == "c50"

    def test_unknown_ids_answer_with_an_error_and_change_nothing(self, session):
        tree = BranchTree(session)
        reply = frontend_request(tree, "select", {"id": "nope"})
        assert "UnknownMessageError" in reply["error"] and tree.selected_leaf == "b3"
        assert "KeyError" in frontend_request(tree, "message", {"id": "nope"})["error"]
        assert "UnknownMessageError" in frontend_request(tree, "reveal", {"id": "nope"})["error"]


def tool_session(name="tools"):
    s = Session(get_agent(Quiet, name))
    s.append_messages([
        msg("q", text="How is the weather in Porto?"),
        {"id": "call", "role": "assistant", "parts": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Porto"}}]},
        {"id": "answer", "role": "user", "parts": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}]},
        msg("long", "assistant", "It is sunny. " + "More detail. " * 100 + "THE END"),
    ], parent_id=None)
    return s


class TestBranchTreeMessages:
    def test_tool_calls_and_results_show_as_such_in_rows_and_in_the_path(self):
        tree = BranchTree(tool_session())
        rows = {r["id"]: r for r in all_rows(tree)}
        assert (rows["call"]["x"], rows["call"]["t"]) == ("call", 'Let me check. [tool weather] {"city": "Porto"}')
        assert (rows["answer"]["x"], rows["answer"]["t"]) == ("result", "[result] sunny, 21 C")
        path = frontend_request(tree, "path", {"limit": 10})["result"]
        parts = {m["id"]: m["parts"] for m in path["messages"]}
        assert parts["call"][1] == {"k": "call", "name": "weather", "id": "toolu_1", "input": '{"city": "Porto"}',
                                    "n": 17}
        assert parts["answer"] == [{"k": "result", "id": "toolu_1", "name": None, "text": "sunny, 21 C",
                                    "error": False, "n": 11}]

    def test_a_long_message_is_cut_in_the_path_and_whole_on_request(self):
        tree = BranchTree(tool_session("long"))
        long = frontend_request(tree, "path", {"limit": 10})["result"]["messages"][-1]
        assert long["cut"] is True and len(long["parts"][0]["text"]) == branch_tree_module.PANEL_TEXT
        assert long["parts"][0]["n"] == 1320
        whole = frontend_request(tree, "message", {"id": "long"})["result"]
        assert whole["cut"] is False and whole["parts"][0]["text"].endswith("THE END")

    def test_the_path_request_applies_overlays_and_pages_back(self, session):
        tree = BranchTree(session)
        session.on_compaction(summarise_first_three)
        session.compact("m4")
        tree.select("m4")
        result = frontend_request(tree, "path", {"limit": 2})["result"]
        assert result["leaf"] == "m4" and result["total"] == 3
        assert [m["id"] for m in result["messages"]] == ["m3", "m4"]
        earlier = frontend_request(tree, "path", {"limit": 2, "skip": 2})["result"]["messages"]
        assert len(earlier) == 1 and earlier[0]["compaction"] is True
        assert earlier[0]["parts"] == [{"k": "text", "text": "the opening", "n": 11}]
        summary = frontend_request(tree, "message", {"id": earlier[0]["id"]})["result"]
        assert summary["parts"][0]["text"] == "the opening"


class TestBranchTreeSearch:
    def test_hits_are_ranked_drawn_inside_collapsed_runs_and_marked(self):
        s = Session(get_agent(Quiet, "search"))
        s.append_messages([msg(f"c{i}", text=f"filler {i}") for i in range(200)], parent_id=None)
        s.update_message(msg("c100", text="the coffee is black"))
        s.update_message(msg("c150", text="coffee coffee with milk"))
        tree = BranchTree(s)
        assert "c100" not in [r.get("id") for r in all_rows(tree)]  # collapsed away before the search
        found = tree.find("coffee")
        assert sorted(found) == ["c100", "c150"] and tree.search["query"] == "coffee"
        rows = all_rows(tree)
        hits = {r["id"]: r["h"] for r in rows if "h" in r}
        assert hits == {found[0]: 1, found[1]: 2}
        assert [rows[h["row"]]["id"] for h in tree.search["hits"]] == found
        assert synced(tree, "search")["hits"][0]["snippet"]

    def test_the_search_runs_again_after_every_change(self):
        s = Session(get_agent(Quiet, "research"))
        s.append_messages([msg("a", text="tea"), msg("b", text="coffee")], parent_id=None)
        tree = BranchTree(s)
        frontend_request(tree, "search", {"query": "coffee", "mode": "any"})
        s.append_message(msg("c", text="more coffee"))
        assert sorted(h["id"] for h in tree.search["hits"]) == ["b", "c"]

    def test_a_blank_query_stops_searching_and_a_bad_mode_changes_nothing(self, session):
        tree = BranchTree(session)
        tree.find("regenerated")
        assert [h["id"] for h in tree.search["hits"]] == ["b3"]
        reply = frontend_request(tree, "search", {"query": "text", "mode": "fuzzy"})
        assert "InvalidSearchError" in reply["error"] and tree.search["query"] == "regenerated"
        with pytest.raises(InvalidSearchError):
            tree.find("text", mode="fuzzy")
        assert frontend_request(tree, "search", {"query": "  "})["result"] == {"total": 0}
        assert tree.search == {} and not any("h" in r for r in all_rows(tree))


class TestBranchTreeCompare:
    def test_two_branches_side_by_side_from_their_fork_point(self, session):
        session.append_message(msg("b4"))
        tree = BranchTree(session)
        result = tree.compare("m3", "b3")
        assert result["fork"]["id"] == "m2" and result["shared"] == 3
        assert (result["a"]["leaf"], result["a"]["total"]) == ("m4", 2)
        assert [m["id"] for m in result["a"]["messages"]] == ["m3", "m4"]
        assert [m["id"] for m in result["b"]["messages"]] == ["b3", "b4"]
        assert tree.comparison == {"a": "m4", "b": "b4"} and synced(tree, "comparison") == tree.comparison
        paged = frontend_request(tree, "compare", {"a": "m4", "b": "b4", "offset": 1, "limit": 1})["result"]
        assert [m["id"] for m in paged["b"]["messages"]] == ["b4"] and paged["b"]["offset"] == 1

    def test_the_fork_chip_compares_the_selected_branch_with_the_next_one(self, session):
        tree = BranchTree(session)
        tree.select("m4")
        result = frontend_request(tree, "compare_at", {"id": "m2"})["result"]
        assert (result["a"]["leaf"], result["b"]["leaf"]) == ("m4", "b3")
        assert "a comparison needs a branch point" in frontend_request(tree, "compare_at", {"id": "m1"})["error"]

    def test_unknown_messages_raise(self, session):
        with pytest.raises(UnknownMessageError):
            BranchTree(session).compare("m3", "nope")


class TestBranchTreeCompactions:
    def test_the_side_panel_lists_range_summary_tokens_and_row(self, session):
        tree = BranchTree(session)
        session.on_compaction(summarise_first_three)
        session.compact("m4")
        (overlay,) = tree.compactions
        assert (overlay["from"], overlay["to"], overlay["count"], overlay["summary"]) == ("m0", "m2", 3, "the opening")
        assert overlay["row"] == 0 and overlay["trigger"] == "manual"
        assert overlay["tokens_before"] > overlay["tokens_after"] > 0
        assert tree.stats["compactions"] == 1 and synced(tree, "compactions") == tree.compactions
        assert frontend_request(tree, "compaction", {"id": overlay["id"]})["result"]["summary"] == "the opening"

    def test_a_long_summary_is_cut_in_the_trait_and_whole_on_request(self, session):
        record = session.add_compaction("s" * 1000, "m0", "m1")  # stored by hand: no event, so draw after it
        tree = BranchTree(session)
        assert tree.compactions[0]["summary"] == "s" * 400 and tree.compactions[0]["summary_chars"] == 1000
        assert frontend_request(tree, "compaction", {"id": record.id})["result"]["summary"] == "s" * 1000
