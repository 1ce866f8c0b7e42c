"""Question decomposition: a question split into sub-queries, each ranked on its own, the rankings fused.

A multi-hop question gathers evidence that no single query finds: "What do Jon and Gina both have in common?"
needs Jon's turns *and* Gina's, and with both names dropped from the query (speakers rarely say their own name)
nothing is left to tell them apart. :func:`decompose` splits a question, by rules and without a language model,
into :class:`SubQuery` items:

- ``question``: the whole question, about the one speaker it names (if exactly one);
- ``speaker``: one per speaker when the question joins two or more names ("Jon and Gina both ..."), each with
  the conjunction removed and a speaker prior for that person only;
- ``clause``: each part of a question joined by "and"/"or" before another question word ("What are Melanie's
  pets' names and what breed are they?");
- ``event``: the event a time phrase anchors to ("... after the roadtrip?" -> "the roadtrip"), whose turns date
  the answer.

:class:`Decomposed` ranks every sub-query with the same inner strategy (min-max scaled, plus a speaker prior for
the sub-query's speaker) and fuses the rankings. ``fusion="interleave"`` (the default) takes the sub-queries'
rankings in turn, each one's next unit not yet taken, so each part of the question has its best units at the top;
the whole question's ranking orders the rest. ``fusion="rrf"`` is weighted reciprocal rank fusion over the whole
question and its parts, which favours units that several rankings agree on (and so can leave one speaker's
evidence out when the whole question and another speaker's sub-query agree). A question that decomposes into
itself alone is ranked exactly as :class:`SpeakerPrior` ranks it.

Invariants: decomposition is deterministic and never empty (the whole question comes first); sub-query texts are
distinct; scores come back in unit order; ties go to the earlier unit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.eval.rescoring import SpeakerPrior
from agentlab.eval.rewrites import named_speakers
from agentlab.eval.units import _by_score

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation

__all__ = ["FUSIONS", "KINDS", "Decomposed", "SubQuery", "decompose", "interleave", "rrf_scores"]

#: How :class:`Decomposed` fuses the sub-queries' rankings.
FUSIONS = ("interleave", "rrf")

#: The kinds of sub-query :func:`decompose` makes, in the order they come out.
KINDS = ("question", "speaker", "clause", "event")

_QUESTION_WORD = r"(?:what|which|where|when|who|whom|whose|why|how|did|does|do|is|are|was|were|has|have|had)"
_CLAUSE_SPLIT = re.compile(rf",?\s+(?:and|or)\s+(?={_QUESTION_WORD}\b)", re.IGNORECASE)
_EVENT = re.compile(r"\b(?:before|after|since|during|following)\s+(?P<event>(?:(?:the|a|an|her|his|their|its|"
                    r"my|your|our)\s+)?[\w' -]+?)\s*[?.!]*\s*$", re.IGNORECASE)
_TOGETHER = re.compile(r"\b(both|each|together|either|neither)\b", re.IGNORECASE)
_PLACEHOLDER = "\u2063SPEAKER\u2063"  # an invisible separator keeps the placeholder out of any real word


@dataclass(frozen=True)
class SubQuery:
    """One sub-query of a decomposed question.

    Attributes:
        text: what is ranked (the inner strategy's own query rewrite still applies).
        speaker: the speaker whose turns gain the prior for this sub-query, or ``None``.
        kind: one of :data:`KINDS`.
    """

    text: str
    speaker: str | None
    kind: str


def _tidy(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([?.,!])", r"\1", text)
    return re.sub(r"^[,;\s]+|[,;\s]+$", "", text) or text


def _per_speaker(question: str, names: Sequence[str]) -> list[SubQuery]:
    """One sub-query per speaker of a conjoined pair ("Jon and Gina"), without the joining words ("and", "both").

    Names in different roles ("What did Jon tell Gina?") are a relation, not a conjunction: no sub-queries.
    """
    marked = question
    for name in names:
        marked = re.sub(r"\b" + re.escape(name) + r"(?:'s|\u2019s)?\b", _PLACEHOLDER, marked)
    joined = re.escape(_PLACEHOLDER) + r"(?:\s*(?:,|and|&|or)\s*" + re.escape(_PLACEHOLDER) + r")+"
    marked, count = re.subn(joined, _PLACEHOLDER, marked)
    if not count:
        return []
    marked = _TOGETHER.sub(" ", marked)
    return [SubQuery(_tidy(marked.replace(_PLACEHOLDER, name)), name, "speaker") for name in names]


def decompose(question: str, speakers: Sequence[str] = ()) -> list[SubQuery]:
    """Split a question into sub-queries (see the module docstring); the whole question always comes first.

    Args:
        question: the question as asked.
        speakers: the conversation's speakers (names are matched as whole, case-sensitive words).

    Returns:
        The sub-queries, whole question first, without repeated texts.
    """
    named = named_speakers(question, speakers)
    one = named[0] if len(named) == 1 else None
    out = [SubQuery(question, one, "question")]
    if len(named) >= 2:
        out += _per_speaker(question, named)
    clauses = [c for c in _CLAUSE_SPLIT.split(question) if re.search(r"\w", c)]
    if len(clauses) > 1:
        for clause in clauses:
            clause_named = named_speakers(clause, speakers)
            speaker = clause_named[0] if len(clause_named) == 1 else one
            out.append(SubQuery(_tidy(clause), speaker, "clause"))
    event = _EVENT.search(question)
    if event is not None and len(event.group("event").split()) <= 6:
        out.append(SubQuery(_tidy(event.group("event")), one, "event"))
    seen: set[str] = set()
    unique = []
    for sub in out:
        if sub.text and sub.text not in seen:
            seen.add(sub.text)
            unique.append(sub)
    return unique


def _min_max(scores: np.ndarray) -> np.ndarray:
    """Scores mapped to [0, 1] (a constant vector becomes zeros), as every wrapper scales its inner scores."""
    low, high = (float(scores.min()), float(scores.max())) if len(scores) else (0.0, 0.0)
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def interleave(rankings: Sequence[np.ndarray], scores: np.ndarray) -> np.ndarray:
    """Scores that put the rankings' units first, taken in turn (each ranking's next unit not yet taken), then the
    rest in the order of ``scores``; in unit order, higher is better."""
    taken: dict[int, None] = {}
    cursors = [0] * len(rankings)
    while len(taken) < len(scores) and any(c < len(r) for c, r in zip(cursors, rankings)):
        for i, ranking in enumerate(rankings):
            while cursors[i] < len(ranking) and int(ranking[cursors[i]]) in taken:
                cursors[i] += 1
            if cursors[i] < len(ranking):
                taken[int(ranking[cursors[i]])] = None
    head = np.fromiter(taken, dtype=np.int64, count=len(taken))
    out = _min_max(np.asarray(scores, dtype=np.float64))
    out[head] = 2.0 + np.arange(len(head), 0, -1, dtype=np.float64)
    return out


def rrf_scores(rankings: Sequence[np.ndarray], n: int, *, k: float = 60.0,
               weights: Sequence[float] | None = None) -> np.ndarray:
    """Weighted reciprocal rank fusion of full rankings (arrays of unit positions, best first) over ``n`` units.

    A unit scores ``sum(w_i / (k + rank_i))`` with 1-based ranks (Cormack, Clarke and Buettcher, SIGIR 2009).
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"Give one weight per ranking: {len(rankings)} rankings, {len(weights)} weights.")
    out = np.zeros(n, dtype=np.float64)
    for ranking, weight in zip(rankings, weights):
        ranking = np.asarray(ranking, dtype=np.int64)
        out[ranking] += float(weight) / (k + np.arange(1, len(ranking) + 1, dtype=np.float64))
    return out


class Decomposed(SpeakerPrior):
    """Rank each sub-query of :func:`decompose` with the inner strategy, then fuse the rankings.

    Args:
        inner: a strategy with ``scores(query)`` (a hybrid, BM25 or dense).
        prior: the speaker prior's weight (a share of the score range) for the speaker of a ``question``, ``clause``
            or ``event`` sub-query.
        speaker_prior: the same for a ``speaker`` sub-query, which asks about that one person of several. 0.25
            and 0.5 did equally well on LoCoMo's development conversations (1.0 one question worse); the larger
            was kept, since such a sub-query exists to bring that person's turns up.
        k: the RRF constant (``fusion="rrf"``).
        weights: the weight of each sub-query kind in RRF (``{"question": 1.0, ...}``; missing kinds 1.0).
        kinds: which kinds of sub-query to use besides the whole question (default ``speaker`` and ``clause``:
            ``event`` sub-queries cost temporal questions a little on LoCoMo's development conversations).
        fusion: ``"interleave"`` or ``"rrf"`` (see the module docstring); both gave the same multi-hop recall@10 on
            LoCoMo's development conversations, interleaving +0.004 recall@5.
        name: the row name.
    """

    name = "decomposed"

    def __init__(self, inner: Any, *, prior: float = 0.25, k: float = 60.0,
                 weights: dict[str, float] | None = None, kinds: Sequence[str] = ("speaker", "clause"),
                 speaker_prior: float = 0.5, fusion: str = "interleave", name: str | None = None) -> None:
        super().__init__(inner, weight=prior, name=name)
        unknown = [kind for kind in [*kinds, *(weights or {})] if kind not in KINDS]
        if unknown:
            raise ValueError(f"Unknown sub-query kind {unknown[0]!r}; choose from {', '.join(KINDS)}.")
        if k < 0:
            raise ValueError(f"The RRF constant k must be 0 or more, not {k!r}.")
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}.")
        self.k, self.kinds, self.speaker_prior = float(k), tuple(kinds), float(speaker_prior)
        self.fusion = fusion
        self.kind_weights = dict.fromkeys(KINDS, 1.0) | dict(weights or {})

    def sub_queries(self, query: str) -> list[SubQuery]:
        """The sub-queries this strategy ranks for ``query`` (the whole question first)."""
        return [s for s in decompose(query, self.speakers) if s.kind == "question" or s.kind in self.kinds]

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        self.speakers = list(conversation.speakers)
        texts = list(dict.fromkeys(s.text for q in queries for s in self.sub_queries(q)))
        super().prepare_conversation(conversation, texts)

    def _sub_scores(self, sub: SubQuery) -> np.ndarray:
        scores = _min_max(np.asarray(self.inner.scores(sub.text), dtype=np.float64))
        weight = self.speaker_prior if sub.kind == "speaker" else self.weight
        if sub.speaker is not None and weight:
            scores = scores + weight * np.array([u.speaker == sub.speaker for u in self.units], dtype=np.float64)
        return scores

    def scores(self, query: str) -> np.ndarray:
        """The fused scores of the sub-queries' rankings, in unit order (one sub-query: its prior-adjusted scores)."""
        if not self.units:
            return np.zeros(0)
        subs = self.sub_queries(query)
        whole = super().scores(query)
        if len(subs) == 1:
            return whole
        parts = subs[1:]
        rankings = [_by_score(self._sub_scores(sub)) for sub in parts]
        if self.fusion == "interleave":
            return interleave(rankings, whole)
        return rrf_scores([_by_score(whole), *rankings], len(self.units), k=self.k,
                          weights=[self.kind_weights[s.kind] for s in subs])
