"""Rank fusion: one ranking from several, by weighted reciprocal rank or by normalised scores.

The one implementation behind :class:`~agentlab.context.HybridSearchProvider` (the agent's hybrid
search) and the evaluation harness's hybrid strategies, so an evaluation measures the fusion the agent ships.

* Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009) scores an item ``sum(w_i / (k + rank_i))`` over
  the rankings it appears in, with 1-based ranks; items missing from a ranking get nothing from it.
* Score fusion first puts each ranking's scores on one scale, then adds them, weighted. ``"minmax"`` maps each
  score vector to [0, 1] per query (a constant vector becomes zeros); ``"zscore"`` subtracts its mean and divides by
  its standard deviation (a constant vector becomes zeros). Min-max keeps every part's best item at 1, whatever the
  shape of the rest; z-scores let a part whose best item stands far above its others speak louder.

Invariants: fusion is deterministic; ties go to the item seen first (keyed rankings: in the order the rankings are
given; positional: the lower position).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np

__all__ = [
    "DEFAULT_RRF_K", "FUSION_METHODS", "fuse", "fuse_keyed", "min_max", "normalize", "order_by_score", "rrf",
    "rrf_positions", "score_fusion", "z_score",
]

DEFAULT_RRF_K = 60.0
"""The constant of the original paper; smaller values trust each ranking's first places more."""

#: ``fuse(method=...)`` choices: reciprocal rank fusion, or score fusion after one of the two normalisations.
FUSION_METHODS = ("rrf", "minmax", "zscore")

K = TypeVar("K", bound=Hashable)


def _weights(count: int, weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * count
    if len(weights) != count:
        raise ValueError(f"Give one weight per ranking: {count} rankings, {len(weights)} weights.")
    return [float(w) for w in weights]


def _check_method(method: str) -> str:
    if method == "score":  # the earlier name of min-max score fusion
        return "minmax"
    if method not in FUSION_METHODS:
        raise ValueError(f"Fusion method must be one of {FUSION_METHODS}, not {method!r}.")
    return method


def order_by_score(scores: np.ndarray) -> np.ndarray:
    """Positions best first; equal scores keep the lower position first (a stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")


def rrf_positions(n: int, rankings: Sequence[np.ndarray], *, k: float = DEFAULT_RRF_K,
                  weights: Sequence[float] | None = None) -> np.ndarray:
    """Fused scores of ``n`` items from rankings given as item positions (best first, each position once).

    A ranking may hold fewer than ``n`` positions (a truncated list); the others get nothing from it.

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
    keys, positions = _keyed_positions(rankings)
    fused = rrf_positions(len(keys), positions, k=k, weights=weights)
    order = np.lexsort((np.arange(len(keys)), -fused))
    return [(keys[i], float(fused[i])) for i in order]


def _keyed_positions(rankings: Sequence[Sequence[K]]) -> tuple[list[K], list[np.ndarray]]:
    first_seen: dict[K, int] = {}
    for ranking in rankings:
        for key in ranking:
            first_seen.setdefault(key, len(first_seen))
    positions = [np.fromiter((first_seen[key] for key in ranking), dtype=np.int64, count=len(ranking))
                 for ranking in rankings]
    return list(first_seen), positions


def min_max(scores: np.ndarray) -> np.ndarray:
    """``scores`` scaled to [0, 1]; all zeros when every score is the same (or there are none)."""
    raw = np.asarray(scores, dtype=np.float64)
    if not len(raw):
        return raw
    low, spread = raw.min(), raw.max() - raw.min()
    return (raw - low) / spread if spread > 0 else np.zeros_like(raw)


def z_score(scores: np.ndarray) -> np.ndarray:
    """``(scores - mean) / standard deviation``; all zeros when every score is the same (or there are none)."""
    raw = np.asarray(scores, dtype=np.float64)
    if not len(raw):
        return raw
    spread = raw.std()
    return (raw - raw.mean()) / spread if spread > 0 else np.zeros_like(raw)


_NORMALIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"minmax": min_max, "zscore": z_score}


def normalize(scores: np.ndarray, method: str = "minmax") -> np.ndarray:
    """One score vector on the scale of ``method``: ``"minmax"`` ([0, 1]) or ``"zscore"`` (mean 0, sd 1)."""
    method = _check_method(method)
    if method == "rrf":
        raise ValueError("'rrf' fuses ranks, not scores; normalise with 'minmax' or 'zscore'.")
    return _NORMALIZERS[method](scores)


def fuse(score_vectors: Sequence[np.ndarray], *, method: str = "minmax", weights: Sequence[float] | None = None,
         k: float = DEFAULT_RRF_K, depth: int | None = None) -> np.ndarray:
    """Fused scores of items given one score vector per ranking (all of one length, in item order).

    Args:
        score_vectors: higher is better; each vector scores every item.
        method: ``"rrf"`` (ranks from each vector, ties to the lower position), ``"minmax"`` or ``"zscore"``.
        weights: one per vector (default all 1).
        k: the RRF constant.
        depth: for ``"rrf"``, keep only each ranking's first ``depth`` items (as a search that returns
            ``depth`` candidates per side does); ``None`` keeps all.

    Returns:
        A float64 array, one fused score per item.
    """
    method = _check_method(method)
    vectors = [np.asarray(v, dtype=np.float64) for v in score_vectors]
    n = len(vectors[0]) if vectors else 0
    if any(len(v) != n for v in vectors):
        raise ValueError("Every score vector must score the same items (equal lengths).")
    if method == "rrf":
        rankings = [order_by_score(v)[:depth] for v in vectors]
        return rrf_positions(n, rankings, k=k, weights=weights)
    fused = np.zeros(n, dtype=np.float64)
    for vector, weight in zip(vectors, _weights(len(vectors), weights)):
        fused += weight * _NORMALIZERS[method](vector)
    return fused


def score_fusion(score_vectors: Sequence[np.ndarray], *, weights: Sequence[float] | None = None) -> np.ndarray:
    """The weighted sum of min-max scaled score vectors (all of one length, in item order)."""
    return fuse(score_vectors, method="minmax", weights=weights)


def fuse_keyed(rankings: Sequence[Sequence[tuple[K, float]]], *, method: str = "rrf",
               weights: Sequence[float] | None = None, k: float = DEFAULT_RRF_K) -> list[tuple[K, float]]:
    """Fuse ranked ``(key, score)`` lists (each best first), as a search returning a few candidates per side gives.

    ``"rrf"`` uses the ranks only (:func:`rrf`). Score methods normalise each list's scores over the items that
    list holds; an item missing from a list gets that list's lowest normalised value (0 for min-max), as if it
    ranked last there.

    Returns:
        ``(key, fused score)`` best first; ties to the key seen first.
    """
    method = _check_method(method)
    if method == "rrf":
        return rrf([[key for key, _ in ranking] for ranking in rankings], k=k, weights=weights)
    keys, positions = _keyed_positions([[key for key, _ in ranking] for ranking in rankings])
    fused = np.zeros(len(keys), dtype=np.float64)
    for ranking, where, weight in zip(rankings, positions, _weights(len(rankings), weights)):
        if not len(ranking):
            continue
        scaled = _NORMALIZERS[method](np.array([score for _, score in ranking], dtype=np.float64))
        column = np.full(len(keys), scaled.min())
        column[where] = scaled
        fused += weight * column
    order = np.lexsort((np.arange(len(keys)), -fused))
    return [(keys[i], float(fused[i])) for i in order]
