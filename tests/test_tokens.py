"""The token heuristic matches upstream's worked values and JavaScript's string semantics."""

from __future__ import annotations

import json
import math

import pytest

from agentlab.context._tokens import (
    CHARS_PER_TOKEN,
    TOKENS_PER_MESSAGE,
    WORDS_TOKEN_MULTIPLIER,
    estimate_message_tokens,
    estimate_string_tokens,
    estimate_value_tokens,
    js_number_to_string,
    js_stringify,
    js_trim,
    normalize_count,
    utf16_len,
    utf16_prefix,
)


def user(*parts):
    return {"id": "m", "role": "user", "parts": list(parts)}


class TestStringEstimatesMatchTheSpecWorkedValues:
    def test_constants_are_upstreams(self):
        assert (CHARS_PER_TOKEN, WORDS_TOKEN_MULTIPLIER, TOKENS_PER_MESSAGE) == (4, 1.3, 4)

    @pytest.mark.parametrize(
        ("text", "tokens"),
        [("Hello world", 3), ("word " * 50, 65), ("x" * 400, 100), ("", 0), (None, 0), ("a", 2)],
    )
    def test_worked_values(self, text, tokens):
        assert estimate_string_tokens(text) == tokens

    def test_an_emoji_counts_two_utf16_units(self):
        # 10 emoji are 20 UTF-16 units -> 5 tokens; counting code points would give ceil(2.5) = 3.
        assert utf16_len("😀" * 10) == 20
        assert estimate_string_tokens("😀" * 10) == 5

    def test_words_split_on_javascript_whitespace_not_pythons(self):
        # U+001C separates words for Python's str.split but not for JS /\s+/; U+FEFF is the reverse.
        assert estimate_string_tokens("a\x1cb") == 2  # one word: ceil(1.3)
        assert estimate_string_tokens("a\ufeffb") == 3  # two words: ceil(2.6)
        assert estimate_string_tokens("one\u3000two\u00a0three") == 4  # three words: ceil(3.9) > 13 / 4


class TestMessageEstimatesCoverBothPartShapes:
    def test_the_spec_message_example_is_seven(self):
        assert estimate_message_tokens([user({"type": "text", "text": "Hello world"})]) == 7

    def test_each_message_costs_four_even_without_parts(self):
        assert estimate_message_tokens([{"id": "a", "role": "user", "parts": []}, {"id": "b", "role": "user"}]) == 8

    def test_reasoning_counts_text_then_reasoning(self):
        assert estimate_message_tokens([user({"type": "reasoning", "text": "x" * 40})]) == 4 + 10
        assert estimate_message_tokens([user({"type": "reasoning", "reasoning": "x" * 40})]) == 4 + 10

    def test_sdk_tool_parts_count_input_and_output_or_result(self):
        tool = {"type": "tool-lookup", "toolCallId": "t", "input": {"q": "x" * 30}, "output": "y" * 80}
        assert estimate_message_tokens([user(tool)]) == 4 + math.ceil(38 / 4) + 20
        dynamic = {"type": "dynamic-tool", "toolCallId": "t", "input": None, "result": "z" * 40}
        assert estimate_message_tokens([user(dynamic)]) == 4 + 10

    def test_anthropic_blocks_count_the_field_carrying_words(self):
        thinking = {"type": "thinking", "thinking": "x" * 40, "signature": "s" * 400}
        tool_use = {"type": "tool_use", "id": "t1", "name": "f", "input": {"path": "/a"}}  # {"path":"/a"} = 13 chars
        result_str = {"type": "tool_result", "tool_use_id": "t1", "content": "r" * 20}
        result_list = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "hi"}]}
        list_json = json.dumps(result_list["content"], separators=(",", ":"))
        assert estimate_message_tokens([user(thinking)]) == 4 + 10
        assert estimate_message_tokens([user(tool_use)]) == 4 + 4
        assert estimate_message_tokens([user(result_str)]) == 4 + 5
        assert estimate_message_tokens([user(result_list)]) == 4 + math.ceil(len(list_json) / 4)

    def test_images_and_redacted_thinking_count_nothing(self):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 4000}}
        redacted = {"type": "redacted_thinking", "data": "B" * 4000}
        assert estimate_message_tokens([user(image, redacted)]) == 4

    def test_a_text_key_holding_null_wins_over_result(self):
        # Upstream tests `part.text !== undefined`, so an explicit null stops the fallback to `result`.
        assert estimate_message_tokens([user({"type": "custom", "text": None, "result": "x" * 400})]) == 4
        assert estimate_message_tokens([user({"type": "custom", "result": "x" * 400})]) == 104


class TestJsStringifyIsJsonStringify:
    def test_plain_json_data_matches_compact_json_dumps(self):
        value = {"a": [1, "two", None, True], "b": {"ü": "日本"}, "c": 1.5}
        assert js_stringify(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def test_javascript_number_and_key_rules(self):
        value = {"b": 1, "10": 2.0, "2": [1e-7, 0.00001, 1e21, float("nan"), float("inf")], "01": -0.0}
        assert js_stringify(value) == '{"2":[1e-7,0.00001,1e+21,null,null],"10":2,"b":1,"01":0}'

    @pytest.mark.parametrize(
        ("x", "text"),
        [(1.0, "1"), (123.456, "123.456"), (1e16, "10000000000000000"), (1.5e300, "1.5e+300"),
         (2.5e-7, "2.5e-7"), (float("nan"), "NaN"), (float("-inf"), "-Infinity"), (7, "7")],
    )
    def test_number_to_string(self, x, text):
        assert js_number_to_string(x) == text

    def test_non_strings_are_measured_as_their_json(self):
        assert estimate_value_tokens({"k": "x" * 100}) == math.ceil(len('{"k":"' + "x" * 100 + '"}') / 4)
        assert estimate_value_tokens(None) == 0


class TestStringHelpersFollowJavaScript:
    def test_utf16_prefix_never_leaves_half_a_surrogate_pair(self):
        assert utf16_prefix("ab😀c", 3) == "ab"
        assert utf16_prefix("ab😀c", 4) == "ab😀"
        assert utf16_prefix("abc", 2) == "ab"
        assert utf16_prefix("abc", -1) == ""

    def test_js_trim_uses_the_javascript_whitespace_set(self):
        assert js_trim("\ufeff x \u00a0\u2028") == "x"
        assert js_trim("\x1cx") == "\x1cx"


class TestCustomCounterResultsAreNormalised:
    @pytest.mark.parametrize(
        ("raw", "count"),
        [(3.2, 4), (7, 7), (-5, 0), (0, 0), (float("nan"), 0), (float("inf"), 0), (True, 0), ("5", 0), (None, 0)],
    )
    def test_normalize_count(self, raw, count):
        assert normalize_count(raw) == count
