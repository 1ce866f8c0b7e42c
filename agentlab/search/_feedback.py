"""Pseudo-relevance feedback for BM25: RM3 query expansion (Abdul-Jaleel et al., UMass at TREC 2004).

The first-pass ranking's best documents are assumed relevant. Their words, each weighted by how much of its
document it makes up and by that document's first-pass score, form a relevance model; its heaviest terms are
mixed into the query, and the documents are scored again with the weighted query.

Invariants: the expanded query keeps every original term; weights sum to 1 (the original terms' share is
``original_weight``); the same corpus and query always give the same weights (ties among candidate terms go to the
term seen first).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from agentlab.search._bm25 import BM25Corpus

__all__ = ["rm3_weights"]


def rm3_weights(corpus: BM25Corpus, query_tokens: Sequence[str], *, fb_docs: int = 10, fb_terms: int = 10,
                original_weight: float = 0.5, first_pass: np.ndarray | None = None) -> dict[str, float]:
    """The RM3 query: original terms and expansion terms with their weights.

    Args:
        corpus: the documents, tokenized as the query is.
        query_tokens: the tokenized query (a repeated term counts each time).
        fb_docs: how many first-pass documents count as relevant.
        fb_terms: how many expansion terms to keep.
        original_weight: the original query's share of the mixture, in [0, 1].
        first_pass: the first-pass scores, if already computed (default: the query's BM25 scores).

    Returns:
        ``{term: weight}``; weights sum to 1 when the query has a term (else ``{}``).
    """
    if not 0.0 <= original_weight <= 1.0:
        raise ValueError(f"original_weight must be between 0 and 1, not {original_weight!r}.")
    counts = Counter(query_tokens)
    if not counts:
        return {}
    total = sum(counts.values())
    weights = {term: original_weight * n / total for term, n in counts.items()}
    scores = corpus.weighted_scores(counts) if first_pass is None else np.asarray(first_pass, dtype=np.float64)
    top = [int(d) for d in np.argsort(-scores, kind="stable")[:fb_docs] if scores[d] > 0]
    relevance: dict[str, float] = {}
    for doc in top:
        tokens = corpus.doc_tokens[doc]
        if not tokens:
            continue
        for term, n in Counter(tokens).items():
            relevance[term] = relevance.get(term, 0.0) + float(scores[doc]) * n / len(tokens)
    chosen = sorted(relevance.items(), key=lambda item: -item[1])[:fb_terms]  # stable: first seen wins ties
    mass = sum(value for _, value in chosen)
    if mass <= 0:
        return {term: weight / original_weight for term, weight in weights.items()} if original_weight else {}
    for term, value in chosen:
        weights[term] = weights.get(term, 0.0) + (1.0 - original_weight) * value / mass
    return weights
