"""Paired significance tests between strategies scored on the same questions.

* :func:`randomization_test`: the paired (sign-flip) randomisation test (Fisher; Smucker, Allan and Carterette,
  CIKM 2007, recommend it for IR): under the null hypothesis each question's two scores could have come from
  either strategy, so the mean difference is compared with those obtained by flipping the sign of each question's
  difference at random. It is the test ``scipy.stats.permutation_test(..., permutation_type="samples")`` runs;
  that call takes about 7.6 s for one pair of 1,536 questions on this project's machine, this one about 0.2 s, and
  a test checks that both give the same p-value within Monte Carlo error.
* :func:`paired_bootstrap`: a percentile interval for the mean difference, resampling questions (both strategies'
  scores of a question move together).
* :func:`holm`: Holm-Bonferroni adjusted p-values. Comparing several strategies with a baseline makes several
  tests; the chance that at least one of them is "significant" by luck grows with their number. Holm's step-down
  adjustment keeps that family-wise error at the chosen level, and is never less powerful than Bonferroni's.

Invariants: results depend only on the scores and ``seed``; p-values are in (0, 1] (the observed statistic counts
as one of the resamples, so a p-value is never 0); adjusted p-values are monotone in the raw ones and at most 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["holm", "paired_bootstrap", "randomization_test"]

Scores = Sequence[float] | np.ndarray


def _differences(a: Scores, b: Scores) -> np.ndarray:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"Paired scores need two vectors of one length, not {x.shape} and {y.shape}.")
    if not len(x):
        raise ValueError("No paired scores to compare.")
    return x - y


def randomization_test(a: Scores, b: Scores, *, n_resamples: int = 10_000, seed: int = 0,
                       batch: int = 1000) -> float:
    """Two-sided p-value of the paired randomisation test of ``mean(a - b) == 0``.

    Args:
        a, b: the two strategies' scores of the same questions, in the same order.
        n_resamples: random sign assignments (the p-value's resolution is ``1 / (n_resamples + 1)``).
        seed: seed of ``numpy.random.default_rng``.
        batch: resamples drawn at once (memory: ``batch * len(a)`` signs).
    """
    d = _differences(a, b)
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    extreme, done = 0, 0
    while done < n_resamples:
        size = min(batch, n_resamples - done)
        signs = rng.integers(0, 2, size=(size, len(d)), dtype=np.int8) * 2 - 1
        means = np.abs(signs @ d) / len(d)
        extreme += int(np.count_nonzero(means >= observed - 1e-12))
        done += size
    return (extreme + 1) / (n_resamples + 1)


def paired_bootstrap(a: Scores, b: Scores, *, n_resamples: int = 10_000, seed: int = 0,
                     confidence: float = 0.95, batch: int = 1000) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(a - b)``, resampling questions with replacement."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}.")
    d = _differences(a, b)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, batch):  # resampled indices in batches: memory stays batch x n
        size = min(batch, n_resamples - start)
        means[start:start + size] = d[rng.integers(0, len(d), size=(size, len(d)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()
