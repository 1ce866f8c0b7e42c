"""The evaluation runner, its results, the CLI, the plot, importing into sessions, and the LoCoMo reference."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from agentlab.cli import main
from agentlab.eval.datasets import load_bundled, load_locomo
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.metrics import evaluate_rankings
from agentlab.eval.runner import Results, run
from agentlab.eval.strategies import BM25, BaseStrategy, Dense, Hybrid, Recency
from agentlab.search._embedders import HashEmbedder

LOCOMO = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "locomo" / "locomo10.json"


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


def hash_dense(**options):
    return Dense(HashEmbedder(64), **options)


class TestRunScoresEveryQuestionWithEveryStrategy:
    def test_one_row_per_question_and_strategy(self, bundled):
        results = run(bundled, [BM25(), Recency()], ks=(1, 5), cache=None, progress=False)
        frame = results.per_question
        assert len(frame) == 80
        assert frame.groupby("strategy").size().to_dict() == {"bm25": 40, "recency": 40}
        assert {"recall@1", "recall@5", "hit@5", "all@5", "ndcg@5", "mrr", "top", "level"} <= set(frame.columns)
        assert frame["top"].map(len).max() == 5
        assert set(frame["level"]) == {"turn"} and set(frame["units"]) == {"turn/text"}

    def test_the_numbers_are_those_of_evaluate_rankings(self, bundled):
        results = run(bundled, [BM25()], ks=(1, 5, 10), cache=None, progress=False)
        strategy, fitted = BM25(), {}

        def ranker(conversation, question):
            if conversation.id not in fitted:
                fitted.clear()
                fitted[conversation.id] = strategy.fit(conversation)
            return strategy.rank(question.question, 10_000)

        expected = evaluate_rankings(bundled, ranker, ks=(1, 5, 10))
        ours = results.per_question.set_index("question_id").loc[expected["question_id"]]
        for column in ("recall@1", "recall@5", "recall@10", "mrr", "ndcg@10"):
            assert ours[column].tolist() == pytest.approx(expected[column].tolist())

    def test_the_summary_has_a_bootstrap_interval_per_category(self, bundled):
        results = run(bundled, ["bm25"], cache=None, progress=False, n_boot=200)
        summary = results.summary
        overall = summary[(summary["category"] == "overall") & (summary["metric"] == "recall@5")].iloc[0]
        assert overall["n"] == 40
        assert overall["ci_low"] <= overall["mean"] <= overall["ci_high"]
        mean = results.per_question["recall@5"].mean()
        assert overall["mean"] == pytest.approx(mean)
        table = results.table()
        assert list(table.columns) == ["units", "tuning", "n", "recall@1", "recall@5", "recall@10", "mrr"]
        assert table.loc[("bm25", "overall"), "units"] == "turn/text"
        assert table.loc[("bm25", "overall"), "tuning"] == "fixed"
        assert table.loc[("bm25", 4), "n"] == 20

    def test_categories_filter_the_questions(self, bundled):
        results = run(bundled, ["recency"], categories=[2], cache=None, progress=False)
        assert set(results.per_question["category"]) == {2}
        assert len(results.per_question) == 9

    def test_session_units_are_scored_at_session_level(self, bundled):
        results = run(bundled, [BM25(unit="session", name="sessions")], cache=None, progress=False)
        frame = results.per_question
        assert set(frame["level"]) == {"session"} and set(frame["units"]) == {"session/text"}
        assert frame["top"].map(lambda ids: all(i.startswith("session_") for i in ids)).all()
        # A multi-hop question citing turns of two sessions has two evidence units.
        multi = frame[frame["category"] == 1]
        assert (multi["n_evidence"] >= 2).all()
        assert frame["recall@10"].min() == 1.0  # at most 5 sessions per conversation: all are in the top 10

    def test_strategy_names_and_mappings_are_accepted(self, bundled):
        results = run(bundled, "bm25,recency", cache=None, progress=False)
        assert list(results.seconds) == ["bm25", "recency"]
        renamed = run(bundled, {"plain": "bm25", "windowed": BM25(unit="window")}, cache=None, progress=False)
        assert list(renamed.seconds) == ["plain", "windowed"]
        with pytest.raises(ValueError, match="Two strategies are named"):
            run(bundled, [BM25(), BM25()], cache=None, progress=False)

    def test_a_plain_protocol_object_is_run_on_turn_units(self, bundled):
        class FirstTurns:
            name = "first"

            def index(self, units):
                self.ids = [u.id for u in units]

            def rank(self, query, k):
                return self.ids[:k]

        results = run(bundled, [FirstTurns()], ks=(1,), cache=None, progress=False)
        assert results.per_question["top"].map(lambda t: t[0] == "D1:1").all()

    def test_a_progress_bar_is_drawn_when_asked(self, bundled, capsys):
        run(bundled, ["recency"], cache=None, progress=True)
        assert "Evaluating" in capsys.readouterr().err


class TestEmbeddingsAreCachedAcrossRuns:
    def test_a_warm_run_embeds_nothing_and_scores_the_same(self, bundled, tmp_path):
        path = tmp_path / "cache.duckdb"
        cold_cache = EmbeddingCache(path)
        cold = run(bundled, [hash_dense(), Hybrid([BM25(), hash_dense()])], cache=cold_cache, progress=False)
        assert cold_cache.misses > 245  # every turn and question, once
        warm_cache = EmbeddingCache(path)
        warm = run(bundled, [hash_dense(), Hybrid([BM25(), hash_dense()])], cache=warm_cache, progress=False)
        assert warm_cache.misses == 0
        pd.testing.assert_frame_equal(cold.per_question, warm.per_question)

    def test_the_default_cache_lives_under_agentlab_home(self, bundled, agentlab_home):
        run(bundled, [hash_dense()], progress=False)
        assert (agentlab_home / "cache" / "embeddings.duckdb").is_file()


class TestResultsGoToParquetAndPlots:
    def test_parquet_round_trip(self, bundled, tmp_path):
        results = run(bundled, ["bm25"], cache=None, progress=False)
        path = results.to_parquet(tmp_path / "out" / "results.parquet")
        back = pd.read_parquet(path)
        assert len(back) == 40
        assert back["recall@5"].tolist() == results.per_question["recall@5"].tolist()
        assert list(back["top"].iloc[0]) == results.per_question["top"].iloc[0]

    def test_recall_curves_draw_one_line_per_strategy_and_panel(self, bundled):
        import matplotlib

        matplotlib.use("Agg")
        from agentlab.frames.plot import recall_curves

        results = run(bundled, ["bm25", "recency"], ks=(1, 5, 10), cache=None, progress=False)
        figure = recall_curves(results)
        assert len(figure.axes) == 5  # categories 1-4 and overall
        overall = figure.axes[-1]
        assert [line.get_label() for line in overall.get_lines()] == ["bm25", "recency"]
        assert list(overall.get_lines()[0].get_xdata()) == [1, 5, 10]
        single = recall_curves(results, by_category=False)
        assert len(single.axes) == 1
        with pytest.raises(ValueError, match="No precision@k"):
            recall_curves(results, metric="precision")


class TestCommandLine:
    def test_eval_bundled_prints_the_table_and_writes_parquet(self, tmp_path, capsys):
        out = tmp_path / "results.parquet"
        code = main(["eval", "bundled", "--strategies", "bm25,recency", "--k", "5,10", "--out", str(out),
                     "--cache", "none", "--no-progress"])
        assert code == 0
        printed = capsys.readouterr().out
        assert "recall@5" in printed and "overall" in printed and "recency" in printed
        assert len(pd.read_parquet(out)) == 80

    def test_unit_and_key_options_reach_the_strategies(self, tmp_path, capsys):
        out = tmp_path / "r.parquet"
        main(["eval", "bundled", "--strategies", "bm25", "--unit", "window", "--key", "speaker",
              "--cache", "none", "--no-progress", "--out", str(out)])
        assert set(pd.read_parquet(out)["units"]) == {"window1/speaker"}

    def test_locomo_without_data_says_what_to_give(self, capsys):
        assert main(["eval", "locomo", "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert "--data" in err and err.count("\n") == 1


class TestUsersOwnStrategy:
    def test_a_subclass_runs_next_to_the_built_ins(self, bundled):
        class Longest(BaseStrategy):
            name = "longest"

            def index(self, units):
                self.ids = [u.id for u in sorted(units, key=lambda u: -len(u.text))]

            def rank(self, query, k):
                return self.ids[:k]

        results = run(bundled, [Longest(), BM25()], cache=None, progress=False)
        assert isinstance(results, Results)
        assert set(results.per_question["strategy"]) == {"longest", "bm25"}


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.is_file(), reason="LoCoMo is not in ../shared/datasets/locomo (licence: not shipped)")
class TestLoCoMoReference:
    def test_bm25_okapi_with_simple_tokens_reproduces_the_reference(self):
        """datasets.md §5.2: categories 1-4, n = 1,536, R@5 0.412, R@10 0.489, MRR 0.348."""
        dataset = load_locomo(LOCOMO)
        results = run(dataset, ["bm25-reference"], ks=(1, 5, 10), categories=[1, 2, 3, 4], cache=None,
                      progress=False, n_boot=10)
        overall = results.table().loc[("bm25-reference", "overall")]
        assert overall["n"] == 1536
        assert round(overall["recall@1"], 3) == 0.221
        assert round(overall["recall@5"], 3) == 0.412
        assert round(overall["recall@10"], 3) == 0.489
        assert round(overall["mrr"], 3) == 0.348
        single_hop = results.table().loc[("bm25-reference", 4)]
        assert (single_hop["n"], round(single_hop["recall@5"], 3)) == (841, 0.505)


class TestImportingIntoSessions:
    def test_one_message_per_turn_with_speaker_and_date_in_metadata(self, bundled, store):
        from agentlab.eval.importing import import_conversation
        from agentlab.session._session import Session

        conversation = bundled.conversations[0]
        session = Session(store, "mini")
        appended = import_conversation(session, conversation)
        history = session.get_history()
        assert len(appended) == len(history) == len(conversation.turns)
        first, turn = history[0], conversation.turns[0]
        assert first["id"] == f"{conversation.id}/{turn.id}"
        assert first["parts"] == [{"type": "text", "text": turn.text}]
        assert first["role"] == "user" and turn.speaker == conversation.speakers[0]
        assert first["metadata"]["speaker"] == turn.speaker
        assert first["metadata"]["date"] == turn.date and first["metadata"]["session_id"] == turn.session_id
        assert {m["role"] for m in history} == {"user", "assistant"}
        stamps = [m["created_at"] for m in history]
        assert stamps == sorted(stamps) and stamps[0] == "2024-03-03T18:10:00Z"

    def test_image_captions_are_kept_and_a_second_import_adds_nothing(self, bundled, store):
        from agentlab.eval.importing import import_dataset

        sessions = import_dataset(store, bundled)
        assert list(sessions) == [c.id for c in bundled.conversations]
        again = import_dataset(store, bundled)
        assert sum(len(s.get_history()) for s in again.values()) == 245
        captioned = [m for s in again.values() for m in s.get_history() if "blip_caption" in m["metadata"]]
        assert len(captioned) == 5

    def test_imported_turns_are_found_by_session_search(self, bundled, store):
        from agentlab.eval.importing import import_dataset

        session = import_dataset(store, bundled)["mini-1"]
        assert [hit.id for hit in session.search("cello lessons", mode="all")] == ["mini-1/D1:9"]
        # Upstream's phrase search with a whole question finds nothing: what the phrase strategy measures.
        assert session.search("When did Priya sign up for cello lessons?") == []

    def test_speakers_without_a_role_are_refused(self, bundled, store):
        from agentlab.eval.importing import import_conversation
        from agentlab.session._session import Session

        with pytest.raises(ValueError, match="has no role"):
            import_conversation(Session(store, "x"), bundled.conversations[0], roles={"Priya": "user"})
        assert Session(store, "x").get_history() == []


class TestDemo:
    def test_the_demo_runs_a_quick_evaluation(self, capsys, tmp_path):
        assert main(["demo", "--data", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        assert "retrieval evaluation" in printed
        assert "bm25-window" in printed and "recall@5" in printed


class TestTheEmbeddingCacheFile:
    def test_vectors_round_trip_exactly_and_other_models_do_not_see_them(self, tmp_path):
        cache = EmbeddingCache(tmp_path / "c.duckdb")
        embedder = HashEmbedder(32)
        first = cache.encode(embedder, ["alpha", "beta", "alpha"])
        assert cache.misses == 2 and cache.hits == 0  # the repeated text is embedded once
        again = EmbeddingCache(tmp_path / "c.duckdb").encode(embedder, ["beta", "alpha"])
        assert (again == first[[1, 0]]).all()
        assert EmbeddingCache(tmp_path / "c.duckdb").lookup("other-model", list(cache._memory)) == {}
        assert cache.count() == 2 and cache.count("hash-v1-32") == 2

    def test_a_run_without_dense_strategies_writes_no_cache_file(self, bundled, agentlab_home):
        run(bundled, ["bm25", "recency"], progress=False)
        assert not (agentlab_home / "cache").exists()

    def test_a_file_locked_by_another_process_is_skipped_with_a_warning(self, tmp_path):
        import subprocess
        import sys
        import time

        path = tmp_path / "locked.duckdb"
        EmbeddingCache(path).encode(HashEmbedder(16), ["seed"])
        holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                                   "print('ready', flush=True); time.sleep(30)", str(path)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert holder.stdout.readline().strip() == "ready"
            cache = EmbeddingCache(path)
            with pytest.warns(RuntimeWarning, match="held by another process"):
                vectors = cache.encode(HashEmbedder(16), ["seed", "new text"])
            assert vectors.shape == (2, 16) and cache.misses == 2  # embedded anyway
        finally:
            holder.kill()
            holder.wait()
        time.sleep(0.1)
        assert EmbeddingCache(path).count() == 1  # nothing was written while it was locked


def test_the_runner_is_reachable_as_agentlab_eval_run():
    import agentlab.eval
    import agentlab.eval.runner

    assert agentlab.eval.run is agentlab.eval.runner.run
