"""How deep a message's JSON may nest: every write refuses more than MAX_MESSAGE_NESTING levels, and every reader
handles a message at the limit, with room to spare on the call stack."""

from __future__ import annotations

import json
from typing import Any

import pytest

import agentlab
from agentlab import Agent, get_agent
from agentlab.chat._api import to_api_messages
from agentlab.context._tokens import estimate_message_tokens
from agentlab.errors import InvalidMessageError
from agentlab.session._messages import MAX_MESSAGE_NESTING
from agentlab.session._session import Session
from agentlab.views._branch_tree import BranchTree
from tests.reliability.snapshot import snapshot


def nesting(value: Any) -> int:
    """Levels of objects and arrays, counted independently of agentlab (the message itself is level 1)."""
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    return 0


def dicts(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


def lists(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def conversation(depth: int, prefix: str = "") -> dict[str, list[dict[str, Any]]]:
    """Conversations whose deepest message nests exactly ``depth`` levels, one per place a deep value can sit."""
    inner = depth - 3  # the message, its parts list and the part are the first three levels
    call = {"id": f"{prefix}ask", "role": "user", "parts": [{"type": "text", "text": "look it up"}]}

    def tool_use(value):
        return {"id": f"{prefix}use", "role": "assistant",
                "parts": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": value}]}

    return {
        "text part field": [{"id": f"{prefix}deep", "role": "user",
                             "parts": [{"type": "text", "text": "hi", "extra": dicts(inner)}]}],
        "tool_use input": [call, tool_use(dicts(inner))],
        "tool_result content": [call, tool_use({}), {"id": f"{prefix}result", "role": "user", "parts": [
            {"type": "tool_result", "tool_use_id": "t1", "content": lists(inner)}]}],
        "AI-SDK tool output": [call, {"id": f"{prefix}sdk", "role": "assistant", "parts": [
            {"type": "tool-lookup", "toolCallId": "c1", "state": "output-available", "input": {},
             "output": dicts(inner)}]}],
    }


SHAPES = list(conversation(10))


def with_frames_in_use(frames: int, fn):
    """Call ``fn`` with ``frames`` more Python frames on the stack, as a notebook cell or widget handler has."""
    if frames == 0:
        return fn()
    return with_frames_in_use(frames - 1, fn)


def every_reader(agent, session: Session, tmp_path) -> dict[str, Any]:
    def export_and_import():
        folder = tmp_path / "export"
        agent.export(folder)
        copy = agentlab.import_(folder, name="imported")
        try:
            return Session(copy, session.session_id).get_history()
        finally:
            copy.close()

    last = session.get_history()[-1]["id"]
    return {
        "history": session.get_history,
        "micro-compacted": lambda: session.get_micro_compacted_history(keep_recent=0, max_tool_output_chars=20,
                                                                       max_text_chars=1),
        "api messages": lambda: to_api_messages(session.get_history()),
        "estimate": lambda: (estimate_message_tokens(session.get_history()), session.estimate_tokens()),
        "frames": lambda: (session.messages_df(), session.tool_calls_df(), session.tokens_df(),
                           session.branches_df()),
        "search": lambda: session.search("look", mode="any"),
        "widget": lambda: json.dumps(BranchTree(session).handle_request("message", {"id": last})),
        "export and import": export_and_import,
    }


class TestAtTheLimit:
    @pytest.mark.parametrize("shape", SHAPES)
    def test_every_reader_handles_a_message_at_the_limit_with_300_frames_in_use(self, tmp_path, shape):
        agent = get_agent(Agent, "nested")
        session = Session(agent)
        messages = conversation(MAX_MESSAGE_NESTING)[shape]
        assert max(nesting(m) for m in messages) == MAX_MESSAGE_NESTING
        session.append_messages(messages)
        stored = session.get_history()
        assert [{k: v for k, v in m.items() if k != "created_at"} for m in stored] == messages
        for name, read in every_reader(agent, session, tmp_path).items():
            result = with_frames_in_use(300, read)
            if name in ("history", "export and import"):
                assert result == stored, name
        micro = session.get_micro_compacted_history(keep_recent=0, max_tool_output_chars=20, max_text_chars=1)
        assert [m["id"] for m in micro] == [m["id"] for m in stored]

    @pytest.mark.parametrize("write", ["append_message", "update_message"])
    def test_single_writes_accept_a_message_at_the_limit(self, store, write):
        session = Session(store)
        message = conversation(MAX_MESSAGE_NESTING)["text part field"][0]
        if write == "update_message":
            session.append_message({**message, "parts": []})
            session.update_message(message)
        else:
            session.append_message(message)
        assert session.get_message(message["id"])["parts"] == message["parts"]

    def test_brackets_inside_text_and_wide_values_are_not_depth(self, store):
        session = Session(store)
        session.append_message({"id": "code", "role": "user", "parts": [{"type": "text", "text": "{[" * 10_000}]})
        session.append_message({"id": "wide", "role": "user",
                                "parts": [{"type": "data", "rows": [{"n": [i]} for i in range(5_000)]}]})
        assert [m["id"] for m in session.get_history()] == ["code", "wide"]


class TestOverTheLimit:
    def setup_agent(self):
        agent = get_agent(Agent, "too-deep")
        session = Session(agent)
        session.append_messages([{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}])
        return agent, session

    @pytest.mark.parametrize("shape", SHAPES)
    def test_every_write_refuses_one_level_more_and_stores_nothing(self, shape):
        agent, session = self.setup_agent()
        messages = conversation(MAX_MESSAGE_NESTING + 1, "x-")[shape]
        deep = messages[-1]
        assert nesting(deep) == MAX_MESSAGE_NESTING + 1
        before = snapshot(agent)
        writes = [lambda: session.append_messages(messages), lambda: session.append_message(deep),
                  lambda: session.update_message({**deep, "id": "m1"})]
        for write in writes:
            with pytest.raises(InvalidMessageError, match=f"more than {MAX_MESSAGE_NESTING} levels"):
                write()
            assert snapshot(agent) == before
        assert [m["id"] for m in session.get_history()] == ["m1"]

    def test_a_bulk_import_with_one_deep_message_stores_none_of_them(self):
        agent, session = self.setup_agent()
        before = snapshot(agent)
        batch = [{"id": f"ok{i}", "role": "user", "parts": [{"type": "text", "text": "fine"}]} for i in range(3)]
        batch.insert(2, conversation(MAX_MESSAGE_NESTING + 1)["text part field"][0])
        with pytest.raises(InvalidMessageError, match="'deep'"):
            session.append_messages(batch)
        assert snapshot(agent) == before
