"""Keyed-entry keys are the ones upstream computes (spec 7, case 15)."""

from __future__ import annotations

import pytest

from agentlab.context._keys import context_entry_key, fnv1a32_base36, slugify

FNV_OFFSET, FNV_PRIME = 0x811C9DC5, 0x01000193


class TestKeysMatchUpstreamValues:
    def test_a_title_becomes_its_slug(self):
        assert context_entry_key("Pirate style", "Talk like a pirate.") == "pirate-style"

    def test_untitled_ascii_content_gets_slug_and_hash(self):
        assert context_entry_key(None, "no key") == "no-key-1nprufp"

    def test_untitled_cjk_content_falls_back_to_entry_and_hash(self):
        assert context_entry_key(None, "用户喜欢咖啡") == "entry-2mzjev"

    def test_a_blank_title_counts_as_no_title(self):
        assert context_entry_key("  \u00a0 ", "no key") == "no-key-1nprufp"
        assert context_entry_key("", "no key") == "no-key-1nprufp"

    def test_a_title_without_slug_characters_hashes_the_title(self):
        assert context_entry_key("!!!", "body") == "entry-" + fnv1a32_base36("!!!")

    def test_a_title_blank_only_for_python_is_still_a_title(self):
        # U+001C is whitespace for str.strip() but not for JavaScript's trim().
        assert context_entry_key("\x1c", "body") == "entry-" + fnv1a32_base36("\x1c")


class TestFnv1aHashesUtf16CodeUnits:
    @pytest.mark.parametrize(("text", "value"), [("", 0x811C9DC5), ("a", 0xE40C292C), ("foobar", 0xBF9CF968)])
    def test_standard_fnv1a_32_vectors(self, text, value):
        assert int(fnv1a32_base36(text), 36) == value

    def test_an_emoji_feeds_its_two_surrogates(self):
        h = FNV_OFFSET
        for unit in (0xD83D, 0xDE00):
            h = ((h ^ unit) * FNV_PRIME) % 2**32
        assert int(fnv1a32_base36("😀"), 36) == h

    def test_output_is_lower_case_base36(self):
        key = fnv1a32_base36("Hello, World")
        assert key == key.lower() and key.isalnum()


class TestSlugify:
    @pytest.mark.parametrize(
        ("text", "slug"),
        [("  Hello, World!  ", "hello-world"), ("a--b__c", "a-b-c"), ("ÄÖÜ", ""), ("\u212a", "k"), ("-x-", "x")],
    )
    def test_examples(self, text, slug):
        assert slugify(text) == slug

    def test_only_the_first_60_utf16_units_count(self):
        assert slugify("a" * 70) == "a" * 60
        # The 60-unit cut splits the emoji; its half becomes a dash, which is then trimmed.
        assert slugify("a" * 59 + "😀bbb") == "a" * 59
        assert slugify("a" * 58 + "😀bbb") == "a" * 58
