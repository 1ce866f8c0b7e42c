"""Re-ranking a scored list: diversity (MMR, one group at a time) and neighbour expansion.

Each function takes one score per item (higher is better) and returns new scores, so re-rankers compose with
fusion and with each other; the items a re-ranker reorders get scores above every item it leaves alone.

* :func:`mmr` is maximal marginal relevance (Carbonell and Goldstein, SIGIR 1998): among the first ``depth``
  items, repeatedly take the one maximising ``(1 - lam) * relevance - lam * max similarity to those taken``,
  relevance being the min-max scaled score.
* :func:`diversify_groups` is the same greedy walk with a cheaper notion of redundancy: an item loses ``penalty``
  for each item of its group already taken.
* :func:`neighbour_boost` lets an item borrow from its neighbours in the same group: it gains ``weight`` times the
  better of the previous and next item's score.

Invariants: the result has one score per item; ties keep the lower position first; ``lam = 0`` and ``penalty = 0``
keep the order unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agentlab.search._fusion import min_max, order_by_score

__all__ = ["diversify_groups", "mmr", "neighbour_boost", "scores_for_order"]


def scores_for_order(scores: np.ndarray, head: Sequence[int]) -> np.ndarray:
    """``scores`` with the items of ``head`` moved to the top, in ``head``'s order (the rest keep their order)."""
    out = np.asarray(scores, dtype=np.float64).copy()
    if len(head):
        top = (out.max() if len(out) else 0.0) + 1.0
        out[np.asarray(head, dtype=np.int64)] = top + np.arange(len(head), 0, -1, dtype=np.float64)
    return out


def _check(scores: np.ndarray, depth: int, amount: float, name: str) -> np.ndarray:
    if depth < 1:
        raise ValueError(f"depth must be 1 or more, not {depth!r}.")
    if amount < 0:
        raise ValueError(f"{name} must be 0 or more, not {amount!r}.")
    return np.asarray(scores, dtype=np.float64)


def mmr(scores: np.ndarray, vectors: np.ndarray, *, lam: float = 0.3, depth: int = 30) -> np.ndarray:
    """Maximal marginal relevance over the first ``depth`` items (``vectors``: one normalised row per item)."""
    raw = _check(scores, depth, lam, "lam")
    if not len(raw) or lam == 0:
        return raw.copy()
    pool = order_by_score(raw)[:depth]
    relevance = min_max(raw[pool])
    pool_vectors = np.asarray(vectors, dtype=np.float64)[pool]
    similarity = pool_vectors @ pool_vectors.T
    closest = np.full(len(pool), -np.inf)
    free = np.ones(len(pool), dtype=bool)
    head: list[int] = []
    for _ in range(len(pool)):
        value = (1 - lam) * relevance - lam * np.where(np.isfinite(closest), closest, 0.0)
        value[~free] = -np.inf
        pick = int(np.argmax(value))  # first maximum: the better-ranked item wins a tie
        head.append(int(pool[pick]))
        free[pick] = False
        closest = np.maximum(closest, similarity[pick])
    return scores_for_order(raw, head)


def diversify_groups(scores: np.ndarray, groups: Sequence[int] | np.ndarray, *, penalty: float = 0.1,
                     depth: int = 30) -> np.ndarray:
    """Greedy re-ranking of the first ``depth`` items: each loses ``penalty`` per item of its group already taken.

    Scores are min-max scaled over those items first, so ``penalty`` is a share of the range between the best
    and the ``depth``-th item.
    """
    raw = _check(scores, depth, penalty, "penalty")
    if not len(raw) or penalty == 0:
        return raw.copy()
    pool = order_by_score(raw)[:depth]
    relevance = min_max(raw[pool])
    pool_groups = np.asarray(groups)[pool]
    taken: dict[object, int] = {}
    free = np.ones(len(pool), dtype=bool)
    head: list[int] = []
    for _ in range(len(pool)):
        value = relevance - penalty * np.array([taken.get(g, 0) for g in pool_groups], dtype=np.float64)
        value[~free] = -np.inf
        pick = int(np.argmax(value))
        head.append(int(pool[pick]))
        free[pick] = False
        taken[pool_groups[pick]] = taken.get(pool_groups[pick], 0) + 1
    return scores_for_order(raw, head)


def neighbour_boost(scores: np.ndarray, groups: Sequence[int] | np.ndarray, *, weight: float = 0.2) -> np.ndarray:
    """Each item plus ``weight`` times the higher score of its previous and next item in the same group."""
    raw = np.asarray(scores, dtype=np.float64)
    if weight < 0:
        raise ValueError(f"weight must be 0 or more, not {weight!r}.")
    if len(raw) < 2 or weight == 0:
        return raw.copy()
    group = np.asarray(groups)
    previous = np.full(len(raw), -np.inf)
    following = np.full(len(raw), -np.inf)
    same = group[1:] == group[:-1]
    previous[1:] = np.where(same, raw[:-1], -np.inf)
    following[:-1] = np.where(same, raw[1:], -np.inf)
    best = np.maximum(previous, following)
    return raw + weight * np.where(np.isfinite(best), best, 0.0)
