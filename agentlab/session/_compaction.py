"""Compaction and the token estimate of a session.

:class:`SessionCompaction` is the compaction half of a :class:`~agentlab.session.Session`: registering a
compaction function, the threshold that triggers it after an append, ``compact()`` itself and the records it
leaves, and the token estimate those decisions use. The session holds one and forwards its documented methods.

Invariants:

* ``compact()`` never changes a stored message; it adds one overlay row, widened to start where the
  overlay already on the branch starts, so a branch carries one growing overlay.
* An exception from the compaction function is not swallowed (a deliberate change from upstream): ``compact``
  returns None, stores an ``"error"`` compaction event and calls the ``on_compaction_error`` handler.
* Errors outside the function during an automatic compaction go to the same handler (or the agent's
  ``on_error``); the append that triggered it still succeeds, and a handler that raises is ignored.
* The estimate is cached per (leaf, tree generation) and extended incrementally by appends under the cached
  leaf; anything that changes an existing path bumps the tree generation and invalidates it.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agentlab.context import estimate_message_tokens, estimate_string_tokens, normalize_count
from agentlab.errors import CompactionError, InvalidArgumentError, InvalidMessageError, UnknownMessageError
from agentlab.session._compact_function import COMPACTION_PREFIX
from agentlab.session._messages import Appended, CompactionRecord

if TYPE_CHECKING:
    from agentlab.session._events import SessionEvents
    from agentlab.session._storage_contract import SessionStorage

__all__ = ["SessionCompaction"]

logger = logging.getLogger("agentlab.session")

Event = dict[str, Any]

_RESULT_KEYS = (("from_message_id", "fromMessageId"), ("to_message_id", "toMessageId"), ("summary", "summary"))


def _result_field(result: Any, snake: str, camel: str) -> Any:
    if isinstance(result, Mapping):
        return result.get(snake, result.get(camel))
    return getattr(result, snake, None)


class CompactionHost(Protocol):
    """What :class:`SessionCompaction` needs from its session (a :class:`~agentlab.session.Session`)."""

    storage: SessionStorage
    events: SessionEvents
    session_id: str
    token_counter: Callable[..., Any] | None
    system_prompt_provider: Callable[[], str | None] | None
    context_blocks_provider: Callable[[], list[Any]] | None

    def get_history(self, leaf_id: str | None = None) -> list[dict[str, Any]]: ...

    def _history(self, leaf_id: str | None, extra: Any = None) -> tuple[list[dict[str, Any]], list[str], bool]: ...

    def latest_leaf_id(self) -> str | None: ...


class SessionCompaction:
    """The compaction half of one :class:`~agentlab.session.Session`: its compaction function, threshold and
    error handler, ``compact()`` and the records it leaves, and the token estimate those decisions use.

    The session creates one and forwards its documented methods to it (``session.compact()``,
    ``session.compact_after(n)``, ``session.estimate_tokens()``...). It reads the session's history, tree and
    providers, and reports through the session's events and frames.

    Attributes:
        fn: The registered compaction function, or None.
        threshold: The automatic compaction threshold (tokens), or None.
        last_outcome: ``"compacted"``, ``"noop"`` or ``"error"``: how the last :meth:`compact` ended.
    """

    def __init__(self, session: CompactionHost) -> None:
        self.session = session
        self.fn: Callable[..., Any] | None = None
        self.fn_takes_counter = False
        self.threshold: int | float | None = None
        self.error_handler: Callable[[BaseException], Any] | None = None
        self.listeners: list[Callable[[Event], Any]] = []
        self.estimate_cache: tuple[str | None, int, int] | None = None  # (leaf, tree generation, tokens)
        self.noop_warned = False
        self.last_outcome = ""
        self.count = 0
        """Successful compactions run by this session object (message-change listeners compare it)."""

    # -- token estimate ------------------------------------------------------------------------

    def _system_prompt(self) -> str:
        provider = self.session.system_prompt_provider
        text = provider() if provider is not None else None
        return text if isinstance(text, str) else ""

    def estimate_tokens(self, leaf_id: str | None = None) -> int:
        """The session estimate: history tokens (overlays applied) plus system-prompt tokens, or the
        custom ``token_counter``'s answer, clamped to a non-negative int."""
        if self.session.token_counter is not None:
            blocks = self.session.context_blocks_provider() if self.session.context_blocks_provider is not None else []
            return normalize_count(self.session.token_counter(messages=self.session.get_history(leaf_id),
                                                      system_prompt=self._system_prompt(), context_blocks=blocks))
        return self._history_tokens(leaf_id) + estimate_string_tokens(self._system_prompt())

    def _history_tokens(self, leaf_id: str | None) -> int:
        leaf = leaf_id or self.session.latest_leaf_id()
        cache = self.estimate_cache
        if cache is not None and cache[0] == leaf and cache[1] == self.session.storage.generation:
            return cache[2]
        tokens = estimate_message_tokens(self.session.get_history(leaf))
        self.estimate_cache = (leaf, self.session.storage.generation, tokens)
        return tokens

    def advance_estimate(self, appended: list[Appended], stored: list[dict[str, Any]]) -> None:
        # Appending under the cached leaf adds exactly the new messages' tokens, unless an overlay names them.
        cache = self.estimate_cache
        if cache is None or cache[1] != self.session.storage.generation or not stored:
            return
        leaf, generation, tokens = cache
        overlays = self.session.storage.compactions()
        endpoints = {x for c in overlays for x in (c.from_message_id, c.to_message_id)}
        for a, message in zip([a for a in appended if not a.duplicate], stored):
            if a.parent_id != leaf or a.id in endpoints:
                self.estimate_cache = None
                return
            leaf, tokens = a.id, tokens + estimate_message_tokens([message])
        self.estimate_cache = (leaf, generation, tokens)

    def maybe_auto_compact(self, estimate: int) -> None:
        if self.threshold is None or self.fn is None or not estimate > self.threshold:
            return
        result = self.compact(trigger="automatic")
        if result is not None:
            self.noop_warned = False
        elif not self.noop_warned and self.last_outcome == "noop":  # errors were reported already
            self.noop_warned = True
            logger.warning("session %r: the estimate %d exceeds the threshold %d but compaction was a no-op.",
                           self.session.session_id, estimate, self.threshold)

    def failed(self, exc: BaseException) -> None:
        self.session.events.broadcast({"type": "cf_agent_session_error", "error": str(exc)})
        self.session.events.emit({"type": "error", "session_id": self.session.session_id, "error": str(exc),
                                  "exception": exc, "tokenEstimate": 0, "tokenThreshold": self.threshold})
        handler = self.error_handler
        if handler is None:
            self.session.events.report(exc)
            return
        try:
            handler(exc)
        except Exception as handler_exc:  # upstream swallows handler errors too
            logger.warning("session %r: on_compaction_error raised %r", self.session.session_id, handler_exc)

    # -- compaction ----------------------------------------------------------------------------

    def on_compaction(self, fn: Callable[..., Any]) -> None:
        """Register the compaction function ``fn(history[, token_counter=...]) -> {"from_message_id",
        "to_message_id", "summary"} | None`` (e.g. :func:`agentlab.session.create_compact_function`)."""
        if not callable(fn):
            raise TypeError("on_compaction needs a callable: fn(history) -> dict | None.")
        try:
            params = inspect.signature(fn).parameters.values()
            self.fn_takes_counter = any(p.name == "token_counter" or p.kind is p.VAR_KEYWORD for p in params)
        except (TypeError, ValueError):
            self.fn_takes_counter = False
        self.fn = fn

    def compact_after(self, threshold: int | float | None, *,
                      token_counter: Callable[..., Any] | None = None) -> None:
        """Compact automatically after a new append when the estimate is strictly above ``threshold``
        (``None`` turns it off). ``token_counter`` also replaces the session's counter.

        Raises:
            TypeError: ``threshold`` is not a number or None, or ``token_counter`` is not callable.
            InvalidArgumentError: ``threshold`` is NaN, infinite or negative; nothing changes.
        """
        if threshold is not None and (not isinstance(threshold, (int, float)) or isinstance(threshold, bool)):
            raise TypeError(f"threshold must be a number of tokens or None, not {threshold!r}.")
        if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
            # NaN compares false with every estimate, so it would silently never compact.
            raise InvalidArgumentError(f"threshold must be a finite number of tokens of 0 or more, not {threshold!r}; "
                                       "pass None to turn automatic compaction off.")
        if token_counter is not None and not callable(token_counter):
            raise TypeError(f"token_counter must be callable (messages=, system_prompt=, context_blocks=), "
                            f"not {token_counter!r}.")
        self.threshold = threshold
        if token_counter is not None:
            self.session.token_counter = token_counter

    def on_compaction_error(self, handler: Callable[[BaseException], Any]) -> None:
        """Call ``handler(exc)`` when compaction fails, including when the summarize function raises."""
        self.error_handler = handler

    def get_compactions(self) -> list[CompactionRecord]:
        """Stored overlays visible to this session, oldest first."""
        return self.session.storage.compactions()

    def get_compaction_events(self) -> list[dict[str, Any]]:
        """Compaction runs that stored nothing (``kind`` ``"error"`` or ``"noop"``), oldest first."""
        return self.session.storage.compaction_events()

    def add_compaction(self, summary: str, from_message_id: str, to_message_id: str) -> CompactionRecord:
        """Store an overlay replacing ``from .. to`` with ``summary`` on every read (upstream ``addCompaction``).

        Raises:
            UnknownMessageError: An id is not a message of this session.
            InvalidMessageError: ``summary`` is not a string.
        """
        if not isinstance(summary, str):
            raise InvalidMessageError(f"A compaction summary must be a str, not {type(summary).__name__}.")
        for mid in (from_message_id, to_message_id):
            if not isinstance(mid, str) or not self.session.storage.has_message(mid):
                raise UnknownMessageError(str(mid))
        return self.session.storage.add_compaction(summary, from_message_id, to_message_id)

    def compact(self, leaf_id: str | None = None, *, trigger: str = "manual") -> dict[str, Any] | None:
        """Summarise part of a branch into an overlay (an error in the summarize function is recorded, not swallowed).

        Args:
            leaf_id: The branch to compact (latest leaf if None).
            trigger: ``"manual"`` or ``"automatic"`` (recorded with the compaction).

        Returns:
            ``{"id", "from_message_id", "to_message_id", "summary"}`` with ``from`` widened to the start of the
            overlay already on this branch, or None when the function raised, returned None, or named a ``to``
            that is not on the branch.

        Raises:
            CompactionError: No compaction function is registered.
        """
        fn = self.fn
        if fn is None:
            raise CompactionError("No compaction function registered. Call on_compaction() first.")
        if trigger not in ("manual", "automatic"):
            raise ValueError(f"trigger must be 'manual' or 'automatic', not {trigger!r}.")
        leaf = leaf_id or self.session.latest_leaf_id()
        before = self.estimate_tokens(leaf)
        self.session.events.status("compacting", estimate=before, phase="compacting", trigger=trigger, leaf_id=leaf)
        history, path, _ = self.session._history(leaf)
        try:
            raw = fn(history, token_counter=self.session.token_counter) if self.fn_takes_counter else fn(history)
            if raw is not None and not all(isinstance(_result_field(raw, *k), str) for k in _RESULT_KEYS):
                raise CompactionError(f"The compaction function returned {raw!r}; return None or a dict with "
                                      "string from_message_id, to_message_id and summary.")
        except Exception as exc:
            self.last_outcome = "error"
            self.session.storage.record_compaction_event("error", trigger=trigger, leaf_id=leaf,
                         tokens_before=before, error=exc)
            self.failed(exc)
            return None
        ids = [m["id"] for m in history]
        if raw is None or _result_field(raw, "to_message_id", "toMessageId") not in ids:
            self.last_outcome = "noop"
            self.session.storage.record_compaction_event("noop", trigger=trigger, leaf_id=leaf,
                         tokens_before=before)
            self.session.events.status("compaction_skipped", estimate=before, trigger=trigger, leaf_id=leaf)
            return None
        summary = _result_field(raw, "summary", "summary")
        to_id = _result_field(raw, "to_message_id", "toMessageId")
        id_set = set(ids)
        existing = [c for c in self.session.storage.compactions()
                    if COMPACTION_PREFIX + c.id in id_set
                    or (c.from_message_id in id_set and c.to_message_id in id_set)]
        from_id = existing[0].from_message_id if existing else _result_field(raw, "from_message_id", "fromMessageId")
        pending = {"id": "pending", "summary": summary, "from_message_id": from_id, "to_message_id": to_id}
        after_history = self.session._history(leaf, extra=pending)[0]
        after = self._estimate_of(after_history)
        covered = path.index(to_id) - path.index(from_id) + 1 if from_id in path and to_id in path else None
        record = self.session.storage.add_compaction(summary, from_id, to_id, leaf_id=leaf,
                                          messages_covered=covered, tokens_before=before, tokens_after=after,
                                          trigger=trigger)
        self.noop_warned = False
        self.last_outcome = "compacted"
        self.count += 1
        event = {"type": "compacted", "session_id": self.session.session_id, "compaction": record.to_dict()}
        self.notify_compacted(event)
        self.session.events.changed({"type": "compact"})
        events = self.session.events
        events.status("compacted", estimate=self.estimate_tokens() if events.needs_estimate() else 0,
                      frame_extra={"compacted": {"tokensBefore": before}}, compaction=record.to_dict(),
                      tokensBefore=before, tokensAfter=after)
        return {"id": record.id, "from_message_id": from_id, "to_message_id": to_id, "summary": summary}

    def _estimate_of(self, history: list[dict[str, Any]]) -> int:
        if self.session.token_counter is not None:
            blocks = self.session.context_blocks_provider() if self.session.context_blocks_provider is not None else []
            return normalize_count(self.session.token_counter(messages=history, system_prompt=self._system_prompt(),
                                                      context_blocks=blocks))
        return estimate_message_tokens(history) + estimate_string_tokens(self._system_prompt())

    def notify_compacted(self, event: Event) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception as exc:
                self.session.events.report(exc)
