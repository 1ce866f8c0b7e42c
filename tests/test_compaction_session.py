"""Compaction through the Session: compact(), the automatic trigger, errors and records (spec 6.2-6.4, 16 cases 9-12)."""

from __future__ import annotations

import pytest

from agentlab.agent._agent import Agent, get_agent
from agentlab.errors import CompactionError, DuplicateMessageWarning, InvalidArgumentError
from agentlab.session._compact_function import create_compact_function
from agentlab.session._session import Session
from tests.helpers import msg, texts


def fixed(from_id: str, to_id: str, summary: str = "S"):
    calls: list[list[str]] = []

    def fn(history):
        calls.append([m["id"] for m in history])
        return {"from_message_id": from_id, "to_message_id": to_id, "summary": summary}

    fn.calls = calls  # type: ignore[attr-defined]  # read back by the tests
    return fn


@pytest.fixture
def session(store):
    return Session(store)


class Chat(Agent):
    pass


class TestCompact:
    def test_without_a_function_it_is_a_typed_error(self, session):
        session.append_message(msg("a"))
        with pytest.raises(CompactionError, match=r"No compaction function registered. Call on_compaction\(\) first."):
            session.compact()

    def test_iterative_compaction_widens_from(self, session):  # spec 16 case 9
        session.append_messages([msg(f"m{i}") for i in range(10)])
        session.add_compaction("first", "m1", "m5")
        result = session.on_compaction(fixed("m6", "m8", "second")).compact()
        assert (result["from_message_id"], result["to_message_id"]) == ("m1", "m8")
        rows = session.get_compactions()
        assert [(c.from_message_id, c.to_message_id) for c in rows] == [("m1", "m5"), ("m1", "m8")]
        assert texts(session.get_history()) == ["m0", "second", "m9"]

    def test_an_explicit_branch_is_compacted_and_sibling_overlays_are_not_extended(self, session):  # case 10
        session.append_messages([msg("m0"), msg("m1"), msg("m2")])
        session.append_message(msg("old-assistant", role="assistant"), "m0")
        session.add_compaction("sibling", "m0", "old-assistant")
        fn = fixed("m1", "m1")
        result = session.on_compaction(fn).compact("m2")
        assert fn.calls == [["m0", "m1", "m2"]]
        assert (result["from_message_id"], result["to_message_id"]) == ("m1", "m1")
        assert session.get_compactions()[-1].leaf_id == "m2"

    def test_originals_stay_and_the_record_says_what_happened(self, session, store):
        session.append_messages([msg(f"m{i}", "word " * 20) for i in range(6)])
        before = session.estimate_tokens()
        session.on_compaction(fixed("m1", "m4", "short")).compact()
        record = session.get_compactions()[0]
        assert record.messages_covered == 4
        assert record.tokens_before == before
        assert record.tokens_after == session.estimate_tokens() < before
        assert record.trigger == "manual" and record.leaf_id == "m5"
        assert store.scalar("SELECT count(*) FROM messages") == 6

    def test_a_to_id_off_the_branch_is_a_noop(self, session):
        session.append_messages([msg("r"), msg("a")])
        session.append_message(msg("b"), "r")
        assert session.on_compaction(fixed("r", "a")).compact() is None
        assert session.get_compactions() == []
        assert [e["kind"] for e in session.get_compaction_events()] == ["noop"]

    def test_a_function_returning_none_is_a_noop(self, session):
        session.append_message(msg("a"))
        assert session.on_compaction(lambda history: None).compact() is None
        assert session.get_compactions() == []

    def test_the_session_counter_is_passed_when_the_function_takes_it(self, store):
        seen = []

        def counter(*, messages, system_prompt, context_blocks):
            return 10 * len(messages)

        def fn(history, token_counter=None):
            seen.append(token_counter)
            return None

        session = Session(store, token_counter=counter).on_compaction(fn)
        session.append_message(msg("a"))
        session.compact()
        assert seen == [counter]
        assert session.estimate_tokens() == 10

    def test_the_reference_compactor_summarises_the_middle(self, session):
        session.append_messages([msg(f"m{i}", f"turn {i} " * 30, role="user" if i % 2 == 0 else "assistant")
                                 for i in range(12)])
        prompts = []

        def summarize(prompt):
            prompts.append(prompt)
            return "Summary of the middle."

        fn = create_compact_function(summarize, protect_head=2, tail_token_budget=100, min_tail_messages=2)
        result = session.on_compaction(fn).compact()
        assert result["from_message_id"] == "m2"
        history = session.get_history()
        assert texts(history)[:3] == ["m0", "m1", "Summary of the middle."]
        assert prompts[0].startswith("Create a concise summary")
        again = session.compact()  # the second pass updates the same growing overlay
        assert again is None or again["from_message_id"] == "m2"


class TestSummarizeErrors:
    def test_are_not_swallowed(self, session):
        seen = []

        def boom(history):
            raise RuntimeError("model down")

        session.on_compaction(boom).on_compaction_error(seen.append)
        events = []
        session.subscribe(events.append)
        session.append_messages([msg("a"), msg("b")])
        assert session.compact() is None
        assert [type(e) for e in seen] == [RuntimeError] and str(seen[0]) == "model down"
        assert [e["type"] for e in events][-2:] == ["compacting", "error"]
        row = session.get_compaction_events()[-1]
        assert (row["kind"], row["error_type"], row["error"], row["trigger"]) == (
            "error", "RuntimeError", "model down", "manual")
        assert session.get_compactions() == []

    def test_a_malformed_result_counts_as_an_error(self, session):
        seen = []
        session.on_compaction(lambda h: {"summary": 3}).on_compaction_error(seen.append)
        session.append_message(msg("a"))
        assert session.compact() is None
        assert isinstance(seen[0], CompactionError)

    def test_the_error_frame_reaches_connections(self):
        agent = get_agent(Chat, "errors")
        frames = []
        agent.connect(on_message=frames.append)
        session = Session.create(agent).on_compaction(lambda h: 1 / 0).on_compaction_error(lambda e: None)
        session.append_message(msg("a"))
        frames.clear()
        session.compact()
        assert frames[-1] == {"type": "cf_agent_session_error", "error": "division by zero"}


class TestFrames:
    def test_compact_sends_exactly_two_frames(self):  # spec 16 case 12
        agent = get_agent(Chat, "two-frames")
        frames = []
        agent.connect(on_message=frames.append)
        session = Session.create(agent).on_compaction(fixed("m1", "m3"))
        session.append_messages([msg(f"m{i}", "some words here") for i in range(6)])
        frames.clear()
        session.compact()
        assert [f["phase"] for f in frames] == ["compacting", "idle"]
        assert frames[0]["type"] == "cf_agent_session" and frames[0]["tokenEstimate"] > 0
        assert frames[1]["compacted"]["tokensBefore"] == frames[0]["tokenEstimate"]


class TestAutomaticTrigger:
    def test_the_system_prompt_counts_towards_the_threshold(self, store):  # spec 16 case 11
        fn = fixed("m0", "m0")
        session = Session(store, system_prompt_provider=lambda: "x" * 400).on_compaction(fn).compact_after(50)
        session.append_message(msg("m0", "short"))
        assert len(fn.calls) == 1  # 100 prompt tokens > 50 already
        session.append_message(msg("m1", "ok"))
        assert session.get_compactions()[0].trigger == "automatic"

    def test_below_the_threshold_nothing_happens(self, session):
        fn = fixed("m0", "m0")
        session.on_compaction(fn).compact_after(1000)
        session.append_message(msg("m0", "short"))
        assert fn.calls == []

    def test_a_frozen_prompt_is_whatever_the_provider_returns(self, store):
        frozen = {"text": "x" * 400}
        fn = fixed("m0", "m0")
        session = Session(store, system_prompt_provider=lambda: frozen["text"]).on_compaction(fn).compact_after(50)
        session.append_message(msg("m0", "short"))
        frozen["text"] = "short"  # the snapshot changes only when the context layer refreshes it
        session.append_message(msg("m1", "ok"))
        assert len(fn.calls) == 1

    def test_a_non_finite_count_never_fires(self, store):
        fn = fixed("m0", "m0")
        session = Session(store).on_compaction(fn).compact_after(1, token_counter=lambda **kw: float("nan"))
        session.append_messages([msg("m0", "a b c d e f"), msg("m1")])
        assert fn.calls == [] and session.estimate_tokens() == 0

    def test_duplicates_and_updates_do_not_fire(self, session):
        fn = fixed("m0", "m0")
        session.append_message(msg("m0", "word " * 100))
        session.on_compaction(fn).compact_after(10)
        with pytest.warns(DuplicateMessageWarning):
            session.append_message(msg("m0"))
        session.update_message(msg("m0", "word " * 200))
        assert fn.calls == []

    def test_a_storage_failure_keeps_the_append(self, session, store):  # spec 16 case 12, second half
        def failing(e):
            raise ValueError("handler fails too")

        session.on_compaction(fixed("m0", "m0", "\ud800")).compact_after(1).on_compaction_error(failing)
        session.append_message(msg("m0", "hello there"))
        session.append_message(msg("m1", "more"))
        assert store.scalar("SELECT count(*) FROM messages") == 2
        assert session.get_compactions() == []

    def test_a_noop_trigger_warns_once(self, session, caplog):
        session.on_compaction(lambda h: None).compact_after(1)
        for i in range(3):
            session.append_message(msg(f"m{i}", "hello there"))
        assert caplog.text.count("no-op") == 1


class TestThresholdArguments:
    @pytest.mark.parametrize("threshold", [float("nan"), -1, -0.5, float("inf"), float("-inf")])
    def test_a_threshold_that_is_nan_infinite_or_negative_is_refused_and_the_old_one_stays(self, session, threshold):
        session.compact_after(500)
        with pytest.raises(InvalidArgumentError, match="threshold"):
            session.compact_after(threshold)
        assert session.token_threshold == 500

    def test_a_token_counter_that_cannot_be_called_is_refused_and_nothing_changes(self, session):
        with pytest.raises(TypeError, match="token_counter"):
            session.compact_after(10, token_counter=5)
        assert (session.token_threshold, session.token_counter) == (None, None)

    def test_none_turns_it_off_and_zero_is_a_threshold(self, session):
        assert session.compact_after(0).token_threshold == 0
        assert session.compact_after(None).token_threshold is None


class TestListeners:
    def test_on_compacted_runs_after_compaction_and_after_clear(self, session):
        seen = []
        session.on_compacted(lambda event: seen.append(event["type"]))
        session.append_messages([msg("a"), msg("b")])
        session.on_compaction(fixed("a", "a")).compact()
        session.clear_messages()
        assert seen == ["compacted", "cleared"]


class TestEstimateCache:
    def test_an_update_refreshes_the_estimate(self, session):
        session.subscribe(lambda event: None)  # someone is listening: the estimate is kept current
        session.append_messages([msg("a", "Hello world"), msg("b", "Hello world")])
        assert session.estimate_tokens() == 14
        session.update_message(msg("a", "word " * 50))
        assert session.estimate_tokens() == 4 + 65 + 7

    def test_a_summarize_error_is_not_reported_as_a_noop(self, session, caplog):
        seen = []
        session.on_compaction(lambda h: 1 / 0).compact_after(1).on_compaction_error(seen.append)
        session.append_message(msg("a", "hello there"))
        assert len(seen) == 1 and "no-op" not in caplog.text
