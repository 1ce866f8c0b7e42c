"""Retrieval strategies: index a conversation's units, then rank them for a query.

Units and keys (turn, window of neighbouring turns or session; text alone or with speaker, date and image
caption) are described by :class:`~agentlab.eval.units.UnitSpec`; every built-in strategy takes them, and a query
rewrite (:mod:`agentlab.eval.rewrites`). This module gathers the strategies of :mod:`~agentlab.eval.lexical`
(BM25, phrase search), :mod:`~agentlab.eval.dense`, :mod:`~agentlab.eval.fused` (hybrids),
:mod:`~agentlab.eval.rescoring` (name, time, session and diversity handling), :mod:`~agentlab.eval.default` and
:mod:`~agentlab.eval.multihop` (with :mod:`~agentlab.eval.decompose`),
and builds any of them by name (:func:`make_strategy`).

A strategy is anything with a ``name``, ``index(units)`` and ``rank(query, k) -> list of unit ids``
(the :class:`Strategy` protocol). Subclass :class:`BaseStrategy` to get unit options for free::

    class Longest(BaseStrategy):
        name = "longest"
        def index(self, units): self.ids = [u.id for u in sorted(units, key=lambda u: -len(u.text))]
        def rank(self, query, k): return self.ids[:k]

Invariants: ``rank`` returns distinct ids of indexed units, best first, at most ``k`` of them;
the same index and query always give the same ranking (ties go to the earlier unit); ``index``
replaces whatever was indexed before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agentlab.eval.default import Default
from agentlab.eval.dense import Dense
from agentlab.eval.fused import Hybrid
from agentlab.eval.lexical import BM25, STOP_WORDS, Phrase
from agentlab.eval.multihop import MultiHop
from agentlab.eval.rescoring import MMR, Diversify, Neighbours, SessionPrior, SpeakerPrior, TimeAware
from agentlab.eval.rewrites import drop_speakers, strip_question
from agentlab.eval.units import BaseStrategy, Strategy, Unit, UnitSpec

__all__ = [
    "BM25", "MMR", "STOP_WORDS", "BaseStrategy", "Default", "Dense", "Diversify", "Hybrid", "MultiHop", "Neighbours",
    "Phrase", "Recency", "SessionPrior", "SpeakerPrior", "Strategy", "TimeAware", "Unit", "UnitSpec", "drop_speakers",
    "make_strategy", "strategy_names", "strip_question",
]


class Recency(BaseStrategy):
    """A baseline that ignores the query: newest units first."""

    name = "recency"

    def scores(self, query: str) -> np.ndarray:
        """The unit's position: the newest scores highest."""
        return np.arange(len(self.units), dtype=np.float64)

    def order(self, query: str) -> np.ndarray:
        """Unit positions, newest first."""
        return np.arange(len(self.units) - 1, -1, -1)


_FACTORIES: dict[str, Callable[..., Any]] = {
    "bm25": BM25,
    "bm25-reference": lambda **o: BM25("simple", k1=1.5, idf="okapi", name="bm25-reference", **o),
    "bm25-rm3": lambda **o: BM25(stopwords=STOP_WORDS, rm3=True, name="bm25-rm3", **o),
    "default": Default,
    "dense": Dense,
    "hybrid": Hybrid,
    "multihop": MultiHop,
    "phrase": Phrase,
    "recency": Recency,
}


def strategy_names() -> list[str]:
    """The names :func:`make_strategy` knows."""
    return sorted(_FACTORIES)


def make_strategy(name: str, **options: Any) -> Any:
    """Build a strategy by name: ``default``, ``bm25``, ``bm25-reference``, ``bm25-rm3``, ``dense``, ``hybrid``,
    ``multihop`` (decomposition for multi-hop questions, :mod:`agentlab.eval.multihop`), ``phrase``, ``recency``.

    Args:
        name: one of the names above.
        **options: passed to the class (for example ``unit="window"``, ``key="speaker"`` or
            ``query_rewrite="drop-speakers"``).

    Raises:
        ValueError: an unknown name.
    """
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"Unknown strategy {name!r}; choose from {', '.join(strategy_names())}.") from None
    return factory(**options)
