"""Summarize functions for compaction: the offline ExtractiveSummarizer and the ClaudeSummarizer (mock transport)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlab import get_agent
from agentlab.chat._chat_agent import ChatAgent
from agentlab.chat._summarizers import ClaudeSummarizer, ExtractiveSummarizer, parse_summary_prompt
from agentlab.context._tokens import estimate_string_tokens
from agentlab.errors import ModelOverloadedError
from agentlab.session._compact_function import build_summary_prompt, compute_summary_budget, create_compact_function
from tests.anthropic_mock import ScriptedClaude, overloaded, reply, text

FACTS = [
    "I am planning a trip to Lisbon in March with my sister Ana.",
    "Our budget is 120 euros per night and we prefer the Alfama district.",
    "Ana is vegetarian and I am allergic to peanuts.",
    "We land on March 14 at 09:40 on flight TP1351.",
]
FILLER = ["ok", "Thanks!", "Sure, happy to help.", "Great.", "Yes, please."]


def conversation(n_rounds: int = 3) -> list[dict]:
    messages = []
    for r in range(n_rounds):
        for i, fact in enumerate(FACTS):
            messages.append({"id": f"u{r}-{i}", "role": "user", "parts": [{"type": "text", "text": fact}]})
            messages.append({"id": f"a{r}-{i}", "role": "assistant",
                             "parts": [{"type": "text", "text": FILLER[(r + i) % len(FILLER)]}]})
    return messages


def quoted(summary: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in summary.splitlines()[1:]]


class TestTheExtractiveSummarizer:
    def test_it_says_it_is_extractive_and_quotes_only_real_sentences(self):
        messages = conversation()
        summary = ExtractiveSummarizer()(build_summary_prompt(messages, None, 100))
        assert summary.startswith("[Extractive summary, no LLM:")
        assert quoted(summary)
        for sentence in quoted(summary):
            assert sentence in FACTS  # verbatim, never invented

    def test_it_prefers_facts_over_filler_and_quotes_a_repeat_once(self):
        summary = ExtractiveSummarizer()(build_summary_prompt(conversation(3), None, 300))
        assert sorted(quoted(summary)) == sorted(FACTS)

    def test_it_stays_under_the_target_of_the_prompt(self):
        messages = conversation(10)
        prompt = build_summary_prompt(messages, None, compute_summary_budget(messages))
        budget = parse_summary_prompt(prompt).budget
        summary = ExtractiveSummarizer()(prompt)
        assert budget == compute_summary_budget(messages)
        assert 0 < estimate_string_tokens(summary) <= budget

    @settings(max_examples=40, deadline=None)
    @given(texts=st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=30),
           budget=st.integers(min_value=0, max_value=400))
    def test_the_budget_holds_for_any_text(self, texts, budget):
        messages = [{"id": str(i), "role": "user" if i % 2 else "assistant", "parts": [{"type": "text", "text": t}]}
                    for i, t in enumerate(texts)]
        summary = ExtractiveSummarizer()(build_summary_prompt(messages, None, budget))
        assert estimate_string_tokens(summary) <= budget

    def test_an_update_keeps_earlier_facts_next_to_new_ones(self):
        first = ExtractiveSummarizer()(build_summary_prompt(conversation(1)[:4], None, 100))
        newer = [{"id": "n1", "role": "user", "parts": [{"type": "text", "text": "We rented a car from Hertz for "
                                                                                "March 16 to March 18."}]}]
        updated = ExtractiveSummarizer()(build_summary_prompt(newer, first, 200))
        lines = updated.splitlines()
        assert any(FACTS[0] in line for line in lines)
        assert any("Hertz" in line for line in lines)
        assert "[user]" in lines[1]  # roles of the earlier summary are kept

    def test_nothing_to_quote_gives_an_empty_summary(self):
        messages = [{"id": "1", "role": "user", "parts": [{"type": "text", "text": "ok"}]}]
        assert ExtractiveSummarizer()(build_summary_prompt(messages, None, 100)) == ""

    def test_it_compacts_a_session_offline(self):
        agent = get_agent(ChatAgent, "compact-offline")
        session = agent.session
        session.append_messages(conversation(3))
        fn = create_compact_function(ExtractiveSummarizer(), tail_token_budget=40)
        session.on_compaction(fn)
        result = session.compact()
        assert result is not None and result["summary"].startswith("[Extractive summary")
        history = session.get_history()
        assert history[3]["id"].startswith("compaction_")
        assert len(history) < 24


_SAME_WHATEVER_THE_SEED = r"""
import random, sys
from agentlab.chat._summarizers import ExtractiveSummarizer
from agentlab.session._compact_function import build_summary_prompt

vocab = ("alpha beta gamma delta kettle violin garden river mountain coffee tea music painting running camping dog "
         "cat sister brother mother father school work office trip beach city museum book movie friend party "
         "birthday concert guitar piano yoga dance soccer tennis hiking sunset morning evening").split()
rng = random.Random(int(sys.argv[1]))
turns = [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(80)]
messages = [{"id": str(i), "role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "text": t}]}
            for i, t in enumerate(turns)]
sys.stdout.write(ExtractiveSummarizer()(build_summary_prompt(messages, None, 150)))
"""


@pytest.mark.slow
class TestTheSummaryDoesNotDependOnTheProcess:
    def test_the_same_prompt_gives_the_same_summary_whatever_pythons_hash_seed(self):
        import os
        import subprocess
        import sys

        outputs = set()
        # Draw 28 has sentences whose scores tie up to float rounding; hash seeds 0 and 1 used to sum their words'
        # weights in orders that broke the tie differently.
        for seed in ("0", "1"):
            env = {**os.environ, "PYTHONHASHSEED": seed}
            done = subprocess.run([sys.executable, "-c", _SAME_WHATEVER_THE_SEED, "28"], env=env,
                                  capture_output=True, text=True, timeout=120, check=True)
            outputs.add(done.stdout)
        assert len(outputs) == 1 and next(iter(outputs)).startswith("[Extractive summary")


class TestTheClaudeSummarizer:
    def test_it_sends_the_reference_prompt_as_one_user_message(self):
        mock = ScriptedClaude(reply(text("## Topic\nA trip to Lisbon.")))
        prompt = build_summary_prompt(conversation(1), None, 150)
        summarize = ClaudeSummarizer(mock.client(), model="claude-haiku-5-5")
        assert summarize(prompt) == "## Topic\nA trip to Lisbon."
        body = mock.requests[0]
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
        assert body["model"] == "claude-haiku-5-5" and body["max_tokens"] == 512
        assert "Target ~150 tokens" in prompt

    def test_an_agents_summarizer_records_its_usage_as_compaction(self):
        mock = ScriptedClaude(reply(text("## Topic\nLisbon."), usage={"input_tokens": 900, "output_tokens": 30}))
        agent = get_agent(ChatAgent, "compact-claude").use_client(mock.client())
        agent.session.append_messages(conversation(3))
        agent.session.on_compaction(create_compact_function(agent.summarizer(), tail_token_budget=40))
        result = agent.session.compact()
        assert result is not None and result["summary"] == "## Topic\nLisbon."
        rows = agent.sql("SELECT purpose, input_tokens, output_tokens FROM chat_usage")
        assert rows == [{"purpose": "compaction", "input_tokens": 900, "output_tokens": 30}]
        assert "CONVERSATION TO SUMMARIZE:" in mock.requests[0]["messages"][0]["content"][0]["text"]

    def test_an_api_failure_is_typed_and_compaction_stores_nothing(self):
        mock = ScriptedClaude(default=overloaded())
        summarize = ClaudeSummarizer(mock.client(max_retries=0))
        with pytest.raises(ModelOverloadedError):
            summarize(build_summary_prompt(conversation(1), None, 100))
        agent = get_agent(ChatAgent, "compact-fails").use_client(mock.client(max_retries=0))
        agent.session.append_messages(conversation(3))
        agent.session.on_compaction(create_compact_function(agent.summarizer(), tail_token_budget=40))
        errors = []
        agent.session.on_compaction_error(errors.append)
        assert agent.session.compact() is None
        assert isinstance(errors[0], ModelOverloadedError)
        assert agent.session.get_compactions() == []
