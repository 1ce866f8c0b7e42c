"""Summarize functions for ``create_compact_function``: one that asks Claude, one that needs no model at all.

Both take the prompt built by :func:`agentlab.session._compact_function.build_summary_prompt` (upstream's reference
prompt: the conversation, an optional previous summary, four ``##`` sections and a ``Target ~N tokens`` line) and return
the summary text.

* :class:`ClaudeSummarizer` sends the prompt to the Messages API as one user message and returns the reply's text.
* :class:`ExtractiveSummarizer` is offline and deterministic, for studying compaction without a key: it picks
  whole sentences from the conversation (SumBasic: sentences whose content words are frequent in the
  conversation, with each picked word's weight squared so the next pick covers something else; a bonus for
  numbers and names, which carry facts), keeps them in conversation order under the token budget, and says in its
  first line that it is extractive. It invents nothing, but it also rewrites nothing: expect a list of quotes, not
  prose. On an update prompt, the previous summary's sentences compete with the new turns' sentences.

Invariant: the extractive summary's estimated size (:func:`agentlab.context.estimate_string_tokens`) never
exceeds the prompt's target.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentlab.context import estimate_string_tokens

__all__ = ["EXTRACTIVE_HEADER", "ClaudeSummarizer", "ExtractiveSummarizer", "parse_summary_prompt"]

EXTRACTIVE_HEADER = "[Extractive summary, no LLM: {picked} of {total} sentences quoted verbatim]"

_TARGET = re.compile(r"Target ~(\d+) tokens")
_ROLE = re.compile(r"^\[([A-Za-z_-]+)\]$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_STOP = frozenset(
    [
        "a", "about", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "because",
        "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "for",
        "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in",
        "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "no", "nor", "not", "now",
        "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "please", "same",
        "she", "should", "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these",
        "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were",
        "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "yes", "you",
        "your", "yours", "ok", "okay", "sure", "thanks", "thank", "hi", "hello"
    ]
)


@dataclass(frozen=True)
class ParsedPrompt:
    """The parts of a reference summary prompt: previous summary ("" on a first compaction), turns, budget."""

    previous: str
    content: str
    budget: int


def _between(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i)
    return text[i:] if j < 0 else text[i:j]


def parse_summary_prompt(prompt: str, default_budget: int = 200) -> ParsedPrompt:
    """Split a reference compaction prompt (either template) into previous summary, turns and token target.

    A prompt in neither form is treated as turns only, with ``default_budget``.
    """
    match = _TARGET.search(prompt)
    budget = int(match.group(1)) if match else default_budget
    first = _between(prompt, "CONVERSATION TO SUMMARIZE:\n", "\n\nUse this structure:")
    if first is not None:
        return ParsedPrompt("", first, budget)
    previous = _between(prompt, "PREVIOUS SUMMARY:\n", "\n\nNEW TURNS TO INCORPORATE:\n")
    turns = _between(prompt, "NEW TURNS TO INCORPORATE:\n", "\n\nUpdate the summary.")
    if previous is not None and turns is not None:
        return ParsedPrompt(previous, turns, budget)
    return ParsedPrompt("", prompt, budget)


@dataclass
class _Sentence:
    order: int
    source: str  # a role, "tool" or "summary"
    text: str
    words: list[str]
    specific: int  # numbers and capitalised words past the first: facts, names, dates

    def line(self) -> str:
        return f"- [{self.source}] {self.text}"


def _words(text: str) -> list[str]:
    return [w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in _STOP and len(w) > 1]


def _specific(text: str) -> int:
    tokens = text.split()
    return sum(1 for i, t in enumerate(tokens) if any(c.isdigit() for c in t) or (i > 0 and t[:1].isupper()))


def _split_sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s.strip() for s in _SENTENCE_END.split(line.strip()) if s.strip())
    return out


def _candidates(parsed: ParsedPrompt) -> list[_Sentence]:
    pieces: list[tuple[str, str]] = []
    for line in parsed.previous.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("[Extractive summary"):
            continue
        role_line = re.match(r"^- \[([A-Za-z_-]+)\] (.*)$", line)  # our own earlier output keeps its roles
        if role_line:
            pieces.append((role_line.group(1), role_line.group(2)))
        else:
            pieces.extend(("summary", s) for s in _split_sentences(line.lstrip("-* ")))
    for chunk in parsed.content.split("\n\n---\n\n"):
        lines = chunk.split("\n")
        role = "message"
        head = _ROLE.match(lines[0].strip()) if lines else None
        if head:
            role, lines = head.group(1), lines[1:]
        tool = None
        for line in lines:
            if line.startswith("[Tool: "):
                tool = line[7:].rstrip("]")
            elif tool and (line.startswith("Input: ") or line.startswith("Output: ")):
                pieces.append(("tool", f"{tool} {line[:300]}"))
            else:
                pieces.extend((role, s) for s in _split_sentences(line))
    sentences = []
    seen: set[str] = set()
    for order, (source, text) in enumerate(pieces):
        words = _words(text)
        specific = _specific(text)
        # Too short to carry a fact ("Sure, happy to help."), unless it names something or has a number.
        if (len(words) >= 3 or (words and specific)) and text not in seen:
            seen.add(text)  # a repeated sentence is quoted once, where it first appears
            sentences.append(_Sentence(order, source, text, words, specific))
    return sentences


def _cost(line: str) -> int:
    # Per-line estimates add up to at least the estimate of the joined text (max(a,b) + max(c,d) >= max(a+c, b+d)),
    # and the +1 pays for the newline, so the sum is a safe upper bound.
    return estimate_string_tokens(line) + 1


class ExtractiveSummarizer:
    """Offline summarizer: quotes the most informative sentences under the prompt's token target.

    Args:
        default_budget: Target when the prompt has no ``Target ~N tokens`` line.
        user_bonus: Weight multiplier for sentences the user wrote (they state the facts a memory needs).
    """

    def __init__(self, *, default_budget: int = 200, user_bonus: float = 1.15) -> None:
        self.default_budget = default_budget
        self.user_bonus = user_bonus

    def __call__(self, prompt: str) -> str:
        """Summarize a reference compaction prompt; returns "" when there is nothing to quote."""
        parsed = parse_summary_prompt(prompt, self.default_budget)
        sentences = _candidates(parsed)
        if not sentences:
            return ""
        counts = Counter(w for s in sentences for w in s.words)
        total_words = sum(counts.values())
        weight = {w: c / total_words for w, c in counts.items()}
        header_cost = _cost(EXTRACTIVE_HEADER.format(picked=len(sentences), total=len(sentences)))
        budget = parsed.budget - header_cost
        chosen: list[_Sentence] = []
        costs = {id(s): _cost(s.line()) for s in sentences}
        # Each sentence's distinct words in the order they first appear: a set's order changes with Python's hash
        # seed, and summing float weights in another order can break a near tie the other way, which would make
        # the summary (and every experiment built on it) differ from one process to the next.
        uniques = {id(s): tuple(dict.fromkeys(s.words)) for s in sentences}
        bonuses = {id(s): (1 + 0.2 * min(s.specific, 3)) * (self.user_bonus if s.source == "user" else 1.0)
                   for s in sentences}

        def score(s: _Sentence) -> float:
            unique = uniques[id(s)]
            return sum(weight[w] for w in unique) / math.sqrt(len(unique)) * bonuses[id(s)]

        remaining = [s for s in sentences if costs[id(s)] <= budget]
        while remaining:
            best = max(remaining, key=lambda s: (score(s), -s.order))
            budget -= costs[id(best)]
            chosen.append(best)
            for w in uniques[id(best)]:
                weight[w] = weight[w] ** 2  # SumBasic: what is said once needs no repeating
            remaining = [s for s in remaining if s is not best and costs[id(s)] <= budget]
        if not chosen:
            return ""
        chosen.sort(key=lambda s: s.order)
        header = EXTRACTIVE_HEADER.format(picked=len(chosen), total=len(sentences))
        return "\n".join([header, *(s.line() for s in chosen)])


class ClaudeSummarizer:
    """Summarize with Claude: the reference prompt as one user message, the reply's text as the summary.

    Args:
        client: An ``anthropic.Anthropic`` client, a zero-argument callable returning one (resolved at each
            call, so an agent's client can be swapped), or None to build one from the settings.
        model: Model id (default: the settings' model).
        max_tokens: Output limit; default ``min(8192, max(512, 2 * target))`` from the prompt's target.
        system: Optional system prompt.
        usage_sink: Called with each response body (dict), e.g. to store usage rows.

    Raises (from a call):
        NoApiKeyError, ModelAPIError: as :meth:`agentlab.chat.ChatAgent.ask`.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        system: str | None = None,
        usage_sink: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self._client = client
        self.model = model
        self.max_tokens = max_tokens
        self.system = system
        self.usage_sink = usage_sink
        self.last_response: dict[str, Any] | None = None

    def _resolve_client(self) -> Any:
        client = self._client
        if client is None:
            from agentlab.chat._settings import build_client, resolve_settings

            client = self._client = build_client(resolve_settings())
        elif callable(client) and not hasattr(client, "messages"):
            client = client()
        return client

    def __call__(self, prompt: str) -> str:
        """Ask Claude for the summary; returns its text (blank replies give "", which compaction treats as none)."""
        from agentlab.chat._api import call_messages_api
        from agentlab.chat._settings import resolve_settings

        client = self._resolve_client()
        target = parse_summary_prompt(prompt).budget
        body: dict[str, Any] = {
            "model": self.model or resolve_settings().model,
            "max_tokens": self.max_tokens or min(8192, max(512, 2 * target)),
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        }
        if self.system:
            body["system"] = self.system
        response = call_messages_api(client, body)
        self.last_response = response
        if self.usage_sink is not None:
            self.usage_sink(response)
        content = response.get("content") or []
        return "\n\n".join(b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str))
