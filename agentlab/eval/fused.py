"""Hybrid retrieval: several strategies fused into one ranking by :mod:`agentlab.search._fusion`.

:class:`Hybrid` fuses its parts' rankings (reciprocal rank fusion) or their scores after min-max or z-score
normalisation, with fixed weights or weights it learns from training questions (``weights="learn"``). Learning
is what :func:`agentlab.eval.run` with ``folds=`` and :func:`agentlab.eval.tune` cross-fit: the weights that score
a question are learnt on other conversations' questions.

Invariants: every part indexes the same unit ids (turn and window units share them; keys may differ); fused
scores come back in unit order; ties go to the earlier unit; learning is deterministic (grid order breaks ties,
equal weights first).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.eval.dense import Dense
from agentlab.eval.lexical import BM25, STOP_WORDS
from agentlab.eval.units import BaseStrategy, Unit, _by_score
from agentlab.search import FUSION_METHODS, fuse

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation, Question
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["Hybrid", "weight_grid"]

_UNIT_OPTIONS = ("unit", "key", "window", "query_rewrite")


def weight_grid(parts: int, step: float = 0.25) -> list[tuple[float, ...]]:
    """Weight vectors on the simplex (non-negative, summing to 1) in steps of ``step``; equal weights first."""
    ticks = round(1 / step)
    grid = [tuple(c / ticks for c in combo) for combo in itertools.product(range(ticks + 1), repeat=parts)
            if sum(combo) == ticks]
    equal = tuple(1 / parts for _ in range(parts))
    return sorted(grid, key=lambda w: max(abs(a - b) for a, b in zip(w, equal)))


class Hybrid(BaseStrategy):
    """Several strategies fused into one ranking (BM25 + dense by default).

    ``method="rrf"``: a unit scores ``sum(weight_i / (k + rank_i))`` over the parts, with 1-based ranks over each
    part's ranking (its first ``depth`` units when ``depth`` is given, as the agent's hybrid search takes
    ``candidates`` per side). ``"minmax"`` or ``"zscore"`` (``"score"`` is ``"minmax"``) add the parts' scores after
    putting each on that scale per query; the parts need ``scores(query)``.

    The default parts and settings were chosen on all of LoCoMo's 1,536 questions (categories 1-4), so its rows
    on LoCoMo are marked in-sample: BM25 with stop words on a window of one neighbouring turn each side keyed
    with the session date, weight 2, and dense retrieval on speaker keys, weight 1, RRF with ``k=10``.

    Args:
        parts: the strategies to fuse; each is fitted with its own unit options, which must give the same unit ids.
        k: the RRF constant (60 in the RRF paper; smaller trusts each part's top ranks more).
        weights: one weight per part (default 2, 1 for the default parts, else all 1), or ``"learn"``: chosen by
            :meth:`learn` on training questions from :func:`weight_grid` (equal weights until then).
        method: ``"rrf"``, ``"minmax"`` or ``"zscore"``.
        depth: for RRF, how many of each part's first units take part (``None``: all).
        learn_metric: what :meth:`learn` maximises (``recall@k`` for some k, or ``mrr``).
        learn_alpha: the significance a learnt weighting needs to replace equal weights (``None``: always take
            the best on the training questions).
        **options: unit options and ``query_rewrite``. With default parts, any given here replace the tuned ones
            in both parts; with your own parts, a ``query_rewrite`` here is applied before theirs.
    """

    name = "hybrid"

    def __init__(self, parts: Sequence[Any] | None = None, *, k: float = 10.0,
                 weights: Sequence[float] | str | None = None, method: str = "rrf", depth: int | None = None,
                 learn_metric: str = "recall@10", learn_alpha: float | None = 0.05, **options: Any) -> None:
        super().__init__(**options)
        if parts is None:
            unit_options = {n: options[n] for n in _UNIT_OPTIONS if n in options}
            lexical = {"unit": "window", "window": 1, "key": "date", **unit_options}
            parts = [BM25(stopwords=STOP_WORDS, **lexical), Dense(**unit_options)]
            weights = [2.0, 1.0] if weights is None else weights
            self.tuned_on = {"locomo": None}
            self._rewrite = None  # the parts rewrite
        self.parts = list(parts)
        if not self.parts:
            raise ValueError("Hybrid needs at least one part strategy.")
        self.learnable = isinstance(weights, str)
        if self.learnable and weights != "learn":
            raise ValueError(f"weights must be a list of numbers or 'learn', not {weights!r}.")
        self.weights = [1.0] * len(self.parts) if weights is None or self.learnable else [float(w) for w in weights]
        if len(self.weights) != len(self.parts):
            raise ValueError(f"Give one weight per part: {len(self.parts)} parts, {len(self.weights)} weights.")
        method = "minmax" if method == "score" else method
        if method not in FUSION_METHODS:
            raise ValueError(f"method must be one of {FUSION_METHODS} (or 'score'), not {method!r}.")
        if k < 0:
            raise ValueError(f"The RRF constant k must be 0 or more, not {k!r}.")
        if method != "rrf" and not all(callable(getattr(p, "scores", None)) for p in self.parts):
            raise TypeError(f"method={method!r} needs parts with a scores(query) method (BM25, Dense, Hybrid); "
                            "use method='rrf' to fuse rankings only.")
        if depth is not None and depth < 1:
            raise ValueError(f"depth must be 1 or more (or None), not {depth!r}.")
        if not (learn_metric == "mrr" or learn_metric.startswith("recall@")):
            raise ValueError(f"learn_metric must be 'recall@k' or 'mrr', not {learn_metric!r}.")
        self.k, self.method, self.depth, self.learn_metric = k, method, depth, learn_metric
        self.learn_alpha = learn_alpha
        self._learning: dict[str, tuple[list[np.ndarray], np.ndarray, int]] = {}

    # --- fitting -------------------------------------------------------------------------------

    def fit(self, conversation: Conversation) -> list[Unit]:
        self.speakers = list(conversation.speakers)
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
                part.prepare([self.query_text(q) for q in queries] if not self.rewrite_needs_speakers else queries)

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        for part in self.parts:
            if hasattr(part, "prepare_conversation"):
                part.prepare_conversation(conversation, [self.query_text(q) for q in queries])

    def use_cache(self, cache: EmbeddingCache) -> None:
        for part in self.parts:
            if hasattr(part, "use_cache"):
                part.use_cache(cache)

    # --- scoring -------------------------------------------------------------------------------

    def _positions(self, part: Any, query: str) -> np.ndarray:
        order = getattr(part, "order", None)
        if callable(order):
            return np.asarray(order(query), dtype=np.int64)
        if getattr(self, "_position_source", None) is not self.units:
            self._position = {u.id: i for i, u in enumerate(self.units)}
            self._position_source = self.units
        ranked = part.rank(query, len(self.units))
        return np.fromiter(map(self._position.__getitem__, ranked), dtype=np.int64, count=len(ranked))

    def part_scores(self, query: str) -> list[np.ndarray]:
        """Each part's scores for the query (rankings as positions for RRF parts without ``scores``)."""
        query = self.query_text(query)
        if self.method == "rrf":
            return [self._positions(part, query)[: self.depth] for part in self.parts]
        return [np.asarray(part.scores(query), dtype=np.float64) for part in self.parts]

    def _combine(self, parts: list[np.ndarray], weights: Sequence[float]) -> np.ndarray:
        if self.method == "rrf":
            from agentlab.search import rrf_positions

            return rrf_positions(len(self.units), parts, k=self.k, weights=weights)
        return fuse(parts, method=self.method, weights=weights)

    def scores(self, query: str) -> np.ndarray:
        """The fused score of every unit, in unit order (:mod:`agentlab.search._fusion`)."""
        if not self.units:
            return np.zeros(0)
        return self._combine(self.part_scores(query), self.weights)

    def order(self, query: str) -> np.ndarray:
        """Unit positions by fused score, best first (ties: the earlier unit)."""
        return _by_score(self.scores(query))

    # --- learning the weights ------------------------------------------------------------------

    def learn(self, examples: Sequence[tuple[Conversation, Sequence[Question]]]) -> list[float]:
        """Choose the weights that maximise ``learn_metric`` on these questions (only with ``weights="learn"``).

        Every weighting of :func:`weight_grid` is scored on the questions; the best replaces equal weights only
        when a paired randomisation test finds it better at ``learn_alpha`` (a few training questions would
        otherwise pick a weighting by chance).

        Args:
            examples: ``(conversation, its training questions)`` pairs.

        Returns:
            The chosen weights (also set on the strategy).
        """
        if not self.learnable:
            return self.weights
        with contextlib.ExitStack() as stack:  # the embedding cache file stays open while every conversation is read
            for cache in {id(c): c for c in (getattr(p, "cache", None) for p in self.parts) if c is not None}.values():
                stack.enter_context(cache.hold())
            data = [item for conversation, questions in examples
                    for item in self._learning_data(conversation, questions)]
        grid = weight_grid(len(self.parts))
        equal = list(grid[0])
        if not data:
            self.weights = equal
            return self.weights
        values = [self._values(data, weights) for weights in grid]
        best = max(range(len(grid)), key=lambda i: (values[i].mean() - 1e-12 * i))
        chosen = equal
        if best != 0:
            from agentlab.eval.significance import randomization_test

            if self.learn_alpha is None or randomization_test(values[best], values[0], n_resamples=2000,
                                                              seed=0) < self.learn_alpha:
                chosen = list(grid[best])
        self.weights = [float(w) for w in chosen]
        return self.weights

    def _learning_data(self, conversation: Conversation, questions: Sequence[Question]
                       ) -> list[tuple[list[np.ndarray], np.ndarray, int]]:
        """Part scores, evidence unit positions and unit count per question, kept per (conversation, question)."""
        out = []
        owner: dict[str, int] | None = None
        for question in questions:
            key = f"{conversation.id}\x00{question.id}"
            if key not in self._learning:
                if owner is None:
                    units = self.fit(conversation)
                    self.prepare_conversation(conversation, [q.question for q in questions])
                    owner = {t: i for i, u in enumerate(units) for t in u.turn_ids}
                positions = np.array(sorted({owner[t] for t in question.evidence if t in owner}), dtype=np.int64)
                self._learning[key] = (self.part_scores(question.question), positions, len(self.units))
            if len(self._learning[key][1]):
                out.append(self._learning[key])
        return out

    def _values(self, data: list[tuple[list[np.ndarray], np.ndarray, int]], weights: Sequence[float]) -> np.ndarray:
        """``learn_metric`` of each training question under these weights."""
        from agentlab.search import rrf_positions

        cut = None if self.learn_metric == "mrr" else int(self.learn_metric.split("@")[1])
        out = np.zeros(len(data))
        for row, (parts, evidence, n) in enumerate(data):
            fused = (rrf_positions(n, parts, k=self.k, weights=weights) if self.method == "rrf"
                     else fuse(parts, method=self.method, weights=weights))
            order = _by_score(fused)
            if cut is None:
                hits = np.flatnonzero(np.isin(order, evidence))
                out[row] = 1.0 / (hits[0] + 1) if len(hits) else 0.0
            else:
                out[row] = float(np.isin(evidence, order[:cut]).mean())
        return out
