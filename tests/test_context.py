"""Context blocks on a session: loading, writes and their errors, the frozen prompt, skills restored from history,
namespacing, and the prompt fixture (spec sections 7-9, 16 cases 11, 13-18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlab import Agent, get_agent
from agentlab.context._blocks import ContextBlocks, ContextConfig
from agentlab.context._providers import AgentSkillProvider, FolderSkillProvider
from agentlab.context._search_providers import VectorSearchProvider
from agentlab.context._tools import scan_loaded_skills
from agentlab.errors import (
    BlockBudgetError,
    BlockNotFoundError,
    BlockReadonlyError,
    ContextError,
    ContextProviderError,
)
from agentlab.search._embedders import HashEmbedder
from agentlab.session._session import Session

FIXTURES = Path(__file__).parent / "fixtures"


class Text:
    """A provider whose text the test changes directly (read-only unless ``writable``)."""

    def __init__(self, text=None, writable=False):
        self.text = text
        if writable:
            self.set = self._set

    def get(self):
        return self.text

    def _set(self, content):
        self.text = content


class Broken:
    def get(self):
        raise OSError("the disk is gone")

    def set(self, content):
        raise AssertionError("never called: the block failed to load")


class Collecting(Agent):
    """An agent that keeps the errors reported to it instead of warning."""

    def on_start(self):
        self.errors = []

    def on_error(self, error):
        self.errors.append(error)


def msg(mid, text=None, role="user"):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": mid if text is None else text}]}


def load_call(mid, call_id, key, label="skills"):
    return {"id": mid, "role": "assistant", "parts": [
        {"type": "tool_use", "id": call_id, "name": "load_context", "input": {"label": label, "key": key}}]}


def tool_result(mid, call_id, content):
    return {"id": mid, "role": "user", "parts": [{"type": "tool_result", "tool_use_id": call_id, "content": content}]}


@pytest.fixture
def agent():
    return get_agent(Collecting, "researcher")


class TestSessionsHaveTheMixin:
    def test_the_session_holds_its_blocks_and_the_builder_chains(self, agent):
        session = Session.create(agent).with_context("memory", description="Facts", max_tokens=100).with_cached_prompt()
        assert isinstance(session, Session) and isinstance(session.context, ContextBlocks)
        assert session.context.labels == ["memory"]


class TestLoading:
    def test_blocks_are_not_loaded_until_something_uses_them(self, agent):
        session = Session.create(agent).with_context("soul", Text("hi"))
        assert session.get_context_block("soul") is None
        assert session.get_context_blocks() == []
        session.tools()
        assert session.get_context_block("soul").content == "hi"
        assert session.get_context_block("soul").tokens == 2  # ceil(1 word x 1.3)

    def test_init_is_called_with_the_label_before_every_get(self):
        seen = []

        class Labelled(Text):
            def init(self, label):
                seen.append(label)

        blocks = ContextBlocks([ContextConfig("soul", provider=Labelled("x"))])
        blocks.load()
        blocks.refresh_system_prompt()
        assert seen == ["soul", "soul"]

    def test_a_provider_whose_get_raises_is_left_out_and_reported(self, agent):
        session = (Session.create(agent).with_context("soul", Text("You are helpful."))
                   .with_context("broken", Broken()).with_context("memory"))
        prompt = session.freeze_system_prompt()
        assert "SOUL [readonly]" in prompt and "MEMORY [writable]" in prompt
        assert "BROKEN" not in prompt
        assert list(session.context.errors) == ["broken"]
        assert [type(e) for e in agent.errors] == [ContextProviderError]
        assert "the disk is gone" in str(agent.errors[0])
        assert session.run_tool("set_context", {"label": "broken", "content": "x"}).startswith(
            'Error: The provider of block "broken" failed: OSError: the disk is gone.')

    def test_a_provider_returning_a_non_string_is_reported(self):
        blocks = ContextBlocks([ContextConfig("soul", provider=Text(42))])
        assert blocks.render() == ""
        assert "returned int" in str(blocks.errors["soul"])


class TestWrites:
    @pytest.fixture
    def session(self, agent):
        return (Session.create(agent).with_context("soul", Text("You are helpful."))
                .with_context("memory", max_tokens=10))

    def test_writing_a_readonly_or_unknown_block_raises_upstreams_error(self, session):
        with pytest.raises(BlockReadonlyError, match=r'^Block "soul" is readonly$'):
            session.set_block("soul", "x")
        with pytest.raises(BlockReadonlyError, match=r'^Block "ghost" is readonly$'):
            session.set_block("ghost", "x")
        with pytest.raises(BlockNotFoundError, match=r'^Block "ghost" not found$'):
            session.append_to_block("ghost", "x")

    def test_over_budget_write_and_append_raise_and_change_nothing(self, session):  # spec 16 case 14
        with pytest.raises(BlockBudgetError, match=r'^Block "memory" exceeds maxTokens: 65 > 10$'):
            session.set_block("memory", "word " * 50)
        session.set_block("memory", "fact1")
        with pytest.raises(BlockBudgetError, match="exceeds maxTokens: 11 > 10"):
            session.append_to_block("memory", "a b c d e f g")
        assert session.get_context_block("memory").content == "fact1"
        assert session.context.config("memory").provider.get() == "fact1"

    def test_append_adds_a_newline_unless_the_text_starts_with_one(self, session):
        session.append_to_block("memory", "fact1")
        session.append_to_block("memory", "\nfact2")
        session.append_to_block("memory", "fact3")
        assert session.get_context_block("memory").content == "fact1\nfact2\nfact3"

    def test_keyed_blocks_refuse_plain_writes(self, agent):
        session = Session.create(agent).with_context("skills", AgentSkillProvider(agent))
        with pytest.raises(ContextError, match=r'is a keyed provider\. Use setSkill\(\) or setSearchEntry\(\)'):
            session.set_block("skills", "x")

    def test_keyed_writes_copy_the_providers_new_text(self, agent):
        session = (Session.create(agent).with_context("skills", AgentSkillProvider(agent))
                   .with_context("knowledge", VectorSearchProvider(agent, HashEmbedder(16))))
        assert session.set_skill("skills", "pirate", "Arr.", "Talk like a pirate").content == "- pirate: Talk like a pirate"
        assert session.set_search_entry("knowledge", "k", "fact").content == "1 entries indexed."
        with pytest.raises(ContextError, match='not a search block'):
            session.set_search_entry("skills", "k", "x")

    def test_a_skill_key_that_does_not_exist_is_none(self, agent):
        session = Session.create(agent).with_context("skills", FolderSkillProvider(FIXTURES / "skills"))
        assert session.load_skill("skills", "nope") is None
        assert session.run_tool("load_context", {"label": "skills", "key": "nope"}) == "Not found: nope"
        assert session.context.loaded_skills == []

    def test_add_and_remove_context(self, agent):
        session = Session.create(agent).with_context("soul", Text("hi"))
        frozen = session.freeze_system_prompt()
        block = session.add_context("notes", Text("later"))
        assert block.content == "later"
        with pytest.raises(ContextError, match=r'^Block "notes" already exists$'):
            session.add_context("notes", Text("again"))
        assert session.freeze_system_prompt() == frozen  # neither add nor remove refreshes
        assert session.remove_context("notes") is True
        assert session.remove_context("notes") is False
        assert "NOTES" not in session.refresh_system_prompt()

    def test_add_context_without_provider_and_without_agent_is_refused(self):
        with pytest.raises(ContextError, match="requires an explicit provider"):
            ContextBlocks().add_context("notes")


class TestFrozenPrompt:  # spec 16 case 13
    def test_writes_change_the_provider_but_not_the_frozen_prompt(self):
        memory = Text("v1", writable=True)
        blocks = ContextBlocks([ContextConfig("memory", provider=memory)])
        assert "v1" in blocks.freeze_system_prompt()
        blocks.set_block("memory", "updated")
        assert memory.text == "updated"
        assert "v1" in blocks.to_system_prompt() and "updated" not in blocks.to_system_prompt()
        memory.text = "v2"
        refreshed = blocks.refresh_system_prompt()
        assert "v2" in refreshed and "v1" not in refreshed
        assert blocks.freeze_system_prompt() == refreshed

    def test_a_second_session_with_the_same_id_returns_the_stored_prompt(self, agent):
        first = Session.create(agent, "chat").with_context("memory").with_cached_prompt()
        first.set_block("memory", "v1")
        stored = first.freeze_system_prompt()
        first.set_block("memory", "v2")
        second = Session(agent, "chat").with_cached_prompt().with_context("memory")
        assert second.freeze_system_prompt() == stored
        assert "v2" in second.refresh_system_prompt()
        assert Session(agent, "chat").with_cached_prompt().freeze_system_prompt() == second.system_prompt

    def test_an_empty_stored_prompt_is_returned_unchanged(self, agent):
        Session.create(agent).with_cached_prompt().freeze_system_prompt()  # stores ""
        later = Session.create(agent).with_context("soul", Text("now there is text")).with_cached_prompt()
        assert later.freeze_system_prompt() == ""

    def test_clear_messages_refreshes_the_prompt_and_forgets_loaded_skills(self, agent):
        session = (Session.create(agent).with_context("memory")
                   .with_context("skills", FolderSkillProvider(FIXTURES / "skills")))
        session.set_block("memory", "v1")
        session.freeze_system_prompt()
        session.run_tool("load_context", {"label": "skills", "key": "pirate"})
        session.set_block("memory", "v2")
        session.clear_messages()
        assert "v2" in session.freeze_system_prompt()
        assert session.context.loaded_skills == []

    def test_a_successful_compaction_refreshes_the_prompt(self, agent):
        session = Session.create(agent).with_context("memory")
        session.on_compaction(lambda history: {"from_message_id": history[0]["id"],
                                               "to_message_id": history[1]["id"], "summary": "S"})
        session.append_messages([msg("m0"), msg("m1"), msg("m2")])
        session.set_block("memory", "v1")
        session.freeze_system_prompt()
        session.set_block("memory", "v2")
        assert "v1" in session.freeze_system_prompt()
        assert session.compact() is not None
        assert "v2" in session.freeze_system_prompt()


class TestAutoCompactionCountsThePrompt:  # spec 16 case 11
    @staticmethod
    def compacting(agent, provider, threshold, **options):
        calls = []

        def fn(history):
            calls.append(len(history))
            if len(history) < 2:
                return None
            return {"from_message_id": history[0]["id"], "to_message_id": history[0]["id"], "summary": "S"}

        session = Session.create(agent).with_context("x", provider).on_compaction(fn)
        session.compact_after(threshold, **options)
        return session, calls

    def test_a_large_readonly_block_triggers_compaction(self, agent):
        session, calls = self.compacting(agent, Text("x" * 400), 50)
        session.append_message(msg("m0", "short"))
        session.append_message(msg("m1", "ok"))
        assert calls and len(session.get_compactions()) == 1

    def test_the_frozen_snapshot_is_counted_not_the_changed_provider(self, agent):
        provider = Text("x" * 400)
        session, _calls = self.compacting(agent, provider, 50)
        session.freeze_system_prompt()
        provider.text = "short"
        session.append_message(msg("m0", "short"))
        session.append_message(msg("m1", "ok"))
        assert len(session.get_compactions()) == 1

    def test_a_counter_returning_nan_never_fires(self, agent):
        session, calls = self.compacting(agent, Text("x" * 400), 1, token_counter=lambda **kw: float("nan"))
        session.append_message(msg("m0", "short"))
        session.append_message(msg("m1", "ok"))
        assert calls == []

    def test_custom_counters_receive_the_loaded_blocks(self, agent):
        seen = {}

        def counter(messages, system_prompt, context_blocks):
            seen.update(prompt=system_prompt, labels=[b.label for b in context_blocks])
            return 0

        session = Session.create(agent, token_counter=counter).with_context("soul", Text("hello"))
        session.estimate_tokens()
        assert seen["labels"] == ["soul"] and "hello" in seen["prompt"]


class TestNamespacing:  # spec 16 case 16
    @pytest.mark.parametrize("order", ["context-first", "cache-first"])
    def test_block_and_prompt_rows_carry_the_session_id(self, agent, order):
        session = Session.create(agent, "chat-123")
        if order == "context-first":
            session.with_context("memory").with_cached_prompt()
        else:
            session.with_cached_prompt().with_context("memory")
        session.set_block("memory", "fact")
        session.freeze_system_prompt()
        keys = {(r["session_id"], r["label"]) for r in agent.sql("SELECT session_id, label FROM context_blocks")}
        assert keys == {("chat-123", "memory"), ("chat-123", "_system_prompt")}

    def test_the_default_session_uses_bare_names(self, agent):
        session = Session.create(agent).with_context("memory").with_cached_prompt()
        session.set_block("memory", "fact")
        session.freeze_system_prompt()
        keys = {(r["session_id"], r["label"]) for r in agent.sql("SELECT session_id, label FROM context_blocks")}
        assert keys == {("", "memory"), ("", "_system_prompt")}


class TestRenderingTags:  # spec 16 case 17
    def test_each_kind_gets_exactly_its_tag(self, agent):
        session = (Session.create(agent).with_context("memory", Text(None, writable=True))
                   .with_context("skills", AgentSkillProvider(agent))
                   .with_context("knowledge", VectorSearchProvider(agent, HashEmbedder(8)))
                   .with_context("soul", Text("Be kind.")))
        prompt = session.freeze_system_prompt()
        headers = [line for line in prompt.split("\n") if line.isupper() or "[" in line]
        assert headers == ["MEMORY [writable]", "SKILLS [loadable]", "KNOWLEDGE [searchable]", "SOUL [readonly]"]
        assert "[readonly]" not in prompt.split("SOUL")[0]

    def test_an_empty_readonly_block_is_skipped(self):
        blocks = ContextBlocks([ContextConfig("soul", provider=Text("")), ContextConfig("memory", provider=Text(None, True))])
        assert blocks.render().split("\n")[1] == "MEMORY [writable]"

    def test_a_session_with_one_block_of_each_kind_matches_the_fixture(self, agent):
        session = (
            Session.create(agent)
            .with_context("soul", Text("You are a careful research assistant."))
            .with_context("memory", description="Facts about the user", max_tokens=1100)
            .with_context("skills", FolderSkillProvider(FIXTURES / "skills"))
            .with_context("knowledge", VectorSearchProvider(agent, HashEmbedder(32)), description="Project notes")
        )
        session.set_block("memory", "User likes coffee.\nUser works in Lisbon.")
        session.set_search_entry("knowledge", "deploy", "Deploys happen on Fridays.")
        session.set_search_entry("knowledge", "lunch", "Lunch is at noon.")
        expected = (FIXTURES / "context_prompt_all_kinds.txt").read_text(encoding="utf-8")
        assert session.freeze_system_prompt() == expected


class TestASkillBlockAddedLaterRestoresLoadedSkills:
    """Upstream rescans the history when addContext adds a skill block; so does every path that adds one here."""

    @pytest.fixture
    def session(self, agent):
        AgentSkillProvider(agent, "skills").set("pirate", "Say Arr.", "Talk like a pirate")
        session = Session.create(agent, "late").with_context("memory")
        session.append_messages([msg("u1", "talk like a pirate"), load_call("a1", "c1", "pirate"),
                                 tool_result("u2", "c1", "Say Arr."), load_call("a2", "c2", "x", label="other"),
                                 tool_result("u3", "c2", "Other text.")])
        return session

    ADD_PATHS = {
        "add_context": lambda s, p: s.add_context("skills", p),
        "with_context": lambda s, p: s.with_context("skills", p),
        "the blocks' add_context": lambda s, p: s.context.add_context("skills", p),
    }

    @pytest.mark.parametrize("blocks_exist", [True, False], ids=["after first use", "before first use"])
    @pytest.mark.parametrize("path", list(ADD_PATHS))
    def test_the_skill_counts_as_loaded(self, agent, session, path, blocks_exist):
        if blocks_exist:
            session.freeze_system_prompt()  # the blocks exist, with no skill block: nothing was scanned
        self.ADD_PATHS[path](session, AgentSkillProvider(agent, "skills"))
        assert session.context.loaded_skills == ["skills:pirate"]  # not "other:x": that block is not here
        assert "already loaded" in session.run_tool("load_context", {"label": "skills", "key": "pirate"})
        assert session.run_tool("unload_context", {"label": "skills", "key": "pirate"}).startswith("Unloaded")
        assert session.get_message("u2")["parts"][0]["content"] == "[skill unloaded: pirate]"

    @pytest.mark.parametrize("unload_first", [False, True])
    def test_each_added_block_adds_only_its_own_skills(self, agent, session, unload_first):
        AgentSkillProvider(agent, "other").set("x", "Other text.")
        session.add_context("other", AgentSkillProvider(agent, "other"))
        assert session.context.loaded_skills == ["other:x"]
        if unload_first:
            session.run_tool("unload_context", {"label": "other", "key": "x"})
        session.add_context("skills", AgentSkillProvider(agent, "skills"))
        assert session.context.loaded_skills == (["skills:pirate"] if unload_first else ["other:x", "skills:pirate"])


class TestSkillsAcrossTheConversation:  # spec 16 case 18 and the unload improvement
    @pytest.fixture
    def session(self, agent):
        skills = AgentSkillProvider(agent, "skills")
        skills.set("pirate", "Say Arr at the start of every answer.", "Talk like a pirate")
        return Session.create(agent, "s1").with_context("skills", skills)

    def converse_load(self, session):
        session.append_message(msg("u1", "talk like a pirate please"))
        session.append_message(load_call("a1", "call-1", "pirate"))
        output = session.run_tool("load_context", {"label": "skills", "key": "pirate"})
        session.append_message(tool_result("u2", "call-1", output))
        return output

    def test_loaded_skills_are_restored_from_ai_sdk_parts(self, agent):
        session = Session.create(agent, "s2").with_context("skills", AgentSkillProvider(agent))
        session.append_messages([msg("u1"), {"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-load_context", "toolName": "load_context", "state": "output-available",
             "input": {"label": "skills", "key": "pirate"}}]}, msg("u2")])
        reopened = Session.create(agent, "s2").with_context("skills", AgentSkillProvider(agent))
        unload = next(t for t in reopened.tools() if t["name"] == "unload_context")
        assert "skills:pirate" in unload["description"]

    def test_loaded_skills_are_restored_from_anthropic_blocks(self, agent, session):
        assert self.converse_load(session) == "Say Arr at the start of every answer."
        reopened = Session.create(agent, "s1").with_context("skills", AgentSkillProvider(agent))
        assert reopened.context.loaded_skills == ["skills:pirate"]
        again = reopened.run_tool("load_context", {"label": "skills", "key": "pirate"})
        assert "already loaded" in again

    def test_unload_replaces_the_text_in_history_and_keeps_it_in_storage(self, agent, session):
        self.converse_load(session)
        out = session.run_tool("unload_context", {"label": "skills", "key": "pirate"})
        assert out.startswith('Unloaded "pirate" from skills. Context reclaimed. ')
        assert session.get_message("u2")["parts"][0]["content"] == "[skill unloaded: pirate]"
        assert session.unloaded_skill_text("skills", "pirate") == "Say Arr at the start of every answer."
        reopened = Session.create(agent, "s1").with_context("skills", AgentSkillProvider(agent))
        assert reopened.context.loaded_skills == []
        assert reopened.run_tool("load_context", {"label": "skills", "key": "pirate"}).startswith("Say Arr")

    def test_scan_ignores_errors_not_found_and_follows_unloads(self):
        history = [
            load_call("a1", "c1", "missing"), tool_result("u1", "c1", "Not found: missing"),
            load_call("a2", "c2", "x", label="nope"), tool_result("u2", "c2", 'Error: "nope" is not a skill block.'),
            load_call("a3", "c3", "pirate"), tool_result("u3", "c3", [{"type": "text", "text": "Arr."}]),
            load_call("a4", "c4", "api"), tool_result("u4", "c4", "API text"),
            {"id": "a5", "role": "assistant", "parts": [{"type": "tool_use", "id": "c5", "name": "unload_context",
                                                        "input": {"label": "skills", "key": "api"}}]},
            tool_result("u5", "c5", 'Unloaded "api" from skills. Context reclaimed.'),
        ]
        assert scan_loaded_skills(history) == ["skills:pirate"]
