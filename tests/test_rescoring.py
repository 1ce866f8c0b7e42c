"""Query rewrites, and the strategies that adjust another's scores: names, time, sessions, neighbours, diversity,
and the default pipeline built from them."""

from __future__ import annotations

import numpy as np
import pytest

from agentlab.errors import EvaluationError
from agentlab.eval.datasets import Conversation, DialogueSession, DialogueTurn, load_bundled
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.rescoring import asks_for_several, asks_when
from agentlab.eval.rewrites import drop_speakers, named_speakers, resolve_rewrite
from agentlab.eval.strategies import (
    BM25,
    MMR,
    STOP_WORDS,
    Default,
    Dense,
    Diversify,
    Hybrid,
    Neighbours,
    Phrase,
    SessionPrior,
    SpeakerPrior,
    TimeAware,
    make_strategy,
)
from agentlab.search._embedders import HashEmbedder


def dense(**options):
    return Dense(HashEmbedder(64), cache=EmbeddingCache(None), **options)


FILLER = ["good morning", "the weather is grey", "traffic was slow", "coffee first", "see you soon",
          "thanks a lot", "talk later", "bye for now"]


def conversation_of(sessions, speakers=("Ana", "Ben")):
    """A conversation from ``[(date, [(speaker, text), ...]), ...]``; turn ids D<session>:<turn>.

    A last session of small talk follows, so that words of the test turns are rare (BM25's idf is positive).
    """
    sessions = [*sessions, (None, [(speakers[1], text) for text in FILLER])]
    built = []
    for s, (date, turns) in enumerate(sessions, 1):
        sid = f"session_{s}"
        built.append(DialogueSession(sid, date, [DialogueTurn(f"D{s}:{t}", who, text, sid, t - 1, date)
                                                 for t, (who, text) in enumerate(turns, 1)]))
    return Conversation("c", list(speakers), built, [])


@pytest.fixture(scope="module")
def bundled():
    return load_bundled()


class TestQueryRewrites:
    def test_names_are_found_as_whole_words_and_dropped_with_their_possessive(self):
        assert named_speakers("What is Ana's job? Annabel?", ["Ana", "Ben"]) == ["Ana"]
        assert drop_speakers("What is Ana's job?", ["Ana", "Ben"]) == "What is job?"
        assert drop_speakers("Did Ana and Ben meet?", ["Ana", "Ben"]) == "Did and meet?"
        assert drop_speakers("Ana?", ["Ana"]) == "Ana?"  # nothing left: the original

    def test_named_rewrites_chain_and_unknown_names_are_refused(self):
        rewrite = resolve_rewrite("drop-speakers+strip-question")
        assert rewrite("When did Ana run a race?", ["Ana"]) == "run a race"
        assert rewrite.needs_speakers
        with pytest.raises(ValueError, match="Unknown query rewrite 'shout'"):
            resolve_rewrite("shout")

    def test_every_strategy_takes_a_rewrite_and_applies_it_before_scoring(self, bundled):
        conversation = bundled.conversations[0]
        question = next(q.question for q in conversation.questions if "Priya" in q.question)
        for name in ("bm25", "phrase", "recency"):
            strategy = make_strategy(name, query_rewrite="drop-speakers")
            strategy.fit(conversation)
            assert "Priya" not in strategy.query_text(question)
        plain, rewritten = BM25(), BM25(query_rewrite="drop-speakers")
        plain.fit(conversation), rewritten.fit(conversation)
        assert not np.allclose(plain.scores(question), rewritten.scores(question))
        np.testing.assert_allclose(rewritten.scores(question), plain.scores(drop_speakers(question, ["Priya", "Tomas"])))

    def test_the_rewrite_shows_in_the_units_label(self):
        assert BM25(query_rewrite="drop-speakers").describe() == "turn/text q:drop-speakers"

    def test_dense_embeds_speaker_dependent_rewrites_per_conversation(self, bundled):
        conversation = bundled.conversations[0]
        strategy = dense(query_rewrite="drop-speakers")
        queries = [q.question for q in conversation.questions]
        strategy.prepare(queries)
        assert not strategy._queries  # the speakers are not known before fit
        strategy.fit(conversation)
        strategy.prepare_conversation(conversation, queries)
        assert all("Priya" not in text for text in strategy._queries)


class TestSpeakerPrior:
    def test_the_named_speakers_turns_gain_the_weight(self):
        conversation = conversation_of([("1 May 2023", [("Ana", "I adopted a dog"), ("Ben", "Ana, a dog!")])])
        prior, plain = SpeakerPrior(BM25(), weight=0.5), BM25()
        prior.fit(conversation), plain.fit(conversation)
        question = "What dog did Ana adopt?"
        base = plain.scores(question)
        scaled = (base - base.min()) / (base.max() - base.min())
        by_ana = np.array([t.speaker == "Ana" for t in conversation.turns], dtype=float)
        np.testing.assert_allclose(prior.scores(question), scaled + 0.5 * by_ana)
        assert plain.rank(question, 1) == ["D1:2"] and prior.rank(question, 1) == ["D1:1"]
        # Both named, or none: no speaker prior.
        assert prior.asked_about("Did Ana and Ben walk?") is None and prior.asked_about("Who walked?") is None

    def test_a_first_person_question_is_about_the_user(self):
        conversation = conversation_of([(None, [("user", "I moved to Oslo"), ("assistant", "Oslo is lovely")])],
                                       speakers=("user", "assistant"))
        prior = SpeakerPrior(BM25(), weight=1.0)
        prior.fit(conversation)
        assert prior.asked_about("Where did I move?") == "user"
        assert prior.rank("Where did I move to Oslo?", 1) == ["D1:1"]

    def test_an_inner_strategy_without_scores_is_refused(self):
        with pytest.raises(TypeError, match="scores"):
            SpeakerPrior(Phrase())


class TestTimeAware:
    def test_when_questions_favour_turns_that_mention_a_time(self):
        conversation = conversation_of([("8 May, 2023", [("Ana", "I ran the race there"),
                                                          ("Ana", "I ran the race today")])])
        strategy = TimeAware(BM25(), weight=0.5)
        strategy.fit(conversation)
        assert strategy.rank("When did Ana run the race?", 1) == ["D1:2"]
        assert strategy.rank("Did Ana run the race?", 1) == ["D1:1"]  # not a when-question: ties go to the first
        assert asks_when("How long ago did I move?") and not asks_when("What did Ana eat?")

    def test_a_named_month_favours_sessions_dated_then(self):
        conversation = conversation_of([("1:00 pm on 8 May, 2023", [("Ana", "I baked bread")]),
                                        ("1:00 pm on 3 July, 2023", [("Ana", "I baked bread")])])
        strategy = TimeAware(BM25(), weight=0.5)
        strategy.fit(conversation)
        assert strategy.rank("What did Ana bake in July 2023?", 1) == ["D2:1"]
        assert strategy.rank("What did Ana bake in May?", 1) == ["D1:1"]


class TestSessionsAndNeighbours:
    def test_session_prior_lifts_the_units_of_the_best_session(self):
        conversation = conversation_of([(None, [("Ana", "cello lesson"), ("Ben", "cello")]),
                                        (None, [("Ana", "cello"), ("Ben", "lunch")])])
        plain, soft = BM25(), SessionPrior(BM25(), weight=1.0)
        plain.fit(conversation), soft.fit(conversation)
        # D1:2 and D2:1 tie on their own; session 1 holds the best unit, so D1:2 comes before D2:1.
        assert plain.rank("cello lesson", 3) == ["D1:1", "D1:2", "D2:1"]
        assert plain.scores("cello lesson")[1] == plain.scores("cello lesson")[2]
        assert soft.rank("cello lesson", 3) == ["D1:1", "D1:2", "D2:1"]
        assert soft.scores("cello lesson")[1] > soft.scores("cello lesson")[2]
        later = conversation_of([(None, [("Ana", "cello"), ("Ben", "lunch")]),
                                 (None, [("Ana", "cello lesson"), ("Ben", "hello")])])
        plain, hard = BM25(), SessionPrior(BM25(), sessions=BM25(unit="session"), weight=0.0, top=1)
        plain.fit(later), hard.fit(later)
        assert plain.rank("lesson", 2) == ["D2:1", "D1:1"]
        assert hard.rank("lesson", 2) == ["D2:1", "D2:2"]  # only the best session's units on top

    def test_neighbours_borrow_from_the_unit_next_to_them(self):
        conversation = conversation_of([(None, [("Ana", "hello"), ("Ben", "the cello recital"), ("Ana", "nice")]),
                                        (None, [("Ana", "bye")])])
        strategy = Neighbours(BM25(), weight=0.5)
        strategy.fit(conversation)
        scores = strategy.scores("cello recital")
        assert scores[0] == scores[2] == 0.5 and scores[3] == 0.0


class TestDiversity:
    def test_list_questions_get_more_sessions_in_the_top(self):
        sessions = [(None, [("Ana", "cello cello"), ("Ana", "cello again cello"), ("Ana", "cello more cello")]),
                    (None, [("Ana", "piano and cello")])]
        conversation = conversation_of(sessions)
        plain = BM25(stopwords=STOP_WORDS)
        plain.fit(conversation)
        diverse = Diversify(BM25(stopwords=STOP_WORDS), penalty=1.0, when="list")
        diverse.fit(conversation)
        list_question = "Which instruments, cello and others, does Ana play?"
        assert asks_for_several(list_question)
        assert "D2:1" not in plain.rank(list_question, 2) and "D2:1" in diverse.rank(list_question, 2)
        assert diverse.rank("Does Ana play the cello?", 2) == plain.rank("Does Ana play the cello?", 2)

    def test_mmr_needs_a_dense_part_and_reorders_with_its_vectors(self, bundled):
        conversation = bundled.conversations[0]
        plain = Hybrid([BM25(stopwords=STOP_WORDS), dense(key="text")], method="minmax")
        strategy = MMR(Hybrid([BM25(stopwords=STOP_WORDS), dense(key="text")], method="minmax"), lam=0.5)
        plain.fit(conversation), strategy.fit(conversation)
        questions = [q.question for q in conversation.questions]
        assert all(sorted(strategy.rank(q, 30)) == sorted(plain.rank(q, 30)) for q in questions)  # same pool
        assert any(strategy.rank(q, 10) != plain.rank(q, 10) for q in questions)  # another order
        lexical_only = MMR(BM25())
        lexical_only.fit(conversation)
        with pytest.raises(TypeError, match="Dense"):
            lexical_only.rank(questions[0], 5)

    @pytest.mark.parametrize("make", [Diversify, MMR], ids=["diversify", "mmr"])
    def test_an_unknown_when_is_refused_with_the_choices(self, make):
        with pytest.raises(EvaluationError, match="'always' or 'list'"):
            make(BM25(), when="lists")


class TestTheDefaultStrategy:
    def test_it_is_the_documented_pipeline(self):
        strategy = Default(embedder=HashEmbedder(32))
        prior = strategy.inner
        fusion = prior.inner
        assert (strategy.name, strategy.penalty, strategy.when, prior.weight) == ("default", 0.2, "list", 0.25)
        assert fusion.method == "minmax" and fusion.weights == [1.0, 1.0] and fusion.learnable and strategy.learnable
        assert Default(embedder=HashEmbedder(32), weights=(1, 1)).inner.inner.learnable is False
        assert strategy.describe() == "window2/date q:drop-speakers + turn/speaker q:drop-speakers"
        assert fusion.parts[0].stopwords == STOP_WORDS
        assert "conv-26" in strategy.tuned_on["locomo"] and "conv-50" not in strategy.tuned_on["locomo"]
        assert "chosen on LoCoMo conv-26" in strategy.methodology and "cross-validation" in strategy.methodology

    def test_unit_options_reach_both_parts(self):
        strategy = Default(embedder=HashEmbedder(32), unit="turn", key="text", query_rewrite=None)
        assert strategy.describe() == "turn/text + turn/text"

    def test_it_is_what_make_strategy_builds_by_name(self):
        assert type(make_strategy("default", embedder=HashEmbedder(32))) is Default

    def test_it_ranks_every_unit_of_a_conversation(self, bundled):
        strategy = Default(embedder=HashEmbedder(32))
        strategy.use_cache(EmbeddingCache(None))
        units = strategy.fit(bundled.conversations[2])
        ranking = strategy.rank(bundled.conversations[2].questions[0].question, len(units))
        assert sorted(ranking) == sorted(u.id for u in units)


class TestLearntWeights:
    def test_learning_picks_the_part_that_finds_the_evidence(self, bundled):
        # Part 1 ranks by BM25; part 2 ranks newest first, which rarely finds the evidence.
        class Newest(BM25):
            def scores(self, query):
                return np.arange(len(self.units), dtype=float)

        hybrid = Hybrid([BM25(stopwords=STOP_WORDS), Newest()], method="minmax", weights="learn")
        assert hybrid.learnable and hybrid.weights == [1.0, 1.0]
        chosen = hybrid.learn([(c, c.questions) for c in bundled.conversations])
        assert chosen[0] > chosen[1] and sum(chosen) == pytest.approx(1.0)
        assert hybrid.weights == chosen

    def test_a_weighting_that_is_not_clearly_better_leaves_equal_weights(self, bundled):
        # Two near-identical parts: some weighting wins on the training questions only by chance.
        near = Hybrid([BM25(stopwords=STOP_WORDS), BM25(stopwords=STOP_WORDS, key="speaker")], method="minmax",
                      weights="learn")
        greedy = Hybrid([BM25(stopwords=STOP_WORDS), BM25(stopwords=STOP_WORDS, key="speaker")], method="minmax",
                        weights="learn", learn_alpha=None)
        examples = [(c, c.questions) for c in bundled.conversations]
        assert near.learn(examples) == [0.5, 0.5]
        chosen = greedy.learn(examples)
        assert chosen != [0.5, 0.5]  # without the test, training noise picks another weighting
        values = [greedy._values([d for c, qs in examples for d in greedy._learning_data(c, qs)], w).mean()
                  for w in ([0.5, 0.5], chosen)]
        assert values[1] >= values[0]  # the greedy choice is the best on the training questions

    def test_fixed_weights_do_not_learn(self, bundled):
        hybrid = Hybrid([BM25(), BM25()], weights=[1, 2])
        assert hybrid.learn([(bundled.conversations[0], bundled.conversations[0].questions)]) == [1.0, 2.0]
