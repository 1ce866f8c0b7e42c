"""Memory designs as policies: the fact memory's decisions, each design replayed through real sessions (DuckDB,
MiniLM, FAISS), what each puts in the prompt and where it finds evidence, the Claude writers through the real SDK
(httpx2.MockTransport), the command line and the frontier plot."""

from __future__ import annotations

import json

import pytest

import agentlab.experiments as ex
from agentlab.errors import InvalidArgumentError, UnknownPolicyError
from agentlab.eval import load_records
from agentlab.experiments.fact_memory import FactMemory, extract_facts
from agentlab.experiments.retrieval import Doc
from tests.anthropic_mock import ScriptedClaude, reply, text, tool_use

_OBJECTS = ["violin", "kettle", "bicycle", "lantern", "compass", "telescope", "hammock", "umbrella", "teapot", "saddle",
            "anchor", "blanket", "canoe", "drum", "easel", "fiddle", "guitar", "harp", "jacket", "kayak", "ladder",
            "mirror", "needle", "piano", "quilt", "rocket", "sofa", "tent", "vase", "wagon"]


def _filler(i: int) -> str:
    return (f"Yesterday I repaired the old {_OBJECTS[i % len(_OBJECTS)]} in the garage, and it took the whole "
            f"afternoon because every part of the {_OBJECTS[(i + 7) % len(_OBJECTS)]} was rusty.")


def _turns() -> list[dict]:
    """Three dated sessions: greetings (the protected head), Ann's job, Bob's dog and band in the first, filler,
    then Ann quits her job."""
    said = [
        ("s1", "Ann", "Hi Bob!"), ("s1", "Bob", "Hello Ann, good to see you."), ("s1", "Ann", "How was the week?"),
        ("s1", "Ann", "I work as a nurse at Mercy Hospital downtown."),
        ("s1", "Bob", "I adopted a dog named Biscuit from the Portland shelter."),
        ("s1", "Ann", "Hi! How are you?"),
        ("s1", "Bob", "My favorite band is Radiohead since the Berlin concert."),
        *[("s1", "Ann" if i % 2 else "Bob", _filler(i)) for i in range(14)],
        *[("s2", "Ann" if i % 2 else "Bob", _filler(i + 14)) for i in range(14)],
        ("s3", "Ann", "I quit my job at Mercy Hospital in March."),
        *[("s3", "Ann" if i % 2 else "Bob", _filler(i + 3)) for i in range(4)],
    ]
    dates = {"s1": "1 May 2023", "s2": "9 May 2023", "s3": "20 June 2023"}
    return [{"conversation_id": "c", "session_id": s, "session_date": dates[s], "turn_id": f"{s}_{n}", "speaker": who,
             "text": words} for n, (s, who, words) in enumerate(said)]


QUESTIONS = [
    {"conversation_id": "c", "question_id": "job", "question": "Where does Ann work as a nurse?",
     "evidence": "s1_3", "category": 1, "answer": "Mercy Hospital", "asked_after": "s2_34"},
    {"conversation_id": "c", "question_id": "dog", "question": "What is the name of the dog Bob adopted?",
     "evidence": "s1_4", "category": 4, "answer": "Biscuit"},
    {"conversation_id": "c", "question_id": "job-late", "question": "Where did Ann work as a nurse?",
     "evidence": "s1_3", "category": 1, "answer": "Mercy Hospital"},
]


@pytest.fixture(scope="module")
def dataset():
    return load_records(_turns(), QUESTIONS, name="tiny")


def _small(policy: ex.Policy, *, compaction=None) -> ex.Policy:
    """A design with a working memory small enough for the tiny conversation (compacts above 300 tokens)."""
    from dataclasses import replace

    return replace(policy, name=policy.name, compaction=compaction or ex.Compaction(300, 80))


@pytest.fixture(scope="module")
def replayed(dataset, tmp_path_factory):
    from dataclasses import replace

    core = replace(_small(ex.get_policy("core-archival")), name="core-pointer", summarizer=ex.PointerSummarizer())
    policies = ["none", *(_small(p) for p in ex.DESIGN_POLICIES), core]
    return ex.replay(dataset, policies, keep_prompts=True, embeddings=tmp_path_factory.mktemp("e") / "e.duckdb",
                     progress=False)


def _row(results, policy, question):
    frame = results.per_question
    return frame[(frame["policy"] == policy) & (frame["question_id"] == question)].iloc[0]


def _status(results, policy, question):
    frame = results.evidence
    return frame[(frame["policy"] == policy) & (frame["question_id"] == question)].iloc[0]


class TestFactMemory:
    def test_extraction_drops_questions_and_small_talk_and_keys_first_person_facts(self):
        doc = Doc("c/t1", "Hi! How are you? I work as a nurse at Mercy Hospital. Wow, great!", "Ann", "1 May 2023")
        facts = extract_facts(doc)
        assert [f.text for f in facts] == ["I work as a nurse at Mercy Hospital."]
        assert facts[0].key == "ann/work" and facts[0].sources == ("c/t1",) and facts[0].date == "1 May 2023"

    def test_the_four_events_of_a_plain_memory(self):
        memory = FactMemory()
        said = [("t1", "I work as a nurse at Mercy Hospital."), ("t2", "I work as a nurse at Mercy Hospital."),
                ("t3", "I work as a surgeon at Mercy Hospital now."), ("t4", "Bought a red kayak in Oslo."),
                ("t5", "Bought a red kayak in Oslo with my brother."), ("t6", "I quit my job last week.")]
        events = [[d.event for d in memory.observe(Doc(f"c/{t}", words, "Ann", "d"))] for t, words in said]
        assert events == [["ADD"], ["NONE"], ["UPDATE"], ["ADD"], ["UPDATE"], ["DELETE", "ADD"]]
        texts = {f.text for f in memory.current()}
        assert texts == {"Bought a red kayak in Oslo with my brother.", "I quit my job last week."}
        kayak = next(f for f in memory.current() if "kayak" in f.text)
        assert kayak.sources == ("c/t4", "c/t5")  # an update keeps the turns the fact came from

    def test_a_dated_memory_closes_facts_instead_of_losing_them(self):
        memory = FactMemory(dated=True)
        memory.observe(Doc("c/t1", "I work as a nurse at Mercy Hospital.", "Ann", "1 May"))
        memory.observe(Doc("c/t2", "I work as a surgeon at Mercy Hospital now.", "Ann", "9 May"))
        memory.observe(Doc("c/t3", "I quit my job last week.", "Ann", "20 June"))
        closed = {f.text: f.valid_to for f in memory.facts.values() if f.valid_to}
        assert closed == {"I work as a nurse at Mercy Hospital.": "9 May",
                          "I work as a surgeon at Mercy Hospital now.": "20 June"}
        assert [f.text for f in memory.current()] == ["I quit my job last week."]

    def test_a_model_event_goes_through_the_same_rules(self):
        memory = FactMemory()
        with pytest.raises(InvalidArgumentError, match="ADD, UPDATE, DELETE or NONE"):
            memory.apply("MERGE", "k", "x", (), None)
        assert memory.apply("DELETE", "missing", None, (), None).event == "NONE"
        assert memory.apply("UPDATE", "new", "Ann likes tea.", ("c/t1",), "d").event == "ADD"


class TestDesignPolicies:
    def test_every_design_is_a_named_documented_policy_with_a_claude_variant(self):
        assert ex.DESIGNS == ("search-tool", "compact-retrieve", "facts", "dated-facts", "core-archival")
        for name in ex.DESIGNS:
            policy = ex.get_policy(name)
            assert policy.design is not None and policy.description and not policy.needs_model
            assert policy.describe()["design"] == policy.design.kind
        for name in ("compact-retrieve-claude", "facts-claude", "dated-facts-claude", "core-archival-claude"):
            assert ex.get_policy(name).needs_model
        with pytest.raises(UnknownPolicyError):
            ex.get_policy("search-tool-claude")  # it writes nothing, so there is nothing for Claude to write

    def test_with_retrieval_swaps_the_ranking_and_bad_retrievals_say_what_to_do(self):
        swapped = ex.with_retrieval("facts", ex.Retrieval("bm25", k=3))
        assert swapped.name == "facts+bm25-k3" and swapped.design.retrieval.k == 3
        assert ex.get_policy("facts").design.retrieval.method == "hybrid"  # the registered design is untouched
        with pytest.raises(InvalidArgumentError, match="no memory design"):
            ex.with_retrieval("aggressive", ex.Retrieval())
        with pytest.raises(InvalidArgumentError, match="one of"):
            ex.Retrieval("tfidf")
        with pytest.raises(InvalidArgumentError, match="whole number"):
            ex.Retrieval(k=0)
        with pytest.raises(InvalidArgumentError, match="MemoryDesign"):
            ex.Policy("p", "x", design="facts")


class TestReplayedDesigns:
    def test_designs_keep_a_small_prompt_and_count_what_their_retrieval_adds(self, replayed):
        frame = replayed.per_question.set_index(["policy", "question_id"])
        for name in ex.DESIGNS:
            row = frame.loc[(name, "job-late")]
            assert row["compactions"] > 0 and row["retrieval_tokens"] > 0
            assert row["prompt_tokens"] < frame.loc[("none", "job-late"), "prompt_tokens"]
            assert row["evidence_reachable"] == row["evidence_in_prompt"]  # a design's recall is in the prompt
            context = replayed.contexts[(name, "c", "s3_39")]
            assert context.retrieved["job-late"].startswith("[")

    def test_search_finds_a_turn_compaction_hid(self, replayed):
        for name in ("search-tool", "compact-retrieve", "core-archival"):
            status = _status(replayed, name, "dog")
            assert status["searchable"] and status["search_rank"] >= 1 and status["distance_turns"] > 30
        # a summary that still carries the turn counts first; the pointer of search-tool carries nothing
        assert _status(replayed, "search-tool", "dog")["status"] == "retrieved"
        assert "Biscuit" in replayed.contexts[("search-tool", "c", "s3_39")].retrieved["dog"]

    def test_a_plain_fact_memory_forgets_a_job_that_ended_and_a_dated_one_keeps_it(self, replayed):
        assert _status(replayed, "facts", "job")["status"] == "retrieved"  # before she quit
        assert _status(replayed, "facts", "job-late")["status"] == "lost"  # deleted when she quit
        assert _status(replayed, "dated-facts", "job-late")["status"] == "retrieved"
        shown = replayed.contexts[("dated-facts", "c", "s3_39")].retrieved["job-late"]
        assert "Mercy Hospital downtown. (no longer true from 20 June 2023)" in shown

    def test_core_memory_holds_the_job_in_a_block_until_she_quits(self, replayed):
        assert _status(replayed, "core-archival", "job")["status"] == "summary"  # its summary kept the turn too
        job = _status(replayed, "core-pointer", "job")  # with no summary, the core block is what holds it
        assert job["status"] == "block"
        early = replayed.contexts[("core-pointer", "c", "s2_34")].system
        late = replayed.contexts[("core-pointer", "c", "s3_39")].system
        assert "work: I work as a nurse at Mercy Hospital downtown." in early
        assert "Mercy Hospital downtown" not in late  # removed from core memory; archival memory keeps it
        assert _status(replayed, "core-pointer", "job-late")["status"] == "retrieved"

    def test_the_summary_ranks_designs_by_prompt_share_and_the_plot_shows_them_all(self, replayed):
        from agentlab import plot

        frontier = replayed.frontier("reachable")
        assert list(frontier["policy"]) == ["none", *ex.DESIGNS, "core-pointer"]
        assert (frontier["kept"] <= 1).all() and frontier.set_index("policy").loc["none", "kept"] == 1
        by_category = replayed.frontier("in_prompt", category=1)
        assert set(by_category["category"]) == {"1"} and (by_category["n"] == 2).all()
        with pytest.raises(ValueError, match="categories are 1, 4"):
            replayed.frontier("reachable", category=3)
        figure = plot.policy_frontier(replayed, kept="reachable", relative=True)
        assert len(figure.axes[0].containers) == 2 + len(ex.DESIGNS)


def _facts_responder(body):
    """Extraction: one fact per turn that names a nurse or a dog; update: UPDATE stored fact 0."""
    said = body["messages"][0]["content"][0]["text"]
    if body["system"].startswith("You keep a memory"):
        return reply(text(json.dumps({"memory": [
            {"id": "0", "text": "Ann worked as a nurse at Mercy Hospital until she quit in March 2023.",
             "event": "UPDATE", "turns": ["s3_35"]}]})))
    facts = []
    for line in said.splitlines():
        if line.startswith("[s1_3]"):
            facts.append({"fact": "Ann works as a nurse at Mercy Hospital downtown.", "turns": ["s1_3"]})
        if line.startswith("[s3_35]"):
            facts.append({"fact": "Ann quit her nurse job at Mercy Hospital in March 2023.", "turns": ["s3_35"]})
    return reply(text("```json\n" + json.dumps({"facts": facts}) + "\n```"))


class TestClaudeDesigns:
    def test_claude_extracts_facts_then_decides_updates_through_the_real_sdk(self, dataset, tmp_path):
        claude = ScriptedClaude(default=_facts_responder)
        policy = _small(ex.get_policy("facts-claude"))
        results = ex.replay(dataset, [policy], client=claude.client(), cache=tmp_path / "c.duckdb",
                            embeddings=tmp_path / "e.duckdb", keep_prompts=True, progress=False)
        systems = [r["system"] for r in claude.requests]
        # one extraction per dated session, and one update once a new fact has similar stored ones
        assert sum(s.startswith("You write the long-term memory") for s in systems) == 3
        assert sum(s.startswith("You keep a memory") for s in systems) == 1
        update = next(r for r in claude.requests if r["system"].startswith("You keep a memory"))
        assert "Ann works as a nurse at Mercy Hospital downtown." in update["messages"][0]["content"][0]["text"]
        early = _status(results, policy.name, "job")
        assert early["status"] == "retrieved"  # the extracted fact cites s1_3 and carries its words
        late = results.contexts[(policy.name, "c", "s3_39")].retrieved["job-late"]
        assert "until she quit in March 2023" in late
        again = ScriptedClaude()  # every request is cached: a re-run sends nothing
        ex.replay(dataset, [policy], client=again.client(), cache=tmp_path / "c.duckdb",
                  embeddings=tmp_path / "e.duckdb", progress=False)
        assert again.requests == []

    def test_claude_edits_core_memory_and_inserts_archival_passages(self, dataset, tmp_path):
        def responder(body):
            said = body["messages"][0]["content"][0]["text"]
            if "[s1_4]" not in said:
                return reply(text("Nothing new worth keeping."))
            return reply(tool_use("set_context", {"label": "human-bob", "content": "Bob has a dog, Biscuit."}),
                         tool_use("archival_memory_insert", {"content": "Bob adopted a dog named Biscuit from "
                                                             "the Portland shelter.", "turns": ["s1_4", "zz"]}))

        claude = ScriptedClaude(default=responder)
        policy = _small(ex.get_policy("core-archival-claude"), compaction=ex.Compaction(300, 80))
        from dataclasses import replace

        policy = replace(policy, summarizer="extractive")  # Claude writes memory here; summaries stay extractive
        results = ex.replay(dataset, [policy], client=claude.client(), cache=None, embeddings=None,
                            keep_prompts=True, progress=False)
        assert len(claude.requests) == 3  # one per dated session
        names = {t["name"] for t in claude.requests[0]["tools"]}
        assert {"set_context", "archival_memory_insert"} <= names
        context = results.contexts[(policy.name, "c", "s3_39")]
        assert "Bob has a dog, Biscuit." in context.system
        assert "[archival_memory_search found" in context.retrieved["dog"]
        assert "Bob adopted a dog named Biscuit from the Portland shelter." in context.retrieved["dog"]


class TestCommandLine:
    def test_designs_run_from_the_command_line(self, capsys):
        from agentlab.cli import main

        code = main(["experiment", "bundled", "--policies", "none,search-tool", "--conversations", "1",
                     "--no-progress"])
        out = capsys.readouterr().out
        assert code == 0 and "search-tool" in out and "in_prompt" in out

    def test_a_claude_design_without_a_key_is_a_one_line_error(self, capsys, monkeypatch):
        from agentlab.cli import main

        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        code = main(["experiment", "bundled", "--policies", "facts-claude", "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and "ANTHROPIC_API_KEY" in err and err.count("\n") == 1


class TestAnswering:
    def test_the_answer_request_carries_what_the_design_retrieved(self, replayed, tmp_path):
        from agentlab.experiments.cache import RequestCache

        def responder(body):
            said = " ".join(b.get("text", "") for b in body["messages"][-1]["content"])
            if said.startswith("You are grading"):
                return reply(text("CORRECT" if "Answer to grade: Biscuit" in said else "WRONG"))
            return reply(text("Biscuit" if "Biscuit" in said else "I do not know"))

        claude = ScriptedClaude(default=responder)
        dog = replayed.only(["c"])
        qa = ex.answer(dog, client=claude.client(max_retries=0), cache=RequestCache(tmp_path / "qa.duckdb"),
                       mode="direct", runs=1, out=lambda line: None, sleep=lambda s: None)
        asked = [r for r in claude.requests if "What is the name of the dog" in json.dumps(r)
                 and not r["messages"][0]["content"][0]["text"].startswith("You are grading")]
        search = next(r for r in asked if "[search_history found" in json.dumps(r))
        parts = [b["text"] for b in search["messages"][0]["content"]]
        assert len(parts) == 3 and parts[1].startswith("[search_history found") and parts[2].startswith("Question:")
        correct = qa.answers.set_index(["policy", "question_id"])["correct"]
        assert correct[("search-tool", "dog")] == 1.0 and correct[("none", "dog")] == 1.0
        assert correct[("facts", "dog")] == float("Biscuit" in dog.contexts[("facts", "c", "s3_39")].retrieved["dog"])

    def test_results_restricted_to_some_conversations(self, replayed):
        assert len(replayed.only(["c"]).per_question) == len(replayed.per_question)
        with pytest.raises(ValueError, match="None of"):
            replayed.only(["conv-99"])
