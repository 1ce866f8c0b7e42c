"""Question decomposition (sub-queries fused by reciprocal rank) and the ``multihop`` strategy built on it."""

from __future__ import annotations

import numpy as np
import pytest

from agentlab.eval import Dataset, run
from agentlab.eval.datasets import Conversation, DialogueSession, DialogueTurn, Question
from agentlab.eval.decompose import Decomposed, SubQuery, decompose, interleave, rrf_scores
from agentlab.eval.embedcache import EmbeddingCache
from agentlab.eval.strategies import BM25, STOP_WORDS, Default, MultiHop, SpeakerPrior, make_strategy
from agentlab.search import HashEmbedder

SPEAKERS = ["Jon", "Gina"]


class TestDecompose:
    def test_joined_speakers_become_one_sub_query_each(self):
        subs = decompose("What do Jon and Gina both have in common?", SPEAKERS)
        assert subs == [SubQuery("What do Jon and Gina both have in common?", None, "question"),
                        SubQuery("What do Jon have in common?", "Jon", "speaker"),
                        SubQuery("What do Gina have in common?", "Gina", "speaker")]

    def test_names_in_different_roles_are_a_relation_not_a_conjunction(self):
        assert decompose("What book did Caroline recommend to Melanie?", ["Caroline", "Melanie"]) == [
            SubQuery("What book did Caroline recommend to Melanie?", None, "question")]

    def test_a_question_joined_to_another_splits_into_clauses_with_the_speaker(self):
        subs = decompose("What are Gina's pets' names and what breed are they?", SPEAKERS)
        assert [(s.kind, s.text, s.speaker) for s in subs] == [
            ("question", "What are Gina's pets' names and what breed are they?", "Gina"),
            ("clause", "What are Gina's pets' names", "Gina"),
            ("clause", "what breed are they?", "Gina")]

    def test_and_inside_one_question_is_not_a_clause(self):
        assert len(decompose("Did Jon buy bread and milk?", SPEAKERS)) == 1

    def test_a_time_phrase_gives_the_event_it_anchors_to(self):
        subs = decompose("When did Gina go on a hike after the roadtrip?", SPEAKERS)
        assert subs[-1] == SubQuery("the roadtrip", "Gina", "event")

    def test_three_joined_names(self):
        subs = decompose("Where have Ana, Ben and Cy all been?", ["Ana", "Ben", "Cy"])
        assert [s.speaker for s in subs if s.kind == "speaker"] == ["Ana", "Ben", "Cy"]
        assert all("Ben" not in s.text for s in subs if s.speaker == "Ana")


class TestFusion:
    def test_interleave_takes_each_rankings_next_unit_in_turn_then_the_scores(self):
        scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
        fused = interleave([np.array([3, 1, 0]), np.array([3, 4])], scores)
        assert list(np.argsort(-fused, kind="stable")) == [3, 4, 1, 0, 2]

    def test_a_unit_near_the_top_of_every_ranking_wins(self):
        scores = rrf_scores([np.array([2, 0, 1]), np.array([0, 2, 1]), np.array([0, 1, 2])], 3, k=1.0)
        assert list(np.argsort(-scores, kind="stable")) == [0, 2, 1]
        assert scores[0] == pytest.approx(1 / 3 + 1 / 2 + 1 / 2)

    def test_weights_decide_between_two_rankings(self):
        first, second = np.array([0, 1]), np.array([1, 0])
        assert np.argmax(rrf_scores([first, second], 2, weights=[2.0, 1.0])) == 0
        assert np.argmax(rrf_scores([first, second], 2, weights=[1.0, 2.0])) == 1
        with pytest.raises(ValueError, match="one weight per ranking"):
            rrf_scores([first, second], 2, weights=[1.0])


def conversation() -> Conversation:
    """Jon talks a lot about painting; Gina paints once, in passing. Small talk keeps the words rare."""
    sessions = [
        ("1 May 2023", [("Jon", "I painted a big mural of the harbour this weekend, painting all day."),
                        ("Gina", "I finally painted my first small canvas, a bowl of lemons."),
                        ("Jon", "Painting the mural made my arms ache, but painting is my joy.")]),
        ("8 May 2023", [("Gina", "That sounds great, the harbour is lovely."),
                        ("Jon", "Lemons! Nice choice."),
                        ("Jon", "I keep painting murals, painting is what I do best.")]),
        ("15 May 2023", [(speaker, text) for speaker, text in
                         [("Gina", "good morning"), ("Jon", "the weather is grey"), ("Gina", "traffic was slow"),
                          ("Jon", "coffee first"), ("Gina", "see you soon"), ("Jon", "bye for now")]]),
    ]
    built = []
    for s, (date, turns) in enumerate(sessions, 1):
        sid = f"session_{s}"
        built.append(DialogueSession(sid, date, [DialogueTurn(f"D{s}:{t}", who, text, sid, t - 1, date)
                                                 for t, (who, text) in enumerate(turns, 1)]))
    question = Question("q1", "What have Jon and Gina both painted?", "murals; lemons", 1, ["D2:3", "D1:2"])
    return Conversation("c", SPEAKERS, built, [question])


def bm25() -> BM25:
    return BM25(stopwords=STOP_WORDS, query_rewrite="drop-speakers")


class TestDecomposedRanking:
    def test_each_joined_speaker_reaches_the_top(self):
        chat = conversation()
        plain, split = SpeakerPrior(bm25()), Decomposed(bm25())
        for strategy in (plain, split):
            strategy.fit(chat)
        question = chat.questions[0].question
        assert plain.rank(question, 2) == ["D2:3", "D1:1"]  # Jon's painting crowds Gina's out
        assert split.rank(question, 2) == ["D2:3", "D1:2"]  # each speaker's best, in turn

    def test_a_question_that_does_not_decompose_is_ranked_as_the_speaker_prior_ranks_it(self):
        chat = conversation()
        plain, split = SpeakerPrior(bm25()), Decomposed(bm25())
        for strategy in (plain, split):
            strategy.fit(chat)
        for question in ("What does Gina paint?", "What was painted in May?"):
            assert np.array_equal(plain.scores(question), split.scores(question))

    def test_rrf_fusion_lets_agreement_win_over_one_sub_query(self):
        # Two of the three rankings (the whole question, Jon's) put Jon's turns first: consensus keeps them on top.
        chat = conversation()
        split = Decomposed(bm25(), fusion="rrf")
        split.fit(chat)
        assert split.rank(chat.questions[0].question, 2) == ["D2:3", "D1:1"]

    def test_unknown_kinds_and_fusions_are_refused_with_the_choices(self):
        with pytest.raises(ValueError, match="question, speaker, clause, event"):
            Decomposed(bm25(), kinds=("speakers",))
        with pytest.raises(ValueError, match="interleave, rrf"):
            Decomposed(bm25(), fusion="mean")


class TestTheMultiHopStrategy:
    def test_it_is_the_documented_pipeline_and_built_by_name(self):
        strategy = make_strategy("multihop", embedder=HashEmbedder(32))
        assert type(strategy) is MultiHop and strategy.name == "multihop"
        decomposed = strategy.inner
        fusion = decomposed.inner
        assert (strategy.penalty, strategy.when, decomposed.weight, decomposed.kinds) == (
            0.2, "list", 0.25, ("speaker", "clause"))
        assert fusion.weights == [1.0, 1.0, 0.5] and fusion.method == "minmax"
        assert fusion.describe() == ("window2/date+caption q:drop-speakers + turn/speaker q:drop-speakers + "
                                     "window1/speaker q:drop-speakers")
        assert "conv-26" in strategy.tuned_on["locomo"]

    def test_it_finds_a_picture_the_default_cannot_see(self):
        # The real MiniLM. The turn that answers says only "Take a look at this!": what Jon painted is in the
        # caption of the image he shared, which multihop's BM25 keys carry and the default's do not.
        talk = [("Jon", "good morning"), ("Gina", "the weather is grey"), ("Jon", "traffic was slow"),
                ("Gina", "coffee first"), ("Jon", "see you soon"), ("Gina", "bye for now")]
        said = [[("Jon", "Work has been busy, lots of meetings."), ("Gina", "Same here, the garden needs me too.")],
                [("Jon", "Take a look at this!"), ("Gina", "Wow, beautiful colours.")],
                [("Gina", "I baked bread yesterday."), ("Jon", "I went for a long run by the river.")]]
        sessions = []
        for s, turns in enumerate(said, 1):
            sid = f"session_{s}"
            turns = [*talk[:3], *turns, *talk[3:]]
            sessions.append(DialogueSession(sid, f"{s} May 2023", [
                DialogueTurn(f"D{s}:{t}", who, text, sid, t - 1, f"{s} May 2023",
                             {"blip_caption": "a photo of a painting of a sunset over a lake"}
                             if text.startswith("Take a look") else {})
                for t, (who, text) in enumerate(turns, 1)]))
        question = Question("q1", "What has Jon painted?", "a sunset", 1, ["D2:4"])
        dataset = Dataset("fixture", [Conversation("c", SPEAKERS, sessions, [question])], {1: "multi-hop"})
        results = run(dataset, {"default": Default(weights=(1.0, 1.0)), "multihop": MultiHop()}, (3,),
                      cache=EmbeddingCache(None), progress=False, n_boot=10)
        recall = results.per_question.set_index("strategy")["recall@3"]
        assert recall["multihop"] == 1.0
        assert recall["default"] == 0.0

    def test_unit_options_reach_every_part(self):
        strategy = MultiHop(embedder=HashEmbedder(32), unit="turn", key="text", query_rewrite=None)
        assert strategy.inner.inner.describe() == "turn/text + turn/text + turn/text"
