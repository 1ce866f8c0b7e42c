"""Units and keys: how a conversation is cut into retrievable items, and what text each is indexed by.

A *unit* is what a retrieval strategy returns; its *key* is the text that gets indexed.
:class:`UnitSpec` builds units from a :class:`~agentlab.datasets.Conversation`:

- ``unit="turn"``: one unit per turn (id = turn id);
- ``unit="window"``: one unit per turn whose key also holds the ``window`` neighbouring turns on
  each side (same session). The unit still *is* its centre turn, so metrics stay turn-level and
  comparable with ``"turn"``; only the indexed text gets context;
- ``unit="session"``: one unit per session (id = session id, key = all its turns); metrics then
  count an evidence turn as found when its session is retrieved.

The key is ``"text"`` or a ``+``-joined choice of extras: ``"speaker"`` (``"Caroline: ..."``),
``"date"`` (``"[8 May 2023] ..."``) and ``"caption"`` (a shared image's caption), e.g.
``"speaker+date"``; or any function ``Turn -> str``.

Invariants: units come out in conversation order with ``position`` 0, 1, ...; unit ids are unique
within a conversation; every turn belongs to exactly one unit's ``turn_ids``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .datasets import Conversation, Turn, parse_date

__all__ = ["KEY_PARTS", "UNIT_KINDS", "Unit", "UnitSpec"]

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


def _short_date(date: str | None) -> str | None:
    parsed = parse_date(date)
    return f"{parsed.day} {parsed:%B %Y}" if parsed else date


def _key_function(key: str | Callable[[Turn], str]) -> Callable[[Turn], str]:
    if callable(key):
        return key
    parts = [p.strip() for p in str(key).split("+") if p.strip()]
    unknown = [p for p in parts if p not in KEY_PARTS]
    if unknown or not parts:
        raise ValueError(f"Unknown key part {unknown[0] if unknown else key!r}; use 'text' or a '+'-joined "
                         f"choice of {KEY_PARTS[1:]} (e.g. 'speaker+date'), or a function Turn -> str.")

    def build(turn: Turn) -> str:
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
            function ``Turn -> str``.
        window: neighbours on each side for ``unit="window"``.
    """

    unit: str = "turn"
    key: str | Callable[[Turn], str] = "text"
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
                                    session.id, len(out)))
                continue
            width = self.window if self.unit == "window" else 0
            for i, turn in enumerate(session.turns):
                text = "\n".join(texts[max(0, i - width): i + width + 1])
                out.append(Unit(turn.id, text, (turn.id,), session.id, len(out)))
        return out

    def describe(self) -> str:
        """A short label such as ``"turn/text"`` or ``"window1/speaker+date"``."""
        key = self.key if isinstance(self.key, str) else getattr(self.key, "__name__", "custom")
        unit = f"window{self.window}" if self.unit == "window" else self.unit
        return f"{unit}/{key}"
