"""ChatAgent turns through the real anthropic SDK over httpx2.MockTransport (tests/anthropic_mock.py).

Every test asserts on what was stored (messages, usage rows, memory) and on the request bodies the SDK sent.
"""

from __future__ import annotations

import json
import threading

import pytest

from agentlab import get_agent
from agentlab.chat._chat_agent import ChatAgent, Tool
from agentlab.chat._settings import ChatSettings
from agentlab.errors import (
    InvalidArgumentError,
    InvalidClientError,
    InvalidModelRequestError,
    ModelConnectionError,
    ModelOverloadedError,
    NoApiKeyError,
    TurnError,
)
from tests.anthropic_mock import (
    ScriptedClaude,
    echo,
    invalid_request,
    overloaded,
    rate_limited,
    redacted_thinking,
    reply,
    text,
    thinking,
    tool_use,
)

EPHEMERAL = {"type": "ephemeral"}


class MemoryAgent(ChatAgent):
    instructions = "You are a test assistant."

    def configure_session(self, session):
        return session.with_context("memory", description="Facts about the user", max_tokens=1100).with_cached_prompt()


def make_agent(mock: ScriptedClaude, name: str = "alice", cls: type[ChatAgent] = MemoryAgent, **client_options):
    agent = get_agent(cls, name)
    agent.use_client(mock.client(**client_options))
    return agent


def history(agent: ChatAgent) -> list[dict]:
    return agent.session.get_history()


def cache_marks(body: dict) -> list[str]:
    """Where the request carries cache_control, as readable paths."""
    marks = [f"system[{i}]" for i, b in enumerate(body.get("system") or []) if "cache_control" in b]
    marks += [f"tools[{i}]" for i, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    for i, m in enumerate(body["messages"]):
        marks += [f"messages[{i}][{j}]" for j, b in enumerate(m["content"]) if "cache_control" in b]
    return marks


def assert_tool_pairs_complete(messages: list[dict]) -> None:
    """Every stored tool_use is answered by a tool_result in the very next message."""
    for i, m in enumerate(messages):
        calls = [p["id"] for p in m["parts"] if p.get("type") == "tool_use"]
        if calls:
            assert i + 1 < len(messages), f"tool_use in the last message {m['id']}"
            answered = [p["tool_use_id"] for p in messages[i + 1]["parts"] if p.get("type") == "tool_result"]
            assert answered == calls


class TestAPlainAnswer:
    def test_the_turn_stores_the_question_and_the_whole_reply(self):
        mock = ScriptedClaude(reply(text("Hello, Alice!")))
        agent = make_agent(mock)
        turn = agent.ask("Hi, I am Alice.")
        stored = history(agent)
        assert [m["role"] for m in stored] == ["user", "assistant"]
        assert [m["id"] for m in stored] == turn.message_ids
        assert stored[0]["parts"] == [{"type": "text", "text": "Hi, I am Alice."}]
        assert stored[1]["parts"] == mock.responses[0]["content"]  # citations: null included
        assert (turn.text, turn.stop_reason, turn.steps) == ("Hello, Alice!", "end_turn", 1)

    def test_the_request_has_the_frozen_prompt_and_two_cache_breakpoints(self):
        mock = ScriptedClaude(reply(text("Hello!")))
        agent = make_agent(mock)
        agent.ask("Hi")
        body = mock.requests[0]
        frozen = agent.session.freeze_system_prompt()
        assert "MEMORY (Facts about the user)" in frozen
        assert body["system"] == [{"type": "text", "text": "You are a test assistant.\n\n" + frozen,
                                   "cache_control": EPHEMERAL}]
        assert body["model"] == "claude-haiku-5-5" and body["max_tokens"] == 4096
        assert [t["name"] for t in body["tools"]] == ["set_context"]
        assert body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "Hi", "cache_control": EPHEMERAL}]}]
        assert cache_marks(body) == ["system[0]", "messages[0][0]"]

    def test_usage_is_stored_per_call_and_summed(self):
        usage = {"input_tokens": 12, "output_tokens": 5, "cache_read_input_tokens": 300,
                 "cache_creation_input_tokens": 40}
        mock = ScriptedClaude(reply(text("a"), usage=usage), reply(text("b"), usage=usage))
        agent = make_agent(mock)
        first = agent.ask("one")
        agent.ask("two")
        assert (first.usage.input_tokens, first.usage.output_tokens) == (12, 5)
        assert (first.usage.cache_read_tokens, first.usage.cache_write_tokens) == (300, 40)
        rows = agent.sql("SELECT turn_id, step, purpose, input_tokens, cache_read_tokens, cache_write_tokens, "
                         "message_id FROM chat_usage ORDER BY seq")
        assert next(r["turn_id"] for r in rows) == first.id
        assert rows[0]["message_id"] == first.message_ids[-1]
        assert [(r["step"], r["purpose"], r["input_tokens"]) for r in rows] == [(1, "turn", 12), (1, "turn", 12)]
        total = agent.usage()
        assert (total.calls, total.input_tokens, total.cache_read_tokens, total.cache_write_tokens) == (2, 24, 600, 80)
        assert agent.usage(turn_id=first.id).calls == 1


class TestAToolLoop:
    def script(self):
        return ScriptedClaude(
            reply(text("I'll remember that."),
                  tool_use("set_context", {"label": "memory", "content": "Alice drinks black coffee.",
                                           "action": "append"})),
            reply(text("Noted: black coffee.")),
        )

    def test_set_context_runs_and_the_pair_is_stored(self):
        mock = self.script()
        agent = make_agent(mock)
        turn = agent.ask("Remember that I drink black coffee.")
        stored = history(agent)
        assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
        assert turn.message_ids == [m["id"] for m in stored]
        assert (turn.steps, turn.text, turn.stop_reason) == (2, "Noted: black coffee.", "end_turn")
        result = stored[2]["parts"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == stored[1]["parts"][1]["id"]
        assert result["content"].startswith("Written to memory.")
        assert "Alice drinks black coffee." in agent.session.get_context_block("memory").content
        assert_tool_pairs_complete(stored)

    def test_every_step_sends_the_same_frozen_prompt_and_moves_the_message_breakpoint(self):
        mock = self.script()
        agent = make_agent(mock)
        agent.ask("Remember that I drink black coffee.")
        first, second = mock.requests
        assert first["system"] == second["system"]  # frozen: the write does not reach the prompt mid-turn
        assert "black coffee" not in json.dumps(second["system"])
        assert first["tools"] == second["tools"]
        assert cache_marks(second) == ["system[0]", "messages[2][0]"]
        assert second["messages"][1]["content"] == mock.responses[0]["content"]  # sent back unchanged
        assert second["messages"][2]["content"][0]["type"] == "tool_result"
        # The second step reads the prefix the first one wrote.
        assert mock.responses[1]["usage"]["cache_read_input_tokens"] > 0

    def test_the_memory_reaches_the_prompt_only_after_a_refresh(self):
        mock = self.script()
        mock.script.extend([reply(text("ok")), reply(text("ok"))])
        agent = make_agent(mock)
        agent.ask("Remember that I drink black coffee.")
        agent.ask("What do I drink?")
        assert "black coffee" not in mock.requests[2]["system"][0]["text"]
        agent.session.refresh_system_prompt()
        agent.ask("And now?")
        assert "Alice drinks black coffee." in mock.requests[3]["system"][0]["text"]


class TestThinkingBlocks:
    def test_signatures_come_back_byte_for_byte(self):
        first = reply(thinking("The user wants their memory checked.", signature="EqQBCkYIBBgC+sig/=="),
                      redacted_thinking(), tool_use("set_context", {"label": "memory", "content": "Likes tea."}))
        mock = ScriptedClaude(first, reply(thinking("Done."), text("Saved.")), reply(text("Tea.")))
        agent = make_agent(mock)
        agent.ask("Remember I like tea.", thinking={"type": "adaptive"})
        agent.ask("What do I like?")
        sent = mock.requests[1]["messages"][1]["content"]
        assert sent == mock.responses[0]["content"]
        raw = mock.raw_requests[1].decode()
        block = json.dumps(mock.responses[0]["content"][0], separators=(",", ":"))
        assert block in raw  # same keys, same order, same signature
        assert mock.requests[0]["thinking"] == {"type": "adaptive"} and "thinking" not in mock.requests[2]
        # A later turn still carries both earlier thinking blocks unchanged.
        later = mock.requests[2]["messages"]
        assert later[1]["content"] == mock.responses[0]["content"]
        assert later[3]["content"] == mock.responses[1]["content"]

    def test_the_message_breakpoint_never_lands_on_a_thinking_block(self):
        from agentlab.chat._api import mark_last_message

        messages = [{"role": "assistant", "content": [text("a"), thinking("b")]}]
        marked = mark_last_message(messages)
        assert marked[0]["content"][0]["cache_control"] == EPHEMERAL
        assert "cache_control" not in marked[0]["content"][1]
        assert "cache_control" not in messages[0]["content"][0]  # the input is not mutated


class TestRequestBuilding:
    def test_upstream_ai_sdk_parts_become_anthropic_blocks(self):
        from agentlab.chat._api import to_api_messages

        history = [
            {"id": "1", "role": "user", "parts": [{"type": "text", "text": "weather?", "state": "done"}]},
            {"id": "2", "role": "assistant", "parts": [
                {"type": "reasoning", "text": "no signature, cannot be sent"},
                {"type": "tool-weather", "toolCallId": "c1", "input": {"city": "Oslo"}, "state": "output-available",
                 "output": {"temp": -3}},
                {"type": "text", "text": ""}]},
            {"id": "3", "role": "assistant", "parts": [{"type": "text", "text": "It is -3."}]},
        ]
        assert to_api_messages(history) == [
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": '{"temp": -3}'}]},
            {"role": "assistant", "content": [{"type": "text", "text": "It is -3."}]},
        ]

    def test_broken_tool_pairs_are_repaired_and_the_input_is_untouched(self):
        from agentlab.chat._api import MISSING_RESULT_TEXT, to_api_messages

        history = [
            {"id": "1", "role": "user", "parts": [{"type": "tool_result", "tool_use_id": "gone", "content": "x"},
                                                  {"type": "text", "text": "hi"}]},
            {"id": "2", "role": "assistant", "parts": [tool_use("t", {}, id="toolu_1")]},
            {"id": "3", "role": "user", "parts": [{"type": "text", "text": "next"}]},
        ]
        before = json.dumps(history)
        out = to_api_messages(history)
        assert out[0]["content"] == [{"type": "text", "text": "hi"}]
        assert out[2]["content"] == [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": MISSING_RESULT_TEXT, "is_error": True},
            {"type": "text", "text": "next"}]
        assert json.dumps(history) == before


class TestApiErrors:
    def test_a_rate_limit_is_retried_by_the_sdk_then_succeeds(self):
        mock = ScriptedClaude(rate_limited(), reply(text("ok")))
        agent = make_agent(mock)
        turn = agent.ask("hello")
        assert turn.text == "ok"
        assert len(mock.requests) == 2 and mock.raw_requests[0] == mock.raw_requests[1]
        assert agent.usage().calls == 1
        assert [m["role"] for m in history(agent)] == ["user", "assistant"]

    def test_overload_until_failure_is_typed_and_keeps_only_the_question(self):
        mock = ScriptedClaude(default=overloaded())
        agent = make_agent(mock, max_retries=2)
        with pytest.raises(ModelOverloadedError) as caught:
            agent.ask("hello")
        assert caught.value.status == 529 and caught.value.kind == "overloaded"
        assert "agent.retry()" in str(caught.value)
        assert len(mock.requests) == 3  # the first try and two SDK retries
        stored = history(agent)
        assert [m["role"] for m in stored] == ["user"]
        assert caught.value.turn.message_ids == [stored[0]["id"]]
        assert agent.usage().calls == 0
        mock.default = reply(text("back"))
        turn = agent.retry()
        assert turn.text == "back" and turn.start_id == stored[0]["id"]
        assert mock.requests[-1]["messages"][0]["content"][0]["text"] == "hello"
        assert [m["role"] for m in history(agent)] == ["user", "assistant"]

    def test_an_overload_inside_a_tool_loop_never_leaves_a_tool_use_alone(self):
        mock = ScriptedClaude(reply(tool_use("set_context", {"label": "memory", "content": "x"})),
                              default=overloaded())
        agent = make_agent(mock, max_retries=0)
        with pytest.raises(ModelOverloadedError) as caught:
            agent.ask("save x")
        stored = history(agent)
        assert [m["role"] for m in stored] == ["user", "assistant", "user"]
        assert_tool_pairs_complete(stored)
        assert caught.value.turn.message_ids == [m["id"] for m in stored]
        mock.default = reply(text("saved"))
        assert agent.retry().text == "saved"
        assert mock.requests[-1]["messages"][-1]["content"][0]["type"] == "tool_result"

    def test_an_invalid_request_is_not_retried(self):
        mock = ScriptedClaude(invalid_request("max_tokens: too large"))
        agent = make_agent(mock)
        with pytest.raises(InvalidModelRequestError, match="too large"):
            agent.ask("hi")
        assert len(mock.requests) == 1

    def test_retry_refuses_to_continue_an_assistant_reply(self):
        mock = ScriptedClaude(reply(text("hi")))
        agent = make_agent(mock)
        agent.ask("hello")
        with pytest.raises(TurnError, match="assistant reply"):
            agent.retry()


class TestAReplyCutOffByMaxTokens:
    def test_a_half_written_tool_call_is_stored_but_not_run(self):
        cut = reply(text("Saving that now."), tool_use("set_context", {"label": "memory"}), stop_reason="max_tokens")
        mock = ScriptedClaude(cut, reply(text("Sorry, saved it now.")))
        agent = make_agent(mock)
        turn = agent.ask("Remember: I live in Porto.")
        assert (turn.stop_reason, turn.steps) == ("max_tokens", 1)
        stored = history(agent)
        assert [m["role"] for m in stored] == ["user", "assistant", "user"]
        assert stored[1]["parts"] == mock.responses[0]["content"]
        result = stored[2]["parts"][0]
        assert result["is_error"] is True and result["content"].startswith("Not run: the reply stopped (max_tokens)")
        assert turn.tool_calls[0].ran is False
        assert agent.session.get_context_block("memory").content == ""
        assert_tool_pairs_complete(stored)
        agent.ask("Try again.")
        last_user = mock.requests[1]["messages"][-1]["content"]
        assert [b["type"] for b in last_user] == ["tool_result", "text"]  # results lead the merged user turn


class TestNoKeyOrNoNetwork:
    def test_without_a_key_only_the_question_is_stored(self, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        agent = get_agent(MemoryAgent, "nokey")
        with pytest.raises(NoApiKeyError, match="ANTHROPIC_API_KEY") as caught:
            agent.ask("hello")
        assert [m["role"] for m in history(agent)] == ["user"]
        assert caught.value.turn.message_ids == [history(agent)[0]["id"]]
        assert agent.sql("SELECT count(*) AS n FROM chat_usage")[0]["n"] == 0
        assert agent.sql("SELECT count(*) AS n FROM context_blocks")[0]["n"] == 0  # not even a frozen prompt
        mock = ScriptedClaude(reply(text("hi")))
        agent.use_client(mock.client())
        assert agent.retry().text == "hi"

    def test_without_a_network_the_error_says_what_to_do(self):
        import anthropic

        agent = get_agent(MemoryAgent, "offline")
        agent.use_client(anthropic.Anthropic(api_key="x", base_url="http://127.0.0.1:9", max_retries=0))
        with pytest.raises(ModelConnectionError, match="ANTHROPIC_API_KEY") as caught:
            agent.ask("hello")
        assert caught.value.kind == "connection"
        assert [m["role"] for m in history(agent)] == ["user"]


class TestBranches:
    def test_ask_with_a_parent_regenerates_on_a_new_branch(self):
        mock = ScriptedClaude(reply(text("A1")), reply(text("B1")), reply(text("B2")))
        agent = make_agent(mock)
        first = agent.ask("question A")
        agent.ask("question B")
        branch = agent.ask("question B, take two", parent_id=first.leaf_id)
        assert len(agent.session.get_branches(first.leaf_id)) == 2
        sent = [b["text"] for m in mock.requests[2]["messages"] for b in m["content"] if b["type"] == "text"]
        assert sent == ["question A", "A1", "question B, take two"]
        assert [m["parts"][0]["text"] for m in history(agent)] == ["question A", "A1", "question B, take two", "B2"]
        assert branch.leaf_id == agent.session.latest_leaf_id()

    def test_retry_of_an_answered_question_makes_a_sibling_reply(self):
        mock = ScriptedClaude(reply(text("first")), reply(text("second")))
        agent = make_agent(mock)
        turn = agent.ask("q")
        again = agent.retry(turn.start_id)
        replies = agent.session.get_branches(turn.start_id)
        assert [r["parts"][0]["text"] for r in replies] == ["first", "second"]
        assert again.message_ids == [replies[1]["id"]]

    def test_reset_clears_the_conversation_but_keeps_memory(self):
        mock = ScriptedClaude(reply(tool_use("set_context", {"label": "memory", "content": "Keeps bees."})),
                              reply(text("ok")), reply(text("fresh")))
        agent = make_agent(mock)
        agent.ask("Remember I keep bees.")
        agent.reset()
        agent.ask("hello again")
        assert len(mock.requests[-1]["messages"]) == 1
        assert "Keeps bees." in mock.requests[-1]["system"][0]["text"]  # clearing refreshed the prompt


class TestToolsAndSettings:
    def test_user_tools_run_and_their_failures_become_error_results(self):
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        def broken(x: str) -> str:
            raise RuntimeError("disk full")

        mock = ScriptedClaude(
            reply(tool_use("add", {"a": 2, "b": 40}), tool_use("broken", {"x": "y"}), tool_use("nope", {})),
            reply(text("42")))
        agent = make_agent(mock)
        failing = Tool("broken", "Always fails.", {"type": "object"}, lambda d: broken(**d))
        turn = agent.ask("2+40?", tools=[add, failing])
        results = history(agent)[2]["parts"]
        assert [r["content"] for r in results[:2]] == ["42", "Error: RuntimeError: disk full"]
        assert results[1]["is_error"] is True and results[2]["content"].startswith("Error: unknown tool 'nope'")
        assert [t["name"] for t in mock.requests[0]["tools"]] == ["set_context", "add", "broken"]
        assert mock.requests[0]["tools"][1]["input_schema"]["required"] == ["a", "b"]
        assert turn.text == "42"

    def test_max_steps_ends_an_endless_tool_loop_with_results_stored(self):
        mock = ScriptedClaude(default=lambda body: reply(tool_use("set_context", {"label": "memory", "content": "."})))
        agent = make_agent(mock)
        turn = agent.ask("loop", max_steps=3)
        assert (turn.stop_reason, turn.steps, len(mock.requests)) == ("max_steps", 3, 3)
        stored = history(agent)
        assert len(stored) == 7 and stored[-1]["parts"][0]["type"] == "tool_result"
        assert_tool_pairs_complete(stored)

    def test_settings_layer_from_class_to_agent_to_call(self):
        class Configured(MemoryAgent):
            chat_settings = ChatSettings(model="claude-class", max_tokens=1000, extra={"temperature": 0.2})

        mock = ScriptedClaude(default=reply(text("ok")))
        agent = make_agent(mock, cls=Configured)
        agent.ask("1")
        agent.configure(model="claude-agent", effort="low", extra={"future_option": {"on": True}})
        agent.ask("2")
        agent.ask("3", model="claude-call", max_tokens=50, thinking={"type": "enabled", "budget_tokens": 1024})
        assert [r["model"] for r in mock.requests] == ["claude-class", "claude-agent", "claude-call"]
        assert [r["max_tokens"] for r in mock.requests] == [1000, 1000, 50]
        assert mock.requests[1]["output_config"] == {"effort": "low"}
        assert mock.requests[1]["temperature"] == 0.2 and mock.requests[1]["future_option"] == {"on": True}
        assert mock.requests[2]["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        with pytest.raises(ValueError, match="max_tokens"):
            agent.configure(max_tokens=0)

    def test_a_client_factory_is_used_when_no_client_was_given(self):
        mock = ScriptedClaude(reply(text("from the factory")))

        class Factory(MemoryAgent):
            client_factory = staticmethod(lambda agent: mock.client())

        agent = get_agent(Factory, "factory")
        assert agent.ask("hi").text == "from the factory"


class TestAutomaticCompaction:
    def test_it_never_runs_between_the_steps_of_a_turn(self):
        events: list[str] = []

        def compact(history):
            events.append(f"compact({len(history)})")
            return None

        def logged(item):
            def respond(body):
                events.append(f"request({len(body['messages'])})")
                return item
            return respond

        mock = ScriptedClaude(logged(reply(tool_use("set_context", {"label": "memory", "content": "x"}))),
                              logged(reply(text("done"))))
        agent = make_agent(mock)
        agent.session.on_compaction(compact).compact_after(1)
        agent.ask("save x")
        assert events == ["compact(1)", "request(1)", "request(3)", "compact(4)"]
        assert agent.session.token_threshold == 1  # restored after the turn


class TestSettingsAndClients:
    def test_the_environment_is_a_layer_under_the_class_and_the_agent(self, monkeypatch):
        from agentlab.chat._settings import resolve_settings

        monkeypatch.setenv("AGENTLAB_MODEL", "claude-env")
        monkeypatch.setenv("AGENTLAB_MAX_TOKENS", "777")
        assert (resolve_settings().model, resolve_settings().max_tokens) == ("claude-env", 777)
        layered = resolve_settings(ChatSettings(model="claude-class"), ChatSettings(max_tokens=5))
        assert (layered.model, layered.max_tokens, layered.max_steps) == ("claude-class", 5, 8)
        monkeypatch.setenv("AGENTLAB_MAX_TOKENS", "lots")
        with pytest.raises(ValueError, match="AGENTLAB_MAX_TOKENS"):
            resolve_settings()

    def test_a_built_client_uses_the_key_and_base_url_and_never_shows_the_key(self, monkeypatch):
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
        agent = get_agent(MemoryAgent, "built").configure(base_url="http://127.0.0.1:9", max_retries=0)
        other = get_agent(MemoryAgent, "built-too").configure(base_url="http://127.0.0.1:9", max_retries=0)
        assert agent.client is other.client  # one connection pool for agents with the same settings
        assert str(agent.client.base_url).startswith("http://127.0.0.1:9")
        with pytest.raises(ModelConnectionError) as caught:
            agent.ask("hello")
        assert "sk-ant-test-secret" not in str(caught.value) and "sk-ant-test-secret" not in repr(agent.settings)


class TestClientsThatAreNotClients:
    @pytest.mark.parametrize("client", ["sk-ant-api03-secret", 42, object()])
    def test_use_client_refuses_at_once_and_keeps_the_old_client(self, client):
        mock = ScriptedClaude(reply(text("still here")))
        agent = make_agent(mock, "clients")
        with pytest.raises(InvalidClientError, match="use_client") as caught:
            agent.use_client(client)
        with pytest.raises(InvalidClientError):
            agent.client = client
        if isinstance(client, str):
            assert "configure(api_key=...)" in str(caught.value) and client not in str(caught.value)
        assert agent.ask("hello").text == "still here"


class TestARetriedMemoryWrite:
    def test_the_same_text_is_not_stored_twice_and_the_result_says_so(self):
        write = tool_use("set_context", {"label": "memory", "content": "I take my coffee black.", "action": "append"})
        mock = ScriptedClaude(reply(write), reply(text("Noted.")), reply(write), reply(text("Noted again.")))
        agent = make_agent(mock, "retry-memory")
        turn = agent.ask("Remember that I take my coffee black.")
        again = agent.retry(turn.start_id)
        assert agent.session.get_context_block("memory").content == "I take my coffee black."
        assert turn.tool_calls[0].output.startswith("Written to memory.")
        assert again.tool_calls[0].output.startswith("Unchanged: memory already holds this text")
        assert not again.tool_calls[0].is_error

    def test_new_text_and_a_replace_still_write(self):
        session = get_agent(MemoryAgent, "writes").session
        run = session.run_tool
        assert run("set_context", {"label": "memory", "content": "a\nb", "action": "append"}).startswith("Written")
        assert run("set_context", {"label": "memory", "content": "b", "action": "append"}).startswith("Unchanged")
        assert run("set_context", {"label": "memory", "content": "\na\nb\n", "action": "append"}).startswith("Unchanged")
        assert run("set_context", {"label": "memory", "content": "a b", "action": "append"}).startswith("Written")
        assert run("set_context", {"label": "memory", "content": "b"}).startswith("Written")  # replace: as upstream
        assert session.get_context_block("memory").content == "b"


class TestSettingValues:
    @pytest.mark.parametrize(("changes", "named"), [
        ({"model": "claude-\ud800"}, "model"), ({"model": ""}, "model"), ({"model": 5}, "model"),
        ({"effort": "hi\udfff"}, "effort"), ({"base_url": "http://\ud800"}, "base_url"),
        ({"timeout": float("nan")}, "timeout"), ({"timeout": 0}, "timeout"), ({"timeout": -1.0}, "timeout"),
    ])
    def test_configure_refuses_a_value_that_cannot_be_sent_and_keeps_the_old_settings(self, changes, named):
        agent = get_agent(MemoryAgent, "settings")
        before = agent.settings
        with pytest.raises(InvalidArgumentError, match=named):
            agent.configure(**changes)
        assert agent.settings == before

    def test_a_lone_surrogate_in_a_call_model_stores_no_question_and_sends_nothing(self):
        mock = ScriptedClaude(reply(text("never sent")))
        agent = make_agent(mock, "surrogate")
        with pytest.raises(InvalidArgumentError, match="model"):
            agent.ask("hello", model="claude-\udc00")
        with pytest.raises(InvalidArgumentError, match="model"):
            agent.retry(model="claude-\udc00")
        assert history(agent) == [] and mock.requests == []


class TestTwoUsers:
    def test_neither_request_ever_holds_the_other_users_history_or_memory(self):
        mock = ScriptedClaude(default=echo)
        client = mock.client()
        alice = get_agent(MemoryAgent, "alice").use_client(client)
        bob = get_agent(MemoryAgent, "bob").use_client(client)
        alice.session.context.set_block("memory", "Alice's locker code is 4711.")
        bob.session.context.set_block("memory", "Bob's locker code is 1337.")
        errors: list[BaseException] = []

        def talk(agent: ChatAgent, who: str) -> None:
            try:
                for i in range(6):
                    agent.ask(f"{who} question {i}")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=talk, args=(alice, "alice")),
                   threading.Thread(target=talk, args=(bob, "bob"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(mock.requests) == 12
        for body in mock.requests:
            dumped = json.dumps(body)
            owner, other = ("alice", "bob") if "alice question" in dumped else ("bob", "alice")
            assert f"{other} question" not in dumped
            assert ("1337" if owner == "alice" else "4711") not in dumped
            assert ("4711" if owner == "alice" else "1337") in dumped
        assert len(history(alice)) == 12 and len(history(bob)) == 12


class TestTheCommandLine:
    def test_without_a_key_it_says_how_to_configure_one_and_creates_nothing(self, monkeypatch, capsys,
                                                                           agentlab_home):
        from agentlab.cli import main

        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        assert main(["chat", "bob"]) == 2
        err = capsys.readouterr().err
        assert "export ANTHROPIC_API_KEY=" in err and "--offline" in err
        assert not agentlab_home.exists()

    def test_an_offline_chat_remembers_across_runs(self, monkeypatch, agentlab_home):
        import argparse
        import io

        from agentlab.chat import cli as chat_cli

        args = argparse.Namespace(name="carol", data=None, model=None, max_tokens=None, offline=True)
        out = io.StringIO()
        code = chat_cli.run(args, stdin=io.StringIO("Remember that I grow tomatoes\n/usage\n/quit\n"), out=out)
        assert code == 0
        printed = out.getvalue()
        assert "[set_context] Written to memory." in printed and "calls 2" in printed
        agent = get_agent(chat_cli.TerminalAgent, "carol")
        assert "I grow tomatoes." in agent.session.refresh_system_prompt()  # the memory was stored
        assert [m["role"] for m in agent.session.get_history()] == ["user", "assistant", "user", "assistant"]


@pytest.mark.slow
class TestTheQuickstartNotebook:
    def test_it_runs_headless_against_the_offline_model(self, monkeypatch, tmp_path):
        from pathlib import Path

        import nbformat
        from nbclient import NotebookClient

        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        path = Path(__file__).parent.parent / "notebooks" / "01-quickstart.ipynb"
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored without outputs
        client = NotebookClient(nb, timeout=180, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
        text_out = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert "the offline stand-in" in text_out
        assert "tool set_context" in text_out
        assert "2 replies to the question" in text_out
        assert "compacted:" in text_out
