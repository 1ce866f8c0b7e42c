"""Headless tests of ContextView: blocks live vs frozen, live updates from every kind of write, and the memory
timeline. A recording comm (``tests/helpers.py``) stands in for the front end."""

from __future__ import annotations

import pytest

from agentlab import get_agent
from agentlab.session import InMemorySessionStorage
from agentlab.session._session import Session
from agentlab.views import ContextView
from agentlab.views import _context_view as context_view_module
from tests.helpers import Quiet, frontend_request, record_comms, summarise_first_three, synced
from tests.helpers import role_msg as msg


@pytest.fixture(autouse=True)
def recording_comms(monkeypatch):
    record_comms(monkeypatch)


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
        context_session.context.set_block("memory", "User likes tea.")  # shown at once: no event, no reload
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


class TestContextViewIsLive:
    def test_every_kind_of_write_shows_without_a_reload(self, context_session):
        view = ContextView(context_session)
        context_session.run_tool("set_context", {"label": "memory", "content": "from the tool"})
        assert view.blocks[1]["content"] == "from the tool" and synced(view, "blocks")[1]["content"] == "from the tool"
        context_session.set_block("memory", "from set_block")
        assert view.blocks[1]["content"] == "from set_block"
        context_session.append_to_block("memory", "appended")
        assert view.blocks[1]["content"] == "from set_block\nappended"

    def test_a_write_through_another_session_object_of_the_agent_shows_too(self, context_session):
        view = ContextView(context_session)
        other = Session(context_session.agent).with_context("memory", description="Facts", max_tokens=100)
        other.set_block("memory", "written elsewhere")
        assert view.timeline[0]["added"] == "written elsewhere"
        assert view.blocks[1]["content"] == "written elsewhere"
        Session(context_session.agent, "another").with_context("memory").set_block("memory", "not ours")
        assert view.timeline[0]["added"] == "written elsewhere"  # another session's block is not this view's

    def test_a_prompt_refresh_from_python_shows_and_a_closed_view_stops_listening(self, context_session):
        context_session.freeze_system_prompt()
        view = ContextView(context_session)
        context_session.set_block("memory", "tea")
        assert view.summary["stale"] is True
        context_session.refresh_system_prompt()
        assert view.summary["stale"] is False and view.blocks[1]["frozen"] == "tea"
        view.close()
        context_session.set_block("memory", "coffee")
        assert view.blocks[1]["content"] == "tea"


class TestTheMemoryTimeline:
    def test_each_write_is_a_row_with_its_writer_and_change_newest_first(self, context_session):
        view = ContextView(context_session)
        context_session.set_block("memory", "User likes tea.")
        context_session.run_tool("set_context", {"label": "memory", "content": "Lives in Porto.", "action": "append"})
        context_session.run_tool("set_context", {"label": "memory", "content": "User likes coffee. Lives in Porto."})
        rows = view.timeline
        assert [(r["label"], r["writer"]) for r in rows] == [
            ("memory", "tool"), ("memory", "tool"), ("memory", "python")]
        assert [(r["before"], r["removed"], r["added"], r["after"]) for r in rows] == [
            ("User likes ", "tea.\n", "coffee. ", "Lives in Porto."),
            ("User likes tea.", "", "\nLives in Porto.", ""),
            ("", "", "User likes tea.", "")]
        assert rows[0]["seq"] > rows[1]["seq"] > rows[2]["seq"] and rows[0]["at"].endswith("+00:00")
        assert synced(view, "timeline") == rows and view.timeline_more is False
        assert "Memory timeline" in view._repr_mimebundle_()[0]["text/html"]

    def test_older_rows_and_full_texts_come_on_request(self, context_session, monkeypatch):
        monkeypatch.setattr(context_view_module, "TIMELINE_ROWS", 2)
        for k in range(5):
            context_session.set_block("memory", f"fact {k} " + "x" * 300)
        view = ContextView(context_session)
        assert [(r["removed"], r["added"]) for r in view.timeline] == [("3", "4"), ("2", "3")]
        assert view.timeline_more is True and view.timeline[0]["cut"] is False
        older = frontend_request(view, "history", {"before": view.timeline[-1]["seq"], "limit": 2})["result"]
        assert [r["added"] for r in older["rows"]] == ["2", "1"] and older["more"] is True
        full = frontend_request(view, "write", {"seq": view.timeline[0]["seq"]})["result"]
        assert (full["old"], full["new"]) == ("fact 3 " + "x" * 300, "fact 4 " + "x" * 300)
        assert "KeyError" in frontend_request(view, "write", {"seq": 10 ** 9})["error"]

    def test_a_refused_write_leaves_no_row(self, context_session):
        view = ContextView(context_session)
        result = context_session.run_tool("set_context", {"label": "memory", "content": "word " * 200})
        assert result.startswith("Error: Block \"memory\" exceeds maxTokens")
        assert view.timeline == []

    def test_a_session_object_without_blocks_still_shows_the_timeline_from_the_file(self, context_session):
        context_session.set_block("memory", "kept in the file")
        bare = ContextView(Session(context_session.agent))
        assert bare.blocks == [] and [r["added"] for r in bare.timeline] == ["kept in the file"]

    def test_a_session_without_an_agent_file_is_live_but_has_no_timeline(self):
        session = Session(InMemorySessionStorage()).with_context("notes", Text("draft", writable=True))
        view = ContextView(session)
        session.set_block("notes", "final")
        assert (view.blocks[0]["content"], view.timeline, view.timeline_more) == ("final", [], False)
