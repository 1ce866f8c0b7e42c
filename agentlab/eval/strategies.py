"""Retrieval strategies: index a conversation's units, then rank them for a query.

Units and keys (turn, window of neighbouring turns or session; text alone or with speaker, date
and image caption) are described by :class:`~agentlab.eval.units.UnitSpec`, the protocol and base class
live in :mod:`agentlab.eval.units`, and :class:`Hybrid` fuses through :mod:`agentlab.search.fusion`; all is
importable from here.

A strategy is anything with a ``name``, ``index(units)`` and ``rank(query, k) -> list of unit ids``
(the :class:`Strategy` protocol). Subclass :class:`BaseStrategy` to get unit options for free::

    class Longest(BaseStrategy):
        name = "longest"
        def index(self, units): self.ids = [u.id for u in sorted(units, key=lambda u: -len(u.text))]
        def rank(self, query, k): return self.ids[:k]

Invariants: ``rank`` returns distinct ids of indexed units, best first, at most ``k`` of them;
the same index and query always give the same ranking (ties go to the earlier unit); ``index``
replaces whatever was indexed before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.eval.units import BaseStrategy, Strategy, Unit, UnitSpec, _by_score
from agentlab.search.fusion import rrf_positions, score_fusion

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation
    from agentlab.eval.embedcache import EmbeddingCache
    from agentlab.search.embedders import Embedder

__all__ = [
    "BM25", "STOP_WORDS", "BaseStrategy", "Dense", "Hybrid", "Phrase", "Recency", "Strategy", "Unit",
    "UnitSpec", "make_strategy", "strip_question",
]


class Recency(BaseStrategy):
    """A baseline that ignores the query: newest units first."""

    name = "recency"

    def order(self, query: str) -> np.ndarray:
        """Unit positions, newest first."""
        return np.arange(len(self.units) - 1, -1, -1)


# --- lexical -----------------------------------------------------------------------------------

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
    from agentlab.search.tokenizer import get_tokenizer

    return get_tokenizer(tokenizer)


class BM25(BaseStrategy):
    """BM25 over each unit's key, scored by agentlab's engine (:class:`agentlab.search.bm25.BM25Corpus`).

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
        **options: unit options (see :class:`BaseStrategy`).
    """

    name = "bm25"

    def __init__(self, tokenizer: str | Callable[[str], list[str]] = "porter", *, k1: float = 1.2,
                 b: float = 0.75, idf: str = "fts5", epsilon: float = 0.25,
                 stopwords: Iterable[str] | None = None, **options: Any) -> None:
        super().__init__(**options)
        from agentlab.search.bm25 import BM25Params

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
        from agentlab.search.bm25 import BM25Corpus

        self.units = list(units)
        p = self.params
        self._corpus = BM25Corpus([u.text for u in self.units], k1=p.k1, b=p.b, idf=p.idf, epsilon=p.epsilon,
                                  tokenizer=self._tokens)
        self._word_scores: dict[str, np.ndarray] = {}

    def scores(self, query: str) -> np.ndarray:
        """One BM25 score per indexed unit, in unit order."""
        if not self.units:
            return np.zeros(0)
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

    Units are indexed in an in-memory :class:`~agentlab.search.fulltext.FullTextIndex` (FTS5 ``porter
    unicode61`` tokens, ``bm25()`` ranking), and only units holding the query's tokens adjacent and
    in order are returned, so a question rarely finds anything: this strategy shows what exact
    phrase search misses. ``mode="all"`` is upstream's ``SessionManager.search`` instead (every
    query word somewhere in the unit), ``mode="any"`` an OR of the words.
    """

    name = "phrase"

    def __init__(self, *, mode: str = "phrase", **options: Any) -> None:
        from agentlab.search.fulltext import MODES

        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}.")
        super().__init__(**options)
        self.mode = mode
        self._index: Any = None

    def index(self, units: Sequence[Unit]) -> None:
        from agentlab.search.fulltext import FullTextIndex
        from agentlab.store.database import Store

        self.units = list(units)
        if self._index is None:
            self._index = FullTextIndex(Store(), "units")
        self._index.clear()
        self._index.index_many((u.id, u.text, "") for u in self.units)

    def rank(self, query: str, k: int) -> list[str]:
        if not self.units or k <= 0:
            return []
        return [hit.doc_id for hit in self._index.search(query, mode=self.mode, limit=k)]


# --- dense -------------------------------------------------------------------------------------

_QUESTION_START = re.compile(
    r"^\s*(?:(?:what|which|who|whom|whose|when|where|why|how)(?:\s+(?:kind|type|sort)s?\s+of)?"
    r"(?:\s+(?:many|much|long|often|old|far))?\s+)?"
    r"(?:(?:is|are|was|were|do|does|did|has|have|had|can|could|would|will|should|might)\s+)?",
    re.IGNORECASE,
)


def strip_question(query: str) -> str:
    """Drop a question's opening words and question mark: "When did Jo run a race?" -> "Jo run a race".

    A rewrite for dense keys: turns are statements, and a symmetric sentence model otherwise
    rates other *questions* in the conversation as closest to the query.
    """
    stripped = _QUESTION_START.sub("", query, count=1).strip().rstrip("?").strip()
    return stripped or query


class Dense(BaseStrategy):
    """Sentence embeddings (MiniLM by default) searched by inner product with FAISS.

    Embeddings of keys and queries go through an :class:`~agentlab.eval.embedcache.EmbeddingCache`,
    so repeated runs do not call the model again.

    The key defaults to ``"speaker"`` (``"Caroline: I went to ..."``), not the bare text: questions
    name the person they ask about, people never say their own name, and the *other* speaker
    addresses them by it ("Hey Caroline!"). On LoCoMo, 70% of MiniLM's top-5 turns for bare-text
    keys contain the asked-about name, against 3% of evidence turns, and 81% are spoken by the
    other person; with speaker keys recall@5 goes from 0.209 to 0.367 (BENCHMARKS.md).

    Args:
        embedder: any :class:`~agentlab.search.embedders.Embedder`; default ``MiniLMEmbedder()``.
        cache: an embedding cache; default the runner's (or an in-memory one when used alone).
        query_rewrite: a function applied to the query before embedding, e.g. :func:`strip_question`.
        **options: unit options (see :class:`BaseStrategy`); ``key`` defaults to ``"speaker"``.
    """

    name = "dense"

    def __init__(self, embedder: Embedder | None = None, *, cache: EmbeddingCache | None = None,
                 query_rewrite: Callable[[str], str] | None = None, **options: Any) -> None:
        options.setdefault("key", "speaker")
        super().__init__(**options)
        if embedder is None:
            from agentlab.search.embedders import MiniLMEmbedder

            embedder = MiniLMEmbedder()
        self.embedder = embedder
        self.cache = cache
        self.query_rewrite = query_rewrite
        self._queries: dict[str, np.ndarray] = {}
        self._vectors = np.zeros((0, int(embedder.dimension)), dtype=np.float32)
        self._index: Any = None

    def use_cache(self, cache: EmbeddingCache) -> None:
        if self.cache is None:
            self.cache = cache

    def _cache(self) -> EmbeddingCache:
        if self.cache is None:
            from agentlab.eval.embedcache import EmbeddingCache

            self.cache = EmbeddingCache(None)
        return self.cache

    def _query_text(self, query: str) -> str:
        return self.query_rewrite(query) if self.query_rewrite else query

    def prepare(self, queries: Sequence[str]) -> None:
        texts = list(dict.fromkeys(self._query_text(q) for q in queries))
        vectors = self._cache().encode(self.embedder, texts, progress=len(texts) > 512, desc="Embedding queries")
        self._queries.update(zip(texts, vectors))

    def index(self, units: Sequence[Unit]) -> None:
        import faiss

        self.units = list(units)
        self._vectors = self._cache().encode(self.embedder, [u.text for u in self.units])
        self._index = faiss.IndexFlatIP(int(self.embedder.dimension))
        if len(self._vectors):
            self._index.add(self._vectors)

    def _query_vector(self, query: str) -> np.ndarray:
        text = self._query_text(query)
        if text not in self._queries:
            self._queries[text] = self._cache().encode(self.embedder, [text])[0]
        return self._queries[text]

    def scores(self, query: str) -> np.ndarray:
        """Inner product of the query with every indexed unit, in unit order."""
        if not self.units:
            return np.zeros(0)
        return self._vectors @ self._query_vector(query)

    def order(self, query: str, k: int | None = None) -> np.ndarray:
        """Unit positions by inner product with the query, best first (ties: the earlier unit)."""
        k = len(self.units) if k is None else min(k, len(self.units))
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        found, ids = self._index.search(self._query_vector(query)[None, :], k)
        keep = ids[0] >= 0
        scores, ids = found[0][keep], ids[0][keep]
        return ids[np.lexsort((ids, -scores))]

    def rank(self, query: str, k: int) -> list[str]:
        return self._ids(self.order(query, k)) if self.units else []


# --- names -------------------------------------------------------------------------------------


class Hybrid(BaseStrategy):
    """Weighted reciprocal rank fusion (RRF) of several strategies (BM25 + dense by default).

    A unit's fused score is ``sum(weight_i / (k + rank_i))`` over the parts, with 1-based ranks
    over each part's full ranking; ties go to the earlier unit. ``method="score"`` instead adds the
    parts' scores after min-max scaling each to [0, 1] per query (parts need ``scores(query)``).

    The default parts, constant and weights were measured best among the RRF settings tried on
    LoCoMo (BENCHMARKS.md): BM25 with stop words on a window of one neighbouring turn each side keyed
    with the session date (context and dates the turn alone lacks), weight 2, and dense retrieval on
    speaker keys, weight 1, with ``k=10``. Plain RRF of turn-level BM25 and bare-text dense (k 60)
    scores below BM25 alone there: a weak ranking pulls a strong one down at equal weight.

    Args:
        parts: the strategies to fuse; each is fitted with its own unit options, which must give
            the same unit ids (turn and window units share ids; the keys may differ).
        k: the RRF constant (60 in the RRF paper; smaller trusts each part's top ranks more).
        weights: one weight per part (default 2, 1 for the default parts, else all 1).
        method: ``"rrf"`` or ``"score"``.
        **options: unit options. With default parts, any given here replace the tuned ones in both.
    """

    name = "hybrid"

    def __init__(self, parts: Sequence[Any] | None = None, *, k: float = 10.0,
                 weights: Sequence[float] | None = None, method: str = "rrf", **options: Any) -> None:
        super().__init__(**options)
        if parts is None:
            unit_options = {n: options[n] for n in ("unit", "key", "window") if n in options}
            lexical = {"unit": "window", "window": 1, "key": "date", **unit_options}
            parts = [BM25(stopwords=STOP_WORDS, **lexical), Dense(**unit_options)]
            weights = [2.0, 1.0] if weights is None else weights
        self.parts = list(parts)
        if not self.parts:
            raise ValueError("Hybrid needs at least one part strategy.")
        self.weights = list(weights) if weights is not None else [1.0] * len(self.parts)
        if len(self.weights) != len(self.parts):
            raise ValueError(f"Give one weight per part: {len(self.parts)} parts, {len(self.weights)} weights.")
        if method not in ("rrf", "score"):
            raise ValueError(f"method must be 'rrf' or 'score', not {method!r}.")
        if k < 0:
            raise ValueError(f"The RRF constant k must be 0 or more, not {k!r}.")
        if method == "score" and not all(callable(getattr(p, "scores", None)) for p in self.parts):
            raise TypeError("method='score' needs parts with a scores(query) method (BM25, Dense, Hybrid); "
                            "use method='rrf' to fuse rankings only.")
        self.k, self.method = k, method

    def fit(self, conversation: Conversation) -> list[Unit]:
        fitted = [part.fit(conversation) if hasattr(part, "fit") else None for part in self.parts]
        reference = next((u for u in fitted if u is not None), None)
        if reference is None:
            reference = self.spec.units(conversation)
        ids = [u.id for u in reference]
        for part, units in zip(self.parts, fitted):
            if units is None:
                part.index(reference)
            elif [u.id for u in units] != ids:
                raise ValueError(f"Hybrid part {part.name!r} indexes other units than the first part; "
                                 "give every part the same unit and window (keys may differ).")
        self.units = list(reference)
        return self.units

    def index(self, units: Sequence[Unit]) -> None:
        self.units = list(units)
        for part in self.parts:
            part.index(self.units)

    def describe(self) -> str:
        return " + ".join(part.describe() if hasattr(part, "describe") else "turn/text" for part in self.parts)

    def prepare(self, queries: Sequence[str]) -> None:
        for part in self.parts:
            if hasattr(part, "prepare"):
                part.prepare(queries)

    def use_cache(self, cache: EmbeddingCache) -> None:
        for part in self.parts:
            if hasattr(part, "use_cache"):
                part.use_cache(cache)

    def _positions(self, part: Any, query: str) -> np.ndarray:
        order = getattr(part, "order", None)
        if callable(order):
            return np.asarray(order(query), dtype=np.int64)
        if getattr(self, "_position_source", None) is not self.units:
            self._position = {u.id: i for i, u in enumerate(self.units)}
            self._position_source = self.units
        ranked = part.rank(query, len(self.units))
        return np.fromiter(map(self._position.__getitem__, ranked), dtype=np.int64, count=len(ranked))

    def scores(self, query: str) -> np.ndarray:
        """The fused score of every unit, in unit order (:mod:`agentlab.search.fusion`)."""
        if self.method == "score":
            return score_fusion([part.scores(query) for part in self.parts], weights=self.weights)
        rankings = [self._positions(part, query) for part in self.parts]
        return rrf_positions(len(self.units), rankings, k=self.k, weights=self.weights)

    def order(self, query: str) -> np.ndarray:
        """Unit positions by fused score, best first (ties: the earlier unit)."""
        return _by_score(self.scores(query))


_FACTORIES: dict[str, Callable[..., Any]] = {
    "bm25": BM25,
    "bm25-reference": lambda **o: BM25("simple", k1=1.5, idf="okapi", name="bm25-reference", **o),
    "dense": Dense,
    "hybrid": Hybrid,
    "phrase": Phrase,
    "recency": Recency,
}


def make_strategy(name: str, **options: Any) -> Any:
    """Build a strategy by name: ``bm25``, ``bm25-reference``, ``dense``, ``hybrid``, ``phrase``, ``recency``.

    Args:
        name: one of the names above.
        **options: passed to the class (for example ``unit="window"`` or ``key="speaker"``).

    Raises:
        ValueError: an unknown name.
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"Unknown strategy {name!r}; choose from {sorted(_FACTORIES)}.") from None
    return factory(**options)

