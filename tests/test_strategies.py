"""Retrieval strategies: units and keys, BM25 against rank_bm25, phrase search, dense with a cache, fusion."""

from __future__ import annotations

import numpy as np
import pytest

from agentlab.eval.datasets import load_bundled
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.strategies import (
    BM25,
    STOP_WORDS,
    BaseStrategy,
    Dense,
    Hybrid,
    Phrase,
    Recency,
    Strategy,
    UnitSpec,
    make_strategy,
    strip_question,
)
from agentlab.search._embedders import HashEmbedder
from agentlab.search._tokenizer import simple_tokenize


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


@pytest.fixture(scope="module")
def conversation(bundled):
    return bundled.conversations[0]


def BM25_scores(conversation):
    """Upstream-default BM25 scores of "cello" over the conversation's turns (FTS5 ranking)."""
    strategy = BM25()
    strategy.fit(conversation)
    return strategy.scores("cello")


class FixedRanking(BaseStrategy):
    """A strategy that returns a given order of unit ids (for fusion arithmetic)."""

    def __init__(self, order, scores=None, **options):
        super().__init__(**options)
        self.order, self.fixed_scores = list(order), scores

    def rank(self, query, k):
        return self.order[:k]

    def scores(self, query):
        return np.asarray(self.fixed_scores, dtype=float)


class TestUnitsCutAConversationIntoRetrievableItems:
    def test_turn_units_are_the_turns_in_order(self, bundled):
        units = [u for c in bundled.conversations for u in UnitSpec().units(c)]
        assert len(units) == 245
        first = bundled.conversations[0]
        assert [u.id for u in UnitSpec().units(first)] == [t.id for t in first.turns]
        assert all(u.turn_ids == (u.id,) for u in units)
        assert [u.position for u in UnitSpec().units(first)] == list(range(len(first.turns)))

    def test_session_units_cover_every_turn_of_their_session(self, bundled):
        units = [u for c in bundled.conversations for u in UnitSpec("session").units(c)]
        assert len(units) == 14
        first = bundled.conversations[0]
        session = first.sessions[0]
        unit = UnitSpec("session").units(first)[0]
        assert unit.id == session.id
        assert unit.turn_ids == tuple(t.id for t in session.turns)
        assert unit.text.splitlines() == [t.text for t in session.turns]

    def test_a_window_key_holds_the_neighbours_but_not_across_sessions(self, conversation):
        units = UnitSpec("window", window=1).units(conversation)
        session = conversation.sessions[0]
        first, second = session.turns[0], session.turns[1]
        assert units[0].id == first.id and units[0].turn_ids == (first.id,)
        assert units[0].text == f"{first.text}\n{second.text}"  # no turn before the first
        assert units[1].text == "\n".join(t.text for t in session.turns[0:3])
        last = units[len(session.turns) - 1]
        assert last.text == "\n".join(t.text for t in session.turns[-2:])  # stops at the session's end
        assert len(UnitSpec("window", window=2).units(conversation)[5].text.splitlines()) == 5

    def test_keys_add_speaker_date_and_caption(self, bundled):
        conversation, turn = next((c, t) for c, t in bundled.iter_turns() if t.metadata.get("blip_caption"))
        unit = next(u for u in UnitSpec(key="speaker+date+caption").units(conversation) if u.id == turn.id)
        caption = turn.metadata["blip_caption"]
        assert unit.text.startswith("[")
        assert f"] {turn.speaker}: {turn.text} [shares an image: {caption}]" in unit.text
        plain = next(u for u in UnitSpec().units(conversation) if u.id == turn.id)
        assert plain.text == turn.text

    def test_a_function_key_is_used_as_is(self, conversation):
        units = UnitSpec(key=lambda t: t.text.upper()).units(conversation)
        assert units[0].text == conversation.turns[0].text.upper()
        assert UnitSpec(key=str.__name__ and (lambda t: "x")).describe() == "turn/<lambda>"

    def test_bad_options_are_refused_with_the_choices(self):
        with pytest.raises(ValueError, match="speaker"):
            UnitSpec(key="speakers")
        with pytest.raises(ValueError, match="unit must be one of"):
            UnitSpec("paragraph")
        with pytest.raises(ValueError, match="window"):
            UnitSpec("window", window=-1)


class TestBM25IsOkapiBM25:
    def test_scores_equal_rank_bm25_on_every_bundled_question(self, bundled):
        rank_bm25 = pytest.importorskip("rank_bm25")
        checked = 0
        for conversation in bundled.conversations:
            strategy = BM25("simple", k1=1.5, idf="okapi")
            units = strategy.fit(conversation)
            reference = rank_bm25.BM25Okapi([simple_tokenize(u.text) for u in units])
            for question in conversation.questions:
                ours = strategy.scores(question.question)
                theirs = reference.get_scores(simple_tokenize(question.question))
                np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
                expected = [units[i].id for i in np.argsort(-theirs, kind="stable")[:10]]
                assert strategy.rank(question.question, 10) == expected
                checked += 1
        assert checked == 40

    def test_stop_words_are_dropped_from_keys_and_queries(self, conversation):
        plain, filtered = BM25("simple"), BM25("simple", stopwords=STOP_WORDS)
        plain.fit(conversation)
        filtered.fit(conversation)
        assert filtered.scores("what did the").max() == 0.0  # only stop words: nothing scores
        assert plain.scores("what did the").max() > 0.0

    def test_ties_go_to_the_earlier_unit_and_k_caps_the_ranking(self, conversation):
        strategy = BM25()
        units = strategy.fit(conversation)
        assert strategy.rank("zzzzqx qqqxz", 3) == [u.id for u in units[:3]]
        assert len(strategy.rank("cello", 10_000)) == len(units)

    def test_the_porter_tokenizer_matches_word_forms(self, conversation):
        stemmed, plain = BM25("porter"), BM25("simple")
        units = stemmed.fit(conversation)
        plain.fit(conversation)
        where = [u.id for u in units].index("D1:9")  # "... signed up for cello lessons ..."
        assert plain.scores("lesson")[where] == 0.0  # "lesson" is not "lessons" without stemming
        assert stemmed.scores("lesson")[where] > 0.0


class TestPhraseSearchIsUpstreamsSessionSearch:
    def test_an_exact_phrase_is_found_and_a_question_is_not(self, conversation):
        strategy = Phrase()
        strategy.fit(conversation)
        turn = conversation.turns[4]
        phrase = " ".join(turn.text.split()[:4])
        assert turn.id in strategy.rank(phrase, 20)
        assert strategy.rank(conversation.questions[0].question, 20) == []

    def test_and_mode_needs_every_word_anywhere(self, conversation):
        phrase, every = Phrase(), Phrase(mode="all")
        phrase.fit(conversation)
        every.fit(conversation)
        assert phrase.rank("cello lessons", 20) == ["D1:9"]
        assert phrase.rank("lessons cello", 20) == []  # out of order: no phrase match
        assert every.rank("lessons cello", 20) == ["D1:9"]
        assert every.rank("cello lessons bakery", 20) == []  # no turn has all three

    def test_phrase_hits_are_ranked_by_fts5_bm25(self, conversation):
        strategy = Phrase()
        strategy.fit(conversation)
        hits = strategy.rank("cello", 50)
        assert sorted(hits) == ["D1:9", "D5:16"]  # the two turns that say "cello"
        scores = dict(zip([u.id for u in strategy.units], BM25_scores(conversation)))
        assert [scores[h] for h in hits] == sorted((scores[h] for h in hits), reverse=True)

    def test_a_second_index_replaces_the_first(self, bundled):
        strategy = Phrase()
        strategy.fit(bundled.conversations[0])
        strategy.fit(bundled.conversations[1])
        assert strategy.rank("cello lessons", 20) == []
        assert set(strategy.units) == set(UnitSpec().units(bundled.conversations[1]))


class TestRecencyIgnoresTheQuery:
    def test_newest_first(self, conversation):
        strategy = Recency()
        units = strategy.fit(conversation)
        assert strategy.rank("anything", 3) == [u.id for u in units[::-1][:3]]
        assert strategy.rank("something else", 3) == strategy.rank("anything", 3)


class TestDenseEmbedsThroughTheCache:
    def test_ranking_is_the_inner_product_order(self, conversation):
        embedder = HashEmbedder(128)
        strategy = Dense(embedder, cache=EmbeddingCache(None))
        units = strategy.fit(conversation)
        query = conversation.questions[0].question
        vectors = embedder.encode([u.text for u in units])
        expected = np.argsort(-(vectors @ embedder.encode([query])[0]), kind="stable")[:10]
        assert strategy.rank(query, 10) == [units[i].id for i in expected]
        np.testing.assert_allclose(strategy.scores(query), vectors @ embedder.encode([query])[0], rtol=1e-5)

    def test_a_second_fit_reads_the_cache_file_instead_of_the_model(self, conversation, tmp_path):
        path = tmp_path / "cache.duckdb"
        first = EmbeddingCache(path)
        Dense(HashEmbedder(64), cache=first).fit(conversation)
        assert first.misses == len(conversation.turns) and first.hits == 0
        assert first.count("hash-v1-64") == len({t.text for t in conversation.turns})
        second = EmbeddingCache(path)  # a new object: only the file remembers
        strategy = Dense(HashEmbedder(64), cache=second)
        strategy.fit(conversation)
        assert second.misses == 0 and second.hits == len(conversation.turns)

    def test_the_query_rewrite_is_applied_before_embedding(self, conversation):
        strategy = Dense(HashEmbedder(64), cache=EmbeddingCache(None), query_rewrite=strip_question)
        strategy.fit(conversation)
        strategy.prepare(["When did Priya start cello lessons?"])
        assert "Priya start cello lessons" in strategy._queries

    def test_strip_question_keeps_the_content_words(self):
        assert strip_question("When did Caroline go to the LGBTQ support group?") == \
            "Caroline go to the LGBTQ support group"
        assert strip_question("What kind of dog does Tomas have?") == "dog does Tomas have"
        assert strip_question("How long has Jo lived there?") == "Jo lived there"
        assert strip_question("Caroline's identity?") == "Caroline's identity"
        assert strip_question("?") == "?"


class TestHybridFusesRankings:
    def test_reciprocal_rank_fusion_by_hand(self, conversation):
        a = FixedRanking(["x", "y", "z"])
        b = FixedRanking(["z", "y", "x"])
        fused = Hybrid([a, b], k=1, weights=[2.0, 1.0])
        fused.units = [type("U", (), {"id": i})() for i in ("x", "y", "z")]
        # x: 2/(1+1) + 1/(1+3) = 1.25; y: 2/3 + 1/3 = 1.0; z: 2/4 + 1/2 = 1.0 (tie: y is the earlier unit)
        np.testing.assert_allclose(fused.scores("q"), [1.25, 1.0, 1.0])
        assert fused.rank("q", 3) == ["x", "y", "z"]
        equal = Hybrid([a, b], k=0)
        equal.units = fused.units
        # x: 1/1 + 1/3; y: 1/2 + 1/2; z: 1/3 + 1/1 -> x and z tie at 4/3, x is earlier
        assert equal.rank("q", 3) == ["x", "z", "y"]

    def test_score_fusion_scales_each_part_to_unit_range(self):
        a = FixedRanking([], scores=[0.0, 5.0, 10.0])
        b = FixedRanking([], scores=[3.0, 1.0, 2.0])
        fused = Hybrid([a, b], method="score", weights=[1.0, 0.5])
        fused.units = [type("U", (), {"id": i})() for i in ("x", "y", "z")]
        # a -> 0, .5, 1; b -> 1, 0, .5; fused = a + .5 b = .5, .5, 1.25
        np.testing.assert_allclose(fused.scores("q"), [0.5, 0.5, 1.25])
        assert fused.rank("q", 2) == ["z", "x"]

    def test_parts_with_different_keys_fuse_and_different_units_are_refused(self, conversation):
        hybrid = Hybrid([BM25(key="speaker"), Dense(HashEmbedder(64), cache=EmbeddingCache(None))])
        units = hybrid.fit(conversation)
        assert [u.id for u in units] == [t.id for t in conversation.turns]
        assert len(hybrid.rank(conversation.questions[0].question, 5)) == 5
        mixed = Hybrid([BM25(), BM25(unit="session")])
        with pytest.raises(ValueError, match="same unit"):
            mixed.fit(conversation)

    def test_the_default_is_the_tuned_rrf_of_windowed_bm25_and_speaker_keyed_dense(self):
        hybrid = Hybrid()
        assert (hybrid.method, hybrid.k, hybrid.weights) == ("rrf", 10.0, [2.0, 1.0])
        assert hybrid.describe() == "window1/date + turn/speaker"
        assert hybrid.parts[0].stopwords == STOP_WORDS
        assert Hybrid(unit="turn", key="text").describe() == "turn/text + turn/text"
        assert Dense().describe() == "turn/speaker" and BM25().describe() == "turn/text"

    def test_score_fusion_needs_parts_with_scores(self):
        with pytest.raises(TypeError, match="scores"):
            Hybrid([BM25(), Phrase()], method="score")

    def test_bad_arguments_say_what_to_give(self):
        with pytest.raises(ValueError, match="one weight per part"):
            Hybrid([BM25(), BM25()], weights=[1.0])
        with pytest.raises(ValueError, match=r"one of .'rrf', 'minmax', 'zscore'"):
            Hybrid([BM25()], method="max")
        with pytest.raises(ValueError, match="list of numbers or 'learn'"):
            Hybrid([BM25(), BM25()], weights="tuned")


class TestUsersAddStrategies:
    def test_a_subclass_in_a_few_lines_satisfies_the_protocol(self, conversation):
        class Longest(BaseStrategy):
            name = "longest"

            def index(self, units):
                self.ids = [u.id for u in sorted(units, key=lambda u: -len(u.text))]

            def rank(self, query, k):
                return self.ids[:k]

        strategy = Longest(key="speaker")
        assert isinstance(strategy, Strategy)
        strategy.fit(conversation)
        longest = max(conversation.turns, key=lambda t: len(t.speaker) + len(t.text))
        assert strategy.rank("", 1) == [longest.id]

    def test_names_build_the_built_in_strategies(self):
        assert isinstance(make_strategy("bm25"), BM25)
        assert make_strategy("bm25-reference").name == "bm25-reference"
        assert make_strategy("recency", unit="session").spec.unit == "session"
        assert isinstance(make_strategy("phrase"), Phrase)
        with pytest.raises(ValueError, match="choose from"):
            make_strategy("bm99")
