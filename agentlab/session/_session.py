"""The Session: one conversation of an agent as a branching message tree, with search, events and compaction.

A :class:`Session` is a facade over the storage of one session's message tree (a
:class:`~agentlab.session.SessionStorage`: the agent's DuckDB file by default, or any implementation, such as
:class:`~agentlab.session.InMemorySessionStorage`). It re-creates upstream's ``Session``: appends
that branch, history read through non-destructive compaction overlays, full-text search, a token estimate with an
automatic compaction trigger, and status events (:mod:`agentlab.session._events`).

Invariants:

* Stored messages are never changed by compaction; overlays are applied on every read.
* Events and agent frames are sent only after the write committed (deferred to the outer transaction's commit
  when one is open), and a subscriber that raises never breaks the write: its error goes to the agent's
  ``on_error`` (or the ``agentlab.session`` logger).
* An exception from the compaction function is not swallowed (a deliberate change from upstream): ``compact``
  returns None, stores a compaction-error event and calls the ``on_compaction_error`` handler with it.
* The token estimate is computed only when someone can see it (subscribers, agent connections) or when the
  automatic trigger needs it; along an unbranched append it is updated incrementally, not recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentlab.context import ContextBlock, ContextBlocks
from agentlab.errors import SessionError
from agentlab.session import _conversations as conversations
from agentlab.session._compact_function import truncate_older_messages
from agentlab.session._compaction import SessionCompaction
from agentlab.session._context import SessionContext
from agentlab.session._events import SessionEvents
from agentlab.session._history import check_overflow, history_path, read_history, recent_history
from agentlab.session._intake import Intake
from agentlab.session._messages import (
    DEFAULT_MAX_DEPTH,
    UNSET,
    Appended,
    CompactionRecord,
    History,
    RecentHistory,
    RowStat,
    SearchHit,
)
from agentlab.session._storage_contract import SearchableStorage
from agentlab.session.duckdb import SessionFrames, resolve_owner

__all__ = ["UNSET", "SearchHit", "Session"]

Event = dict[str, Any]


class Session(SessionFrames):
    """One conversation (session id) of an agent: a branching message tree with search and compaction.

    Args:
        agent_or_store: An :class:`~agentlab.agent.Agent` (frames are broadcast to its connections), a bare
            :class:`~agentlab.store.Store`, or a :class:`~agentlab.session.SessionStorage` (then context
            blocks need explicit providers and nothing is broadcast, as upstream with a ``SessionProvider``).
        session_id: Which session of the agent; ``""`` is the default one (a storage knows its own).
        token_counter: Replaces the built-in estimate: called as ``counter(messages=..., system_prompt=...,
            context_blocks=...)``; its answer is clamped by :func:`~agentlab.context._tokens.normalize_count`.
        system_prompt_provider: Returns the system prompt text counted in the estimate (default: none, "").
        max_depth: Longest path a history read walks (default :data:`~agentlab.session._messages.DEFAULT_MAX_DEPTH`).
        on_overflow: What :meth:`get_history` does with a longer branch: ``"warn"`` (default), ``"raise"`` or
            ``"truncate"`` (see :data:`~agentlab.session._messages.OVERFLOW_MODES`).

    Attributes:
        token_counter, system_prompt_provider: As above; the context layer sets them.
        context_blocks_provider: Returns the loaded context blocks passed to a custom ``token_counter``.
    """

    def __init__(
        self,
        agent_or_store: Any,
        session_id: str = "",
        *,
        token_counter: Callable[..., Any] | None = None,
        system_prompt_provider: Callable[[], str | None] | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        on_overflow: str = "warn",
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str ('' for the default session), not {session_id!r}.")
        if not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be a positive int, not {max_depth!r}.")
        check_overflow(on_overflow)
        self.agent, self.store, self.storage = resolve_owner(agent_or_store, session_id)
        self.session_id = self.storage.session_id
        self.tree = getattr(self.storage, "tree", None)
        """The agent's :class:`~agentlab.session.duckdb._tree.MessageTree` when stored in DuckDB, else None."""
        self.token_counter = token_counter
        self.system_prompt_provider = system_prompt_provider
        self.context_blocks_provider: Callable[[], list[Any]] | None = None
        self.max_depth = max_depth
        self.on_overflow = on_overflow
        self.events = SessionEvents(self)
        """Subscribers, message-change listeners and agent frames; the event methods below forward to it."""
        self.compaction = SessionCompaction(self)
        """The session's compaction function, threshold and token estimate; the methods below forward to it."""
        self.session_context = SessionContext(self)
        """The session's context blocks and their wiring; the context methods below forward to it."""

    @classmethod
    def create(cls, agent: Any, session_id: str = "", **options: Any) -> Session:
        """Builder entry point (upstream ``Session.create(agent_or_provider)``): chain ``.on_compaction(fn)``,
        ``.compact_after(n)`` and ``.on_compaction_error(handler)`` on the result."""
        return cls(agent, session_id, **options)

    def __repr__(self) -> str:
        owner = self.agent.name if self.agent is not None else self.store.path if self.store else self.storage
        return f"<Session {self.session_id!r} of {owner!r}>"

    # -- messages ------------------------------------------------------------------------------

    def append_message(self, message: Mapping[str, Any], parent_id: Any = UNSET) -> Appended:
        """Append one message.

        Args:
            message: ``{"id", "role", "parts", "created_at"?}``; ``created_at`` is filled in if missing. An OpenAI
                or Anthropic message (``{"role", "content"}``) is converted (:mod:`agentlab.session._formats`).
            parent_id: Omitted: after the latest leaf. ``None``: a new root. An id: under that message (a branch).

        Returns:
            What happened; ``duplicate=True`` if the id already existed (nothing changed: the first content wins,
            with a :class:`~agentlab.errors.DuplicateMessageWarning` when the content differs). An unknown role
            gives an :class:`~agentlab.errors.UnknownRoleWarning`.

        Raises:
            InvalidMessageError: Bad message (nothing stored), or the id belongs to another session.
            UnknownMessageError: ``parent_id`` is not a message of this session.
        """
        intake = Intake()
        appended, stored = self.storage.append(intake.take(message), parent_id)
        intake.check(self.storage, [appended], stacklevel=2)
        self.storage.after_commit(lambda: self.events.after_append(
            [appended], [stored] if not appended.duplicate else [], intake.given))
        return appended

    def append_messages(self, messages: Iterable[Mapping[str, Any]], parent_id: Any = UNSET) -> list[Appended]:
        """Append many messages in one transaction, chained one after the other after ``parent_id``.

        A message may carry its own ``"parent_id"`` key (removed before storing) to hang it elsewhere, e.g. under
        an earlier message of the same list; the chain continues from it. Duplicates are skipped (first wins).

        Raises:
            InvalidMessageError, UnknownMessageError: As :meth:`append_message`; nothing is stored.
        """
        intake = Intake()
        results, stored = self.storage.append_many(intake.stream(messages), parent_id)
        intake.check(self.storage, results, stacklevel=2)
        self.storage.after_commit(lambda: self.events.after_append(results, stored, intake.given))
        return results

    def get_history(self, leaf_id: str | None = None, *, on_overflow: str | None = None) -> History:
        """The path root -> leaf with compaction overlays applied.

        Args:
            leaf_id: Any message of this session (it may be interior); falsy means the latest leaf.
            on_overflow: For a branch longer than ``max_depth``: ``"warn"``, ``"raise"`` or ``"truncate"``
                (default: the session's ``on_overflow``, itself ``"warn"`` unless set).

        Returns:
            The messages, root first, as a :class:`~agentlab.session._messages.History` (a list whose ``truncated``
            says whether the branch was cut to its newest ``max_depth`` messages); ``[]`` for an empty session, or
            for an unknown id (as upstream, with an :class:`~agentlab.errors.UnknownLeafWarning`).

        Raises:
            HistoryTooDeepError: The branch is longer than ``max_depth`` and ``on_overflow`` is ``"raise"``.
        """
        return read_history(self, leaf_id, self.on_overflow if on_overflow is None else check_overflow(on_overflow))

    def _history(self, leaf_id: str | None, extra: Any = None) -> tuple[list[dict[str, Any]], list[str], bool]:
        return history_path(self, leaf_id, extra)

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        """The stored message (no overlay), or None if this session has no such message."""
        return self.storage.get_message(message_id)

    def get_branches(self, message_id: str) -> list[dict[str, Any]]:
        """The children of ``message_id`` in this session, oldest first: the alternatives at that point."""
        return self.storage.read(self.storage.children_ids(message_id))

    def latest_leaf_id(self) -> str | None:
        """Id of the current tip: the newest message with no child."""
        return self.storage.latest_leaf_id()

    def latest_leaf(self) -> dict[str, Any] | None:
        """The current tip message (no overlay), or None for an empty session."""
        leaf = self.latest_leaf_id()
        return None if leaf is None else self.get_message(leaf)

    def path_length(self, leaf_id: str | None = None) -> int:
        """Stored messages on the path to ``leaf_id`` (latest leaf if falsy), overlays not applied; at most
        ``max_depth``."""
        return len(self.storage.path_ids(leaf_id, max_depth=self.max_depth))

    def get_history_row_stats(self, leaf_id: str | None = None) -> list[RowStat]:
        """``(id, role, bytes)`` per stored message on the path, without reading contents."""
        return self.storage.row_stats(leaf_id, max_depth=self.max_depth)

    def get_recent_history(self, max_bytes: int, min_recent: int = 1, *,
                           leaf_id: str | None = None) -> RecentHistory:
        """The newest messages of the path that fit in ``max_bytes`` of stored JSON.

        At least ``max(1, min_recent)`` messages are returned even if they exceed the budget. Overlays apply only
        inside the window (an overlay starting before it is not applied). A branch longer than ``max_depth`` counts
        as cut: ``truncated`` is True and ``total_content_bytes`` covers its newest ``max_depth`` rows.
        """
        return recent_history(self, max_bytes, min_recent, leaf_id)

    def get_micro_compacted_history(self, leaf_id: str | None = None, *, keep_recent: int = 4,
                                    max_tool_output_chars: int = 500,
                                    max_text_chars: int = 10000) -> list[dict[str, Any]]:
        """:meth:`get_history` with older tool outputs and long texts shrunk for a model call.

        Storage is unchanged; see :func:`agentlab.session.truncate_older_messages`.
        """
        return truncate_older_messages(self.get_history(leaf_id), keep_recent, max_tool_output_chars,
                                       max_text_chars)

    def update_message(self, message: Mapping[str, Any]) -> None:
        """Replace the stored content of the message with this id (role and parent stay), and re-index it.

        Raises:
            UnknownMessageError: This session stores no message with that id (upstream does nothing; an error
                is safer, since the caller meant to change something).
            ForkedHistoryError: The message is shared with a fork.
        """
        stored = self.storage.update(message)

        def done() -> None:
            self.events.status("updated", ids=[stored["id"]])
            self.events.changed({"type": "update", "message": stored})

        self.storage.after_commit(done)

    def rewrite_message(self, message: Mapping[str, Any]) -> None:
        """:meth:`update_message` without the status event, frame and token estimate (upstream's
        ``internal_rewriteMessage``): for maintenance passes over many rows. Message-change listeners are told.

        Raises:
            UnknownMessageError, ForkedHistoryError: As :meth:`update_message`.
        """
        stored = self.storage.update(message)
        self.storage.after_commit(lambda: self.events.changed({"type": "update", "message": stored}))

    def delete_messages(self, ids: Iterable[str]) -> int:
        """Delete messages of this session (unknown ids are ignored); returns how many were deleted.

        Children are not re-parented (upstream): deleting an interior message cuts its descendants' history.
        """
        if isinstance(ids, str):
            ids = [ids]
        deleted = self.storage.delete(ids)

        def done() -> None:
            self.events.status("deleted", ids=deleted)
            self.events.changed({"type": "delete", "message_ids": deleted})

        self.storage.after_commit(done)
        return len(deleted)

    def clear_messages(self) -> None:
        """Delete every message and overlay of this session; ``on_compacted`` listeners are told."""
        self.storage.clear()
        self.compaction.estimate_cache = None

        def done() -> None:
            self.compaction.notify_compacted({"type": "cleared", "session_id": self.session_id})
            self.events.status("cleared")
            self.events.changed({"type": "clear"})

        self.storage.after_commit(done)

    # -- conversations in chat formats (:mod:`agentlab.session._conversations`) ------------------------------------

    import_conversation = conversations.import_conversation
    export_conversation = conversations.export_conversation

    # -- search --------------------------------------------------------------------------------

    def search(self, query: str, *, mode: str = "phrase", limit: int = 20, role: str | None = None,
               branch: str | None = None, all_sessions: bool = False) -> list[SearchHit]:
        """BM25-ranked full-text search over message texts.

        Args:
            query: Words; FTS syntax characters are plain text. Empty or blank gives ``[]``.
            mode: ``"phrase"`` (upstream default: the words adjacent, in order), ``"all"`` or ``"any"``.
            limit: Most hits returned.
            role: Only messages with this role.
            branch: A leaf id: only messages on the path to it.
            all_sessions: Search every session of the agent (else this session, all its branches).

        Returns:
            Hits, best first, each with id, role, text, snippet, score, session and whether it is on the
            current branch of its session.
        """
        if not isinstance(self.storage, SearchableStorage):
            raise SessionError(f"This session's storage ({type(self.storage).__name__}) does not support search; "
                               "use one that has search(), such as the default DuckDB storage.")
        return self.storage.search(query, mode=mode, limit=limit, role=role, branch=branch,
                                   all_sessions=all_sessions, max_depth=self.max_depth)

    # -- events (forwarded to :attr:`events`) -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` for every session event; returns a function that unsubscribes.

        Events are dicts with ``type`` (``"appended"``, ``"updated"``, ``"deleted"``, ``"cleared"``,
        ``"compacting"``, ``"compacted"``, ``"compaction_skipped"``, ``"error"``), ``session_id``,
        ``tokenEstimate`` and ``tokenThreshold``, plus per-type details (``ids``, ``compaction``, ``error``...).
        """
        return self.events.subscribe(callback)

    def on_messages_changed(self, listener: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``listener(event)`` after every change to the stored messages (upstream's
        ``internal_onMessagesChanged``, for hosts that keep their own copy); returns an unsubscribe function.

        Events: ``{"type": "append", "message", "parent_id", "inserted"}``, ``{"type": "update", "message"}``,
        ``{"type": "delete", "message_ids"}``, ``{"type": "clear"}``, ``{"type": "compact"}`` (an append that set
        off an automatic compaction is announced by ``compact`` alone: re-read the history).
        """
        return self.events.on_messages_changed(listener)

    def on_compacted(self, listener: Callable[[Event], Any]) -> Callable[[], None]:
        """Call ``listener(event)`` after each successful compaction and after :meth:`clear_messages` (the
        context layer refreshes its frozen system prompt there). Returns an unsubscribe function."""
        listeners = self.compaction.listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    def _report(self, exc: BaseException) -> None:
        self.events.report(exc)

    # -- compaction (forwarded to :attr:`compaction`) ---------------------------------------------------------

    def on_compaction(self, fn: Callable[..., Any]) -> Session:
        """Register the compaction function ``fn(history[, token_counter=...]) -> {"from_message_id",
        "to_message_id", "summary"} | None`` (e.g. :func:`agentlab.create_compact_function`); returns the session."""
        self.compaction.on_compaction(fn)
        return self

    def compact_after(self, threshold: int | float | None, *,
                      token_counter: Callable[..., Any] | None = None) -> Session:
        """Compact automatically after a new append when the estimate is strictly above ``threshold`` tokens
        (``None`` turns it off); ``token_counter`` also replaces the session's counter. Returns the session.

        Raises:
            TypeError: ``threshold`` is not a number or None, or ``token_counter`` is not callable.
            InvalidArgumentError: ``threshold`` is NaN, infinite or negative; nothing changes.
        """
        self.compaction.compact_after(threshold, token_counter=token_counter)
        return self

    def on_compaction_error(self, handler: Callable[[BaseException], Any]) -> Session:
        """Call ``handler(exc)`` when compaction fails, including when the summarize function raises."""
        self.compaction.on_compaction_error(handler)
        return self

    @property
    def token_threshold(self) -> int | float | None:
        """The automatic compaction threshold, or None."""
        return self.compaction.threshold

    def estimate_tokens(self, leaf_id: str | None = None) -> int:
        """History tokens (overlays applied) plus system-prompt tokens by upstream's heuristic, or the custom
        ``token_counter``'s answer, clamped to a non-negative int."""
        return self.compaction.estimate_tokens(leaf_id)

    def compact(self, leaf_id: str | None = None, *, trigger: str = "manual") -> dict[str, Any] | None:
        """Summarise part of a branch into an overlay; see :meth:`SessionCompaction.compact`."""
        return self.compaction.compact(leaf_id, trigger=trigger)

    def add_compaction(self, summary: str, from_message_id: str, to_message_id: str) -> CompactionRecord:
        """Store an overlay replacing ``from .. to`` with ``summary`` on every read."""
        return self.compaction.add_compaction(summary, from_message_id, to_message_id)

    def get_compactions(self) -> list[CompactionRecord]:
        """Stored overlays visible to this session, oldest first."""
        return self.compaction.get_compactions()

    def get_compaction_events(self) -> list[dict[str, Any]]:
        """Compaction runs that stored nothing (``kind`` ``"error"`` or ``"noop"``), oldest first."""
        return self.compaction.get_compaction_events()

    # -- context (forwarded to :attr:`session_context` and its blocks) ------------------------------------------

    @property
    def context(self) -> ContextBlocks:
        """The session's :class:`~agentlab.context.ContextBlocks` (created on first use)."""
        return self.session_context.blocks

    def with_context(self, label: str, provider: Any = None, description: str | None = None,
                     max_tokens: int | None = None) -> Session:
        """Add a context block (builder); returns the session.

        Args:
            label: The block's name.
            provider: Any provider (:mod:`agentlab.context._providers`); None stores a writable block in the agent.
            description: Shown in the prompt header and the ``set_context`` description.
            max_tokens: Budget enforced on writes.

        Raises:
            ContextError: ``Block "x" already exists``.
        """
        self.session_context.add(label, provider, description, max_tokens)
        return self

    def with_cached_prompt(self, store: Any = None) -> Session:
        """Keep the frozen prompt across restarts (builder), in ``store`` or in the agent; returns the session."""
        self.session_context.cache_prompt(store)
        return self

    def add_context(self, label: str, provider: Any = None, description: str | None = None,
                    max_tokens: int | None = None) -> ContextBlock | None:
        """Add a block now and load it (the frozen prompt is not refreshed)."""
        self.session_context.wire()
        return self.context.add_context(label, provider, description=description, max_tokens=max_tokens)

    def remove_context(self, label: str) -> bool:
        """Remove a block (the frozen prompt is not refreshed)."""
        return self.context.remove_context(label)

    def tools(self) -> list[dict[str, Any]]:
        """Anthropic tool definitions for the context blocks (loads them on first use)."""
        return self.context.tools()

    def run_tool(self, name: str, input: Any) -> str:
        """Execute a context tool call; never raises (errors are ``Error: ...`` strings)."""
        try:
            return self.context.run_tool(name, input)
        except Exception as exc:
            return f"Error: {exc}"

    def freeze_system_prompt(self) -> str:
        """The frozen system prompt (rendered, and persisted with ``with_cached_prompt``, on first use)."""
        return self.context.freeze_system_prompt()

    def refresh_system_prompt(self) -> str:
        """Reload every block and re-render the prompt (also done after compaction and ``clear_messages``)."""
        return self.context.refresh_system_prompt()

    @property
    def system_prompt(self) -> str:
        """The frozen system prompt (same as :meth:`freeze_system_prompt`)."""
        return self.freeze_system_prompt()

    def get_context_block(self, label: str) -> ContextBlock | None:
        """The loaded block ``label``, or None; does not load."""
        return self.context.get_context_block(label) if self.session_context.created else None

    def get_context_blocks(self) -> list[ContextBlock]:
        """The loaded blocks in order ([] until something loads); does not load."""
        return self.context.get_context_blocks() if self.session_context.created else []

    def set_block(self, label: str, content: str) -> ContextBlock:
        """Replace a writable block's text; see :meth:`ContextBlocks.set_block`."""
        return self.context.set_block(label, content)

    def append_to_block(self, label: str, content: str) -> ContextBlock:
        """Append to a writable block; see :meth:`ContextBlocks.append_to_block`."""
        return self.context.append_to_block(label, content)

    def set_skill(self, label: str, key: str, content: str, description: str | None = None) -> ContextBlock:
        """Store a skill document; see :meth:`ContextBlocks.set_skill`."""
        return self.context.set_skill(label, key, content, description)

    def set_search_entry(self, label: str, key: str, content: str) -> ContextBlock:
        """Store a searchable entry; see :meth:`ContextBlocks.set_search_entry`."""
        return self.context.set_search_entry(label, key, content)

    def load_skill(self, label: str, key: str) -> str | None:
        """Load a skill document and mark it loaded; see :meth:`ContextBlocks.load_skill`."""
        return self.context.load_skill(label, key)

    def unload_skill(self, label: str, key: str) -> bool:
        """Unload a skill and replace its text in history by a marker (the text stays in storage)."""
        return self.context.unload_skill(label, key)

    def unloaded_skill_text(self, label: str, key: str) -> str | None:
        """The text that ``unload_context`` last removed from this conversation for ``label:key``, or None."""
        return self.session_context.unloaded_skill_text(label, key)

