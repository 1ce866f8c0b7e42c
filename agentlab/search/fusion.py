"""Rank fusion: one ranking from several, by weighted reciprocal rank or by min-max scaled scores.

The one implementation behind :class:`~agentlab.context.providers.HybridSearchProvider` (the agent's hybrid
search) and the evaluation harness's hybrid strategy, so an evaluation measures the fusion the agent ships.

Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009) scores an item ``sum(w_i / (k + rank_i))`` over
the rankings it appears in, with 1-based ranks; items missing from a ranking get nothing from it. Score fusion
scales each score vector to [0, 1] per query (a constant vector scales to zeros) and adds them, weighted.

Invariants: fusion is deterministic; ties go to the item seen first (keyed rankings: in the order the rankings are
given; positional: the lower position).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np

__all__ = ["DEFAULT_RRF_K", "min_max", "rrf", "rrf_positions", "score_fusion"]

DEFAULT_RRF_K = 60.0
"""The constant of the original paper; smaller values trust each ranking's first places more."""

K = TypeVar("K", bound=Hashable)


def _weights(count: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * count
    if len(weights) != count:
        raise ValueError(f"Give one weight per ranking: {count} rankings, {len(weights)} weights.")
    return [float(w) for w in weights]


def rrf_positions(n: int, rankings: Sequence[np.ndarray], *, k: float = DEFAULT_RRF_K,
                  weights: Sequence[float] | None = None) -> np.ndarray:
    """Fused scores of ``n`` items from rankings given as item positions (best first, each position once).

    Returns:
        A float64 array of length ``n``: item ``i``'s weighted sum of ``1 / (k + rank)``.
    """
    fused = np.zeros(n, dtype=np.float64)
    for ranking, weight in zip(rankings, _weights(len(rankings), weights)):
        positions = np.asarray(ranking, dtype=np.int64)
        fused[positions] += weight / (k + np.arange(1, len(positions) + 1))  # distinct positions: += is safe
    return fused


def rrf(rankings: Sequence[Sequence[K]], *, k: float = DEFAULT_RRF_K,
        weights: Sequence[float] | None = None) -> list[tuple[K, float]]:
    """Fuse rankings of keys; returns ``(key, score)`` best first, ties to the key seen first."""
    first_seen: dict[K, int] = {}
    for ranking in rankings:
        for key in ranking:
            first_seen.setdefault(key, len(first_seen))
    keys = list(first_seen)
    positions = [np.fromiter((first_seen[key] for key in ranking), dtype=np.int64, count=len(ranking))
                 for ranking in rankings]
    fused = rrf_positions(len(keys), positions, k=k, weights=weights)
    order = np.lexsort((np.arange(len(keys)), -fused))
    return [(keys[i], float(fused[i])) for i in order]


def min_max(scores: np.ndarray) -> np.ndarray:
    """``scores`` scaled to [0, 1]; all zeros when every score is the same (or there are none)."""
    raw = np.asarray(scores, dtype=np.float64)
    if not len(raw):
        return raw
    low, spread = raw.min(), raw.max() - raw.min()
    return (raw - low) / spread if spread > 0 else np.zeros_like(raw)


def score_fusion(score_vectors: Sequence[np.ndarray], *, weights: Sequence[float] | None = None) -> np.ndarray:
    """The weighted sum of min-max scaled score vectors (all of one length, in item order)."""
    vectors = [min_max(v) for v in score_vectors]
    fused = np.zeros(len(vectors[0]) if vectors else 0, dtype=np.float64)
    for vector, weight in zip(vectors, _weights(len(vectors), weights)):
        fused += weight * vector
    return fused
