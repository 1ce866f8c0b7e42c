"""The ``default`` strategy: what ``agentlab eval`` runs without ``--strategies``, with fixed parameters.

It is a pipeline of parts each measured on its own (BENCHMARKS.md, the ideas table):

1. BM25 (FTS5 porter tokens, stop words) on windows of two neighbouring turns each side, keyed with the session
   date, and MiniLM on turns keyed with their speaker, both with the speakers' names dropped from the query;
2. their scores fused after min-max scaling; the two weights are learnt by cross-validation inside the run (each
   fold's questions are scored with weights chosen on the other folds' conversations, from five weightings, and
   equal weights stay unless another is better at p < 0.05), or fixed with ``weights=(1, 1)``;
3. a speaker prior: turns of the speaker the question asks about gain a quarter of the score range;
4. for questions asking for several things, one session's turns may not crowd the top 30.

How its parameters were chosen (:data:`METHODOLOGY`): min-max scaling and equal starting weights from principle
(no part is trusted over another without data); the fusion weights per fold by cross-validation; the window, the
prior's weight and the diversity penalty by looking at 4 of LoCoMo's 10 conversations (conv-26, conv-30, conv-41,
conv-42: 582 of the 1,536 questions of categories 1-4), whose rows are therefore marked in-sample. Learning the
weights (rather than fixing them equal) was decided after the fixed version lost to its own dense part on the
LongMemEval-format data of ``benchmarks/lme_synthetic.py``; BENCHMARKS.md reports both.
"""

from __future__ import annotations

from typing import Any

from agentlab.eval.dense import Dense
from agentlab.eval.fused import Hybrid
from agentlab.eval.lexical import BM25, STOP_WORDS
from agentlab.eval.rescoring import Diversify, SpeakerPrior

__all__ = ["DEVELOPMENT_CONVERSATIONS", "METHODOLOGY", "Default"]

#: The LoCoMo conversations whose questions were looked at while choosing the default's parameters.
DEVELOPMENT_CONVERSATIONS = frozenset({"conv-26", "conv-30", "conv-41", "conv-42"})

METHODOLOGY = (
    "default = BM25 (window2/date, stop words) + MiniLM (turn/speaker), speaker names dropped from both queries; "
    "min-max fusion, weights chosen per fold by cross-validation over conversations inside the run (equal unless "
    "another weighting is better on the training folds at p < 0.05); speaker prior 0.25; session diversity 0.2 "
    "for list questions. Window, prior and penalty were chosen on LoCoMo conv-26, -30, -41, -42 (582 of 1,536 "
    "questions): rows there are marked in-sample."
)


class Default(Diversify):
    """The default pipeline (see the module docstring); unit options given here replace both parts' own.

    Args:
        prior: the speaker prior's weight.
        penalty: the diversity penalty for list questions.
        weights: the fusion weights of (BM25, dense), or ``"learn"``: chosen from a grid on training questions
            (cross-fitted by ``run(..., folds=)``, so never on the questions they score).
        embedder: the dense part's embedder (default MiniLM).
        **options: ``unit``, ``key``, ``window`` or ``query_rewrite`` for both parts; ``name``.
    """

    name = "default"


    def __init__(self, *, prior: float = 0.25, penalty: float = 0.2, weights: Any = "learn", embedder: Any = None,
                 **options: Any) -> None:
        name = options.pop("name", None)
        shared = {"query_rewrite": "drop-speakers", **options}
        lexical = {"unit": "window", "window": 2, "key": "date", **shared}
        dense = {"key": "speaker", **shared}
        fused = Hybrid([BM25(stopwords=STOP_WORDS, **lexical), Dense(embedder, **dense)], method="minmax",
                       weights=weights if isinstance(weights, str) else list(weights), name="default-fusion")
        super().__init__(SpeakerPrior(fused, weight=prior), penalty=penalty, depth=30, when="list", name=name)
        self.prior = prior
        self.methodology = METHODOLOGY if isinstance(weights, str) else METHODOLOGY.replace(
            "min-max fusion, weights chosen per fold by cross-validation over conversations inside the run (equal "
            "unless another weighting is better on the training folds at p < 0.05)",
            f"min-max fusion with fixed weights {list(weights)}")

    @property
    def tuned_on(self) -> dict[str, frozenset[str] | None]:
        return {"locomo": DEVELOPMENT_CONVERSATIONS}
