"""Memory policies: named, documented settings for how a session keeps a long conversation.

A :class:`Policy` bundles everything that decides what a model sees at question time:

* :class:`Compaction`: when the session compacts (``threshold``, checked after every append, as
  ``Session.compact_after``), what it never summarises (``protect_head`` messages at the start,
  ``min_tail_messages`` at the end) and how much recent history stays verbatim (``tail_token_budget``);
  ``None`` means the session never compacts;
* the summarizer that writes the compaction summary: ``"extractive"``
  (:class:`agentlab.chat.ExtractiveSummarizer`, offline and deterministic), ``"claude"``
  (:class:`agentlab.chat.ClaudeSummarizer`), ``"auto"`` (Claude when ``ANTHROPIC_API_KEY`` is set,
  else extractive) or any ``prompt -> summary`` callable;
* context :class:`Block` objects: writable blocks in the system prompt, and a ``memory_writer`` that
  updates them with ``set_context`` after each dataset session (``"claude"``, or a callable); without a
  writer the blocks stay as configured (empty), which only costs their headers;
* :class:`Search`: the retrieval strategy behind the search tool, i.e. how ``session.search`` is called
  with the question (``mode`` and the cut-off ``k``);
* a memory ``design`` (:class:`~agentlab.experiments.memory_design.MemoryDesign`): a memory architecture kept
  beside the session (extracted facts, core and archival memory, a search over the whole history) that writes as
  the conversation goes and puts what its own retrieval finds into the prompt at each question. The named designs
  are in :mod:`agentlab.experiments.designs`.

The default ladder (:data:`DEFAULT_POLICIES`) is ``none`` plus three offline compacting policies. Their
numbers come from principles, not from LoCoMo's questions or answers:

* one shape at every rung: the tail keeps a quarter of the threshold verbatim, so after a compaction the
  prompt falls to about 40% of the threshold (head, a summary of about 20% of what it replaces, which is
  the reference compactor's own budget, and the tail), and the saw-tooth has the same proportions;
* ``protect_head`` 3 and ``min_tail_messages`` 2 are the reference compactor's defaults, left alone so
  that only the size of the working memory varies;
* the thresholds form a geometric ladder (x4): 1,000 tokens (about one dated session of a LoCoMo
  conversation, 770 estimated tokens on average: the working memory of "today"), 4,000 and 16,000 (below
  9 of the 10 LoCoMo conversations, which are 12,700-25,600 estimated tokens long, so even the gentle
  rung compacts on most of them). Only conversation lengths were looked at to place the ladder;
* every default searches with ``mode="any"`` (BM25 over the words of the question) and ``k=10``, the
  result count of the reference ``session_search`` tool. Upstream's ``Session.search`` default, one exact
  phrase, almost never matches a question.

Invariants: policies are immutable values; a policy's name is unique within one experiment; building a
session from a policy never sends anything unless the policy names a Claude summarizer or writer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentlab.errors import InvalidArgumentError, UnknownPolicyError

__all__ = ["DEFAULT_POLICIES", "POLICIES", "Block", "Compaction", "Policy", "Search", "get_policy",
           "resolve_policies"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
_SUMMARIZERS = ("extractive", "claude", "auto")
_SEARCH_MODES = ("phrase", "all", "any")


def _positive_int(name: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{name} must be a whole number of {minimum} or more, not {value!r}.")
    return value


@dataclass(frozen=True)
class Compaction:
    """When and how a policy compacts (the arguments of ``compact_after`` and ``create_compact_function``).

    Attributes:
        threshold: Compact after an append that takes the session estimate strictly above this many tokens.
        tail_token_budget: Tokens of the newest messages kept verbatim.
        protect_head: Messages at the start that are never summarised.
        min_tail_messages: Messages at the end that are never summarised.
    """

    threshold: int
    tail_token_budget: int
    protect_head: int = 3
    min_tail_messages: int = 2

    def __post_init__(self) -> None:
        _positive_int("threshold", self.threshold)
        _positive_int("tail_token_budget", self.tail_token_budget, minimum=1)
        _positive_int("protect_head", self.protect_head)
        _positive_int("min_tail_messages", self.min_tail_messages)


@dataclass(frozen=True)
class Block:
    """A writable context block in the system prompt (``session.with_context(label, ...)``)."""

    label: str
    description: str | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Search:
    """How the search tool is called at question time: ``session.search(question, mode=mode, limit=k)``."""

    mode: str = "any"
    k: int = 10

    def __post_init__(self) -> None:
        if self.mode not in _SEARCH_MODES:
            raise InvalidArgumentError(f"Search mode must be one of {_SEARCH_MODES}, not {self.mode!r}.")
        _positive_int("k", self.k, minimum=1)


@dataclass(frozen=True)
class Policy:
    """A named memory policy. See the module docstring for what each part means.

    Attributes:
        name: Short name used in result rows (letters, digits, ``_ . + -``; up to 64 characters).
        description: One or two sentences saying what the policy does and why.
        compaction: The compaction settings, or None for a session that never compacts.
        summarizer: ``"extractive"``, ``"claude"``, ``"auto"`` or a ``prompt -> summary`` callable.
        blocks: Writable context blocks added to the session's system prompt.
        memory_writer: ``"claude"``, a callable ``(session, turns) -> None`` run after each dataset session,
            or None.
        search: The search tool's strategy.
        design: A memory design (None for a policy that is compaction, blocks and search only).
    """

    name: str
    description: str
    compaction: Compaction | None = None
    summarizer: str | Callable[[str], str] = "extractive"
    blocks: tuple[Block, ...] = ()
    memory_writer: str | Callable[..., Any] | None = None
    search: Search = field(default_factory=Search)
    design: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidArgumentError(f"A policy name is 1-64 letters, digits or _ . + - (starting with a letter "
                                       f"or digit), not {self.name!r}.")
        if isinstance(self.summarizer, str) and self.summarizer not in _SUMMARIZERS:
            raise InvalidArgumentError(f"summarizer must be one of {_SUMMARIZERS} or a callable, not "
                                       f"{self.summarizer!r}.")
        if not isinstance(self.summarizer, str) and not callable(self.summarizer):
            raise InvalidArgumentError(f"summarizer must be a name or a callable, not {self.summarizer!r}.")
        if self.memory_writer is not None and self.memory_writer != "claude" and not callable(self.memory_writer):
            raise InvalidArgumentError(f"memory_writer must be None, 'claude' or a callable, not "
                                       f"{self.memory_writer!r}.")
        if self.memory_writer is not None and not self.blocks:
            raise InvalidArgumentError(f"Policy {self.name!r} has a memory_writer but no block to write; add "
                                       "blocks=(Block('memory', ...),).")
        if self.design is not None and not callable(getattr(self.design, "start", None)):
            raise InvalidArgumentError(f"design must be a MemoryDesign (agentlab.experiments.designs), not "
                                       f"{self.design!r}.")
        labels = [b.label for b in self.blocks]
        if len(set(labels)) != len(labels):
            raise InvalidArgumentError(f"Policy {self.name!r} names a block twice: {labels}.")

    @property
    def summarizer_name(self) -> str:
        """``"none"`` without compaction, else the summarizer's name (a callable's class or function name)."""
        if self.compaction is None:
            return "none"
        if isinstance(self.summarizer, str):
            if self.summarizer == "auto":
                return "claude" if os.environ.get("ANTHROPIC_API_KEY") else "extractive"
            return self.summarizer
        from agentlab.chat import ClaudeSummarizer, ExtractiveSummarizer

        if isinstance(self.summarizer, ExtractiveSummarizer):
            return "extractive"
        if isinstance(self.summarizer, ClaudeSummarizer):
            return "claude"
        return getattr(self.summarizer, "__name__", type(self.summarizer).__name__)

    @property
    def needs_model(self) -> bool:
        """Whether replaying this policy needs a Claude client from the experiment (a summarizer or memory writer
        named ``"claude"``; a ``ClaudeSummarizer`` object brings its own client)."""
        named = self.compaction is not None and self.summarizer in ("claude", "auto") and \
            self.summarizer_name == "claude"
        return named or self.memory_writer == "claude" or bool(getattr(self.design, "needs_model", False))

    def describe(self) -> dict[str, Any]:
        """One flat row of the settings, for tables and Parquet metadata."""
        c = self.compaction
        return {
            "policy": self.name, "description": self.description,
            "threshold": None if c is None else c.threshold,
            "tail_token_budget": None if c is None else c.tail_token_budget,
            "protect_head": None if c is None else c.protect_head,
            "min_tail_messages": None if c is None else c.min_tail_messages,
            "summarizer": self.summarizer_name, "blocks": ",".join(b.label for b in self.blocks),
            "memory_writer": None if self.memory_writer is None else (
                self.memory_writer if isinstance(self.memory_writer, str) else "callable"),
            "search_mode": self.search.mode, "search_k": self.search.k,
            **({"design": None, "writer": None, "retrieval": None} if self.design is None else self.design.describe()),
        }


def _ladder(name: str, threshold: int, words: str) -> Policy:
    return Policy(name, f"Compacts above {threshold:,} estimated tokens and keeps the newest {threshold // 4:,} "
                        f"verbatim; extractive summaries, offline. {words}",
                  Compaction(threshold=threshold, tail_token_budget=threshold // 4))


DEFAULT_POLICIES: tuple[Policy, ...] = (
    Policy("none", "Never compacts: the whole conversation stays in the prompt verbatim (the reference point)."),
    _ladder("aggressive", 1_000, "About one dated session of working memory."),
    _ladder("moderate", 4_000, "A few sessions of working memory."),
    _ladder("gentle", 16_000, "Most of a LoCoMo conversation; compacts late, and rarely."),
)
"""``none`` and the offline compacting ladder, from aggressive to gentle (see the module docstring)."""

_MEMORY = Block("memory", "Facts about the people in this conversation worth remembering", 1_100)

POLICIES: dict[str, Policy] = {p.name: p for p in DEFAULT_POLICIES}
POLICIES.update({
    "aggressive-claude": Policy(
        "aggressive-claude", "The aggressive ladder rung with Claude writing the summaries (needs a key).",
        DEFAULT_POLICIES[1].compaction, summarizer="claude"),
    "moderate-memory": Policy(
        "moderate-memory", "The moderate rung plus a writable memory block that Claude updates with set_context "
        "after every dataset session (needs a key).",
        DEFAULT_POLICIES[2].compaction, blocks=(_MEMORY,), memory_writer="claude"),
})
"""Every named policy: the defaults plus variants that need ``ANTHROPIC_API_KEY``."""


def get_policy(name: str) -> Policy:
    """The named policy.

    Raises:
        UnknownPolicyError: No policy has this name (the message lists the known ones).
    """
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(name, list(POLICIES)) from None


def resolve_policies(policies: str | Policy | Iterable[str | Policy] | Mapping[str, Policy] | None) -> list[Policy]:
    """Policies from names, objects, a comma-separated string, or ``None`` (the defaults).

    Raises:
        UnknownPolicyError: A name is not known.
        InvalidArgumentError: No policy, or two with one name.
    """
    if policies is None:
        return list(DEFAULT_POLICIES)
    if isinstance(policies, Policy):
        policies = [policies]
    elif isinstance(policies, str):
        policies = [p.strip() for p in policies.split(",") if p.strip()]
    elif isinstance(policies, Mapping):
        policies = list(policies.values())
    out = [p if isinstance(p, Policy) else get_policy(str(p)) for p in policies]
    if not out:
        raise InvalidArgumentError("Give at least one policy, e.g. policies=['none', 'aggressive'].")
    names = [p.name for p in out]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise InvalidArgumentError(f"Two policies are named {duplicate!r}; give each a distinct name.")
    return out
