"""The search layer's shared ranking code: fusion normalisations, re-ranking, RM3, the FAISS index, and the agent's
hybrid search giving the evaluation harness's numbers."""

from __future__ import annotations

import numpy as np
import pytest

from agentlab.context._search_providers import HybridSearchProvider
from agentlab.eval.datasets import load_bundled
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.strategies import BM25, Dense, Hybrid, Phrase
from agentlab.search._bm25 import BM25Corpus
from agentlab.search._embedders import HashEmbedder
from agentlab.search._faiss_index import VectorIndex
from agentlab.search._feedback import rm3_weights
from agentlab.search._fusion import fuse, fuse_keyed, min_max, normalize, z_score
from agentlab.search._rerank import diversify_groups, mmr, neighbour_boost


class TestScoreNormalisations:
    def test_z_score_has_mean_zero_and_unit_spread(self):
        scaled = z_score(np.array([1.0, 2.0, 3.0, 10.0]))
        assert scaled.mean() == pytest.approx(0) and scaled.std() == pytest.approx(1)
        assert z_score(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]

    def test_min_max_maps_the_best_to_one_and_the_worst_to_zero(self):
        assert min_max(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
        assert normalize(np.array([5.0, 5.0]), "minmax").tolist() == [0.0, 0.0]

    def test_fuse_adds_weighted_normalised_scores(self):
        a, b = np.array([0.0, 5.0, 10.0]), np.array([3.0, 1.0, 2.0])
        np.testing.assert_allclose(fuse([a, b], method="minmax", weights=[1, 0.5]), [0.5, 0.5, 1.25])
        np.testing.assert_allclose(fuse([a, b], method="zscore"), z_score(a) + z_score(b))

    def test_z_scores_let_a_standout_speak_louder_than_min_max(self):
        # Part a has one clear winner (item 0); part b spreads evenly and prefers item 1.
        a = np.array([10.0, 1, 1, 1, 1, 1, 1, 1, 1, 0])
        b = np.array([0.0, 9, 8, 7, 6, 5, 4, 3, 2, 1])
        assert np.argmax(fuse([a, b], method="zscore")) == 0
        assert np.argmax(fuse([a, b], method="minmax")) == 1

    def test_rrf_of_score_vectors_with_a_depth_ignores_ranks_beyond_it(self):
        a, b = np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0])
        full = fuse([a, b], method="rrf", k=1)
        np.testing.assert_allclose(full, [1 / 2 + 1 / 4, 2 / 3, 1 / 4 + 1 / 2])
        np.testing.assert_allclose(fuse([a, b], method="rrf", k=1, depth=1), [1 / 2, 0, 1 / 2])

    def test_bad_methods_and_lengths_are_refused(self):
        with pytest.raises(ValueError, match="one of"):
            fuse([np.zeros(2)], method="max")
        with pytest.raises(ValueError, match="same items"):
            fuse([np.zeros(2), np.zeros(3)])
        with pytest.raises(ValueError, match="ranks, not scores"):
            normalize(np.zeros(2), "rrf")

    def test_keyed_score_fusion_gives_a_missing_item_the_lowest_value(self):
        fused = dict(fuse_keyed([[("a", 9.0), ("b", 1.0)], [("c", 4.0), ("a", 2.0)]], method="minmax"))
        assert fused == {"a": pytest.approx(1.0), "b": pytest.approx(0.0), "c": pytest.approx(1.0)}
        assert [k for k, _ in fuse_keyed([[("a", 9.0), ("b", 1.0)], [("c", 4.0), ("a", 2.0)]], method="rrf")] == \
            ["a", "c", "b"]


class TestReRanking:
    def test_diversify_spreads_the_top_over_groups(self):
        scores = np.array([1.0, 0.95, 0.9, 0.5])
        groups = [0, 0, 0, 1]
        assert np.argsort(-diversify_groups(scores, groups, penalty=0.0), kind="stable").tolist() == [0, 1, 2, 3]
        order = np.argsort(-diversify_groups(scores, groups, penalty=1.0), kind="stable").tolist()
        assert order[:2] == [0, 3]  # the other group's item comes second

    def test_mmr_skips_a_near_duplicate(self):
        vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        scores = np.array([1.0, 0.99, 0.8])
        assert np.argsort(-mmr(scores, vectors, lam=0.0), kind="stable").tolist() == [0, 1, 2]
        assert np.argsort(-mmr(scores, vectors, lam=0.5), kind="stable").tolist() == [0, 2, 1]

    def test_neighbour_boost_stays_inside_a_group(self):
        scores = np.array([0.0, 1.0, 0.0, 0.0])
        boosted = neighbour_boost(scores, [0, 0, 0, 1], weight=0.5)
        assert boosted.tolist() == [0.5, 1.0, 0.5, 0.0]  # item 3 is in another group

    def test_bad_settings_are_refused(self):
        with pytest.raises(ValueError, match="depth"):
            diversify_groups(np.zeros(3), [0, 0, 0], depth=0)
        with pytest.raises(ValueError, match="weight"):
            neighbour_boost(np.zeros(3), [0, 0, 0], weight=-1)


class TestRM3:
    def test_feedback_adds_the_words_of_the_best_documents(self):
        corpus = BM25Corpus(["the cello lesson with my teacher", "a cello recital", "lunch at noon"],
                            tokenizer="simple")
        weights = rm3_weights(corpus, ["cello"], fb_docs=2, fb_terms=5, original_weight=0.5)
        assert sum(weights.values()) == pytest.approx(1.0)
        assert weights["cello"] > 0.5  # original share plus its own feedback mass
        assert {"lesson", "recital"} & set(weights) and "lunch" not in weights

    def test_an_expanded_query_finds_a_document_without_the_query_word(self):
        corpus = BM25Corpus(["cello recital tonight", "cello lesson", "recital hall parking", "lunch"],
                            tokenizer="simple")
        plain = corpus.scores("cello")
        expanded = corpus.weighted_scores(rm3_weights(corpus, ["cello"], fb_docs=2, fb_terms=5))
        assert plain[2] == 0 and expanded[2] > 0

    def test_bm25_with_rm3_is_a_strategy(self):
        conversation = load_bundled().conversations[0]
        strategy = BM25(rm3=True)
        strategy.fit(conversation)
        assert strategy.describe() == "turn/text +rm3"
        assert len(strategy.rank(conversation.questions[0].question, 5)) == 5
        with pytest.raises(ValueError, match="Unknown rm3 option"):
            BM25(rm3={"docs": 3})


class TestOneFaissIndex:
    def test_equal_scores_come_back_by_ascending_id(self):
        index = VectorIndex(2)
        index.add(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32),
                  np.array([7, 5, 3, 9]))
        scores, ids = index.search(np.array([1.0, 0.0], dtype=np.float32), 3)
        assert ids.tolist() == [3, 5, 9] and scores.tolist() == [1.0, 1.0, 0.5]

    def test_the_dense_strategy_searches_through_it(self):
        conversation = load_bundled().conversations[0]
        dense = Dense(HashEmbedder(64), cache=EmbeddingCache(None), key="text")
        units = dense.fit(conversation)
        assert isinstance(dense._index, VectorIndex)
        query = conversation.questions[3].question
        order = np.lexsort((np.arange(len(units)), -dense.scores(query).astype(np.float32)))
        assert dense.order(query).tolist() == order.tolist()


class TestTheAgentsHybridSearchIsWhatTheHarnessMeasures:
    def test_same_fused_scores_for_the_same_texts(self, store):
        # The agent's hybrid: the vector store's FAISS side and the full-text index's "any" side, 30 candidates
        # each, RRF k 60. The harness: Dense on the same texts (the same VectorIndex) and Phrase(mode="any") (the
        # same full-text index), fused by the same function.
        conversation = load_bundled().conversations[1]
        embedder = HashEmbedder(64)
        provider = HybridSearchProvider(store, embedder, label="turns", candidates=30, limit=30)
        provider.init("turns")
        provider.set_many([(t.id, t.text) for t in conversation.turns])
        harness = Hybrid([Dense(embedder, cache=EmbeddingCache(None), key="text"), Phrase(mode="any")],
                         method="rrf", k=60, depth=30)
        units = harness.fit(conversation)
        position = {u.id: i for i, u in enumerate(units)}
        for question in conversation.questions[:10]:
            hits = provider.hits(question.question)
            fused = harness.scores(question.question)
            assert len(hits) == 30
            for hit in hits:
                assert hit.score == pytest.approx(fused[position[hit.key]], rel=1e-12)
            assert [h.score for h in hits] == pytest.approx(sorted(fused, reverse=True)[:30], rel=1e-12)

    def test_score_fusion_in_the_agent_adds_each_sides_min_max_scaled_scores(self, store):
        provider = HybridSearchProvider(store, HashEmbedder(64), label="kb", fusion="minmax", weights=(1.0, 2.0))
        provider.init("kb")
        provider.set_many([("a", "deploy on friday"), ("b", "lunch on monday"), ("c", "deploy the fix")])
        by_meaning = [(h.key, h.score) for h in provider.vector.hits("deploy friday", 50)]
        by_words = [(h.doc_id, h.score) for h in provider.index.search("deploy friday", mode="any", limit=50)]
        expected = fuse_keyed([by_meaning, by_words], method="minmax", weights=(1.0, 2.0))
        assert [(h.key, h.score) for h in provider.hits("deploy friday")] == \
            [(k, pytest.approx(v)) for k, v in expected]

    def test_a_bad_fusion_is_refused(self, store):
        with pytest.raises(ValueError, match="fusion must be one of"):
            HybridSearchProvider(store, HashEmbedder(8), fusion="max")
