"""Conversations in and out of a session as OpenAI and Anthropic message lists (JSON and JSONL files)."""

from __future__ import annotations

import json

import pytest

from agentlab import Agent, get_agent
from agentlab.errors import ConversationFormatError
from agentlab.session._formats import detect_format
from agentlab.session._session import Session
from tests.helpers import msg

OPENAI = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo and Rome?"},
    {"role": "assistant", "content": "Checking both.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "rain, 4 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "sun, 19 C"},
    {"role": "assistant", "content": "Oslo: rain. Rome: sun."},
    {"role": "user", "content": [{"type": "text", "text": "And this?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}}]},
    {"role": "assistant", "content": "A chart."},
]

ANTHROPIC = [
    {"role": "user", "content": [{"type": "text", "text": "Look up pears."}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should search.", "signature": "EqQBCkYIBxgCKkA"},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "pears"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": [{"type": "text", "text": "Pears are pomes."}]}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Pears are pomes.", "citations": None}]},
]


def normalized_openai(messages: list[dict]) -> list[dict]:
    """OpenAI messages with tool-call arguments parsed, so JSON spacing does not matter."""
    out = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


@pytest.fixture
def agent():
    return get_agent(Agent, "conversations")


@pytest.fixture
def session(agent):
    return Session(agent, "imported")


class TestImportingOpenAI:
    def test_order_roles_and_tool_pairs_are_kept(self, session):
        appended = session.import_conversation(OPENAI)
        history = session.get_history()
        assert [a.id for a in appended] == [m["id"] for m in history]
        assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant", "user",
                                                "assistant"]
        uses = [p["id"] for p in history[2]["parts"] if p["type"] == "tool_use"]
        results = [p["tool_use_id"] for p in history[3]["parts"]]
        assert uses == results == ["call_1", "call_2"]  # the two tool messages became one user message
        assert history[2]["parts"][0] == {"type": "text", "text": "Checking both."}
        assert history[5]["parts"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "iVBORw0K"}}

    def test_it_round_trips_through_a_jsonl_file(self, session, tmp_path):
        source = tmp_path / "chat.jsonl"
        source.write_text("".join(json.dumps(m) + "\n" for m in OPENAI) + "\n", encoding="utf-8")
        session.import_conversation(source)
        written = session.export_conversation(tmp_path / "out.jsonl", format="openai")
        lines = [json.loads(line) for line in written.read_text(encoding="utf-8").splitlines()]
        assert normalized_openai(lines) == normalized_openai(OPENAI)

    def test_a_new_session_imported_from_an_export_has_the_same_parts(self, agent, session, tmp_path):
        session.import_conversation(OPENAI)
        path = session.export_conversation(tmp_path / "out.json", format="openai")
        again = Session(agent, "again")
        again.import_conversation(path)
        assert [m["parts"] for m in again.get_history()] == [m["parts"] for m in session.get_history()]


class TestImportingAnthropic:
    def test_blocks_are_kept_as_they_are_and_round_trip(self, session, tmp_path):
        session.import_conversation(ANTHROPIC)
        assert [m["parts"] for m in session.get_history()] == [m["content"] for m in ANTHROPIC]
        path = session.export_conversation(tmp_path / "out.jsonl", format="anthropic")
        assert [json.loads(line) for line in path.read_text().splitlines()] == ANTHROPIC

    def test_a_request_body_with_a_system_prompt(self, session):
        session.import_conversation({"system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]})
        assert [(m["role"], m["parts"][0]["text"]) for m in session.get_history()] == [("system", "Be brief."),
                                                                                      ("user", "hi")]

    def test_export_to_openai_drops_thinking_and_splits_tool_results(self, session):
        session.import_conversation(ANTHROPIC)
        exported = session.export_conversation(format="openai")
        assert exported[1] == {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "pears"}'}}]}
        assert exported[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Pears are pomes."}


class TestWhatIsExported:
    def test_a_chosen_branch_and_the_compacted_view(self, session):
        session.append_messages([msg("q"), msg("a1", role="assistant"), msg("q2"), msg("a2", role="assistant")])
        session.append_message(msg("b1", role="assistant"), parent_id="q")
        assert [m["content"] for m in session.export_conversation(leaf_id="a2")] == ["q", "a1", "q2", "a2"]
        assert [m["content"] for m in session.export_conversation()] == ["q", "b1"]
        session.add_compaction("They asked twice.", "q", "a1")
        compacted = session.export_conversation(leaf_id="a2", compacted=True)
        assert [m["content"] for m in compacted] == ["They asked twice.", "q2", "a2"]

    def test_ai_sdk_tool_parts_become_a_call_and_its_result(self, session):
        session.append_message({"id": "a", "role": "assistant", "parts": [
            {"type": "tool-search", "toolCallId": "c1", "toolName": "search", "state": "output-available",
             "input": {"q": "x"}, "output": {"hits": 2}}]})
        assert session.export_conversation(format="anthropic") == [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": '{"hits": 2}'}]}]


class TestBadInputStoresNothing:
    @pytest.mark.parametrize("messages, problem", [
        ([{"role": "tool", "tool_call_id": "nope", "content": "x"}], "answers no earlier"),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                "function": {"name": "f", "arguments": "{oops"}}]}], "not a JSON object"),
        ([{"role": "user", "content": "ok"}, {"content": "no role"}], "Message 1"),
        ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}], "not supported"),
        ([{"role": "function", "name": "f", "content": "x"}], "legacy"),
        ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}], "answers no earlier"),
        ([{"role": "tool", "tool_call_id": "c", "content": "x"},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c"}]}], "mix OpenAI"),
    ])
    def test_a_bad_conversation_is_refused_before_anything_is_stored(self, session, messages, problem):
        session.append_message(msg("before"))
        with pytest.raises(ConversationFormatError, match=problem):
            session.import_conversation(messages)
        assert [m["id"] for m in session.get_history()] == ["before"]

    def test_a_broken_jsonl_line_names_the_line(self, session, tmp_path):
        path = tmp_path / "chat.jsonl"
        path.write_text('{"role": "user", "content": "a"}\n{not json\n', encoding="utf-8")
        with pytest.raises(ConversationFormatError, match="line 2"):
            session.import_conversation(path)
        assert session.get_history() == []

    def test_unknown_formats_and_parts_the_target_cannot_hold(self, session, tmp_path):
        with pytest.raises(ConversationFormatError, match="format must be one of"):
            session.import_conversation([], format="gemini")
        session.append_message({"id": "d", "role": "user", "parts": [{"type": "document", "source": {}}]})
        target = tmp_path / "out.jsonl"
        with pytest.raises(ConversationFormatError, match="'document' block"):
            session.export_conversation(target, format="openai")
        assert not target.exists()


class TestFormatDetection:
    def test_text_only_lists_read_the_same_either_way(self):
        assert detect_format([{"role": "user", "content": "hi"}]) == "openai"
        assert detect_format(ANTHROPIC) == "anthropic" and detect_format(OPENAI) == "openai"
