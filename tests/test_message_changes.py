"""Updates of unknown ids, upstream's rewrite without side effects, and the message-change listener."""

from __future__ import annotations

import logging

import pytest

from agentlab import Agent, get_agent
from agentlab.errors import UnknownMessageError
from agentlab.session import InMemorySessionStorage
from agentlab.session._compact_function import create_compact_function
from agentlab.session._session import Session
from tests.helpers import msg


class Recording(Agent):
    """Errors from listeners land here instead of as warnings."""

    def on_start(self) -> None:
        self.errors: list[BaseException] = []

    def on_error(self, error: BaseException) -> None:
        self.errors.append(error)


@pytest.fixture(params=["duckdb", "memory"])
def session(request):
    if request.param == "memory":
        return Session(InMemorySessionStorage())
    return Session(get_agent(Recording, "changes"))


def listen(session):
    events = []
    session.on_messages_changed(events.append)
    return events


class TestUpdatingAnUnknownId:
    def test_update_and_rewrite_refuse_an_id_that_is_not_stored(self, session):
        session.append_message(msg("m1"))
        for call in (session.update_message, session.rewrite_message):
            with pytest.raises(UnknownMessageError, match="'ghost'"):
                call(msg("ghost"))
        assert [m["id"] for m in session.get_history()] == ["m1"]


class TestRewriteMessage:
    def test_it_changes_the_row_and_tells_the_listeners_but_sends_no_status(self, session):
        session.append_message(msg("m1"))
        status, changes = [], listen(session)
        session.subscribe(status.append)
        session.rewrite_message(msg("m1", "evicted"))
        assert session.get_message("m1")["parts"][0]["text"] == "evicted"
        assert status == [] and [(e["type"], e["message"]["id"]) for e in changes] == [("update", "m1")]

    def test_update_message_sends_both(self, session):
        session.append_message(msg("m1"))
        status, changes = [], listen(session)
        session.subscribe(status.append)
        session.update_message(msg("m1", "edited"))
        assert [e["type"] for e in status] == ["updated"] and [e["type"] for e in changes] == ["update"]


class TestTheMessageChangeListener:
    def test_appends_updates_deletes_and_clears_arrive_in_upstreams_shapes(self, session):
        changes = listen(session)
        session.append_message(msg("m1"))
        session.append_message(msg("m1"))
        session.append_messages([msg("m2"), msg("m3")], parent_id="m1")
        session.update_message(msg("m2", "x"))
        session.delete_messages(["m3"])
        session.clear_messages()
        assert [(e["type"], e.get("message", {}).get("id"), e.get("parent_id"), e.get("inserted"))
                for e in changes[:4]] == [("append", "m1", None, True), ("append", "m1", None, False),
                                          ("append", "m2", "m1", True), ("append", "m3", "m2", True)]
        assert [e["type"] for e in changes[4:]] == ["update", "delete", "clear"]
        assert changes[5]["message_ids"] == ["m3"]

    def test_an_append_that_compacts_is_announced_as_a_compaction_only(self, session):
        session.append_messages([msg(f"m{i}", "word " * 10) for i in range(3)])
        session.on_compaction(create_compact_function(lambda p: "summary", protect_head=0, min_tail_messages=1,
                                                      tail_token_budget=1)).compact_after(20)
        changes = listen(session)
        session.append_message(msg("m3", "word " * 10))
        assert changes == [{"type": "compact"}] and len(session.get_compactions()) == 1

    def test_a_manual_compaction_is_announced(self, session):
        session.append_messages([msg(f"m{i}", "word " * 10) for i in range(4)])
        session.on_compaction(create_compact_function(lambda p: "summary", protect_head=0, min_tail_messages=1,
                                                      tail_token_budget=1))
        changes = listen(session)
        assert session.compact() is not None
        assert changes == [{"type": "compact"}]

    def test_unsubscribing_stops_the_events(self, session):
        changes = []
        stop = session.on_messages_changed(changes.append)
        session.append_message(msg("m1"))
        stop()
        session.append_message(msg("m2"))
        assert [e["message"]["id"] for e in changes] == ["m1"]

    def test_a_listener_that_raises_never_fails_the_write(self, session, caplog):
        def broken(event):
            raise RuntimeError("listener bug")

        session.on_messages_changed(broken)
        with caplog.at_level(logging.WARNING, logger="agentlab.session"):
            session.append_message(msg("m1"))
        assert session.get_message("m1") is not None
        reported = session.agent.errors if session.agent is not None else [r.getMessage() for r in caplog.records]
        assert "listener bug" in str(reported)

    def test_inside_a_transaction_the_events_wait_for_the_commit(self):
        session = Session(get_agent(Recording, "tx"))
        changes = listen(session)
        with session.store.transaction():
            session.append_message(msg("m1"))
            assert changes == []
        assert [e["type"] for e in changes] == ["append"]
