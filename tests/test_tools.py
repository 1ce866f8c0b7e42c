"""The generated context tools: upstream's definitions byte for byte, results, errors as strings, bad input."""

from __future__ import annotations

import json

import pytest

from agentlab.context._blocks import ContextBlocks, ContextConfig
from agentlab.context._providers import AgentContextProvider, AgentSkillProvider
from agentlab.context._search_providers import VectorSearchProvider
from agentlab.context._tools import context_tools
from agentlab.search._embedders import HashEmbedder


class Readonly:
    def __init__(self, text):
        self.text = text

    def get(self):
        return self.text


class Memory:
    """A writable provider in three lines, as a user would write one."""

    def __init__(self, text=None):
        self.text = text

    def get(self):
        return self.text

    def set(self, content):
        self.text = content


class Skills:
    def __init__(self, docs=None, writable=True):
        self.docs = dict(docs or {})
        if writable:
            self.set = self._set

    def get(self):
        return "\n".join(f"- {k}" for k in self.docs) or None

    def load(self, key):
        return self.docs.get(key)

    def _set(self, key, content, description=None):
        self.docs[key] = content


@pytest.fixture
def blocks(store):
    return ContextBlocks(
        [
            ContextConfig("soul", provider=Readonly("You are helpful.")),
            ContextConfig("memory", "Facts", 10),
            ContextConfig("skills", provider=AgentSkillProvider(store)),
            ContextConfig("knowledge", provider=VectorSearchProvider(store, HashEmbedder(32))),
        ],
        default_provider=lambda label: AgentContextProvider(store, label),
    )


SET_CONTEXT_DESCRIPTION = (
    'Write to a context block. Available blocks:\n- "memory" (writable): Facts\n- "skills" (skill collection, keyed '
    'entries): no description\n- "knowledge" (searchable, keyed entries): no description\n\nWrites are durable and '
    "persist across sessions.\n\nFor keyed blocks (skill collections / searchable), pass `metadata: { title, "
    "description }` \u2014 title stabilises updates, description helps the model pick entries. Metadata is optional; "
    "short content rarely needs it, long loadable entries benefit most."
)

# The spec's JSON schema (section 10), written out as JSON text so key order is checked too.
SET_CONTEXT_SCHEMA = (
    '{"type":"object","required":["label","content"],"properties":{'
    '"label":{"type":"string","enum":["memory","skills","knowledge"],"description":"Block label to write to"},'
    '"content":{"type":"string","description":"The main content to write to the block."},'
    '"action":{"type":"string","enum":["replace","append"],"description":"replace (default) or append"},'
    '"metadata":{"type":"object","description":"Optional metadata for keyed entries (skill collections, searchable '
    'blocks: \\"skills\\", \\"knowledge\\"). Short content doesn\'t need metadata; longer loadable entries (skills) '
    'benefit from a title and description so the model can pick the right one without loading it.",'
    '"properties":{"title":{"type":"string","description":"Short title. Used as a stable identifier \u2014 entries '
    'with the same title are updated in place, different titles create new entries."},'
    '"description":{"type":"string","description":"One-line summary shown alongside the title in the system prompt '
    'so the model can decide when to load the entry."}}}}}'
)


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class TestToolDefinitionsMatchUpstream:
    def test_set_context_has_upstreams_description_and_schema(self, blocks):
        tool = blocks.tools()[0]
        assert list(tool) == ["name", "description", "input_schema"]
        assert tool["name"] == "set_context"
        assert tool["description"] == SET_CONTEXT_DESCRIPTION
        assert compact(tool["input_schema"]) == SET_CONTEXT_SCHEMA

    def test_without_keyed_blocks_there_is_no_metadata_and_no_hint(self):
        tools = ContextBlocks([ContextConfig("memory", provider=Memory())]).tools()
        assert tools == [{
            "name": "set_context",
            "description": 'Write to a context block. Available blocks:\n- "memory" (writable): no description\n\n'
                           "Writes are durable and persist across sessions.",
            "input_schema": {"type": "object", "required": ["label", "content"], "properties": {
                "label": {"type": "string", "enum": ["memory"], "description": "Block label to write to"},
                "content": {"type": "string", "description": "The main content to write to the block."},
                "action": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append"},
            }},
        }]

    def test_load_unload_and_search_have_upstreams_text(self, blocks):
        tools = {t["name"]: t for t in blocks.tools()}
        assert list(tools) == ["set_context", "load_context", "unload_context", "search_context"]
        assert tools["load_context"]["description"] == (
            'Load a document from a skill block by key. Available skill blocks: "skills". Check the system prompt '
            "for available keys."
        )
        assert compact(tools["load_context"]["input_schema"]) == (
            '{"type":"object","properties":{"label":{"type":"string","enum":["skills"],"description":"Skill block '
            'label"},"key":{"type":"string","description":"Skill key to load"}},"required":["label","key"]}'
        )
        assert tools["unload_context"]["description"] == (
            "Unload a previously loaded skill to free context space. The skill remains available for re-loading. "
            "No skills currently loaded."
        )
        assert tools["unload_context"]["input_schema"]["properties"]["key"]["description"] == "Skill key to unload"
        assert tools["search_context"]["description"] == (
            'Search for information in a searchable context block. ONLY these blocks are searchable: "knowledge". '
            "Other blocks cannot be searched."
        )
        assert compact(tools["search_context"]["input_schema"]) == (
            '{"type":"object","properties":{"label":{"type":"string","enum":["knowledge"],"description":"Searchable '
            'block label"},"query":{"type":"string","description":"Search query"}},"required":["label","query"]}'
        )

    def test_unload_description_lists_loaded_skills_as_of_the_call(self):
        blocks = ContextBlocks([ContextConfig("skills", provider=Skills({"a": "A", "b": "B"}))])
        blocks.run_tool("load_context", {"label": "skills", "key": "a"})
        blocks.run_tool("load_context", {"label": "skills", "key": "b"})
        unload = next(t for t in blocks.tools() if t["name"] == "unload_context")
        assert unload["description"].endswith(" Currently loaded: skills:a, skills:b.")

    def test_enums_follow_block_order_with_several_blocks(self):
        tools = context_tools([], [])
        assert tools == []
        blocks = ContextBlocks([ContextConfig("b", provider=Skills()), ContextConfig("a", provider=Skills())])
        load = next(t for t in blocks.tools() if t["name"] == "load_context")
        assert load["input_schema"]["properties"]["label"]["enum"] == ["b", "a"]
        assert '"b", "a"' in load["description"]

    def test_only_readonly_blocks_give_no_tools(self):
        assert ContextBlocks([ContextConfig("soul", provider=Readonly("hi"))]).tools() == []

    def test_a_readonly_search_block_gets_search_but_not_set_context(self):
        class Search:
            def get(self):
                return None

            def search(self, query):
                return None

        names = [t["name"] for t in ContextBlocks([ContextConfig("k", provider=Search())]).tools()]
        assert names == ["search_context"]


class TestSetContextResults:
    def test_replace_reports_usage_against_the_budget(self, blocks):
        assert blocks.run_tool("set_context", {"label": "memory", "content": "fact1"}) == (
            "Written to memory. Usage: 20% (2/10 tokens)"
        )

    def test_usage_without_a_budget_is_a_token_count(self):
        blocks = ContextBlocks([ContextConfig("notes", provider=Memory())])
        assert blocks.run_tool("set_context", {"label": "notes", "content": "Hello world"}) == (
            "Written to notes. Usage: 3 tokens"
        )

    def test_append_joins_with_a_newline(self, blocks):
        blocks.run_tool("set_context", {"label": "memory", "content": "fact1"})
        blocks.run_tool("set_context", {"label": "memory", "content": "\nfact2", "action": "append"})
        assert blocks.get_context_block("memory").content == "fact1\nfact2"

    def test_over_budget_write_is_upstreams_error_string(self, blocks):
        out = blocks.run_tool("set_context", {"label": "memory", "content": "word " * 50})
        assert out == 'Error: Block "memory" exceeds maxTokens: 65 > 10'

    def test_over_budget_append_checks_the_combined_text(self, blocks):
        blocks.run_tool("set_context", {"label": "memory", "content": "one two three four five"})
        out = blocks.run_tool("set_context", {"label": "memory", "content": "six seven eight", "action": "append"})
        assert out == 'Error: Block "memory" exceeds maxTokens: 11 > 10'
        assert blocks.get_context_block("memory").content == "one two three four five"

    def test_writing_a_readonly_block_is_an_error(self, blocks):
        out = blocks.run_tool("set_context", {"label": "soul", "content": "evil"})
        assert out == 'Error: Block "soul" is readonly'
        assert blocks.get_context_block("soul").content == "You are helpful."

    def test_an_unknown_label_is_upstreams_lower_case_error(self, blocks):
        assert blocks.run_tool("set_context", {"label": "nope", "content": "x"}) == 'Error: block "nope" not found'

    def test_keyed_write_returns_the_derived_key(self, blocks):
        out = blocks.run_tool("set_context", {"label": "skills", "content": "Talk like a pirate.",
                                              "metadata": {"title": "Pirate style"}})
        assert out == 'Indexed "pirate-style" in skills.'
        assert blocks.get_context_block("skills").content == "- pirate-style: Pirate style"

    @pytest.mark.parametrize(
        ("metadata", "content", "key"),
        [({"title": "Pirate style"}, "Talk like a pirate.", "pirate-style"),
         (None, "no key", "no-key-1nprufp"),
         ({}, "\u7528\u6237\u559c\u6b22\u5496\u5561", "entry-2mzjev"),
         ({"title": "   "}, "no key", "no-key-1nprufp")],
    )
    def test_keys_are_derived_as_upstream(self, blocks, metadata, content, key):  # spec 16 case 15
        data = {"label": "skills", "content": content}
        if metadata is not None:
            data["metadata"] = metadata
        assert blocks.run_tool("set_context", data) == f'Indexed "{key}" in skills.'
        assert blocks.load_skill("skills", key) == content

    def test_keyed_write_ignores_action(self, blocks):
        out = blocks.run_tool("set_context", {"label": "knowledge", "content": "no key", "action": "append"})
        assert out == 'Indexed "no-key-1nprufp" in knowledge.'
        assert blocks.get_context_block("knowledge").content == "1 entries indexed."

    def test_keyed_write_without_content_is_a_schema_error(self, blocks):
        out = blocks.run_tool("set_context", {"label": "skills", "metadata": {"title": "Pirate style"}})
        assert out == 'Error: Invalid input for set_context: "content" is required'
        assert blocks.get_context_block("skills").content == ""


class TestSkillTools:
    def test_loading_returns_the_document_and_a_missing_key_is_not_found(self):
        blocks = ContextBlocks([ContextConfig("skills", provider=Skills({"pirate": "Arr."}))])
        assert blocks.run_tool("load_context", {"label": "skills", "key": "pirate"}) == "Arr."
        assert blocks.run_tool("load_context", {"label": "skills", "key": "ninja"}) == "Not found: ninja"
        assert blocks.loaded_skills == ["skills:pirate"]

    def test_loading_an_already_loaded_skill_sends_no_second_copy(self):
        blocks = ContextBlocks([ContextConfig("skills", provider=Skills({"pirate": "Arr. " * 100}))])
        first = blocks.run_tool("load_context", {"label": "skills", "key": "pirate"})
        second = blocks.run_tool("load_context", {"label": "skills", "key": "pirate"})
        assert first.startswith("Arr.")
        assert "Arr." not in second and "already loaded" in second
        unload = next(t for t in blocks.tools() if t["name"] == "unload_context")
        assert unload["description"].count("skills:pirate") == 1

    def test_a_wrong_label_lists_the_skill_blocks(self):
        blocks = ContextBlocks([ContextConfig("a", provider=Skills()), ContextConfig("b", provider=Skills()),
                                ContextConfig("memory", provider=Memory())])
        assert blocks.run_tool("load_context", {"label": "memory", "key": "x"}) == (
            'Error: "memory" is not a skill block. Skill blocks: a, b'
        )
        assert blocks.run_tool("unload_context", {"label": "zzz", "key": "x"}) == (
            'Error: "zzz" is not a skill block. Skill blocks: a, b'
        )

    def test_unload_says_the_text_stays_retrievable(self):
        unloaded = []
        blocks = ContextBlocks([ContextConfig("skills", provider=Skills({"pirate": "Arr."}))],
                               on_unload=lambda label, key: unloaded.append((label, key)))
        assert blocks.run_tool("unload_context", {"label": "skills", "key": "pirate"}) == (
            'Skill "pirate" is not currently loaded in "skills".'
        )
        blocks.run_tool("load_context", {"label": "skills", "key": "pirate"})
        out = blocks.run_tool("unload_context", {"label": "skills", "key": "pirate"})
        assert out.startswith('Unloaded "pirate" from skills. Context reclaimed. ')
        assert "stays in storage" in out
        assert unloaded == [("skills", "pirate")]
        assert blocks.loaded_skills == []
        assert blocks.run_tool("load_context", {"label": "skills", "key": "pirate"}) == "Arr."


class TestSearchTool:
    def test_a_search_on_an_empty_block_finds_nothing(self, blocks):
        assert blocks.run_tool("search_context", {"label": "knowledge", "query": "anything"}) == "No results found."

    def test_results_show_each_hits_key_and_score(self, blocks):
        blocks.run_tool("set_context", {"label": "knowledge", "content": "The deploy runs on Friday",
                                        "metadata": {"title": "deploy day"}})
        blocks.run_tool("set_context", {"label": "knowledge", "content": "Lunch is at noon",
                                        "metadata": {"title": "lunch"}})
        out = blocks.run_tool("search_context", {"label": "knowledge", "query": "when is the deploy"})
        first = out.split("\n\n")[0]
        assert first.startswith("[deploy-day] (score 0.")
        assert first.endswith("\nThe deploy runs on Friday")

    def test_a_wrong_label_lists_the_searchable_blocks(self, blocks):
        assert blocks.run_tool("search_context", {"label": "memory", "query": "q"}) == (
            'Error: "memory" is not searchable. Searchable blocks: knowledge'
        )


class TestRunToolNeverRaises:
    @pytest.mark.parametrize(
        ("name", "data", "expected"),
        [
            ("set_context", None, "Error: Invalid input for set_context: expected an object, got NoneType"),
            ("set_context", {"label": "memory", "content": 5},
             'Error: Invalid input for set_context: "content" must be a string'),
            ("set_context", {"label": "memory", "content": "x", "action": "prepend"},
             'Error: Invalid input for set_context: "action" must be one of "replace", "append"'),
            ("set_context", {"label": "skills", "content": "x", "metadata": "t"},
             'Error: Invalid input for set_context: "metadata" must be an object'),
            ("set_context", {"label": "skills", "content": "x", "metadata": {"title": 3}},
             'Error: Invalid input for set_context: "metadata.title" must be a string'),
            ("load_context", {"label": "skills"}, 'Error: Invalid input for load_context: "key" is required'),
            ("search_context", {"label": 7, "query": "q"},
             'Error: Invalid input for search_context: "label" must be a string'),
            ("delete_everything", {}, 'Error: unknown tool "delete_everything". Available tools: set_context, '
                                      "load_context, unload_context, search_context"),
        ],
    )
    def test_bad_input_comes_back_as_an_error_string(self, blocks, name, data, expected):
        assert blocks.run_tool(name, data) == expected

    def test_a_provider_that_raises_on_write_is_an_error_string(self):
        class Broken(Memory):
            def set(self, content):
                raise OSError("disk full")

        blocks = ContextBlocks([ContextConfig("memory", provider=Broken("old"))])
        assert blocks.run_tool("set_context", {"label": "memory", "content": "new"}) == "Error: disk full"
        assert blocks.get_context_block("memory").content == "old"
