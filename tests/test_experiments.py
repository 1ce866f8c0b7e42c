"""Memory-policy experiments: policies, replay through the real session machinery, matching, analyses, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import agentlab.experiments as ex
from agentlab import Agent, get_agent
from agentlab.errors import ExperimentError, InvalidArgumentError, UnknownPolicyError
from agentlab.eval import datasets
from agentlab.eval.records import load_records
from agentlab.experiments.matching import ExactMatch, FuzzyMatch, make_matcher
from agentlab.session._session import Session

# LoCoMo (CC BY-NC) is read from ../shared next to the repository, never copied into it; AGENTLAB_LOCOMO names
# another copy (a git worktree sits one folder deeper).
LOCOMO = Path(os.environ.get("AGENTLAB_LOCOMO") or
              Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "locomo" / "locomo10.json")

TIGHT = ex.Policy("tight", "Compacts above 300 tokens, keeps 80.", ex.Compaction(300, 80))


@pytest.fixture(scope="module")
def bundled():
    return datasets.load_bundled()


def _records(turns, questions):
    return load_records(turns, questions, name="tiny")


def _tiny(n=40, questions=None):
    """One conversation of ``n`` turns, each naming a distinct object; optional questions."""
    turns = [{"conversation_id": "c", "session_id": f"s{i // 10}", "turn_id": f"t{i}",
              "speaker": "Ann" if i % 2 == 0 else "Bob",
              "text": f"I keep my {word} in the {place} since last week, and it works well for me."}
             for i, (word, place) in enumerate(zip(_WORDS[:n], reversed(_WORDS[:n])))]
    return _records(turns, questions or [])


_WORDS = ("violin kettle bicycle lantern compass telescope hammock umbrella teapot saddle anchor blanket "
          "canoe drum easel fiddle guitar harp igloo jacket kayak ladder mirror needle oven piano quilt rocket "
          "sofa tent urn vase wagon xylophone yacht zither apron basket candle desk").split()


class TestPolicies:
    def test_the_defaults_are_none_and_three_offline_rungs_from_aggressive_to_gentle(self):
        names = [p.name for p in ex.DEFAULT_POLICIES]
        assert names == ["none", "aggressive", "moderate", "gentle"]
        assert ex.DEFAULT_POLICIES[0].compaction is None
        thresholds = [p.compaction.threshold for p in ex.DEFAULT_POLICIES[1:]]
        assert thresholds == sorted(thresholds) and thresholds[0] < thresholds[-1]
        for p in ex.DEFAULT_POLICIES[1:]:
            assert p.compaction.tail_token_budget == p.compaction.threshold // 4
            assert p.summarizer_name == "extractive" and not p.needs_model and p.description

    def test_names_resolve_and_an_unknown_name_lists_the_known_ones(self):
        from agentlab.experiments.policies import resolve_policies

        assert [p.name for p in resolve_policies("none, gentle")] == ["none", "gentle"]
        with pytest.raises(UnknownPolicyError, match="known policies: none, aggressive"):
            resolve_policies("none,bogus")
        with pytest.raises(InvalidArgumentError, match="named 'none'"):
            resolve_policies(["none", ex.get_policy("none")])

    @pytest.mark.parametrize("build, message", [
        (lambda: ex.Policy("bad name", "x"), "policy name"),
        (lambda: ex.Policy("p", "x", ex.Compaction(-1, 10)), "threshold"),
        (lambda: ex.Policy("p", "x", summarizer="gpt"), "summarizer"),
        (lambda: ex.Policy("p", "x", memory_writer="claude"), "no block"),
        (lambda: ex.Search(mode="fuzzy"), "Search mode"),
    ])
    def test_bad_settings_raise_a_typed_error_that_says_what_to_do(self, build, message):
        with pytest.raises(InvalidArgumentError, match=message):
            build()


class TestMatching:
    def test_exact_needs_half_of_the_long_sentences_verbatim(self):
        m = ExactMatch()
        text = "Wow! I bought a red kayak yesterday. It cost me three hundred dollars."
        quoted = m.prepare("- [user] I bought a red  kayak yesterday.\n- [user] other things here")
        assert m.contains(text, quoted)  # one of two long sentences, whitespace normalised
        assert not m.contains(text, m.prepare("They talked about boats and money."))
        assert not m.contains("I bought a kayak. Then I sold my old canoe. And a tent too.",
                              m.prepare("I bought a kayak."))  # one of three

    def test_fuzzy_counts_content_words_and_names_its_threshold(self):
        m = FuzzyMatch(0.6)
        assert m.name == "fuzzy>=0.6"
        text = "Caroline adopted a rescue greyhound called Pepper in March."
        assert m.contains(text, m.prepare("In March Caroline adopted Pepper, a greyhound."))
        assert not m.contains(text, m.prepare("Caroline talked about painting."))

    def test_auto_picks_exact_for_extractive_and_fuzzy_otherwise(self):
        assert make_matcher("auto", "extractive").name == "exact"
        assert make_matcher("auto", "claude").name == "fuzzy>=0.6"
        assert make_matcher("fuzzy>=0.5").name == "fuzzy>=0.5"
        with pytest.raises(InvalidArgumentError, match="Unknown summary match"):
            make_matcher("levenshtein")


class TestReplay:
    def test_under_none_every_evidence_turn_is_verbatim(self, bundled):
        results = ex.replay(bundled, ["none"], progress=False)
        rows = results.per_question
        assert len(rows) == sum(len(c.questions) for c in bundled.conversations)
        assert (rows["evidence_total"] > 0).all()
        assert (rows["evidence_verbatim"] == rows["evidence_total"]).all()
        assert (rows["evidence_in_summary"] == 0).all() and (rows["compactions"] == 0).all()
        assert set(results.evidence["status"]) == {"verbatim"}
        assert results.compactions.empty and results.drops.empty

    @pytest.mark.skipif(not LOCOMO.is_file(), reason="LoCoMo is not available here")
    def test_under_none_every_locomo_evidence_turn_is_verbatim(self):
        dataset = datasets.load_locomo(LOCOMO)
        results = ex.replay(dataset, ["none"], conversations=2, progress=False)
        rows = results.per_question
        assert len(rows) == len(dataset.conversations[0].questions) + len(dataset.conversations[1].questions)
        assert (rows["evidence_verbatim"] == rows["evidence_total"]).all()
        assert rows["evidence_total"].sum() > 300

    def test_the_numbers_are_the_sessions_own(self, bundled, tmp_path):
        """Kept as agent files, the sessions say the same as the rows: estimate, compactions, visible turns."""
        results = ex.replay(bundled, ["none", TIGHT], conversations=1, root=tmp_path, progress=False)
        conversation = bundled.conversations[0]
        for policy in ("none", "tight"):
            agent = get_agent(Agent, f"{policy}/{conversation.id}", root=tmp_path)
            session = Session(agent, conversation.id)
            rows = results.per_question[results.per_question["policy"] == policy]
            assert set(rows["prompt_tokens"]) == {session.estimate_tokens()}
            assert set(rows["compactions"]) == {len(session.get_compactions())}
            log = results.compactions[results.compactions["policy"] == policy]
            assert len(log) == len(session.get_compactions())
            frame = session.compactions_df()
            frame = frame[frame["kind"] == "compaction"]
            assert list(log["compaction_id"]) == list(frame["id"])
            assert list(log["summary_tokens"]) == list(frame["summary_tokens"])
            assert list(log["tokens_after"]) == list(frame["tokens_after"])
            visible = {m["id"] for m in session.get_history()}
            evidence = results.evidence[results.evidence["policy"] == policy]
            for turn, status in zip(evidence["turn_id"], evidence["status"]):
                assert (f"{conversation.id}/{turn}" in visible) == (status == "verbatim")
            agent.close()
        tight = results.per_question[results.per_question["policy"] == "tight"]
        assert tight["compactions"].iloc[0] >= 2
        assert tight["prompt_tokens"].iloc[0] < results.per_question["prompt_tokens"].max()
        assert (tight["evidence_verbatim"] < tight["evidence_total"]).any()

    def test_a_summary_that_quotes_a_turn_keeps_it_and_the_rest_is_lost(self):
        quote = "I keep my violin in the desk since last week, and it works well for me."
        keeper = ex.Policy("keeper", "Keeps only the violin.", ex.Compaction(300, 80, protect_head=0),
                           summarizer=lambda prompt: "They talked. " + quote)
        questions = [{"conversation_id": "c", "question": "Where is the violin?", "evidence": "t0", "category": 1},
                     {"conversation_id": "c", "question": "Where is the kettle?", "evidence": "t1", "category": 1}]
        results = ex.replay(_tiny(40, questions), [keeper], match="exact", progress=False)
        rows = results.per_question.set_index("question_id")
        assert rows.loc["c/q0", "evidence_in_summary"] == 1 and rows.loc["c/q0", "summary_match"] == "exact"
        assert rows.loc["c/q1", "evidence_in_summary"] == 0 and rows.loc["c/q1", "evidence_verbatim"] == 0
        first = results.drops[results.drops["compaction"] == 1].set_index("turn_id")
        assert first.loc["t0", "after"] == "summary" and first.loc["t1", "after"] == "lost"
        assert first.loc["t1", "cited_by"] == ["c/q1"]
        assert list(results.dropped("keeper")["turn_id"]) == ["t1"]
        log = results.compactions.iloc[0]
        assert log["evidence_hidden"] == 2 and log["evidence_kept_in_summary"] == 1 and log["evidence_lost"] == 1

    def test_a_later_summary_that_drops_a_kept_fact_is_recorded(self):
        quote = "I keep my violin in the desk since last week, and it works well for me."
        calls = []

        def forgetful(prompt):
            calls.append(prompt)
            return quote if len(calls) == 1 else "Nothing worth keeping."

        policy = ex.Policy("forgetful", "Forgets on the second pass.", ex.Compaction(300, 80, protect_head=0),
                           summarizer=forgetful)
        questions = [{"conversation_id": "c", "question": "Where is the violin?", "evidence": "t0"}]
        results = ex.replay(_tiny(40, questions), [policy], progress=False)
        changes = results.drops[results.drops["turn_id"] == "t0"][["compaction", "before", "after"]]
        assert changes.values.tolist() == [[1, "verbatim", "summary"], [2, "summary", "lost"]]
        assert results.compactions["evidence_dropped_from_summary"].tolist()[:2] == [0, 1]

    def test_a_question_asked_mid_conversation_sees_only_what_came_before(self):
        questions = [{"conversation_id": "c", "question": "Where is the violin?", "evidence": "t0;t30",
                      "asked_after": "t9"},
                     {"conversation_id": "c", "question": "Where is the violin?", "evidence": "t0;t30"}]
        results = ex.replay(_tiny(40, questions), ["none"], progress=False)
        early, late = results.per_question.itertuples()
        assert (early.asked_after, early.evidence_total, early.evidence_unseen) == ("t9", 1, 1)
        assert (late.asked_after, late.evidence_total, late.evidence_unseen) == ("t39", 2, 0)
        assert early.prompt_tokens < late.prompt_tokens and early.history_messages == 10

    @pytest.mark.parametrize(("options", "message"), [
        ({"conversations": 0}, "conversations must be a whole number of 1 or more"),
        ({"conversations": -2}, "conversations must be a whole number of 1 or more"),
        ({"conversations": ["nope"]}, "No conversation with the ids"),
        ({"categories": [9]}, "No question of the categories [9]"),
    ])
    def test_a_selection_that_leaves_nothing_to_replay_is_a_typed_error(self, bundled, options, message):
        with pytest.raises(InvalidArgumentError) as caught:
            ex.replay(bundled, ["none"], progress=False, **options)
        assert message in str(caught.value)

    def test_an_unknown_asked_after_turn_is_a_typed_error(self):
        questions = [{"conversation_id": "c", "question": "?", "asked_after": "t999"}]
        with pytest.raises(ExperimentError, match="not a turn of conversation 'c'"):
            ex.replay(_tiny(10, questions), ["none"], progress=False)

    def test_evidence_is_searchable_when_the_sessions_search_ranks_it_within_k(self):
        questions = [{"conversation_id": "c", "question": "telescope", "evidence": "t5"},
                     {"conversation_id": "c", "question": "nothing matches this", "evidence": "t5"}]
        narrow = ex.Policy("narrow", "k=1", search=ex.Search("any", 1))
        phrase = ex.Policy("phrase", "upstream phrase search", search=ex.Search("phrase", 10))
        results = ex.replay(_tiny(40, questions), [narrow, phrase], progress=False)
        rows = results.per_question.set_index(["policy", "question_id"])["evidence_searchable"]
        assert rows.to_dict() == {("narrow", "c/q0"): 1, ("narrow", "c/q1"): 0,
                                  ("phrase", "c/q0"): 1, ("phrase", "c/q1"): 0}
        ranks = results.evidence.set_index(["policy", "question_id"])["search_rank"]
        assert ranks[("narrow", "c/q0")] == 1

    def test_compaction_shrinks_the_prompt_and_search_still_finds_what_it_hid(self, bundled):
        results = ex.replay(bundled, ["none", TIGHT], progress=False)
        table = results.table(None)
        assert table.loc[("tight", "overall"), "tokens_vs_none"] < 0.5
        assert table.loc[("none", "overall"), "kept"] == 1.0
        assert table.loc[("tight", "overall"), "kept"] < table.loc[("tight", "overall"), "reachable"]
        # search covers every stored message, so both policies find the same evidence
        by_policy = results.per_question.groupby("policy")["evidence_searchable"].sum()
        assert by_policy["none"] == by_policy["tight"]


@pytest.fixture(scope="module")
def results(bundled):
    return ex.replay(bundled, ["none", TIGHT, "aggressive"], progress=False)


class TestAnalyses:
    def test_summary_gives_intervals_per_category_and_overall(self, results):
        summary = results.summary()
        part = summary[(summary["policy"] == "tight") & (summary["metric"] == "kept")]
        assert list(part["category"])[-1] == "overall"
        assert (part["ci_low"] <= part["mean"]).all() and (part["mean"] <= part["ci_high"]).all()
        assert int(part[part["category"] == "overall"]["n"].iloc[0]) == 40

    def test_frontier_has_one_point_per_policy(self, results):
        frontier = results.frontier()
        assert list(frontier["policy"]) == ["none", "tight", "aggressive"]
        none = frontier.iloc[0]
        assert none["kept"] == 1.0 and none["prompt_tokens"] > frontier.iloc[1]["prompt_tokens"]
        with pytest.raises(ValueError, match="kept must be one of"):
            results.frontier("everything")

    def test_survival_by_distance_counts_every_evidence_turn_once(self, results):
        by_distance = results.survival_by_distance(bins=(0, 20, 60))
        assert by_distance.groupby(level=0, observed=True)["n"].sum().to_dict() == \
            results.evidence.groupby("policy").size().to_dict()
        shares = by_distance[["verbatim", "in_summary", "lost"]].sum(axis=1)
        assert shares.round(9).eq(1).all()
        near = by_distance.loc[("tight", "0-19"), "verbatim"]
        far = by_distance.loc[("tight", "60+"), "verbatim"]
        assert near > far

    def test_the_frontier_plot_draws_one_point_per_policy(self, results):
        import matplotlib

        matplotlib.use("Agg")
        from agentlab.frames import plot

        figure = plot.policy_frontier(results, relative=True)
        ax = figure.axes[0]
        assert [t.get_text() for t in ax.texts] == ["none", "tight", "aggressive"]
        assert ax.get_xscale() == "log" and "relative to none" in ax.get_xlabel()

    def test_parquet_keeps_the_rows_and_the_policies(self, results, tmp_path):
        import pyarrow.parquet as pq

        path = results.to_parquet(tmp_path / "out" / "rows.parquet")
        table = pq.read_table(path)
        assert table.num_rows == len(results.per_question)
        assert {"policy", "prompt_tokens", "evidence_in_summary", "summary_match", "evidence_searchable",
                "compactions"} <= set(table.column_names)
        policies = json.loads(table.schema.metadata[b"agentlab.policies"])
        assert [p["policy"] for p in policies] == ["none", "tight", "aggressive"]
        assert policies[1]["threshold"] == 300


class TestCommandLine:
    def run(self, *argv, capsys):
        from agentlab.cli import main

        code = main(["experiment", *argv])
        return code, capsys.readouterr()

    def test_bundled_prints_the_table_and_writes_parquet(self, tmp_path, capsys):
        code, out = self.run("bundled", "--policies", "none,aggressive", "--no-progress", "--out",
                             str(tmp_path / "r.parquet"), capsys=capsys)
        assert code == 0
        assert "tokens_vs_none" in out.out and "aggressive" in out.out and "wrote" in out.out
        assert (tmp_path / "r.parquet").is_file()

    def test_records_read_turns_and_questions_files(self, tmp_path, capsys):
        turns = tmp_path / "turns.jsonl"
        turns.write_text("\n".join(json.dumps({"conversation_id": "c", "session_id": "s1", "speaker": s,
                                               "text": f"line {i} about the {w}"})
                                   for i, (s, w) in enumerate([("A", "kettle"), ("B", "violin")] * 3)))
        questions = tmp_path / "q.csv"
        questions.write_text("conversation_id,question,evidence,category\nc,where is the violin,s1_2,4\n")
        code, out = self.run("records", "--data", str(turns), "--questions", str(questions), "--policies", "none",
                             "--no-progress", capsys=capsys)
        assert code == 0 and "1 rows (1 conversations x 1 policies)" in out.out

    @pytest.mark.parametrize("argv, message", [
        (["locomo"], "give the locomo file with --data PATH"),
        (["bundled", "--policies", "nope"], "No memory policy named 'nope'"),
        (["records", "--data", "x.jsonl"], "records needs the turns"),
        (["bundled", "--qa"], "needs ANTHROPIC_API_KEY"),
    ])
    def test_errors_are_one_line(self, argv, message, capsys, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        code, out = self.run(*argv, "--no-progress", capsys=capsys)
        assert code == 2
        assert message in out.err and out.err.count("\n") == 1 and out.err.startswith("agentlab experiment: ")

    @pytest.mark.parametrize("argv, message", [
        (["--out", "{file}/rows.parquet"], "cannot write --out"),
        (["--qa", "--dry-run", "--qa-out", "{file}/qa.parquet"], "cannot write --qa-out"),
        (["--qa", "--dry-run", "--budget", "-1"], "--budget must be a number of dollars of 0 or more"),
        (["--qa", "--dry-run", "--budget", "nan"], "--budget must be a number of dollars of 0 or more"),
    ])
    def test_bad_outputs_and_budgets_are_refused_before_the_replay(self, argv, message, tmp_path, capsys,
                                                                   monkeypatch):
        import agentlab.experiments.replaying as replaying

        def must_not_run(*args, **kwargs):
            raise AssertionError("the replay ran before the arguments were checked")

        monkeypatch.setattr(replaying, "replay", must_not_run)
        (tmp_path / "file").write_text("a file, not a folder")
        argv = [a.replace("{file}", str(tmp_path / "file")) for a in argv]
        code, out = self.run("bundled", "--policies", "none", "--no-progress", "--qa-cache", "none", *argv,
                             capsys=capsys)
        assert code == 2
        assert message in out.err and out.err.count("\n") == 1 and out.err.startswith("agentlab experiment: ")

    def test_a_root_that_cannot_be_a_folder_is_one_line(self, tmp_path, capsys):
        (tmp_path / "file").write_text("a file, not a folder")
        code, out = self.run("bundled", "--policies", "none", "--no-progress", "--root", str(tmp_path / "file"),
                             capsys=capsys)
        assert code == 2
        assert "agentlab experiment: " in out.err and out.err.count("\n") == 1

    def test_a_dry_run_prints_the_cost_estimate_without_a_key(self, capsys, monkeypatch):
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        code, out = self.run("bundled", "--policies", "none,aggressive", "--qa", "--dry-run", "--runs", "2",
                             "--no-progress", "--qa-cache", "none", capsys=capsys)
        assert code == 0
        assert "answers: 160 requests via Message Batches (50% off)" in out.out  # 2 policies x 40 x 2 runs
        assert "judges (at most): 160 requests" in out.out  # one per answer, even for the same question
