"""Query rewrites: what a strategy does to a question before scoring it, and how speakers' names are found.

Built-in rewrites, by name (join several with ``+``, applied left to right):

- ``"strip-question"`` (:func:`strip_question`): drop the opening question words and the question mark, so a
  statement-like query meets statement-like turns ("When did Jo run a race?" -> "Jo run a race").
- ``"drop-speakers"`` (:func:`drop_speakers`): remove the conversation's speaker names. A question names the person
  it asks about, but people rarely say their own name: the *other* speaker does ("Hey Caroline!"), so a name in
  the query pulls up the wrong person's turns. Where the name belongs is the speaker prior
  (:class:`~agentlab.eval.rescoring.SpeakerPrior`) or the key (``key="speaker"``).

A rewrite is resolved to a function ``(query, speakers) -> str``; a plain function ``str -> str`` is accepted too.

Invariants: a rewrite never returns an empty query (it falls back to the original); names are matched as whole,
case-sensitive words, with a possessive ``'s`` removed along with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["REWRITES", "Rewrite", "describe_rewrite", "drop_speakers", "named_speakers", "resolve_rewrite",
           "strip_question"]

Rewrite = Callable[[str], str]

_QUESTION_START = re.compile(
    r"^\s*(?:(?:what|which|who|whom|whose|when|where|why|how)(?:\s+(?:kind|type|sort)s?\s+of)?"
    r"(?:\s+(?:many|much|long|often|old|far))?\s+)?"
    r"(?:(?:is|are|was|were|do|does|did|has|have|had|can|could|would|will|should|might)\s+)?",
    re.IGNORECASE,
)


def strip_question(query: str) -> str:
    """Drop a question's opening words and question mark: "When did Jo run a race?" -> "Jo run a race".

    A rewrite for dense keys: turns are statements, and a symmetric sentence model otherwise
    rates other *questions* in the conversation as closest to the query.
    """
    stripped = _QUESTION_START.sub("", query, count=1).strip().rstrip("?").strip()
    return stripped or query


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(name) + r"(?:'s|\u2019s)?\b")


def named_speakers(query: str, speakers: Sequence[str]) -> list[str]:
    """The speakers whose names the query contains (whole words, case-sensitive), in ``speakers`` order."""
    return [s for s in speakers if s and _name_pattern(s).search(query)]


def drop_speakers(query: str, speakers: Sequence[str]) -> str:
    """``query`` without the speakers' names (and their possessive ``'s``); the original if nothing is left."""
    out = query
    for speaker in speakers:
        if speaker:
            out = _name_pattern(speaker).sub(" ", out)
    out = re.sub(r"\s+", " ", out).strip()
    out = re.sub(r"\s+([?.,!])", r"\1", out)
    return out if re.search(r"\w", out) else query


REWRITES: dict[str, Callable[[str, Sequence[str]], str]] = {
    "strip-question": lambda query, speakers: strip_question(query),
    "drop-speakers": drop_speakers,
}


class _Chain:
    """Named rewrites applied left to right; ``needs_speakers`` when one of them reads the speakers."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.steps = [REWRITES[n] for n in names]
        self.needs_speakers = "drop-speakers" in names

    def __call__(self, query: str, speakers: Sequence[str]) -> str:
        for step in self.steps:
            query = step(query, speakers)
        return query


class _Plain:
    """A user's ``str -> str`` function as a rewrite."""

    needs_speakers = False

    def __init__(self, function: Rewrite) -> None:
        self.function = function

    def __call__(self, query: str, speakers: Sequence[str]) -> str:
        return self.function(query) or query


def resolve_rewrite(spec: Any) -> Callable[[str, Sequence[str]], str] | None:
    """The rewrite function for ``spec``: ``None``, a name or ``+``-joined names, or a function ``str -> str``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if spec is None or spec == "" or spec == "none":
        return None
    if callable(spec):
        return _Plain(spec)
    names = [part.strip() for part in str(spec).split("+") if part.strip()]
    unknown = [n for n in names if n not in REWRITES]
    if unknown:
        raise ValueError(f"Unknown query rewrite {unknown[0]!r}; use one of {sorted(REWRITES)} (join with '+'), "
                         "or a function str -> str.")
    return _Chain(names)


def describe_rewrite(spec: Any) -> str:
    """A short label for a rewrite: its names, a function's name, or ``""`` for none."""
    if spec is None or spec == "" or spec == "none":
        return ""
    if callable(spec):
        return getattr(spec, "__name__", "custom").replace("_", "-")
    return str(spec)
