"""Leakage-free tuning: choose among strategies by cross-validation over conversations, and vary one factor at a time.

:func:`tune` splits the selected questions' conversations into folds (no conversation on both sides). For each
fold it picks the candidate with the best mean ``metric`` on the *other* folds' questions and scores the fold's
questions with it, so every reported number comes from parameters chosen without its question. A candidate that
learns (``Hybrid(weights="learn")``) is nested: its score on the training folds is itself cross-fitted inside
them, and for the held-out fold it learns on all training folds.

:func:`ablation` runs a base configuration and its variants, each changing one factor, on the same questions.

Invariants: folds depend only on the conversation ids and ``seed``; each question is scored once in the
cross-validated rows; the in-sample best (chosen on all questions) is reported beside them and marked so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlab.errors import EvaluationError
from agentlab.eval.results import Results
from agentlab.eval.runner import Selection, conversation_folds, run, select_questions

if TYPE_CHECKING:
    import pandas as pd

    from agentlab.eval.datasets import Dataset

__all__ = ["Grid", "TuneResults", "ablation", "tune"]


@dataclass
class Grid:
    """Candidates from a factory and lists of parameter values: every combination is one candidate.

    ``Grid(Default, prior=[0, 0.25, 0.5], penalty=[0, 0.1])`` gives six candidates named like
    ``"prior=0.25,penalty=0.1"``.
    """

    factory: Callable[..., Any]
    params: dict[str, list[Any]] = field(default_factory=dict)

    def __init__(self, factory: Callable[..., Any], **params: Iterable[Any]) -> None:
        self.factory = factory
        self.params = {name: list(values) for name, values in params.items()}
        empty = [name for name, values in self.params.items() if not values]
        if empty:
            raise EvaluationError(f"Grid parameter {empty[0]!r} has no values.")

    def candidates(self) -> dict[str, Any]:
        """``{name: strategy}`` for every combination, in grid order."""
        names = list(self.params)
        out = {}
        for values in itertools.product(*(self.params[n] for n in names)):
            label = ",".join(f"{n}={v}" for n, v in zip(names, values)) or "base"
            out[label] = self.factory(**dict(zip(names, values)))
        return out


@dataclass
class TuneResults:
    """What :func:`tune` returns.

    Attributes:
        results: rows of the cross-validated choice (strategy ``name``, marked ``cross-validated``) and of the
            candidate that is best on all questions (``"<name> (in-sample best)"``, marked ``in-sample``).
        chosen: one row per fold: ``fold``, ``conversations``, ``candidate`` chosen, its ``train`` metric.
        candidates: every candidate's mean metric on all questions (in-sample: for looking, not for reporting).
        metric: the metric tuned.
    """

    results: Results
    chosen: pd.DataFrame
    candidates: pd.DataFrame
    metric: str

    def table(self, metrics: Any = None, **options: Any) -> pd.DataFrame:
        """:meth:`Results.table` of :attr:`results`."""
        return self.results.table(metrics, **options)

    def report(self) -> str:
        """The report of :attr:`results`, then the candidate chosen per fold."""
        lines = [self.results.report(), "", f"chosen per fold (by {self.metric} on the other folds):"]
        for row in self.chosen.itertuples():
            lines.append(f"  fold {row.fold} ({', '.join(row.conversations)}): {row.candidate} "
                         f"(train {row.train:.3f})")
        return "\n".join(lines)


def _candidates(space: Any) -> dict[str, Any]:
    from agentlab.eval.strategies import make_strategy

    if isinstance(space, Grid):
        found = space.candidates()
    elif isinstance(space, Mapping):
        found = {str(n): make_strategy(s) if isinstance(s, str) else s for n, s in space.items()}
    else:
        found = {}
        for item in space:
            strategy = make_strategy(item) if isinstance(item, str) else item
            found[strategy.name] = strategy
    if not found:
        raise EvaluationError("Give at least one candidate: a {name: strategy} mapping, a list, or a Grid.")
    for name, strategy in found.items():
        strategy.name = name
    return found


def _subset(selection: Selection, conversations: Iterable[str]) -> list[str]:
    return [q.id for cid in conversations if cid in selection for q in selection[cid][1]]


def _mean(frame: pd.DataFrame, metric: str, ids: list[str]) -> float:
    part = frame[frame["question_id"].isin(ids)]
    return float(part[metric].mean()) if len(part) else float("-inf")


def tune(dataset: Dataset, space: Any, metric: str = "recall@10", folds: int = 5, *, name: str = "tuned",
         ks: Iterable[int] = (1, 5, 10), categories: Iterable[int | str] | None = None,
         question_ids: Iterable[str] | None = None, limit: int | None = None, cache: Any = "default",
         progress: bool = True, seed: int = 0, n_boot: int = 1000) -> TuneResults:
    """Choose among candidate strategies by cross-validation over conversations (see the module docstring).

    Args:
        dataset: the data.
        space: candidates: a ``{name: strategy}`` mapping, a list of strategies or names, or a :class:`Grid`.
        metric: what to maximise (a column of the per-question rows, e.g. ``"recall@10"`` or ``"mrr"``).
        folds: how many groups of conversations.
        name: the strategy name of the cross-validated rows.
        ks, categories, question_ids, limit, cache, progress, seed, n_boot: as :func:`agentlab.eval.run`;
            ``seed`` also shuffles the folds.

    Returns:
        :class:`TuneResults`.

    Raises:
        EvaluationError: no candidate, or a metric the rows do not have.
        EmptySelectionError: fewer conversations than folds, or nothing selected.
    """
    import pandas as pd

    ks = tuple(sorted(set(ks)))
    candidates = _candidates(space)
    selection = select_questions(dataset, categories=categories, question_ids=question_ids, limit=limit)
    groups = conversation_folds(list(selection), folds, seed=seed)
    ids = [q.id for _, asked in selection.values() for q in asked]
    common = {"categories": None, "question_ids": ids, "cache": cache, "progress": progress, "seed": seed,
              "n_boot": 1}
    fixed = {n: s for n, s in candidates.items() if not getattr(s, "learnable", False)}
    learning = {n: s for n, s in candidates.items() if n not in fixed}
    rows = run(dataset, fixed, ks, **common).per_question if fixed else pd.DataFrame()
    if len(rows) and metric not in rows.columns:
        raise EvaluationError(f"No metric {metric!r} in the rows; use one of recall@k, hit@k, all@k, ndcg@k, mrr.")
    in_sample = {n: _mean(rows[rows["strategy"] == n], metric, ids) for n in fixed}
    outer: dict[str, pd.DataFrame] = {}
    if learning:  # each held-out fold: learn on the other folds
        for n, strategy in learning.items():
            outer[n] = run(dataset, {n: strategy}, ks, folds=folds, **common).per_question
            in_sample[n] = _mean(run(dataset, {n: strategy}, ks, **common).per_question, metric, ids)
    picked, log = [], []
    for number, fold in enumerate(groups):
        training = [cid for other in groups if other is not fold for cid in other]
        train_ids = _subset(selection, training)
        scores = {n: _mean(rows[rows["strategy"] == n], metric, train_ids) for n in fixed}
        for n, strategy in learning.items():  # nested: cross-fitted inside the training folds
            inner = run(dataset, {n: strategy}, ks, folds=min(folds - 1, len(training)),
                        **{**common, "question_ids": train_ids}).per_question
            scores[n] = _mean(inner, metric, train_ids)
        best = max(scores, key=lambda n: (scores[n], -list(candidates).index(n)))
        test_ids = _subset(selection, fold)
        source = outer[best] if best in learning else rows[rows["strategy"] == best]
        part = source[source["question_id"].isin(test_ids)].copy()
        part["strategy"], part["tuning"], part["fold"] = name, "cross-validated", number
        picked.append(part)
        log.append({"fold": number, "conversations": list(fold), "candidate": best, "train": scores[best]})
    best_all = max(in_sample, key=lambda n: (in_sample[n], -list(candidates).index(n)))
    source = outer[best_all] if best_all in learning else rows[rows["strategy"] == best_all]
    optimistic = source.copy()
    optimistic["strategy"], optimistic["tuning"] = f"{name} (in-sample best: {best_all})", "in-sample"
    frame = pd.concat([*picked, optimistic], ignore_index=True)
    results = Results.from_rows(frame.to_dict("records"), ks, n_boot=n_boot, seed=seed, dataset=dataset.name,
                                category_names=dict(dataset.category_names), tuning_log=log,
                                methodology={name: f"chosen per fold by {metric} on the other folds "
                                                   f"({folds} folds by conversation) among {len(candidates)} "
                                                   "candidates"})
    chosen = pd.DataFrame(log, columns=["fold", "conversations", "candidate", "train"])
    table = pd.DataFrame({"candidate": list(in_sample), metric: list(in_sample.values())})
    return TuneResults(results, chosen, table, metric)


def ablation(dataset: Dataset, factory: Callable[..., Any], factors: Mapping[str, Iterable[Any]], *,
             base: Mapping[str, Any] | None = None, **run_options: Any) -> Results:
    """The base configuration and one variant per other value of each factor, run on the same questions.

    Args:
        dataset: the data.
        factory: builds a strategy from keyword options (a class such as ``Default`` or ``BM25``).
        factors: ``{option: values}``; each value other than the base's gives a variant named ``"option=value"``.
        base: the base options (default: the factory's own defaults).
        **run_options: passed to :func:`agentlab.eval.run` (``ks``, ``categories``, ``cache``...).

    Returns:
        :class:`~agentlab.eval.results.Results` with a ``"base"`` row and one per variant; compare them with
        ``results.compare("base")``.
    """
    base = dict(base or {})
    variants: dict[str, Any] = {"base": factory(**base)}
    for option, values in factors.items():
        for value in values:
            if option in base and base[option] == value:
                continue
            variants[f"{option}={value}"] = factory(**{**base, option: value})
    return run(dataset, variants, **run_options)
