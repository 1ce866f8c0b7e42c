"""Lexical strategies: BM25 (with optional RM3 feedback) and upstream's phrase search.

Both score a unit's key by its words, tokenized as upstream's full-text search tokenizes them (FTS5 ``porter
unicode61``) unless told otherwise. Invariants: scores come back in unit order; ties go to the earlier unit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from agentlab.eval.units import BaseStrategy, Unit, _by_score

__all__ = ["BM25", "RM3_DEFAULTS", "STOP_WORDS", "Phrase"]

#: RM3's settings when ``BM25(rm3=True)``: feedback units, expansion terms, the original query's share.
RM3_DEFAULTS: dict[str, Any] = {"fb_docs": 10, "fb_terms": 10, "original_weight": 0.5}

#: Common English function words (written for this project; 149 of them). Removing them from BM25
#: keys and queries keeps "what", "did", "the" from outscoring the content words of a question.
STOP_WORDS = frozenset([
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do",
    "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having",
    "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it",
    "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on",
    "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so",
    "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these",
    "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
    "yourself", "yourselves", "s", "t", "d", "ll", "m", "re", "ve", "don", "didn", "doesn", "isn", "wasn", "weren",
    "haven", "hasn", "wouldn", "shouldn", "couldn", "aren", "also", "got", "get", "gets"
])


def _resolve_tokenizer(tokenizer: str | Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    from agentlab.search import get_tokenizer

    return get_tokenizer(tokenizer)


class BM25(BaseStrategy):
    """BM25 over each unit's key, scored by agentlab's engine (:class:`agentlab.search.BM25Corpus`).

    The defaults are upstream's search ranking: FTS5 ``porter unicode61`` tokens and ``bm25()``
    (k1 = 1.2, b = 0.75, idf floored at 1e-6). ``BM25("simple", k1=1.5, idf="okapi")`` is
    ``rank_bm25.BM25Okapi``, the reference LoCoMo BM25 baseline. Query terms are a bag of
    words (a repeated term counts each time).

    Args:
        tokenizer: ``"porter"``, ``"simple"`` (``\\w+`` lower-cased), ``"simple_porter"``, or a
            function ``str -> list[str]``.
        k1, b: BM25's term-frequency saturation and length normalisation.
        idf: ``"fts5"`` or ``"okapi"`` (negative idf replaced by ``epsilon`` times the mean idf).
        epsilon: see ``idf``.
        stopwords: words dropped from keys and queries after tokenizing, e.g. :data:`STOP_WORDS`.
        rm3: pseudo-relevance feedback (:func:`agentlab.search._feedback.rm3_weights`): ``True`` for
            10 feedback units, 10 expansion terms and half the weight on the original query, or a dict of
            ``fb_docs``, ``fb_terms``, ``original_weight``.
        **options: unit options and ``query_rewrite`` (see :class:`BaseStrategy`).
    """

    name = "bm25"

    def __init__(self, tokenizer: str | Callable[[str], list[str]] = "porter", *, k1: float = 1.2,
                 b: float = 0.75, idf: str = "fts5", epsilon: float = 0.25,
                 stopwords: Iterable[str] | None = None, rm3: bool | dict[str, Any] = False,
                 **options: Any) -> None:
        super().__init__(**options)
        self.rm3 = {**RM3_DEFAULTS, **(rm3 if isinstance(rm3, dict) else {})} if rm3 else None
        if self.rm3 is not None:
            unknown = sorted(set(self.rm3) - set(RM3_DEFAULTS))
            if unknown:
                raise ValueError(f"Unknown rm3 option {unknown[0]!r}; use {sorted(RM3_DEFAULTS)}.")
        from agentlab.search import BM25Params

        self.params = BM25Params(k1=k1, b=b, idf=idf, epsilon=epsilon)  # validates idf early
        self.tokenizer = _resolve_tokenizer(tokenizer)
        self._additive = isinstance(tokenizer, str)  # built-in tokenizers split on whitespace
        self.stopwords = frozenset(stopwords or ())
        # Stop words are given as plain words; compare them after the same tokenizer (so stemmed too).
        self._stop = frozenset(t for w in self.stopwords for t in self.tokenizer(w))
        self._corpus: Any = None

    def _tokens(self, text: str) -> list[str]:
        tokens = self.tokenizer(text)
        return [t for t in tokens if t not in self._stop] if self._stop else tokens

    def index(self, units: Sequence[Unit]) -> None:
        from agentlab.search import BM25Corpus

        self.units = list(units)
        p = self.params
        self._corpus = BM25Corpus([u.text for u in self.units], k1=p.k1, b=p.b, idf=p.idf, epsilon=p.epsilon,
                                  tokenizer=self._tokens)
        self._word_scores: dict[str, np.ndarray] = {}

    def describe(self) -> str:
        return super().describe() + (" +rm3" if self.rm3 else "")

    def scores(self, query: str) -> np.ndarray:
        """One BM25 score per indexed unit, in unit order (after the query rewrite, and RM3 if on)."""
        if not self.units:
            return np.zeros(0)
        query = self.query_text(query)
        if self.rm3 is not None:
            from agentlab.search import rm3_weights

            weights = rm3_weights(self._corpus, self._tokens(query), **self.rm3)
            return self._corpus.weighted_scores(weights)
        if not self._additive:
            return self._corpus.scores(query)
        # The built-in tokenizers never join characters across whitespace, so a query's score is
        # the sum of its words' scores; questions repeat words ("what", names), so each word's
        # vector is computed once per index.
        total = np.zeros(len(self.units))
        for word in query.split():
            vector = self._word_scores.get(word)
            if vector is None:
                vector = self._word_scores[word] = self._corpus.scores(word)
            total += vector
        return total

    def order(self, query: str) -> np.ndarray:
        """Unit positions, best first (ties: the earlier unit), as ``BM25Corpus.rank`` orders them."""
        return _by_score(self.scores(query))


class Phrase(BaseStrategy):
    """Upstream's ``Session.search``: the question as one FTS5 phrase, through agentlab's full-text index.

    Units are indexed in an in-memory :class:`~agentlab.search.FullTextIndex` (FTS5 ``porter
    unicode61`` tokens, ``bm25()`` ranking), and only units holding the query's tokens adjacent and
    in order are returned, so a question rarely finds anything: this strategy shows what exact
    phrase search misses. ``mode="all"`` is upstream's ``SessionManager.search`` instead (every
    query word somewhere in the unit), ``mode="any"`` an OR of the words.
    """

    name = "phrase"

    def __init__(self, *, mode: str = "phrase", **options: Any) -> None:
        from agentlab.search import MODES

        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}.")
        super().__init__(**options)
        self.mode = mode
        self._index: Any = None

    def index(self, units: Sequence[Unit]) -> None:
        from agentlab.search import FullTextIndex
        from agentlab.store import Store

        self.units = list(units)
        if self._index is None:
            self._index = FullTextIndex(Store(), "units")
        self._index.clear()
        self._index.index_many((u.id, u.text, "") for u in self.units)

    def rank(self, query: str, k: int) -> list[str]:
        if not self.units or k <= 0:
            return []
        return [hit.doc_id for hit in self._index.search(self.query_text(query), mode=self.mode, limit=k)]
