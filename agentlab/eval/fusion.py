"""Fusion: one ranking from several strategies, by reciprocal rank or by scaled scores.

:class:`Hybrid` fits each part on the conversation with the part's own unit options, asks each
for its ranking (or scores) of a query, and combines them.

Invariants: the parts must index the same unit ids (turn and window units share them; keys may
differ); fused rankings are deterministic, ties going to the earlier unit; a part's weight scales
its whole contribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from agentlab.eval.units import BaseStrategy, Unit, _by_score

if TYPE_CHECKING:
    from agentlab.eval.datasets import Conversation
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["Hybrid"]


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
            from agentlab.eval.strategies import BM25, STOP_WORDS, Dense  # here: strategies imports this module

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
        """The fused score of every unit, in unit order."""
        fused = np.zeros(len(self.units), dtype=np.float64)
        for part, weight in zip(self.parts, self.weights):
            if self.method == "score":
                raw = np.asarray(part.scores(query), dtype=np.float64)
                spread = raw.max() - raw.min() if len(raw) else 0.0
                fused += weight * ((raw - raw.min()) / spread if spread > 0 else np.zeros_like(raw))
                continue
            positions = self._positions(part, query)  # distinct positions, so += is safe
            fused[positions] += weight / (self.k + np.arange(1, len(positions) + 1))
        return fused

    def order(self, query: str) -> np.ndarray:
        """Unit positions by fused score, best first (ties: the earlier unit)."""
        return _by_score(self.scores(query))
