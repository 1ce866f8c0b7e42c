"""The write-time row size limit (upstream's enforceRowSizeLimit / ROW_MAX_BYTES), alone and in a ChatAgent turn."""

from __future__ import annotations

import copy

import pytest

from agentlab import get_agent
from agentlab.chat._chat_agent import ChatAgent
from agentlab.errors import RowSizeWarning
from agentlab.session._row_size_limit import ROW_MAX_BYTES, enforce_row_size_limit, row_bytes
from tests.anthropic_mock import ScriptedClaude, reply, text, tool_use

BIG = "x" * 2_000_000


def tool_result_message(content) -> dict:
    return {"id": "u1", "role": "user", "parts": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                   "content": content}]}


class TestAMessageThatFits:
    def test_is_returned_as_it_is(self, recwarn):
        message = tool_result_message("x" * 100_000)
        assert enforce_row_size_limit(message) is message and len(recwarn) == 0


class TestToolOutputsAreTruncatedFirst:
    def test_an_anthropic_tool_result_keeps_its_pair_and_says_what_was_cut(self):
        message = tool_result_message(BIG)
        original = copy.deepcopy(message)
        with pytest.warns(RowSizeWarning, match=r"'u1' is 2,000,0\d\d bytes.*1 tool output"):
            shrunk = enforce_row_size_limit(message)
        part = shrunk["parts"][0]
        assert part["tool_use_id"] == "toolu_1" and part["type"] == "tool_result"
        assert part["content"] == "x" * (1000 - 29) + "... [truncated 2000000 chars]"
        assert shrunk["metadata"] == {"compactedToolOutputs": ["toolu_1"]}
        assert message == original and row_bytes(shrunk) <= ROW_MAX_BYTES

    def test_text_blocks_of_a_tool_result_share_the_budget(self):
        message = tool_result_message([{"type": "text", "text": BIG}, {"type": "text", "text": "tail"}])
        with pytest.warns(RowSizeWarning):
            blocks = enforce_row_size_limit(message)["parts"][0]["content"]
        assert [len(b["text"]) for b in blocks] == [1000]

    def test_an_ai_sdk_tool_output_keeps_its_shape(self):
        message = {"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-fetch", "toolCallId": "c1", "state": "output-available", "input": {},
             "output": {"status": 200, "body": BIG}}]}
        with pytest.warns(RowSizeWarning):
            shrunk = enforce_row_size_limit({**message, "metadata": {"model": "m"}})
        output = shrunk["parts"][0]["output"]
        assert output["status"] == 200 and output["body"].endswith("... [truncated 2000000 chars]")
        assert shrunk["metadata"] == {"model": "m", "compactedToolOutputs": ["c1"]}


class TestThenTexts:
    def test_long_texts_are_replaced_oldest_first_until_the_message_fits(self):
        first, second = "a" * 1_000_000, "b" * 1_000_000
        message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": first},
                                                         {"type": "text", "text": second}]}
        with pytest.warns(RowSizeWarning, match="0 tool output.*1 text part"):
            shrunk = enforce_row_size_limit(message)
        assert shrunk["parts"][0]["text"] == f"[Text truncated for storage (1000000 chars). First 500 chars: {'a' * 500}...]"
        assert shrunk["parts"][1]["text"] == second
        assert shrunk["metadata"] == {"compactedTextParts": [0]}


class Fetcher(ChatAgent):
    def get_tools(self):
        def fetch(url: str) -> str:
            """Fetch a page."""
            return BIG

        return [fetch]


class TestAChatTurn:
    def test_a_huge_tool_output_is_stored_truncated_and_sent_so_next_time(self):
        mock = ScriptedClaude(reply(tool_use("fetch", {"url": "https://example.org"})), reply(text("done")))
        agent = get_agent(Fetcher, "fetcher")
        agent.use_client(mock.client())
        with pytest.warns(RowSizeWarning, match="1 tool output"):
            agent.ask("Fetch it.")
        history = agent.session.get_history()
        result = history[2]["parts"][0]
        assert result["tool_use_id"] == history[1]["parts"][0]["id"]
        assert len(result["content"]) == 1000 and history[2]["metadata"]["compactedToolOutputs"] == [result["tool_use_id"]]
        assert mock.requests[1]["messages"][2]["content"][0]["content"] == result["content"]
