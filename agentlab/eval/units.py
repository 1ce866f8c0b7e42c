"""Units, keys and the strategy protocol: what retrieval strategies index, and the base they build on.

A *unit* is what a retrieval strategy returns; its *key* is the text that gets indexed.
:class:`UnitSpec` builds units from a :class:`~agentlab.eval.datasets.Conversation`:

- ``unit="turn"``: one unit per turn (id = turn id);
- ``unit="window"``: one unit per turn whose key also holds the ``window`` neighbouring turns on
  each side (same session). The unit still *is* its centre turn, so metrics stay turn-level and
  comparable with ``"turn"``; only the indexed text gets context;
- ``unit="session"``: one unit per session (id = session id, key = all its turns); metrics then
  count an evidence turn as found when its session is retrieved.

The key is ``"text"`` or a ``+``-joined choice of extras: ``"speaker"`` (``"Caroline: ..."``),
``"date"`` (``"[8 May 2023] ..."``) and ``"caption"`` (a shared image's caption), e.g.
``"speaker+date"``; or any function ``DialogueTurn -> str``.

A strategy is anything with a ``name``, ``index(units)`` and ``rank(query, k)`` (the
:class:`Strategy` protocol); :class:`BaseStrategy` adds unit options, a query rewrite
(:mod:`agentlab.eval.rewrites`) and ``fit(conversation)``.

Invariants: units come out in conversation order with ``position`` 0, 1, ...; unit ids are unique
within a conversation; every turn belongs to exactly one unit's ``turn_ids``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from agentlab.eval.datasets import Conversation, DialogueTurn, parse_date
from agentlab.eval.rewrites import Rewrite, describe_rewrite, resolve_rewrite

if TYPE_CHECKING:
    from agentlab.eval.embedcache import EmbeddingCache

__all__ = ["KEY_PARTS", "UNIT_KINDS", "BaseStrategy", "Strategy", "Unit", "UnitSpec"]

UNIT_KINDS = ("turn", "window", "session")
KEY_PARTS = ("text", "speaker", "date", "caption")


@dataclass(frozen=True)
class Unit:
    """One retrievable item. ``turn_ids`` are the turns a hit on it counts as retrieving."""

    id: str
    text: str
    turn_ids: tuple[str, ...]
    session_id: str
    position: int  # chronological order within the conversation (0 = oldest)
    speaker: str | None = None  # who said it (a turn or window: its centre turn; a session: None)
    date: str | None = None  # the session's date as the dataset wrote it


def _short_date(date: str | None) -> str | None:
    parsed = parse_date(date)
    return f"{parsed.day} {parsed:%B %Y}" if parsed else date


def _key_function(key: str | Callable[[DialogueTurn], str]) -> Callable[[DialogueTurn], str]:
    if callable(key):
        return key
    parts = [p.strip() for p in str(key).split("+") if p.strip()]
    unknown = [p for p in parts if p not in KEY_PARTS]
    if unknown or not parts:
        raise ValueError(f"Unknown key part {unknown[0] if unknown else key!r}; use 'text' or a '+'-joined "
                         f"choice of {KEY_PARTS[1:]} (e.g. 'speaker+date'), or a function DialogueTurn -> str.")

    def build(turn: DialogueTurn) -> str:
        text = turn.text
        caption = turn.metadata.get("blip_caption")
        if "caption" in parts and caption:
            text = f"{text} [shares an image: {caption}]"
        if "speaker" in parts:
            text = f"{turn.speaker}: {text}"
        if "date" in parts and turn.date:
            text = f"[{_short_date(turn.date)}] {text}"
        return text

    return build


@dataclass(frozen=True)
class UnitSpec:
    """How to cut a conversation into units and what text to index for each.

    Args:
        unit: ``"turn"``, ``"window"`` or ``"session"`` (see the module docstring).
        key: ``"text"``, a ``+``-joined choice of ``speaker``, ``date``, ``caption``, or a
            function ``DialogueTurn -> str``.
        window: neighbours on each side for ``unit="window"``.
    """

    unit: str = "turn"
    key: str | Callable[[DialogueTurn], str] = "text"
    window: int = 1

    def __post_init__(self) -> None:
        if self.unit not in UNIT_KINDS:
            raise ValueError(f"unit must be one of {UNIT_KINDS}, not {self.unit!r}.")
        if self.window < 0:
            raise ValueError(f"window must be 0 or more, not {self.window!r}.")
        _key_function(self.key)  # fail early on a bad key

    def units(self, conversation: Conversation) -> list[Unit]:
        """The conversation's units in chronological order."""
        key = _key_function(self.key)
        out: list[Unit] = []
        for session in conversation.sessions:
            texts = [key(t) for t in session.turns]
            if self.unit == "session":
                if session.turns:
                    out.append(Unit(session.id, "\n".join(texts), tuple(t.id for t in session.turns),
                                    session.id, len(out), None, session.date))
                continue
            width = self.window if self.unit == "window" else 0
            for i, turn in enumerate(session.turns):
                text = "\n".join(texts[max(0, i - width): i + width + 1])
                out.append(Unit(turn.id, text, (turn.id,), session.id, len(out), turn.speaker, session.date))
        return out

    def describe(self) -> str:
        """A short label such as ``"turn/text"`` or ``"window1/speaker+date"``."""
        key = self.key if isinstance(self.key, str) else getattr(self.key, "__name__", "custom")
        unit = f"window{self.window}" if self.unit == "window" else self.unit
        return f"{unit}/{key}"


@runtime_checkable
class Strategy(Protocol):
    """What the evaluation runner needs: a name, ``index(units)`` and ``rank(query, k)``."""

    name: str

    def index(self, units: Sequence[Unit]) -> None:
        """Index one conversation's units, replacing what was indexed before."""
        ...

    def rank(self, query: str, k: int) -> list[str]:
        """Up to ``k`` unit ids, best first."""
        ...


class BaseStrategy:
    """Unit options, a query rewrite, ``fit(conversation)`` and helpers shared by the built-in strategies.

    Args:
        unit, key, window: see :class:`UnitSpec`.
        name: overrides the class's default name (useful to compare two configurations).
        query_rewrite: applied to every query before it is scored: a name of
            :mod:`agentlab.eval.rewrites` (``"strip-question"``, ``"drop-speakers"``, or both joined by ``+``),
            or a function ``str -> str``.

    Attributes:
        tuned_on: ``{dataset name: conversation ids}`` whose questions chose this strategy's parameters (``None``
            for every conversation of that dataset); the runner marks those rows ``"in-sample"``.
    """

    name = "strategy"
    tuned_on: dict[str, frozenset[str] | None]

    def __init__(self, *, unit: str = "turn", key: str | Callable[[DialogueTurn], str] = "text", window: int = 1,
                 name: str | None = None, query_rewrite: str | Rewrite | None = None) -> None:
        self.spec = UnitSpec(unit, key, window)
        if name is not None:
            self.name = name
        self.query_rewrite = query_rewrite
        self._rewrite = resolve_rewrite(query_rewrite)
        self.units: list[Unit] = []
        self.speakers: list[str] = []
        self.tuned_on = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, units={self.describe()!r})"

    def describe(self) -> str:
        """Unit and key in a few characters, e.g. ``"turn/text"`` or ``"window1/date"``; a rewrite adds ``" q:..."``."""
        rewrite = describe_rewrite(self.query_rewrite)
        return self.spec.describe() + (f" q:{rewrite}" if rewrite else "")

    def query_text(self, query: str) -> str:
        """The query as this strategy scores it (after its rewrite, with the fitted conversation's speakers)."""
        return self._rewrite(query, self.speakers) if self._rewrite is not None else query

    @property
    def rewrite_needs_speakers(self) -> bool:
        """Whether the rewrite depends on the conversation (so queries are known only after ``fit``)."""
        return bool(getattr(self._rewrite, "needs_speakers", False))

    def fit(self, conversation: Conversation) -> list[Unit]:
        """Build this strategy's units for ``conversation``, index them and return them."""
        self.speakers = list(conversation.speakers)
        units = self.spec.units(conversation)
        self.index(units)
        return units

    def prepare(self, queries: Sequence[str]) -> None:
        """Called once with every query of a run before any ``rank``; batch work goes here."""

    def prepare_conversation(self, conversation: Conversation, queries: Sequence[str]) -> None:
        """Called after ``fit(conversation)`` with that conversation's queries; per-conversation batch work."""

    def use_cache(self, cache: EmbeddingCache) -> None:
        """Offer the runner's embedding cache; strategies that embed keep it unless they have one."""

    def index(self, units: Sequence[Unit]) -> None:
        self.units = list(units)

    def rank(self, query: str, k: int) -> list[str]:
        order = getattr(self, "order", None)
        if order is None:
            raise NotImplementedError(f"{type(self).__name__} must implement rank(query, k) or order(query).")
        return self._ids(order(query)[:k]) if self.units else []

    def _ids(self, positions: np.ndarray) -> list[str]:
        """The ids of the units at these positions (an object array lookup, not a loop per unit)."""
        if getattr(self, "_id_source", None) is not self.units:
            self._id_array = np.array([u.id for u in self.units], dtype=object)
            self._id_source = self.units
        return self._id_array[positions].tolist()


def _by_score(scores: np.ndarray) -> np.ndarray:
    # Stable sort on the negated scores: equal scores keep the earlier unit first.
    return np.argsort(-scores, kind="stable")
