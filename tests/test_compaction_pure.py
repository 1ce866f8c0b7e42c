"""Pure compaction: overlays on read (spec 6.1, cases 5-8), the reference compactor (6.4), truncation (6.5)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab.context._tokens import estimate_message_tokens
from agentlab.errors import CompactionError
from agentlab.session._compact_function import (
    COMPACTION_PREFIX,
    STUB_RESULT_TEXT,
    align_boundary_backward,
    align_boundary_forward,
    apply_compactions,
    build_summary_prompt,
    compute_summary_budget,
    create_compact_function,
    is_compaction_message,
    sanitize_tool_pairs,
    truncate_older_messages,
    truncate_tool_output,
)

NOW = "2026-08-21T00:00:00.000Z"


def msg(mid, text=None, role="user", parts=None):
    return {"id": mid, "role": role, "parts": parts if parts is not None else [{"type": "text", "text": text or mid}],
            "created_at": "2026-08-20T00:00:00.000Z"}


def path(*ids):
    return [msg(i) for i in ids]


def comp(cid, summary, start, end):
    return {"id": cid, "summary": summary, "from_message_id": start, "to_message_id": end}


def view(messages):
    """Ids, with overlays shown as their summary text."""
    return [m["parts"][0]["text"] if is_compaction_message(m) else m["id"] for m in messages]


def ms(n):
    return [f"m{i}" for i in range(n)]


def tool_use(call_id, name="lookup", tool_input=None):
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input if tool_input is not None else {}}


def tool_result(call_id, content="ok"):
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


class TestOverlaysReplaceRangesOnRead:
    def test_case5_a_range_becomes_one_assistant_summary(self):
        out = apply_compactions(path(*ms(6)), [comp("u1", "Summary of m1-m3", "m1", "m3")], now=NOW)
        assert out == [
            msg("m0"),
            {"id": "compaction_u1", "role": "assistant",
             "parts": [{"type": "text", "text": "Summary of m1-m3"}], "created_at": NOW},
            msg("m4"),
            msg("m5"),
        ]

    def test_case6_a_wider_newer_overlay_supersedes(self):
        first = [comp("s1", "S1", "m1", "m7")]
        assert view(apply_compactions(path(*ms(10)), first, now=NOW)) == ["m0", "S1", "m8", "m9"]
        both = [*first, comp("s2", "S2", "m1", "m12")]
        assert view(apply_compactions(path(*ms(15)), both, now=NOW)) == ["m0", "S2", "m13", "m14"]

    def test_case7_the_later_row_wins_even_when_narrower_ranges_tie(self):
        rows = [comp("old", "Old summary", "m0", "m1"), comp("new", "New summary", "m0", "m2")]
        assert view(apply_compactions(path(*ms(4)), rows, now=NOW)) == ["New summary", "m3"]
        narrower_last = [comp("wide", "Wide", "m0", "m2"), comp("narrow", "Narrow", "m0", "m1")]
        assert view(apply_compactions(path(*ms(4)), narrower_last, now=NOW)) == ["Narrow", "m2", "m3"]

    def test_case8_sibling_branch_overlays_never_leak(self):
        rows = [comp("a1", "Branch A summary 1", "m0", "a2"), comp("b", "Branch B summary", "m0", "b2"),
                comp("a2", "Branch A summary 2", "m0", "a3")]
        branch_a = path("m0", "m1", "a2", "a3", "a4")
        assert view(apply_compactions(branch_a, rows, now=NOW)) == ["Branch A summary 2", "a4"]
        assert view(apply_compactions(path("m0", "m1", "b2", "b3"), rows, now=NOW)) == ["Branch B summary", "b3"]

    def test_an_overlay_starting_inside_a_replaced_range_is_ignored(self):
        rows = [comp("outer", "Outer", "m1", "m4"), comp("inner", "Inner", "m2", "m6")]
        assert view(apply_compactions(path(*ms(8)), rows, now=NOW)) == ["m0", "Outer", "m5", "m6", "m7"]

    def test_an_overlay_ending_before_its_start_is_not_applied(self):
        assert view(apply_compactions(path(*ms(4)), [comp("x", "X", "m2", "m1")], now=NOW)) == ms(4)

    def test_compactions_may_be_objects_or_camel_case_dicts(self):
        @dataclasses.dataclass
        class Row:
            id: str
            summary: str
            from_message_id: str
            to_message_id: str

        camel = {"id": "c", "summary": "Camel", "fromMessageId": "m2", "toMessageId": "m2"}
        rows = [Row("r", "Obj", "m0", "m1"), camel]
        assert view(apply_compactions(path(*ms(4)), rows, now=NOW)) == ["Obj", "Camel", "m3"]

    def test_the_overlay_is_stamped_at_read_time_by_default(self):
        out = apply_compactions(path(*ms(3)), [comp("c", "S", "m0", "m1")])
        assert out[0]["created_at"].endswith("Z") and out[0]["created_at"] > "2026-01-01"

    def test_inputs_are_not_changed(self):
        messages, rows = path(*ms(5)), [comp("c", "S", "m1", "m2")]
        before = copy.deepcopy((messages, rows))
        apply_compactions(messages, rows, now=NOW)
        assert (messages, rows) == before


ids_on_path = st.integers(min_value=0, max_value=12).map(lambda n: [f"m{i}" for i in range(n)])


@st.composite
def off_path_overlays(draw):
    ids = draw(ids_on_path)
    starts = st.sampled_from([*ids, "zz", "m99"]) if ids else st.just("zz")
    ends = st.text(alphabet="abcxyz", min_size=1, max_size=3).map(lambda s: "x-" + s)  # never an "m<n>" id
    rows = draw(st.lists(st.builds(lambda i, f, t: comp(f"c{i}", "S", f, t), st.integers(0, 99), starts, ends),
                         max_size=8))
    return ids, rows


def reference_apply(messages, rows):
    """The spec 6.1 pseudocode, transcribed literally with list.index."""
    ids = [m["id"] for m in messages]
    out, i = [], 0
    while i < len(messages):
        matching = [c for c in rows if c["from_message_id"] == ids[i]
                    and c["to_message_id"] in ids and ids.index(c["to_message_id"]) >= i]
        if matching:
            out.append("S:" + matching[-1]["id"])
            i = ids.index(matching[-1]["to_message_id"]) + 1
            continue
        out.append(ids[i])
        i += 1
    return out


class TestOverlayProperties:
    @settings(max_examples=100, deadline=None)
    @given(off_path_overlays())
    def test_overlays_ending_off_the_path_never_apply(self, case):
        ids, rows = case
        messages = path(*ids)
        assert apply_compactions(messages, rows, now=NOW) == messages

    @settings(max_examples=100, deadline=None)
    @given(st.integers(0, 10).flatmap(lambda n: st.tuples(
        st.just(n), st.lists(st.tuples(st.integers(0, n + 1), st.integers(0, n + 1)), max_size=6))))
    def test_matches_the_spec_pseudocode(self, case):
        n, pairs = case
        messages = path(*ms(n))
        rows = [comp(f"c{k}", f"S{k}", f"m{a}", f"m{b}") for k, (a, b) in enumerate(pairs)]
        got = ["S:" + m["id"][len(COMPACTION_PREFIX):] if is_compaction_message(m) else m["id"]
               for m in apply_compactions(messages, rows, now=NOW)]
        assert got == reference_apply(messages, rows)


FIRST_TEMPLATE_FOR_AB = """Create a concise summary of this conversation that preserves the important information for future context.

CONVERSATION TO SUMMARIZE:
[user]
Hello

---

[assistant]
Hi there

Use this structure:

## Topic
[What the conversation is about]

## Key Points
[Important information, decisions, and conclusions from the conversation]

## Current State
[Where things stand now — what has been done, what is in progress]

## Open Items
[Unresolved questions, pending tasks, or next steps discussed]

Target ~100 tokens. Be factual — only include information that was explicitly discussed in the conversation. Do NOT invent file paths, commands, or details that were not mentioned. Write only the summary body."""


class TestSummaryPrompt:
    def test_first_compaction_template_is_verbatim(self):
        messages = [msg("a", "Hello"), msg("b", "Hi there", role="assistant")]
        assert build_summary_prompt(messages, None, 100) == FIRST_TEMPLATE_FOR_AB

    def test_update_template_carries_the_previous_summary(self):
        prompt = build_summary_prompt([msg("a", "Hello")], "Old facts.", 250)
        assert prompt.startswith(
            "You are updating a conversation summary. A previous summary exists below. New conversation turns have "
            "occurred since then and need to be incorporated.\n\nPREVIOUS SUMMARY:\nOld facts.\n\n"
            "NEW TURNS TO INCORPORATE:\n[user]\nHello\n\nUpdate the summary. PRESERVE existing information that is "
            "still relevant. ADD new information. Remove information only if it is clearly obsolete.\n\n## Topic\n"
        )
        assert prompt.endswith(FIRST_TEMPLATE_FOR_AB[FIRST_TEMPLATE_FOR_AB.index("[What the"):].replace("100", "250"))

    def test_an_empty_previous_summary_uses_the_first_template(self):
        assert build_summary_prompt([msg("a", "Hello")], "", 100).startswith("Create a concise summary")

    def test_sdk_tool_parts_show_input_json_and_output_cut_to_500(self):
        part = {"type": "tool-read", "toolCallId": "t", "toolName": "read", "input": {"p": "x" * 600},
                "output": "y" * 600}
        message = msg("a", role="assistant", parts=[{"type": "text", "text": "look"}, part])
        prompt = build_summary_prompt([message], None, 100)
        expected = "[assistant]\nlook\n[Tool: read]\nInput: " + ('{"p":"' + "x" * 600)[:500] + "\nOutput: " + "y" * 500
        assert expected + "\n\nUse this structure:" in prompt

    def test_structured_outputs_are_json_and_js_falsy_values_are_hidden(self):
        part = {"type": "dynamic-tool", "toolCallId": "t", "input": {}, "output": {"customer": "ACME", "amount": 1200}}
        zero = {"type": "tool-count", "toolCallId": "u", "toolName": "count", "input": 0, "output": 0}
        prompt = build_summary_prompt([msg("a", role="assistant", parts=[part, zero])], None, 100)
        expected = (
            '[assistant]\n\n[Tool: unknown]\nInput: {}\nOutput: {"customer":"ACME","amount":1200}\n[Tool: count]\n\n'
        )
        assert expected in prompt

    def test_anthropic_tool_blocks_name_their_results(self):
        call = msg("a", role="assistant", parts=[tool_use("t1", "weather", {"city": "Oslo"})])
        answer = msg("b", parts=[tool_result("t1", "Rain, 7C")])
        prompt = build_summary_prompt([call, answer], None, 100)
        expected = (
            '[assistant]\n\n[Tool: weather]\nInput: {"city":"Oslo"}\n\n---\n\n[user]\n\n[Tool: weather]\nOutput: Rain'
        )
        assert expected in prompt

    def test_budget_is_a_fifth_of_the_estimate_but_at_least_100(self):
        small = [msg("a", "hi")]
        big = [msg("a", "x" * 8000)]
        assert compute_summary_budget(small) == 100
        assert compute_summary_budget(big) == (4 + 2000) // 5 == 400


def conversation(n):
    return [msg(f"m{i}", f"turn {i} " + "body " * 20, role="user" if i % 2 == 0 else "assistant") for i in range(n)]


class Recorder:
    def __init__(self, answer="the summary"):
        self.answer, self.prompts = answer, []

    def __call__(self, prompt):
        self.prompts.append(prompt)
        return self.answer


class TestReferenceCompactor:
    @pytest.mark.parametrize("n", [0, 3, 5])
    def test_five_or_fewer_messages_are_never_summarised(self, n):
        summarize = Recorder()
        assert create_compact_function(summarize, tail_token_budget=1)(conversation(n)) is None
        assert summarize.prompts == []

    def test_the_middle_between_head_and_tail_is_summarised(self):
        summarize = Recorder()
        history = conversation(12)
        result = create_compact_function(summarize, tail_token_budget=1)(history)
        assert result == {"from_message_id": "m3", "to_message_id": "m9", "summary": "the summary"}
        middle = history[3:10]
        assert summarize.prompts == [build_summary_prompt(middle, None, compute_summary_budget(middle))]

    def test_a_tail_within_the_default_budget_means_nothing_to_compact(self):
        assert create_compact_function(Recorder())(conversation(12)) is None

    def test_the_tail_keeps_as_many_messages_as_the_token_budget_allows(self):
        history = conversation(12)
        per_message = estimate_message_tokens([history[11]])
        result = create_compact_function(Recorder(), tail_token_budget=3 * per_message + 1)(history)
        assert result["to_message_id"] == "m8"

    def test_the_start_moves_past_results_of_a_head_tool_call(self):
        history = conversation(12)
        history[2] = msg("m2", role="assistant", parts=[tool_use("t1"), tool_use("t2")])
        history[3] = msg("m3", parts=[tool_result("t1")])
        history[4] = msg("m4", parts=[tool_result("t2")])
        result = create_compact_function(Recorder(), tail_token_budget=1)(history)
        assert result["from_message_id"] == "m5"

    def test_the_cut_moves_back_to_keep_a_call_with_its_results(self):
        history = conversation(12)
        history[9] = msg("m9", role="assistant", parts=[tool_use("t9")])
        history[10] = msg("m10", parts=[tool_result("t9")])
        result = create_compact_function(Recorder(), tail_token_budget=1)(history)
        assert result["to_message_id"] == "m8"

    def test_sdk_tool_shapes_align_too(self):
        history = conversation(12)
        call = {"type": "tool-search", "toolCallId": "c1", "state": "input-available", "input": {"q": "x"}}
        history[9] = msg("m9", role="assistant", parts=[call])
        history[10] = msg("m10", role="tool", parts=[{**call, "state": "output-available", "output": "r"}])
        result = create_compact_function(Recorder(), tail_token_budget=1)(history)
        assert result["to_message_id"] == "m8"
        # Upstream treats any assistant message with tool parts as a call, so the cut does not move back onto it.
        history[10]["role"] = "assistant"
        assert create_compact_function(Recorder(), tail_token_budget=1)(history)["to_message_id"] == "m9"

    def test_a_previous_overlay_feeds_the_update_template_and_never_bounds_the_range(self):
        summarize = Recorder("second summary")
        history = conversation(12)
        history.insert(4, msg("compaction_earlier", "previous summary", role="assistant"))
        result = create_compact_function(summarize, tail_token_budget=1)(history)
        assert result == {"from_message_id": "m3", "to_message_id": "m9", "summary": "second summary"}
        assert summarize.prompts[0].startswith("You are updating a conversation summary.")
        assert "PREVIOUS SUMMARY:\nprevious summary\n\nNEW TURNS" in summarize.prompts[0]
        assert "[assistant]\nprevious summary" not in summarize.prompts[0]

    @pytest.mark.parametrize("blank", ["", "   \n", "\ufeff", None])
    def test_a_blank_summary_gives_none(self, blank):
        assert create_compact_function(Recorder(blank), tail_token_budget=1)(conversation(12)) is None

    def test_a_per_message_counter_replaces_the_estimate(self):
        seen = []

        def count(messages):
            seen.append([m["id"] for m in messages])
            return 10

        result = create_compact_function(Recorder(), tail_token_budget=35, token_counter=count)(conversation(12))
        assert result["to_message_id"] == "m8"  # three messages of 10 fit, the fourth would exceed 35
        assert seen == [["m11"], ["m10"], ["m9"], ["m8"]]

    def test_the_session_counter_is_called_per_message_with_empty_prompt_and_blocks(self):
        calls = []

        def session_counter(*, messages, system_prompt, context_blocks):
            calls.append((len(messages), system_prompt, context_blocks))
            return 10

        fn = create_compact_function(Recorder(), tail_token_budget=35)
        assert fn(conversation(12), token_counter=session_counter)["to_message_id"] == "m8"
        assert calls == [(1, "", [])] * 4
        assert create_compact_function(Recorder(), tail_token_budget=35, token_counter=lambda m: 1)(
            conversation(12), token_counter=session_counter) is None  # the function's own counter wins
        assert len(calls) == 4

    def test_an_async_summarize_is_refused_with_guidance(self):
        async def summarize(prompt):
            return "s"

        with pytest.raises(CompactionError, match="synchronous"):
            create_compact_function(summarize, tail_token_budget=1)(conversation(12))

    def test_the_history_is_not_changed(self):
        history = conversation(12)
        before = copy.deepcopy(history)
        create_compact_function(Recorder(), tail_token_budget=1)(history)
        assert history == before


class TestBoundaryAlignment:
    def test_forward_skips_every_result_message_of_the_call(self):
        messages = [msg("a"), msg("b", role="assistant", parts=[tool_use("t1"), tool_use("t2")]),
                    msg("c", parts=[tool_result("t1")]), msg("d", parts=[tool_result("t2")]), msg("e")]
        assert align_boundary_forward(messages, 2) == 4
        assert align_boundary_forward(messages, 1) == 1
        assert align_boundary_forward(messages, 0) == 0 and align_boundary_forward(messages, 9) == 9

    def test_backward_steps_onto_the_call(self):
        messages = [msg("a"), msg("b", role="assistant", parts=[tool_use("t1")]), msg("c", parts=[tool_result("t1")])]
        assert align_boundary_backward(messages, 2) == 1
        assert align_boundary_backward(messages, 1) == 1

    def test_unrelated_results_do_not_move_the_boundary(self):
        call = msg("a", role="assistant", parts=[tool_use("t1")])
        messages = [call, msg("b", parts=[tool_result("other")]), msg("c")]
        assert align_boundary_forward(messages, 1) == 1
        assert align_boundary_backward(messages, 1) == 1


class TestSanitizeToolPairs:
    def test_orphan_results_are_dropped_and_empty_messages_removed(self):
        messages = [msg("a", parts=[tool_result("gone")]), msg("b", "kept"),
                    msg("c", role="user", parts=[{"type": "tool-x", "toolCallId": "gone2", "output": 1}])]
        assert [m["id"] for m in sanitize_tool_pairs(messages)] == ["b"]

    def test_a_call_without_result_gets_a_stub(self):
        messages = [msg("a", role="assistant", parts=[tool_use("t1", "weather")]), msg("b", "next"),
                    msg("c", role="assistant", parts=[{"type": "tool-find", "toolCallId": "s1", "toolName": "find",
                                                       "state": "input-available", "input": {}}])]
        out = sanitize_tool_pairs(messages, now=NOW)
        assert [m["id"] for m in out] == ["a", "stub-t1", "b", "c", "stub-s1"]
        assert out[1] == {"id": "stub-t1", "role": "user", "created_at": NOW,
                          "parts": [{"type": "tool_result", "tool_use_id": "t1", "content": STUB_RESULT_TEXT}]}
        assert out[4]["role"] == "assistant" and out[4]["parts"] == [
            {"type": "tool-result", "toolCallId": "s1", "toolName": "find", "result": STUB_RESULT_TEXT}]

    def test_complete_pairs_are_left_alone_and_input_is_not_changed(self):
        messages = [msg("a", role="assistant", parts=[tool_use("t1")]), msg("b", parts=[tool_result("t1")])]
        before = copy.deepcopy(messages)
        assert sanitize_tool_pairs(messages) == before
        assert messages == before


def old_tool(mid, output):
    return msg(mid, role="assistant", parts=[{"type": "tool-read", "toolCallId": mid, "toolName": "read",
                                              "state": "output-available", "input": {}, "output": output}])


class TestTruncateOlderMessages:
    def test_recent_messages_are_untouched_and_older_text_is_cut(self):
        messages = [msg("old", "a" * 10050), *path("r1", "r2", "r3", "r4")]
        messages.append(msg("r5", "b" * 20_000))
        out = truncate_older_messages(messages)
        assert out[0]["parts"][0]["text"] == "a" * 10_000 + "... [truncated 10050 chars]"
        assert out[1:] == messages[1:]  # r1 is older but short; r5 is long but recent

    def test_string_tool_outputs_stay_strings_of_the_budget_length(self):
        out = truncate_older_messages([old_tool("t", "z" * 1000), msg("r1"), msg("r2")], keep_recent=2,
                                      max_tool_output_chars=100)
        text = out[0]["parts"][0]["output"]
        assert len(text) == 100 and text.endswith("... [truncated 1000 chars]") and text.startswith("z" * 74)

    def test_object_outputs_keep_their_shape(self):
        output = {"path": "/large.txt", "content": "x" * 5000, "totalLines": 1}
        out = truncate_older_messages([old_tool("t", output), msg("r1"), msg("r2")], keep_recent=2)
        shrunk = out[0]["parts"][0]["output"]
        assert shrunk["path"] == "/large.txt" and shrunk["totalLines"] == 1
        assert "[truncated 5000 chars]" in shrunk["content"] and len(shrunk["content"]) < 500

    def test_nested_arrays_with_small_budgets_get_markers(self):
        output = {k: list(range(1000)) for k in "abcdefg"}
        out = truncate_older_messages([old_tool("t", output), msg("r1"), msg("r2")], keep_recent=2)
        a = out[0]["parts"][0]["output"]["a"]
        assert len(a) == 1 and a[0]["__truncated"] is True and isinstance(a[0]["__truncatedChars"], int)

    def test_anthropic_tool_result_strings_and_text_blocks_are_cut(self):
        blocks = [{"type": "text", "text": "p" * 300}, {"type": "image", "source": {}},
                  {"type": "text", "text": "q" * 300}, {"type": "text", "text": "r" * 10}]
        messages = [msg("a", parts=[tool_result("t1", "s" * 800)]), msg("b", parts=[tool_result("t2", blocks)]),
                    msg("r1"), msg("r2")]
        out = truncate_older_messages(messages, keep_recent=2)
        assert len(out[0]["parts"][0]["content"]) == 500
        kept = out[1]["parts"][0]["content"]
        assert [b["type"] for b in kept] == ["text", "image", "text"]
        assert kept[0]["text"] == "p" * 300 and len(kept[2]["text"]) == 200 and kept[2]["text"].endswith("300 chars]")

    def test_result_is_a_deep_copy_and_input_is_unchanged(self):
        messages = [old_tool("t", "z" * 1000), msg("r1"), msg("r2")]
        before = copy.deepcopy(messages)
        out = truncate_older_messages(messages, keep_recent=2)
        out[2]["parts"][0]["text"] = "changed"
        assert messages == before

    def test_short_histories_come_back_equal(self):
        messages = [old_tool("t", "z" * 1000)]
        assert truncate_older_messages(messages) == messages

    def test_outputs_that_fit_are_returned_as_is(self):
        value = {"a": 1}
        assert truncate_tool_output(value, 500) == (value, False, 7)
