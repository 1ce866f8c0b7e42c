"""Choosing questions, marking how parameters were tuned, cross-fitting, tuning by folds, paired tests, saved
results and the ``agentlab eval`` command line for any dataset."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from agentlab.cli import main
from agentlab.errors import EmptySelectionError, EvaluationError, UnknownCategoryError
from agentlab.eval import Grid, Results, ablation, run, tune
from agentlab.eval.datasets import Dataset, load_bundled
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.records import load_records
from agentlab.eval.runner import conversation_folds, select_questions
from agentlab.eval.strategies import BM25, STOP_WORDS, BaseStrategy, Default, Dense, Hybrid, Recency
from agentlab.search._embedders import HashEmbedder


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


def quiet(dataset, strategies, **options):
    return run(dataset, strategies, cache=None, progress=False, n_boot=50, **options)


def write_records(folder, turns=120, conversations=3):
    """A records dataset: ``conversations`` conversations of ``turns`` numbered turns, one question per turn/10."""
    turn_rows, question_rows = [], []
    for c in range(conversations):
        for t in range(turns):
            turn_rows.append({"conversation_id": f"c{c}", "session_id": f"s{t // 20}", "speaker": "ana",
                              "text": f"note {t} about topic{t} in conversation {c}", "turn_id": f"t{t}"})
        for q in range(0, turns, 10):
            question_rows.append({"conversation_id": f"c{c}", "question_id": f"c{c}/q{q}", "question":
                                  f"what about topic{q}?", "category": "lookup" if q % 20 else "recall",
                                  "evidence": [f"t{q}"]})
    turns_path, questions_path = folder / "turns.jsonl", folder / "questions.csv"
    turns_path.write_text("\n".join(json.dumps(r) for r in turn_rows))
    frame = pd.DataFrame(question_rows)
    frame["evidence"] = frame["evidence"].map(lambda ids: ";".join(ids))
    frame.to_csv(questions_path, index=False)
    return turns_path, questions_path


class TestChoosingQuestions:
    def test_categories_by_name_or_id(self, bundled):
        by_name = select_questions(bundled, categories=["multi-hop", "temporal"])
        by_id = select_questions(bundled, categories=[1, "2"])
        names = [q.id for _, qs in by_name.values() for q in qs]
        assert names == [q.id for _, qs in by_id.values() for q in qs]
        assert {q.category for _, qs in by_name.values() for q in qs} == {1, 2}

    def test_an_unknown_category_names_the_known_ones(self, bundled):
        with pytest.raises(UnknownCategoryError, match="1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop"):
            quiet(bundled, ["bm25"], categories=["multihop"])

    def test_question_ids_and_limit(self, bundled):
        ids = [bundled.conversations[1].questions[2].id, bundled.conversations[0].questions[0].id]
        results = quiet(bundled, ["bm25"], question_ids=ids)
        assert results.per_question["question_id"].tolist() == [ids[1], ids[0]]  # dataset order
        assert len(quiet(bundled, ["bm25"], limit=7).per_question) == 7

    def test_an_empty_selection_is_a_clear_error(self, bundled):
        with pytest.raises(EmptySelectionError, match="No question 'nope'"):
            quiet(bundled, ["bm25"], question_ids=["nope"])
        with pytest.raises(EmptySelectionError, match="limit"):
            quiet(bundled, ["bm25"], limit=0)
        unanswered = load_records([{"conversation_id": "c", "session_id": "s", "speaker": "a", "text": "hi"}],
                                  [{"conversation_id": "c", "question": "what?", "category": "open"}])
        with pytest.raises(EmptySelectionError, match=r"No question with evidence .* for categories open"):
            quiet(unanswered, ["bm25"], categories=["open"])

    def test_folds_never_share_a_conversation(self):
        ids = [f"c{i}" for i in range(10)]
        folds = conversation_folds(ids, 4, seed=3)
        assert sorted(c for f in folds for c in f) == ids and len(folds) == 4
        assert {len(f) for f in folds} <= {2, 3}
        assert folds == conversation_folds(ids, 4, seed=3) and folds != conversation_folds(ids, 4, seed=4)
        with pytest.raises(EmptySelectionError, match="at least 4 conversations"):
            conversation_folds(ids[:3], 4)


class TestTuningMarks:
    def test_rows_say_whether_parameters_were_chosen_on_them(self, bundled):
        locomo_named = Dataset("locomo", bundled.conversations, bundled.category_names)
        results = quiet(locomo_named, {"hybrid": Hybrid([BM25(), BM25(key="speaker")]), "bm25": BM25()})
        assert set(results.per_question["tuning"]) == {"fixed"}
        tuned = Hybrid([BM25(), BM25(key="speaker")])
        tuned.tuned_on = {"locomo": frozenset({"mini-1"})}
        marked = quiet(locomo_named, {"tuned": tuned})
        by_conversation = marked.per_question.groupby("conversation_id")["tuning"].first().to_dict()
        assert by_conversation == {"mini-1": "in-sample", "mini-2": "fixed", "mini-3": "fixed"}
        assert marked.table().loc[("tuned", "overall"), "tuning"].startswith("mixed: ")
        assert quiet(bundled, {"tuned": tuned}).table().loc[("tuned", "overall"), "tuning"] == "fixed"

    def test_the_shipped_hybrid_and_default_say_where_they_were_tuned(self):
        assert Hybrid().tuned_on == {"locomo": None}  # every LoCoMo conversation: in-sample there
        assert Hybrid([BM25(), BM25()]).tuned_on == {}
        assert Default(embedder=HashEmbedder(8)).tuned_on["locomo"] == {"conv-26", "conv-30", "conv-41", "conv-42"}


class RecordingHybrid(Hybrid):
    """A learning hybrid that remembers which conversations each ``learn`` call saw."""

    def __init__(self, **options):
        super().__init__([BM25(stopwords=STOP_WORDS), Recency()], weights="learn", **options)
        self.seen = []

    def learn(self, examples):
        self.seen.append({c.id for c, _ in examples})
        return super().learn(examples)


class TestCrossFitting:
    def test_each_fold_is_scored_with_weights_learnt_on_the_others(self, bundled):
        strategy = RecordingHybrid(name="learnt")
        results = quiet(bundled, [strategy], folds=3)
        rows = results.per_question
        assert set(rows["tuning"]) == {"cross-validated"} and len(rows) == 40
        for number, entry in enumerate(results.tuning_log):
            assert entry["fold"] == number and len(entry["chosen"]) == 2
            assert not set(entry["conversations"]) & strategy.seen[number]  # never learnt on its own fold
            fold_rows = rows[rows["fold"] == number]
            assert set(fold_rows["conversation_id"]) == set(entry["conversations"])

    def test_without_folds_the_learning_is_in_sample_and_marked(self, bundled):
        results = quiet(bundled, [RecordingHybrid(name="learnt")], folds=None)
        assert set(results.per_question["tuning"]) == {"in-sample"}
        assert "learnt on training questions" in results.methodology["learnt"]


    def test_by_default_learning_is_cross_fitted_and_one_conversation_learns_nothing(self, bundled):
        strategy = RecordingHybrid(name="learnt")
        results = quiet(bundled, [strategy])  # folds="auto": one fold per conversation here (3 < 5)
        assert set(results.per_question["tuning"]) == {"cross-validated"} and len(strategy.seen) == 3
        alone = Dataset("one", bundled.conversations[:1], bundled.category_names)
        single = RecordingHybrid(name="learnt")
        rows = quiet(alone, [single]).per_question
        assert single.seen == [] and set(rows["tuning"]) == {"fixed"} and single.weights == [1.0, 1.0]

    def test_a_dev_conversation_stays_in_sample_even_when_weights_are_cross_fitted(self, bundled):
        locomo_named = Dataset("locomo", bundled.conversations, bundled.category_names)
        strategy = RecordingHybrid(name="learnt")
        strategy.tuned_on = {"locomo": frozenset({"mini-1"})}
        rows = quiet(locomo_named, [strategy], folds=3).per_question
        marks = rows.groupby("conversation_id")["tuning"].first().to_dict()
        assert marks == {"mini-1": "in-sample", "mini-2": "cross-validated", "mini-3": "cross-validated"}


class Oracle(BaseStrategy):
    """Puts the evidence first for the questions of one conversation, and last everywhere else."""

    name = "oracle"

    def __init__(self, cheat_on, evidence, **options):
        super().__init__(**options)
        self.cheat_on, self.evidence = cheat_on, evidence

    def fit(self, conversation):
        self.conversation_id = conversation.id
        return super().fit(conversation)

    def rank(self, query, k):
        gold = self.evidence.get(query, [])
        ids = [u.id for u in self.units]
        rest = [i for i in ids if i not in gold]
        order = gold + rest if self.conversation_id == self.cheat_on else rest + gold
        return order[:k]


class TestTuningByFolds:
    def test_a_candidate_good_only_on_the_held_out_fold_is_not_chosen_for_it(self, bundled):
        evidence = {q.question: list(q.evidence) for c in bundled.conversations for q in c.questions}
        space = {"oracle": Oracle("mini-2", evidence), "bm25": BM25(stopwords=STOP_WORDS)}
        tuned = tune(bundled, space, metric="recall@5", folds=3, cache=None, progress=False, n_boot=50, seed=1)
        chosen = tuned.chosen.set_index("fold")
        for row in tuned.chosen.itertuples():
            expected = "bm25" if "mini-2" in row.conversations else "oracle"
            assert row.candidate == expected  # chosen on the other folds only
        cv = tuned.results.per_question[tuned.results.per_question["strategy"] == "tuned"]
        assert set(cv["tuning"]) == {"cross-validated"} and len(cv) == 40 and cv["question_id"].is_unique
        optimistic = tuned.results.per_question[tuned.results.per_question["strategy"] != "tuned"]
        assert set(optimistic["tuning"]) == {"in-sample"}
        assert len(chosen) == 3 and "chosen per fold" in tuned.report()

    def test_a_grid_names_its_candidates_and_a_learning_candidate_is_nested(self, bundled):
        grid = Grid(lambda weights: Hybrid([BM25(stopwords=STOP_WORDS), Recency()], method="minmax",
                                           weights=weights), weights=[[1, 0], "learn"])
        assert list(grid.candidates()) == ["weights=[1, 0]", "weights=learn"]
        tuned = tune(bundled, grid, folds=3, cache=None, progress=False, n_boot=50)
        assert set(tuned.candidates["candidate"]) == {"weights=[1, 0]", "weights=learn"}
        assert tuned.results.per_question.groupby("strategy").size()["tuned"] == 40

    def test_ablation_changes_one_factor_at_a_time(self, bundled):
        results = ablation(bundled, BM25, {"key": ["text", "speaker"], "unit": ["window"]},
                           base={"key": "text"}, cache=None, progress=False, n_boot=50)
        assert results.strategies == ["base", "key=speaker", "unit=window"]
        assert results.table().loc[("key=speaker", "overall"), "units"] == "turn/speaker"
        assert len(results.compare("base")) == 2


class TestPairedTests:
    def test_a_clear_difference_is_significant_and_no_difference_is_not(self, bundled):
        results = quiet(bundled, {"bm25": BM25(stopwords=STOP_WORDS), "same": BM25(stopwords=STOP_WORDS),
                                  "recency": Recency()})
        compared = results.compare("bm25", "recall@10", n_resamples=2000).set_index("strategy")
        assert compared.loc["same", "difference"] == 0 and compared.loc["same", "p"] == 1.0
        assert compared.loc["recency", "difference"] < 0 and compared.loc["recency", "p"] < 0.01
        low, high = compared.loc["recency", ["ci_low", "ci_high"]]
        assert low <= compared.loc["recency", "difference"] <= high < 0
        assert (compared["p_holm"] >= compared["p"]).all()
        with pytest.raises(EvaluationError, match="No strategy 'x'"):
            results.compare("x")


class TestSavedResults:
    def test_results_load_back_with_their_settings(self, bundled, tmp_path):
        results = quiet(bundled, {"learnt": RecordingHybrid(), "bm25": BM25()}, folds=3)
        path = results.to_parquet(tmp_path / "r.parquet")
        back = Results.load(path)
        pd.testing.assert_frame_equal(back.table(), results.table())
        assert back.category_names == results.category_names and back.ks == results.ks
        assert back.tuning_log == json.loads(json.dumps(results.tuning_log))
        assert back.per_question["category"].tolist() == results.per_question["category"].tolist()

    def test_a_file_that_is_not_saved_results_is_refused(self, tmp_path):
        with pytest.raises(EvaluationError, match="No results file"):
            Results.load(tmp_path / "missing.parquet")
        other = tmp_path / "other.parquet"
        pd.DataFrame({"a": [1]}).to_parquet(other)
        with pytest.raises(EvaluationError, match="not a saved evaluation"):
            Results.load(other)
        text = tmp_path / "text.parquet"
        text.write_text("hello")
        with pytest.raises(EvaluationError, match="not a Parquet file"):
            Results.load(text)

    def test_the_report_names_categories_and_shows_intervals_tests_and_methodology(self, bundled):
        report = quiet(bundled, {"default": Default(embedder=HashEmbedder(32)), "bm25": BM25()}).report()
        assert "1 multi-hop" in report and "4 single-hop" in report
        assert "paired tests against default on recall@10" in report and "Holm" in report
        assert "methodology:" in report and "chosen on LoCoMo conv-26" in report
        assert "window2/date q:drop-speakers + turn/speaker q:drop-speakers" in report
        row = next(line for line in report.splitlines() if line.startswith("default"))
        assert "1 multi-hop" in row and row.count("[") == 4  # recall@1, 5, 10 and mrr with intervals

    def test_results_plot_themselves(self, bundled):
        import matplotlib

        matplotlib.use("Agg")
        figure = quiet(bundled, ["bm25"]).plot(by_category=False)
        assert len(figure.axes) == 1


class TestProgress:
    def test_the_bar_names_the_work_and_embedding_draws_its_own_bar(self, tmp_path, capsys):
        turns, questions = write_records(tmp_path, turns=300, conversations=1)
        dataset = load_records(turns, questions)
        run(dataset, [Dense(HashEmbedder(16), key="text")], cache=EmbeddingCache(None), progress=True)
        err = capsys.readouterr().err
        assert "Evaluating" in err and "dense: c0" in err
        assert "Embedding" in err and "300/300" in err


class TestCommandLineForAnyDataset:
    def test_records_with_category_names_ids_and_a_limit(self, tmp_path, capsys):
        turns, questions = write_records(tmp_path)
        out = tmp_path / "r.parquet"
        code = main(["eval", "records", str(turns), "--questions", str(questions), "--strategies", "bm25,recency",
                     "--categories", "lookup", "--limit", "5", "--cache", "none", "--no-progress", "--out", str(out)])
        printed = capsys.readouterr().out
        assert code == 0 and "lookup" in printed and "[" in printed and "paired tests against bm25" in printed
        saved = pd.read_parquet(out)
        assert len(saved) == 10 and set(saved["category"]) == {"lookup"}
        code = main(["eval", "records", str(turns), "--questions", str(questions), "--strategies", "bm25",
                     "--question-ids", "c1/q10,c2/q20", "--cache", "none", "--no-progress"])
        assert code == 0 and "2 rows" in capsys.readouterr().out

    def test_bad_requests_are_one_line_and_status_one(self, tmp_path, capsys):
        turns, questions = write_records(tmp_path)
        cases = [
            (["eval", "records", str(turns), "--questions", str(questions), "--categories", "nope"], "No category"),
            (["eval", "records", str(turns), "--questions", str(questions), "--question-ids", "x"], "No question 'x'"),
            (["eval", "records", str(turns)], "--questions"),
            (["eval", "locomo", "--data", str(tmp_path / "missing.json")], "not found"),
            (["eval", "bundled", "--strategies", "bm99"], "Unknown strategy 'bm99'"),
            (["eval", "show", str(tmp_path / "none.parquet")], "No results file"),
        ]
        for argv, message in cases:
            assert main([*argv, "--no-progress", "--cache", "none"]) == 1, argv
            err = capsys.readouterr().err
            assert message in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)

    @pytest.mark.slow
    def test_the_default_strategy_learns_its_weights_on_other_conversations(self, tmp_path, capsys):
        out = tmp_path / "r.parquet"
        assert main(["eval", "bundled", "--cache", str(tmp_path / "c.duckdb"), "--no-progress", "--out", str(out)]) == 0
        assert "default: window2/date q:drop-speakers + turn/speaker q:drop-speakers; cross-validated" in \
            capsys.readouterr().out
        saved = Results.load(out)
        assert set(saved.per_question["tuning"]) == {"cross-validated"} and len(saved.tuning_log) == 3

    def test_debug_shows_the_traceback(self, capsys):
        with pytest.raises(UnknownCategoryError):
            main(["eval", "bundled", "--categories", "nope", "--debug", "--no-progress"])

    def test_show_reloads_tabulates_and_plots(self, tmp_path, capsys):
        out, image = tmp_path / "r.parquet", tmp_path / "recall.png"
        assert main(["eval", "bundled", "--strategies", "bm25,recency", "--cache", "none", "--no-progress",
                     "--out", str(out)]) == 0
        capsys.readouterr()
        assert main(["eval", "show", str(out), "--plot", str(image)]) == 0
        printed = capsys.readouterr().out
        assert "2 temporal" in printed and "paired tests against bm25" in printed and image.stat().st_size > 1000
        assert np.isclose(Results.load(out).table().loc[("bm25", "overall"), "recall@5"],
                          run(load_bundled(), ["bm25"], cache=None, progress=False).table().loc[
                              ("bm25", "overall"), "recall@5"])
