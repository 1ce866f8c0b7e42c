"""Retrieval metrics over ranked ids: per question, then per category with bootstrap intervals.

A *ranking* is a sequence of item ids, best first (1-based ranks); the *evidence* is the set of
ids that answer the question. Definitions follow the LoCoMo retrieval baseline:

- ``recall@k`` = |E ∩ top-k| / |E| (LoCoMo's "recall accuracy");
- ``hit@k`` = 1 if any evidence id is in the top k, else 0 (LongMemEval's ``recall_any``);
- ``all@k`` = 1 if every evidence id is in the top k, else 0 (LongMemEval's ``recall_all``);
- ``mrr`` = 1 / rank of the first evidence id in the whole ranking, 0 if none appears
  (per question this is the reciprocal rank; its mean over questions is the MRR);
- ``ndcg@k`` with binary gains: DCG = Σ 1/log2(rank+1) over evidence ids in the top k,
  IDCG = the same sum over ranks 1..min(|E|, k).

Invariants: every value lies in [0, 1]; an id repeated in a ranking counts once, at its first
position; the single-metric functions refuse empty evidence (the value is undefined), and
:func:`question_metrics` settles it with an explicit ``empty_evidence`` policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from agentlab.eval.datasets import Conversation, Dataset, Question

__all__ = [
    "DEFAULT_KS",
    "all_at_k",
    "collapse_ranking",
    "evaluate_rankings",
    "hit_at_k",
    "mrr",
    "ndcg_at_k",
    "question_metrics",
    "recall_at_k",
    "summarize",
]

DEFAULT_KS = (1, 5, 10, 20)
EMPTY_EVIDENCE_POLICIES = ("drop", "perfect")


def _evidence_set(evidence: Collection[str]) -> set[str]:
    found = set(evidence)
    if not found:
        raise ValueError(
            "The evidence is empty, so this metric is undefined. Skip the question, or use "
            "question_metrics(..., empty_evidence='perfect') for LoCoMo's convention (score 1)."
        )
    return found


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, not {k!r}.")


def _top(ranking: Sequence[str], k: int) -> set[str]:
    _check_k(k)
    return set(ranking[:k])


def recall_at_k(ranking: Sequence[str], evidence: Collection[str], k: int) -> float:
    """Fraction of the evidence ids found in the top k.

    Example: ranking ``[a, b, c]``, evidence ``{b, z}``: recall@1 = 0/2, recall@2 = 1/2.
    """
    gold = _evidence_set(evidence)
    return len(gold & _top(ranking, k)) / len(gold)


def hit_at_k(ranking: Sequence[str], evidence: Collection[str], k: int) -> float:
    """1.0 if at least one evidence id is in the top k, else 0.0."""
    gold = _evidence_set(evidence)
    return 1.0 if gold & _top(ranking, k) else 0.0


def all_at_k(ranking: Sequence[str], evidence: Collection[str], k: int) -> float:
    """1.0 if every evidence id is in the top k, else 0.0."""
    gold = _evidence_set(evidence)
    return 1.0 if gold <= _top(ranking, k) else 0.0


def mrr(ranking: Sequence[str], evidence: Collection[str]) -> float:
    """Reciprocal rank of the first evidence id in the whole ranking; 0.0 if none appears."""
    gold = _evidence_set(evidence)
    for rank, item in enumerate(ranking, 1):
        if item in gold:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranking: Sequence[str], evidence: Collection[str], k: int) -> float:
    """Binary-gain nDCG at k; the ideal ranking puts min(|E|, k) evidence ids first."""
    gold = _evidence_set(evidence)
    _check_k(k)
    seen: set[str] = set()
    dcg = 0.0
    for rank, item in enumerate(ranking[:k], 1):
        if item in gold and item not in seen:
            dcg += 1.0 / math.log2(rank + 1)
        seen.add(item)
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(gold), k) + 1))
    return dcg / ideal


def question_metrics(
    ranking: Sequence[str],
    evidence: Collection[str],
    ks: Iterable[int] = DEFAULT_KS,
    *,
    empty_evidence: str = "drop",
) -> dict[str, float] | None:
    """Every metric for one question: ``recall@k``, ``hit@k``, ``all@k``, ``ndcg@k`` per k, and ``mrr``.

    Args:
        ranking: ids, best first. Pass the whole ranking, not just the top k, so ``mrr`` sees
            evidence ranked below the largest k.
        evidence: the gold ids.
        ks: the cut-offs.
        empty_evidence: what to do when ``evidence`` is empty. ``"drop"`` (our reference)
            returns ``None`` so the question is left out of averages; ``"perfect"`` scores every
            metric 1.0, as LoCoMo's own evaluation does for recall (paper-comparable numbers).

    Returns:
        A dict ordered recall, hit, all, ndcg (each by k), then mrr; or ``None`` (see above).
    """
    if empty_evidence not in EMPTY_EVIDENCE_POLICIES:
        raise ValueError(f"empty_evidence must be one of {EMPTY_EVIDENCE_POLICIES}, not {empty_evidence!r}.")
    ks = list(ks)
    for k in ks:
        _check_k(k)
    names = [f"{m}@{k}" for m in ("recall", "hit", "all", "ndcg") for k in ks] + ["mrr"]
    if not set(evidence):
        return None if empty_evidence == "drop" else dict.fromkeys(names, 1.0)
    row: dict[str, float] = {}
    for name, fn in (("recall", recall_at_k), ("hit", hit_at_k), ("all", all_at_k), ("ndcg", ndcg_at_k)):
        for k in ks:
            row[f"{name}@{k}"] = fn(ranking, evidence, k)
    row["mrr"] = mrr(ranking, evidence)
    return row


def collapse_ranking(ranking: Sequence[str], key: Mapping[str, str] | Callable[[str], str]) -> list[str]:
    """Map a ranking of items to a ranking of their groups, each group at its first position.

    Used for session-level metrics from a turn ranking: with ``key`` mapping turn id to session id,
    the top k of the result are the first k distinct sessions, which is LongMemEval's "widen k
    until k sessions are reached" rule. Evidence must then be session ids too.
    """
    lookup = key.__getitem__ if isinstance(key, Mapping) else key
    out: list[str] = []
    seen: set[str] = set()
    for item in ranking:
        group = lookup(item)
        if group not in seen:
            seen.add(group)
            out.append(group)
    return out


Ranker = Callable[["Conversation", "Question"], Sequence[str]]


def evaluate_rankings(
    dataset: Dataset,
    rankings: Mapping[str, Sequence[str]] | Ranker,
    ks: Iterable[int] = DEFAULT_KS,
    *,
    categories: Iterable[int | str] | None = None,
    empty_evidence: str = "drop",
) -> pd.DataFrame:
    """Score rankings against a dataset's evidence: one row per question.

    Args:
        dataset: questions and their evidence turn ids.
        rankings: ``{question_id: ranked turn ids}``, or a function ``(conversation, question) ->
            ranked turn ids`` that is called once per question.
        ks: the cut-offs.
        categories: score only these categories, e.g. ``(1, 2, 3, 4)`` for LoCoMo's reference.
        empty_evidence: see :func:`question_metrics`; with ``"drop"`` those questions get no row.

    Returns:
        Columns ``conversation_id``, ``question_id``, ``category``, ``n_evidence``, then the metrics.

    Raises:
        KeyError: a mapping has no ranking for a question that is scored.
    """
    import pandas as pd

    ks = list(ks)
    rows = []
    for conversation, question in dataset.iter_questions(categories):
        if callable(rankings):
            ranking = rankings(conversation, question)
        elif question.id in rankings:
            ranking = rankings[question.id]
        else:
            raise KeyError(f"No ranking for question {question.id!r}; give one for every question scored.")
        scores = question_metrics(list(ranking), question.evidence, ks, empty_evidence=empty_evidence)
        if scores is not None:
            rows.append({"conversation_id": conversation.id, "question_id": question.id,
                         "category": question.category, "n_evidence": len(question.evidence), **scores})
    columns = ["conversation_id", "question_id", "category", "n_evidence"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def _group_key(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def summarize(
    per_question: pd.DataFrame,
    by: str | None = "category",
    metrics: Sequence[str] | None = None,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    overall: bool = True,
) -> pd.DataFrame:
    """Mean of each metric per group, with a percentile bootstrap confidence interval.

    Each group's questions are resampled with replacement ``n_boot`` times (numpy, seeded, the
    same resamples for every metric of a group); the interval is the central ``confidence``
    share of the resampled means. A group of one question gets a zero-width interval.

    Args:
        per_question: the frame from :func:`evaluate_rankings` (any frame of numeric metric columns).
        by: the grouping column, or ``None`` for the overall row only.
        metrics: the columns to summarise; default every metric column (``recall@k``, ``hit@k``,
            ``all@k``, ``ndcg@k``, ``mrr``) present.
        n_boot: number of bootstrap resamples.
        seed: seed of ``numpy.random.default_rng``; results are reproducible for a given seed.
        confidence: e.g. 0.95 for a 95% interval.
        overall: add a row group ``"overall"`` over all questions (a macro-average over questions).

    Returns:
        A long frame with columns ``[by or "group", "metric", "n", "mean", "ci_low", "ci_high"]``,
        groups sorted with ``"overall"`` last. For a table of means use
        ``summary.pivot(index="category", columns="metric", values="mean")``.
    """
    import numpy as np
    import pandas as pd

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}.")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, not {n_boot!r}.")
    if metrics is None:
        prefixes = ("recall@", "hit@", "all@", "ndcg@")
        metrics = [c for c in per_question.columns if c == "mrr" or str(c).startswith(prefixes)]
    missing = [m for m in metrics if m not in per_question.columns]
    if missing:
        raise ValueError(f"No column {missing[0]!r} in the frame; its columns are {list(per_question.columns)}.")
    label = by or "group"
    groups: list[tuple[Any, pd.DataFrame]] = []
    if by is not None:
        for value in sorted(per_question[by].dropna().unique().tolist(), key=_group_key):
            groups.append((value, per_question[per_question[by] == value]))
    if overall or by is None:
        groups.append(("overall", per_question))
    tail = (1 - confidence) / 2 * 100
    rows = []
    for value, frame in groups:
        n = len(frame)
        if n == 0:
            continue
        data = frame[list(metrics)].to_numpy(dtype=float)
        rng = np.random.default_rng(seed)
        # Multinomial counts are the same as drawing n indices with replacement, but let one
        # matrix product compute every resampled mean of every metric at once.
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)
        boot = counts @ data / n
        low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
        means = data.mean(axis=0)
        for j, metric in enumerate(metrics):
            rows.append({label: value, "metric": metric, "n": n, "mean": float(means[j]),
                         "ci_low": float(low[j]), "ci_high": float(high[j])})
    return pd.DataFrame(rows, columns=[label, "metric", "n", "mean", "ci_low", "ci_high"])
