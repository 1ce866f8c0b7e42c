"""Is an evidence turn inside a compaction summary? Two named methods, so every result says which it used.

Compaction hides a turn from the visible history; its content may survive in the summary that replaced it.
A matcher answers "does this summary still carry this turn?":

* ``exact``: the turn is split into sentences (after ``.``, ``!`` or ``?`` and whitespace) and sentences of
  fewer than 3 words are set aside (greetings, "Wow!"); the turn is in the summary when at least half of the
  remaining sentences appear in it word for word (whitespace normalised, case kept). A turn with no such
  sentence must appear whole. Right for extractive summaries, which quote whole sentences; it never credits a
  paraphrase, so it undercounts abstractive (Claude) summaries.
* ``fuzzy``: the turn's content words (lower-cased runs of letters and digits, 3 characters or more, not in
  :data:`agentlab.eval.strategies.STOP_WORDS`) are looked up in the summary's words; the turn is in the summary when
  at least ``threshold`` (default 0.6) of them are there, or all of them for a turn of fewer than 3 content
  words. It credits paraphrases that keep the words (names, objects, places), and can credit a turn whose words
  the summary uses for another fact; its name carries the threshold (``fuzzy>=0.6``).

``auto`` picks ``exact`` for extractive summaries (and for a pointer that stands in for the turns a design keeps
elsewhere, which carries none) and ``fuzzy`` for every other summarizer.

Invariant: a matcher is a pure function of (turn text, summary text); :meth:`prepare` only caches the
summary's normalised text and word set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentlab.errors import InvalidArgumentError

__all__ = ["ExactMatch", "FuzzyMatch", "Prepared", "make_matcher"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Prepared:
    """A summary, normalised once for many lookups."""

    text: str
    words: frozenset[str]


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


class _Matcher:
    name = "matcher"

    def prepare(self, summary: str) -> Prepared:
        """Normalise a summary for :meth:`contains` (call once per summary)."""
        return Prepared(_normal(summary), frozenset(w.lower() for w in _WORD.findall(summary)))

    def contains(self, text: str, summary: Prepared) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class ExactMatch(_Matcher):
    """At least half of the turn's sentences of 3+ words appear verbatim in the summary."""

    name = "exact"

    def contains(self, text: str, summary: Prepared) -> bool:
        """Whether ``summary`` quotes the turn (see the module docstring)."""
        sentences = [_normal(s) for s in _SENTENCE_END.split(text.strip())]
        long = [s for s in sentences if len(s.split()) >= 3]
        if not long:
            whole = _normal(text)
            return bool(whole) and whole in summary.text
        found = sum(1 for s in long if s in summary.text)
        return 2 * found >= len(long)


class FuzzyMatch(_Matcher):
    """At least ``threshold`` of the turn's content words occur in the summary."""

    def __init__(self, threshold: float = 0.6) -> None:
        if not 0 < threshold <= 1:
            raise InvalidArgumentError(f"The fuzzy threshold is a share in (0, 1], not {threshold!r}.")
        self.threshold = threshold
        self.name = f"fuzzy>={threshold:g}"
        from agentlab.eval.strategies import STOP_WORDS

        self._stop = STOP_WORDS

    def content_words(self, text: str) -> set[str]:
        """The words of ``text`` that count: lower-cased, 3+ characters, not stop words."""
        return {w for w in (m.lower() for m in _WORD.findall(text)) if len(w) >= 3 and w not in self._stop}

    def contains(self, text: str, summary: Prepared) -> bool:
        """Whether enough of the turn's content words are in ``summary`` (see the module docstring)."""
        words = self.content_words(text)
        if not words:
            return False
        found = len(words & summary.words)
        if len(words) < 3:
            return found == len(words)
        return found >= self.threshold * len(words)


def make_matcher(method: Any, summarizer: str = "extractive") -> _Matcher:
    """A matcher from a name (``"exact"``, ``"fuzzy"``, ``"fuzzy>=0.5"``, ``"auto"``) or a matcher object.

    Args:
        method: The method; ``"auto"`` resolves by ``summarizer``.
        summarizer: The policy's summarizer name (for ``"auto"``).

    Raises:
        InvalidArgumentError: An unknown method name.
    """
    if isinstance(method, _Matcher) or (hasattr(method, "contains") and hasattr(method, "prepare")):
        return method
    if method == "auto":
        method = "exact" if summarizer in ("extractive", "none", "pointer") else "fuzzy"
    if method == "exact":
        return ExactMatch()
    if isinstance(method, str) and method.startswith("fuzzy"):
        rest = method[len("fuzzy"):]
        if not rest:
            return FuzzyMatch()
        if rest.startswith(">="):
            try:
                return FuzzyMatch(float(rest[2:]))
            except ValueError:
                pass
    raise InvalidArgumentError(f"Unknown summary match method {method!r}; use 'exact', 'fuzzy', 'fuzzy>=0.5' "
                               "or 'auto'.")
