"""The rendered system prompt is byte-for-byte upstream's (spec 8, case 17)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentlab.context._prompt import SEPARATOR, ContextBlock, js_round, render_prompt
from agentlab.context._tokens import estimate_string_tokens

FIXTURE = Path(__file__).parent / "fixtures" / "prompt_example.txt"


def block(label, content="", **kw):
    return ContextBlock(label=label, content=content, tokens=estimate_string_tokens(content), **kw)


class TestTheSpecExampleRendersByteForByte:
    def test_example(self):
        blocks = [
            block("soul", "You are helpful."),
            block("memory", "User likes coffee.", description="Facts", max_tokens=1100, writable=True),
            block("todos", "", max_tokens=200, writable=True),
            block("skills", "- api-ref: API Reference", is_skill=True, writable=True),
        ]
        # The fixture holds the spec's example verbatim, with no final newline.
        assert render_prompt(blocks).encode("utf-8") == FIXTURE.read_bytes()

    def test_separator_is_46_box_drawing_characters(self):
        assert SEPARATOR == "\u2550" * 46 and len(SEPARATOR.encode("utf-8")) == 138


class TestEachBlockGetsExactlyOneTag:
    def test_writable_block_with_no_content_still_renders(self):
        text = render_prompt([block("memory", writable=True)])
        assert text == f"{SEPARATOR}\nMEMORY [writable]\n{SEPARATOR}\n"

    def test_empty_skill_block_is_loadable(self):
        assert render_prompt([block("skills", is_skill=True)]) == f"{SEPARATOR}\nSKILLS [loadable]\n{SEPARATOR}\n"

    def test_empty_search_block_is_searchable(self):
        text = render_prompt([block("knowledge", is_searchable=True, writable=True)])
        assert text == f"{SEPARATOR}\nKNOWLEDGE [searchable]\n{SEPARATOR}\n"

    def test_readonly_block_is_readonly(self):
        assert render_prompt([block("soul", "Be kind.")]) == f"{SEPARATOR}\nSOUL [readonly]\n{SEPARATOR}\nBe kind."

    def test_a_writable_block_never_shows_readonly(self):
        text = render_prompt([block("memory", "fact", writable=True)])
        assert "[readonly]" not in text and text.count("[writable]") == 1

    def test_precedence_is_searchable_then_loadable(self):
        text = render_prompt([block("x", "c", is_searchable=True, is_skill=True, writable=True)])
        assert "X [searchable]\n" in text and "[loadable]" not in text


class TestHeaderDetails:
    def test_empty_readonly_blocks_are_skipped(self):
        blocks = [block("a", ""), block("b", "kept"), block("c", "")]
        assert render_prompt(blocks) == f"{SEPARATOR}\nB [readonly]\n{SEPARATOR}\nkept"

    def test_nothing_to_render_gives_an_empty_string(self):
        assert render_prompt([]) == "" and render_prompt([block("a")]) == ""

    def test_sections_are_joined_by_a_blank_line_without_trailing_newline(self):
        text = render_prompt([block("a", "one"), block("b", "two")])
        assert text == f"{SEPARATOR}\nA [readonly]\n{SEPARATOR}\none\n\n{SEPARATOR}\nB [readonly]\n{SEPARATOR}\ntwo"

    @pytest.mark.parametrize("max_tokens", [0, None])
    def test_zero_or_missing_max_tokens_hides_the_usage(self, max_tokens):
        text = render_prompt([block("memory", "fact", writable=True, max_tokens=max_tokens)])
        assert "%" not in text and "MEMORY [writable]" in text

    def test_half_percent_rounds_up_like_math_round(self):
        # 1/200 = 0.5%: Math.round gives 1, Python's round() would give 0.
        b = dataclasses.replace(block("m", "x", writable=True, max_tokens=200), tokens=1)
        assert "M [1% \u2014 1/200 tokens] [writable]" in render_prompt([b])

    def test_over_budget_shows_more_than_100_percent(self):
        b = dataclasses.replace(block("m", "x", writable=True, max_tokens=10), tokens=65)
        assert "M [650% \u2014 65/10 tokens] [writable]" in render_prompt([b])

    def test_description_goes_in_parentheses_and_the_label_is_upper_cased(self):
        assert "\nUSER_PREFS (What the user likes) [readonly]\n" in render_prompt(
            [block("user_prefs", "tea", description="What the user likes")]
        )


class TestJsRound:
    @pytest.mark.parametrize(
        ("x", "r"), [(2.5, 3), (-2.5, -2), (1.4, 1), (0.5, 1), (-0.5, 0), (0.49999999999999994, 0), (99.5, 100)]
    )
    def test_half_up(self, x, r):
        assert js_round(x) == r
