"""Messages on their way into a session: chat-format messages converted, and misuse upstream accepts made visible."""

from __future__ import annotations

import warnings

import pytest

from agentlab.errors import (
    AgentlabError,
    DuplicateMessageWarning,
    InvalidMessageError,
    UnknownLeafWarning,
    UnknownRoleWarning,
)
from agentlab.session._session import Session
from tests.helpers import msg


@pytest.fixture
def session(store):
    return Session(store)


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


class TestChatShapedMessagesAreConverted:
    def test_an_openai_style_user_message_gets_an_id_and_a_text_part(self, session):
        appended = session.append_message({"role": "user", "content": "Hi there"})
        stored = session.get_message(appended.id)
        assert len(appended.id) == 32 and (stored["role"], stored["parts"]) == ("user", [{"type": "text",
                                                                                         "text": "Hi there"}])

    def test_an_openai_assistant_tool_call_and_its_tool_message_become_anthropic_blocks(self, session):
        session.append_messages([
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        ])
        history = session.get_history()
        assert [m["role"] for m in history] == ["user", "assistant", "user"]
        assert history[1]["parts"] == [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}}]
        assert history[2]["parts"] == [{"type": "tool_result", "tool_use_id": "call_1", "content": "rain"}]

    def test_an_anthropic_message_keeps_its_blocks_and_a_given_id(self, session):
        blocks = [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]
        session.append_message({"id": "a1", "role": "assistant", "content": blocks})
        assert session.get_message("a1")["parts"] == blocks

    def test_a_message_in_no_known_shape_says_which_shape_is_expected(self, session):
        with pytest.raises(InvalidMessageError, match=r"'parts': \[\{'type': 'text'"):
            session.append_message({"role": "user", "text": "Hi"})
        with pytest.raises(InvalidMessageError, match="converts OpenAI/Anthropic messages"):
            session.append_message({"role": "user", "parts": []})
        assert session.latest_leaf_id() is None


    @pytest.mark.parametrize("bad", [{"role": {}, "content": "hi"}, {"role": "user", "content": [{"type": {}}]},
                                     {"role": "user", "content": 5}, {"content": "no role"}, {"role": ["x"], "parts": []}])
    def test_a_broken_chat_message_is_a_typed_error_and_stores_nothing(self, session, bad):
        with pytest.raises(AgentlabError, match=r"role|content part|'content'") as caught:
            session.append_message(bad)
        assert isinstance(caught.value, ValueError) and session.latest_leaf_id() is None


class TestARoleTypoIsVisible:
    def test_an_unknown_role_warns_with_the_likely_meaning_and_is_stored_as_given(self, session):
        with pytest.warns(UnknownRoleWarning, match="role 'asistant'.*did you mean 'assistant'"):
            session.append_message(msg("m1", role="asistant"))
        assert session.get_message("m1")["role"] == "asistant"

    def test_each_unknown_role_of_a_batch_warns_once(self, session):
        with pytest.warns(UnknownRoleWarning) as caught:
            session.append_messages([msg("a", role="usr"), msg("b", role="usr"), msg("c", role="model")])
        assert sorted(str(w.message).split("role ")[1].split(",")[0] for w in caught) == ["'model'", "'usr'"]

    def test_the_usual_roles_are_quiet(self, session, no_warnings):
        session.append_messages([msg(r, role=r) for r in ("system", "user", "assistant", "tool")])


class TestADuplicateWithOtherContentIsVisible:
    def test_the_same_content_again_is_quiet(self, session, no_warnings):
        session.append_message(msg("m1", "same"))
        assert session.append_message(msg("m1", "same")).duplicate

    def test_other_content_under_a_stored_id_warns_and_keeps_the_first(self, session):
        session.append_message(msg("m1", "first"))
        with pytest.warns(DuplicateMessageWarning, match="update_message"):
            assert session.append_message(msg("m1", "second")).duplicate
        with pytest.warns(DuplicateMessageWarning):
            session.append_messages([msg("m2"), msg("m1", role="assistant", text="first")])  # same text, other role
        assert session.get_message("m1")["parts"][0]["text"] == "first"


class TestAnUnknownLeafIsVisible:
    def test_an_unknown_leaf_warns_and_reads_as_empty_as_upstream(self, session):
        session.append_message(msg("m1"))
        with pytest.warns(UnknownLeafWarning, match="'nope'"):
            assert session.get_history("nope") == []

    def test_known_and_falsy_leaves_are_quiet(self, session, no_warnings):
        assert session.get_history() == [] and session.get_history("") == []
        session.append_message(msg("m1"))
        assert [m["id"] for m in session.get_history("m1")] == ["m1"]
