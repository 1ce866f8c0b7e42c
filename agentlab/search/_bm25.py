"""BM25 ranking: the one expression both full-text search and the evaluation harness score with.

:data:`FTS5_BM25` is the ranking constant of agentlab's search, in the spirit of llm's
``TURN_SEARCH_RANK``: SQLite FTS5's ``bm25()`` with its fixed k1 = 1.2 and b = 0.75 and its idf
``log((N - n + 0.5) / (n + 0.5))``, which FTS5 raises to 1e-6 when it is zero or negative
(sqlite ``ext/fts5/fts5_aux.c``, ``fts5Bm25GetData``: "the mimimum allowable IDF is (1e-6)").
FTS5 returns the score negated so that ``ORDER BY rank`` is ascending; here higher is better.

:data:`OKAPI_BM25` is ``rank_bm25.BM25Okapi``'s default (k1 = 1.5, b = 0.75; a negative idf is
replaced by epsilon = 0.25 times the mean idf over the vocabulary), used by the LoCoMo baseline.
:class:`BM25Corpus` ranks a fixed list of texts with either, without storage.

Invariants:

* A document's score is the sum, over the query's phrases in query order, of
  :func:`bm25_term` -- the same float operations, in the same order, as FTS5's C code and
  rank_bm25's numpy code, so scores agree to the last bit in practice.
* N, n and the average length are taken over the whole corpus (a whole FTS table), never over a
  filtered subset: filters choose among results, they do not change scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from agentlab.search._postings import Postings, count_runs
from agentlab.search._tokenizer import Tokenizer, get_tokenizer


@dataclass(frozen=True)
class BM25Params:
    """Constants of a BM25 ranking.

    Attributes:
        k1: Term-frequency saturation.
        b: Length normalisation (0 = none, 1 = full).
        idf: ``"fts5"`` (floored at 1e-6) or ``"okapi"`` (rank_bm25's epsilon flooring).
        epsilon: For ``"okapi"``: negative idfs become ``epsilon * mean idf``.
    """

    k1: float
    b: float
    idf: str = "fts5"
    epsilon: float = 0.25

    def __post_init__(self) -> None:
        if self.idf not in ("fts5", "okapi"):
            raise ValueError(f"idf must be 'fts5' or 'okapi', not {self.idf!r}.")


#: The ranking of agentlab's full-text search: SQLite FTS5 bm25() (fts5_aux.c, fts5Bm25Function).
FTS5_BM25 = BM25Params(k1=1.2, b=0.75, idf="fts5")
#: rank_bm25.BM25Okapi's defaults (the LoCoMo BM25 baseline).
OKAPI_BM25 = BM25Params(k1=1.5, b=0.75, idf="okapi", epsilon=0.25)

FTS5_MIN_IDF = 1e-6


def fts5_idf(n_docs: int, n_hits: int) -> float:
    """FTS5's idf of a phrase found in ``n_hits`` of ``n_docs`` rows, floored at 1e-6."""
    idf = math.log((n_docs - n_hits + 0.5) / (n_hits + 0.5))
    return idf if idf > 0.0 else FTS5_MIN_IDF


def bm25_term(idf: float, tf: np.ndarray, doc_len: np.ndarray, avgdl: float, params: BM25Params) -> np.ndarray:
    """One phrase's BM25 contribution per document (the expression, written once).

    Args:
        idf: The phrase's idf.
        tf: Occurrences of the phrase in each document.
        doc_len: Each document's length in tokens.
        avgdl: Mean document length over the corpus.
        params: k1 and b.
    """
    k1, b = params.k1, params.b
    return idf * ((tf * (k1 + 1.0)) / (tf + k1 * (1 - b + b * doc_len / avgdl)))


def top_k(candidates: np.ndarray, scores: np.ndarray, k: int | None) -> np.ndarray:
    """The ``k`` best candidates by score, ties broken by the smaller docnum (earlier insertion).

    Args:
        candidates: Docnums, ascending.
        scores: Score of each candidate (same order).
        k: How many to keep; None keeps all.

    Returns:
        Positions into ``candidates``, best first.
    """
    keep = np.arange(len(candidates))
    if k is not None and len(candidates) > k:
        # Everything scoring at least the k-th best survives, so ties at the cut are all seen.
        kth = np.partition(-scores, k - 1)[k - 1]
        keep = np.flatnonzero(-scores <= kth)
    order = np.lexsort((candidates[keep], -scores[keep]))
    return keep[order][:k] if k is not None else keep[order]


class BM25Corpus:
    """BM25 over a fixed list of texts, in memory: the ``bm25`` strategy of the evaluation harness.

    Every query token is scored on its own (a bag of words, duplicates counted), like
    ``rank_bm25.BM25Okapi.get_scores(query_tokens)``.

    Args:
        texts: The documents; results refer to them by index.
        k1: Term-frequency saturation (default: FTS5's 1.2).
        b: Length normalisation (default 0.75).
        tokenizer: ``"porter"`` (the FTS5 emulation), ``"simple"`` (``\\w+`` lower-case),
            ``"simple_porter"``, or a function ``str -> list[str]``.
        idf: ``"fts5"`` or ``"okapi"`` (rank_bm25's epsilon flooring).
        epsilon: Flooring factor for ``idf="okapi"``.

    Example:
        >>> corpus = BM25Corpus(["deploy on friday", "lunch on monday"], tokenizer="simple")
        >>> corpus.rank("friday deploy", k=1)[0][0]
        0
    """

    def __init__(
        self,
        texts: Sequence[str],
        *,
        k1: float = FTS5_BM25.k1,
        b: float = FTS5_BM25.b,
        tokenizer: str | Tokenizer = "porter",
        idf: str = "fts5",
        epsilon: float = 0.25,
    ) -> None:
        self.params = BM25Params(k1=k1, b=b, idf=idf, epsilon=epsilon)
        self.tokenize = get_tokenizer(tokenizer)
        self.postings = Postings()
        token_lists = [self.tokenize(text) for text in texts]
        self.doc_tokens = token_lists  # kept for pseudo-relevance feedback (agentlab.search._feedback)
        vocabulary: dict[str, int] = {}  # first-seen order, as rank_bm25 builds its idf table
        term_index = [vocabulary.setdefault(t, len(vocabulary)) for tokens in token_lists for t in tokens]
        self.postings.add_many(
            list(vocabulary),
            np.array(term_index, dtype=np.int64),
            np.array([len(t) for t in token_lists], dtype=np.int64),
        )
        n = self.postings.n_alive
        self._doc_len = self.postings.lengths.values.astype(np.float64)
        self._avgdl = self.postings.total_length / n if n else 0.0
        self._idf: dict[str, float] = {}
        if idf == "okapi" and n:
            self._idf = self._okapi_idfs(n)

    def __len__(self) -> int:
        return self.postings.size

    def _df(self, term: str) -> int:
        return len(count_runs(self.postings.occurrences(term)[0])[0])

    def _okapi_idfs(self, n: int) -> dict[str, float]:
        # rank_bm25 subtracts two logs (not the log of a ratio) and averages over the vocabulary in
        # first-seen order; both are kept so that scores match it to the last digits.
        idfs = {t: math.log(n - df + 0.5) - math.log(df + 0.5) for t in self.postings.term_ids for df in [self._df(t)]}
        floor = self.params.epsilon * (sum(idfs.values()) / len(idfs))
        return {t: (floor if v < 0 else v) for t, v in idfs.items()}

    def idf(self, term: str) -> float:
        """The idf this corpus gives a (tokenized) term; 0 for an unknown term under ``"okapi"``."""
        if self.params.idf == "okapi":
            return self._idf.get(term, 0.0)
        return fts5_idf(self.postings.n_alive, self._df(term))

    def term_scores(self, token: str) -> np.ndarray:
        """One already tokenized term's BM25 contribution to every document (zeros for an unknown term)."""
        docs, _ = self.postings.occurrences(token)
        if not len(docs):
            return np.zeros(len(self))  # rank_bm25 adds 0 for an unknown word; FTS5 ignores it
        tf = np.bincount(docs, minlength=len(self)).astype(np.float64)
        return bm25_term(self.idf(token), tf, self._doc_len, self._avgdl, self.params)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for a query (0 where no token matches)."""
        total = np.zeros(len(self))
        if not len(self):
            return total
        for token in self.tokenize(query):
            total += self.term_scores(token)
        return total

    def weighted_scores(self, weights: Mapping[str, float]) -> np.ndarray:
        """Scores of a weighted bag of tokenized terms: ``sum(weight * term_scores(term))``."""
        total = np.zeros(len(self))
        for token, weight in weights.items():
            if weight:
                total += weight * self.term_scores(token)
        return total

    def rank(self, query: str, k: int | None = None) -> list[tuple[int, float]]:
        """Documents best first as ``(index, score)``; ties go to the earlier document.

        Args:
            query: The query text (tokenized with the corpus's tokenizer).
            k: Keep the best ``k``; None ranks every document, zero scores included, which is what
                rank-based metrics (MRR, recall at k over the full ranking) need.
        """
        if k is not None and k < 0:
            raise ValueError(f"k must be None or >= 0, not {k}.")
        scores = self.scores(query)
        if k == 0:
            return []
        order = top_k(np.arange(len(scores)), scores, k)
        return [(int(i), float(scores[i])) for i in order]
