"""Retrieval metrics: hand-computed examples, the empty-evidence policy, scoring a dataset, bootstrap summaries."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlab.eval.datasets import load_bundled
from agentlab.eval.metrics import (
    all_at_k,
    collapse_ranking,
    evaluate_rankings,
    hit_at_k,
    mrr,
    ndcg_at_k,
    question_metrics,
    recall_at_k,
    summarize,
)
from agentlab.eval.records import load_records

RANKING = ["a", "b", "c", "d", "e"]
EVIDENCE = {"b", "e", "z"}  # "z" is never retrieved


class TestHandComputedExample:
    """Ranking a b c d e against evidence {b, e, z}: b is at rank 2, e at rank 5, z absent."""

    def test_recall_counts_the_fraction_of_evidence_found(self):
        assert recall_at_k(RANKING, EVIDENCE, 1) == 0.0  # {} / 3
        assert recall_at_k(RANKING, EVIDENCE, 2) == pytest.approx(1 / 3)  # {b} / 3
        assert recall_at_k(RANKING, EVIDENCE, 5) == pytest.approx(2 / 3)  # {b, e} / 3
        assert recall_at_k(RANKING, EVIDENCE, 50) == pytest.approx(2 / 3)  # k past the end changes nothing

    def test_hit_needs_one_and_all_needs_every_id(self):
        assert [hit_at_k(RANKING, EVIDENCE, k) for k in (1, 2, 5)] == [0.0, 1.0, 1.0]
        assert all_at_k(RANKING, EVIDENCE, 5) == 0.0  # z is missing
        assert all_at_k(RANKING, {"b", "e"}, 4) == 0.0  # e is at rank 5
        assert all_at_k(RANKING, {"b", "e"}, 5) == 1.0

    def test_mrr_is_one_over_the_first_rank(self):
        assert mrr(RANKING, EVIDENCE) == 0.5  # first evidence b at rank 2 -> 1/2
        assert mrr(RANKING, {"e"}) == 0.2  # 1/5
        assert mrr(RANKING, {"z"}) == 0.0  # never retrieved

    def test_ndcg_uses_binary_gains_and_min_of_evidence_and_k(self):
        # k=5: DCG = 1/log2(2+1) + 1/log2(5+1) = 0.630930 + 0.386853 = 1.017783
        #      IDCG over min(3, 5) = 3 ranks = 1/log2(2) + 1/log2(3) + 1/log2(4) = 1 + 0.630930 + 0.5 = 2.130930
        #      nDCG = 1.017783 / 2.130930 = 0.477624
        assert ndcg_at_k(RANKING, EVIDENCE, 5) == pytest.approx(0.477624, abs=1e-6)
        # k=2: DCG = 0.630930; IDCG over min(3, 2) = 2 ranks = 1 + 0.630930 = 1.630930; nDCG = 0.386853
        assert ndcg_at_k(RANKING, EVIDENCE, 2) == pytest.approx(0.386853, abs=1e-6)
        # One evidence id at rank 1 is perfect whatever k is.
        assert ndcg_at_k(RANKING, {"a"}, 10) == 1.0

    def test_a_repeated_id_counts_once_at_its_first_position(self):
        ranking = ["b", "b", "x", "e"]
        assert recall_at_k(ranking, {"b", "e"}, 2) == 0.5  # top-2 holds only b
        # DCG = 1/log2(2) + 1/log2(5) = 1 + 0.430677 = 1.430677; IDCG = 1 + 0.630930 = 1.630930 -> 0.877215
        assert ndcg_at_k(ranking, {"b", "e"}, 4) == pytest.approx(0.877215, abs=1e-6)


class TestEmptyEvidenceAndBadArguments:
    @pytest.mark.parametrize("metric", [recall_at_k, hit_at_k, all_at_k, ndcg_at_k])
    def test_single_metrics_refuse_empty_evidence(self, metric):
        with pytest.raises(ValueError, match="evidence is empty"):
            metric(RANKING, [], 5)
        with pytest.raises(ValueError, match="evidence is empty"):
            mrr(RANKING, set())

    def test_question_metrics_drops_or_scores_one_by_policy(self):
        assert question_metrics(RANKING, [], (5,)) is None
        assert question_metrics(RANKING, [], (5,), empty_evidence="perfect") == {
            "recall@5": 1.0, "hit@5": 1.0, "all@5": 1.0, "ndcg@5": 1.0, "mrr": 1.0
        }
        with pytest.raises(ValueError, match="empty_evidence"):
            question_metrics(RANKING, [], (5,), empty_evidence="zero")

    @pytest.mark.parametrize("k", [0, -1, 2.5, True])
    def test_k_must_be_a_positive_int(self, k):
        with pytest.raises(ValueError, match="positive int"):
            recall_at_k(RANKING, EVIDENCE, k)

    def test_question_metrics_gathers_every_metric(self):
        row = question_metrics(RANKING, EVIDENCE, (1, 5))
        assert row == pytest.approx({
            "recall@1": 0.0, "recall@5": 2 / 3, "hit@1": 0.0, "hit@5": 1.0, "all@1": 0.0, "all@5": 0.0,
            "ndcg@1": 0.0, "ndcg@5": 0.477624, "mrr": 0.5,
        }, abs=1e-6)


class TestCollapseRanking:
    def test_turns_become_sessions_at_their_first_position(self):
        turn_to_session = {"s1_1": "s1", "s2_3": "s2", "s1_2": "s1", "s3_1": "s3"}
        assert collapse_ranking(["s1_1", "s2_3", "s1_2", "s3_1"], turn_to_session) == ["s1", "s2", "s3"]
        assert collapse_ranking(["x_1", "y_2", "x_2"], lambda t: t.split("_")[0]) == ["x", "y"]


class TestEvaluateRankings:
    def test_a_perfect_ranker_scores_one_everywhere(self):
        data = load_bundled()

        def perfect(conversation, question):
            rest = [t.id for t in conversation.turns if t.id not in question.evidence]
            return list(question.evidence) + rest

        frame = evaluate_rankings(data, perfect, ks=(1, 10))
        assert len(frame) == 40
        assert list(frame.columns[:4]) == ["conversation_id", "question_id", "category", "n_evidence"]
        assert frame["recall@10"].eq(1.0).all() and frame["mrr"].eq(1.0).all() and frame["ndcg@10"].eq(1.0).all()
        # recall@1 is 1/|E|: 1 for one-id questions, 1/2 or 1/3 for multi-hop ones.
        assert (frame["recall@1"] * frame["n_evidence"]).eq(1.0).all()

    def test_a_mapping_of_rankings_and_category_filter(self):
        data = load_bundled()
        rankings = {q.id: [t.id for t in c.turns][::-1] for c, q in data.iter_questions()}
        frame = evaluate_rankings(data, rankings, ks=(5,), categories=(2,))
        assert set(frame["category"]) == {2} and len(frame) == data.category_counts()[2]
        with pytest.raises(KeyError, match="No ranking for question"):
            evaluate_rankings(data, {}, ks=(5,))

    def test_empty_evidence_questions_are_dropped_or_counted_as_one(self):
        turns = [{"conversation_id": "c", "session_id": "s", "turn_id": f"t{i}", "speaker": "A", "text": "x"}
                 for i in range(3)]
        questions = [{"conversation_id": "c", "question_id": "with", "question": "?", "evidence": "t2"},
                     {"conversation_id": "c", "question_id": "without", "question": "?"}]
        data = load_records(turns, questions)
        rankings = {"with": ["t0", "t1", "t2"], "without": ["t0", "t1", "t2"]}
        dropped = evaluate_rankings(data, rankings, ks=(1,))
        assert dropped["question_id"].tolist() == ["with"]
        counted = evaluate_rankings(data, rankings, ks=(1,), empty_evidence="perfect")
        # mean recall@1 over both questions: (0 + 1) / 2
        assert counted["recall@1"].mean() == 0.5


class TestSummarize:
    @staticmethod
    def _frame():
        import pandas as pd

        return pd.DataFrame({
            "category": [1, 1, 1, 2, 2, 4],
            "recall@5": [0.0, 0.5, 1.0, 1.0, 1.0, 0.25],
            "mrr": [0.1, 0.2, 0.3, 1.0, 0.5, 0.25],
        })

    def test_means_per_category_and_overall(self):
        summary = summarize(self._frame(), n_boot=200)
        means = summary.pivot(index="category", columns="metric", values="mean")
        assert means.loc[1, "recall@5"] == pytest.approx(0.5)  # (0 + 0.5 + 1) / 3
        assert means.loc[2, "mrr"] == pytest.approx(0.75)  # (1 + 0.5) / 2
        assert means.loc["overall", "recall@5"] == pytest.approx(0.625)  # (0 + .5 + 1 + 1 + 1 + .25) / 6
        assert summary.groupby("category", sort=False)["n"].first().to_dict() == {1: 3, 2: 2, 4: 1, "overall": 6}
        assert list(summary.columns) == ["category", "metric", "n", "mean", "ci_low", "ci_high"]

    def test_intervals_are_seeded_bracket_the_mean_and_collapse_for_constants(self):
        frame = self._frame()
        first, again = summarize(frame, seed=7), summarize(frame, seed=7)
        assert first.equals(again)
        assert not first.equals(summarize(frame, seed=8))
        assert ((first["ci_low"] <= first["mean"] + 1e-12) & (first["mean"] <= first["ci_high"] + 1e-12)).all()
        constant = first[(first["category"] == 2) & (first["metric"] == "recall@5")].iloc[0]
        assert (constant["ci_low"], constant["ci_high"]) == pytest.approx((1.0, 1.0))
        single = first[(first["category"] == 4) & (first["metric"] == "mrr")].iloc[0]
        assert (single["ci_low"], single["ci_high"]) == pytest.approx((0.25, 0.25))
        wide = first[(first["category"] == 1) & (first["metric"] == "recall@5")].iloc[0]
        assert 0.0 <= wide["ci_low"] < 0.5 < wide["ci_high"] <= 1.0

    def test_bad_arguments_say_what_to_fix(self):
        with pytest.raises(ValueError, match="No column 'ndcg@3'"):
            summarize(self._frame(), metrics=["ndcg@3"])
        with pytest.raises(ValueError, match="confidence"):
            summarize(self._frame(), confidence=95)


class TestMetricProperties:
    @given(
        ranking=st.lists(st.sampled_from("abcdefgh"), max_size=10),
        evidence=st.sets(st.sampled_from("abcdefghij"), min_size=1, max_size=5),
    )
    def test_values_are_in_range_and_monotone_in_k(self, ranking, evidence):
        previous = {"recall": 0.0, "hit": 0.0, "all": 0.0}
        for k in range(1, 12):
            values = {"recall": recall_at_k(ranking, evidence, k), "hit": hit_at_k(ranking, evidence, k),
                      "all": all_at_k(ranking, evidence, k)}
            for name, value in values.items():
                assert 0.0 <= value <= 1.0 and value >= previous[name]
            previous = values
            assert 0.0 <= ndcg_at_k(ranking, evidence, k) <= 1.0 + 1e-12
        assert values["hit"] == (1.0 if mrr(ranking, evidence) > 0 else 0.0)
        assert math.isclose(values["recall"], len(set(ranking) & evidence) / len(evidence))


class TestAgainstTrecEval:
    """Our metrics equal trec_eval's (through pytrec_eval) on random rankings: recall_k, success_k (hit), binary
    ndcg_cut_k and recip_rank (on the whole ranking)."""

    def test_random_rankings_score_the_same(self):
        import random

        import pytrec_eval

        rng = random.Random(7)
        ks = (1, 5, 10)
        measures = {f"recall.{','.join(map(str, ks))}", f"success.{','.join(map(str, ks))}",
                    f"ndcg_cut.{','.join(map(str, ks))}", "recip_rank"}
        for trial in range(200):
            items = [f"d{i}" for i in range(rng.randint(3, 40))]
            ranking = rng.sample(items, len(items))
            evidence = set(rng.sample(items, rng.randint(1, min(6, len(items)))))
            qrels = {"q": dict.fromkeys(evidence, 1)}
            run = {"q": {item: float(len(ranking) - rank) for rank, item in enumerate(ranking)}}  # distinct scores
            theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)["q"]
            ours = question_metrics(ranking, evidence, ks)
            for k in ks:
                assert ours[f"recall@{k}"] == pytest.approx(theirs[f"recall_{k}"]), trial
                assert ours[f"hit@{k}"] == pytest.approx(theirs[f"success_{k}"]), trial
                assert ours[f"ndcg@{k}"] == pytest.approx(theirs[f"ndcg_cut_{k}"]), trial
            assert ours["mrr"] == pytest.approx(theirs["recip_rank"]), trial


class TestPairedSignificance:
    def test_the_randomisation_test_is_scipys_paired_permutation_test(self):
        import numpy as np
        from scipy import stats

        from agentlab.eval.significance import randomization_test

        rng = np.random.default_rng(3)
        a = rng.random(150)
        b = a + rng.normal(0.01, 0.15, 150)
        ours = randomization_test(a, b, n_resamples=20_000, seed=1)
        theirs = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis),
                                        permutation_type="samples", vectorized=True, n_resamples=20_000,
                                        rng=2).pvalue
        assert 0.001 < theirs < 0.5  # a case where the p-value is neither 0 nor 1
        assert ours == pytest.approx(theirs, abs=0.01)  # Monte Carlo error of 20,000 resamples: about 0.003

    def test_holm_adjusts_step_down_and_keeps_order(self):
        from agentlab.eval.significance import holm

        assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
        assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])

    def test_the_paired_bootstrap_interval_holds_the_mean_difference(self):
        from agentlab.eval.significance import paired_bootstrap

        low, high = paired_bootstrap([1, 1, 0, 1, 1, 0], [0, 1, 0, 0, 1, 0], n_resamples=2000)
        assert low <= 2 / 6 <= high and low >= 0
        with pytest.raises(ValueError, match="one length"):
            paired_bootstrap([1, 0], [1])
