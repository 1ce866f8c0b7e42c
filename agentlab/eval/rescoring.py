"""Strategies that adjust another strategy's scores: name, time and session handling, neighbours, diversity.

Each wraps an *inner* strategy that has ``scores(query)`` (BM25, Dense, Hybrid, or another wrapper), scales its
scores to [0, 1] per query (min-max), and changes them:

- :class:`SpeakerPrior` (names): a unit spoken by the one speaker the question names gains ``weight``; with no
  name but a first-person question ("What did I ...?"), the speaker called ``user`` counts as named.
- :class:`TimeAware` (temporal questions): for a question asking when, units whose text holds a time expression
  ("yesterday", "last week", a month) gain ``weight``; a question naming a month or year favours units of
  sessions dated then.
- :class:`SessionPrior` (two-stage session -> turn): each unit gains ``weight`` times its session's score (the
  session's best unit, or a session-level strategy); ``top`` keeps only the best sessions' units on top.
- :class:`Neighbours` (neighbour expansion): each unit borrows from the better of its neighbours in its session.
- :class:`Diversify` (sessions) and :class:`MMR` (embeddings): re-rank the first ``depth`` units so one session
  or one near-duplicate does not fill the top; ``when="list"`` only for questions asking for several things.

Invariants: wrappers keep the inner strategy's units and unit order, and pass fitting, preparation, the embedding
cache and learning through to it; scores come back in unit order; ties go to the earlier unit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.errors import EvaluationError
from agentlab.eval.datasets import parse_date
from agentlab.eval.rewrites import named_speakers
from agentlab.eval.units import Unit, _by_score
from agentlab.search import diversify_groups, min_max, mmr, neighbour_boost

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation, Question
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["MMR", "Diversify", "Neighbours", "Rescored", "SessionPrior", "SpeakerPrior", "TimeAware",
           "asks_for_several", "asks_when"]

_FIRST_PERSON = re.compile(r"\b(I|I'm|I've|I'd|me|my|mine|myself)\b")
_WHEN = re.compile(r"^\s*when\b|\bwhen (did|was|were|is|will|do|does|has|have)\b|\bhow long (ago|before|after)\b"
                   r"|\bwhat (date|day|month|year|time)\b|\bwhich (date|day|month|year)\b|\bhow many (days|weeks|"
                   r"months|years)\b", re.IGNORECASE)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_TIME_WORDS = re.compile(r"\b(yesterday|today|tonight|tomorrow|last|next|ago|weekend|week|weeks|month|months|year|"
                         r"years|recently|earlier|lately|soon|monday|tuesday|wednesday|thursday|friday|saturday|"
                         r"sunday|" + "|".join(_MONTHS) + r"|\d{4})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19|20)\d{2}\b")
_SEVERAL = re.compile(r"\b(what|which) (\w+ )?(are|were|kinds?|types?|sorts?)\b|\b(what|which) \w+s (has|have|did|"
                      r"does|do)\b|\bhow many\b|\bboth\b|\bin what ways\b|\b(hobbies|activities|things|places|events|"
                      r"ways|books|pets|items|games|sports|countries|cities|instruments|people)\b", re.IGNORECASE)


def asks_when(question: str) -> bool:
    """Whether the question asks for a time ("When did ...", "How long ago ...", "What year ...")."""
    return bool(_WHEN.search(question))


def asks_for_several(question: str) -> bool:
    """Whether the question asks for several things ("What are ...", "Which cities ...", "both", plurals)."""
    return bool(_SEVERAL.search(question))


class Rescored:
    """Base of the wrappers: the inner strategy's min-max scaled scores, changed by :meth:`adjust`.

    Args:
        inner: a strategy with ``scores(query)``.
        name: the row name (default the class's).
    """

    name = "rescored"

    def __init__(self, inner: Any, *, name: str | None = None) -> None:
        if not callable(getattr(inner, "scores", None)):
            raise TypeError(f"{type(self).__name__} needs an inner strategy with scores(query) (BM25, Dense, Hybrid, "
                            f"or another wrapper), not {type(inner).__name__}.")
        self.inner = inner
        if name is not None:
            self.name = name
        self.units: list[Unit] = []
        self.speakers: list[str] = []
        self.conversation: Conversation | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, name={self.name!r})"

    @property
    def tuned_on(self) -> dict[str, frozenset[str] | None]:
        return dict(getattr(self.inner, "tuned_on", {}))

    @property
    def learnable(self) -> bool:
        return bool(getattr(self.inner, "learnable", False))

    def learn(self, examples: Sequence[tuple[Conversation, Sequence[Question]]]) -> Any:
        return self.inner.learn(examples) if self.learnable else None

    def describe(self) -> str:
        return self.inner.describe() if hasattr(self.inner, "describe") else "turn/text"

    def fit(self, conversation: Conversation) -> list[Unit]:
        self.conversation = conversation
        self.speakers = list(conversation.speakers)
        self.units = list(self.inner.fit(conversation))
        self._fitted()
        return self.units

    def index(self, units: Sequence[Unit]) -> None:
        self.units = list(units)
        self.inner.index(self.units)
        self._fitted()

    def _fitted(self) -> None:
        """Per-conversation set-up after fitting (subclasses)."""

    def prepare(self, queries: Sequence[str]) -> None:
        if hasattr(self.inner, "prepare"):
            self.inner.prepare(queries)

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        if hasattr(self.inner, "prepare_conversation"):
            self.inner.prepare_conversation(conversation, queries)

    def use_cache(self, cache: EmbeddingCache) -> None:
        if hasattr(self.inner, "use_cache"):
            self.inner.use_cache(cache)

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        return scores

    def scores(self, query: str) -> np.ndarray:
        """The adjusted scores, in unit order."""
        if not self.units:
            return np.zeros(0)
        return self.adjust(query, min_max(np.asarray(self.inner.scores(query), dtype=np.float64)))

    def order(self, query: str) -> np.ndarray:
        return _by_score(self.scores(query))

    def rank(self, query: str, k: int) -> list[str]:
        if not self.units or k <= 0:
            return []
        return [self.units[i].id for i in self.order(query)[:k]]

    def _sessions(self) -> np.ndarray:
        index: dict[str, int] = {}
        return np.array([index.setdefault(u.session_id, len(index)) for u in self.units], dtype=np.int64)


class SpeakerPrior(Rescored):
    """Units spoken by the speaker the question asks about gain ``weight`` (of the inner score range).

    Args:
        inner: the strategy whose scores are adjusted.
        weight: the gain.
        first_person: the speaker a first-person question ("What did I ...?") is about when it names nobody
            (``None``: none).
    """

    name = "speaker-prior"

    def __init__(self, inner: Any, *, weight: float = 0.25, first_person: str | None = "user",
                 name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.weight, self.first_person = float(weight), first_person

    def asked_about(self, query: str) -> str | None:
        """The one speaker the question asks about, or ``None``."""
        named = named_speakers(query, self.speakers)
        if len(named) == 1:
            return named[0]
        if not named and self.first_person in self.speakers and _FIRST_PERSON.search(query):
            return self.first_person
        return None

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        speaker = self.asked_about(query)
        if speaker is None or not self.weight:
            return scores
        return scores + self.weight * np.array([u.speaker == speaker for u in self.units], dtype=np.float64)


class TimeAware(Rescored):
    """For a question asking when, units that mention a time gain ``weight``; a named month or year favours
    units of sessions dated then (``weight`` again).
    """

    name = "time-aware"

    def __init__(self, inner: Any, *, weight: float = 0.1, name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.weight = float(weight)

    def _fitted(self) -> None:
        self._mentions = np.array([bool(_TIME_WORDS.search(u.text)) for u in self.units], dtype=np.float64)
        dates = [parse_date(u.date) for u in self.units]
        self._months = [(d.year, d.month) if d else None for d in dates]

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        out = scores
        if asks_when(query):
            out = out + self.weight * self._mentions
        lowered = query.lower()
        years = {int(m.group(0)) for m in _YEAR.finditer(query)}
        months = {i + 1 for i, month in enumerate(_MONTHS) if re.search(rf"\b{month}\b", lowered)
                  and not (month == "may" and not re.search(r"\bmay\s+(\d|of\b)|\bin may\b", lowered))}
        if years or months:
            dated = np.array([m is not None and (not years or m[0] in years) and (not months or m[1] in months)
                              for m in self._months], dtype=np.float64)
            out = out + self.weight * dated
        return out


class SessionPrior(Rescored):
    """Two-stage retrieval: sessions first, then their units.

    Args:
        inner: the unit-level strategy.
        sessions: a strategy fitted with ``unit="session"`` that scores sessions (default: each session scores its
            best unit's inner score).
        weight: the share of the session score added to each of its units.
        top: keep only the units of the ``top`` best sessions above the rest (``None``: a soft prior only).
    """

    name = "session-prior"

    def __init__(self, inner: Any, *, sessions: Any = None, weight: float = 0.25, top: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.sessions, self.weight, self.top = sessions, float(weight), top

    def fit(self, conversation: Conversation) -> list[Unit]:
        if self.sessions is not None:
            self.sessions.fit(conversation)
        return super().fit(conversation)

    def _fitted(self) -> None:
        self._group = self._sessions()
        if self.sessions is not None:
            order = {u.session_id: i for i, u in enumerate(self.sessions.units)}
            self._session_of = np.array([order[u.session_id] for u in self.units], dtype=np.int64)

    def prepare(self, queries: Sequence[str]) -> None:
        super().prepare(queries)
        if self.sessions is not None and hasattr(self.sessions, "prepare"):
            self.sessions.prepare(queries)

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        super().prepare_conversation(conversation, queries)
        if self.sessions is not None and hasattr(self.sessions, "prepare_conversation"):
            self.sessions.prepare_conversation(conversation, queries)

    def use_cache(self, cache: EmbeddingCache) -> None:
        super().use_cache(cache)
        if self.sessions is not None and hasattr(self.sessions, "use_cache"):
            self.sessions.use_cache(cache)

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        if self.sessions is not None:
            per_unit = min_max(np.asarray(self.sessions.scores(query), dtype=np.float64))[self._session_of]
        else:
            best = np.full(self._group.max() + 1, -np.inf)
            np.maximum.at(best, self._group, scores)
            per_unit = best[self._group]
        out = scores + self.weight * per_unit
        if self.top is not None:
            ranked = list(dict.fromkeys(self._group[_by_score(per_unit)].tolist()))[: self.top]
            out = out + (out.max() - out.min() + 1.0) * np.isin(self._group, ranked)
        return out


class Neighbours(Rescored):
    """Neighbour expansion: each unit gains ``weight`` times the better score of its neighbours in its session."""

    name = "neighbours"

    def __init__(self, inner: Any, *, weight: float = 0.2, name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.weight = float(weight)

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        return neighbour_boost(scores, self._sessions(), weight=self.weight)


def _checked_when(when: str) -> str:
    """``when`` of :class:`Diversify` and :class:`MMR`, checked."""
    if when not in ("always", "list"):
        raise EvaluationError(f"when must be 'always' or 'list', not {when!r}.")
    return when


def _applies(when: str, query: str) -> bool:
    """Whether a re-ranking with this ``when`` applies to ``query`` (``"list"``: questions asking for several)."""
    return when == "always" or asks_for_several(query)


class Diversify(Rescored):
    """Re-rank the first ``depth`` units so each extra unit from an already used session costs ``penalty``.

    Args:
        when: ``"always"``, or ``"list"``: only for questions asking for several things
            (:func:`asks_for_several`), whose evidence tends to lie in several sessions.
    """

    name = "diversify"

    def __init__(self, inner: Any, *, penalty: float = 0.1, depth: int = 30, when: str = "list",
                 name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.penalty, self.depth, self.when = float(penalty), int(depth), _checked_when(when)

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        if not _applies(self.when, query):
            return scores
        return diversify_groups(scores, self._sessions(), penalty=self.penalty, depth=self.depth)


def _vectors_of(strategy: Any) -> np.ndarray | None:
    vectors = getattr(strategy, "vectors", None)
    if isinstance(vectors, np.ndarray) and len(vectors):
        return vectors
    for part in [getattr(strategy, "inner", None), *(getattr(strategy, "parts", None) or [])]:
        if part is not None and (found := _vectors_of(part)) is not None:
            return found
    return None


class MMR(Rescored):
    """Maximal marginal relevance over the first ``depth`` units, with the unit embeddings of a dense part.

    Args:
        inner: must contain a :class:`~agentlab.eval.dense.Dense` (itself, or a part of a hybrid) whose unit
            vectors measure redundancy.
        lam: the weight of redundancy against relevance.
        when: ``"always"`` or ``"list"`` (see :class:`Diversify`).
    """

    name = "mmr"

    def __init__(self, inner: Any, *, lam: float = 0.3, depth: int = 30, when: str = "always",
                 name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.lam, self.depth, self.when = float(lam), int(depth), _checked_when(when)

    def adjust(self, query: str, scores: np.ndarray) -> np.ndarray:
        if not _applies(self.when, query):
            return scores
        vectors = _vectors_of(self.inner)
        if vectors is None:
            raise TypeError("MMR needs a Dense strategy inside its inner strategy (for the unit embeddings).")
        return mmr(scores, vectors, lam=self.lam, depth=self.depth)
