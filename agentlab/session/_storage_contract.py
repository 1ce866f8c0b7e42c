"""The storage contract of a session's message tree: what a :class:`~agentlab.session.Session` asks of it.

A :class:`SessionStorage` holds the messages of **one** session (upstream's ``SessionProvider`` after
``forSession``): parent-pointer rows, the latest leaf, compaction overlay rows and the record of compaction runs
that stored nothing. The session does everything else on top of it: overlays applied on read, the token
estimate, events and frames, context blocks. Two implementations pass one conformance suite
(``tests/test_storage_conformance.py``):

* :class:`~agentlab.session.duckdb._storage.DuckDBSessionStorage`: the agent's DuckDB file (the default);
* :class:`~agentlab.session.InMemorySessionStorage`: plain Python dicts, for tests and as the
  reference the DuckDB one is checked against.

Full-text search is an optional capability (upstream's ``searchMessages?``): a storage that can search also
satisfies :class:`SearchableStorage`; ``Session.search`` on one that cannot raises
:class:`~agentlab.errors.SessionError`. A storage that can list its whole tree's shape at once (the branch tree
widget draws it) also satisfies :class:`OutlineStorage`.

Contract, beyond the signatures (each point has a conformance test):

* Messages are validated and serialised as :func:`agentlab.session._messages.prepare_message` does, and a read
  returns a fresh parse of what was stored (callers may mutate it).
* ``append`` is idempotent by id: an id already stored is a duplicate, nothing changes, the first content wins.
  ``parent_id`` omitted (:data:`~agentlab.session.UNSET`) hangs the message under the latest leaf,
  ``None`` makes a root, an id that is not a message here raises :class:`~agentlab.errors.UnknownMessageError`.
* ``append_many`` checks every message before it stores any: a bad one stores nothing.
* The latest leaf is the newest (by append order) message without a child; deleting does not re-parent children,
  so a path stops at the first missing ancestor.
* A path longer than ``max_depth`` is cut on the root side to its newest ``max_depth`` messages, and ``path`` and
  ``read_path`` say it was cut (a path of exactly ``max_depth`` messages is not cut).
* ``update`` of an id not stored raises :class:`~agentlab.errors.UnknownMessageError`; the role used by
  ``row_stats`` and role filters stays the one appended.
* ``generation`` changes whenever a stored path can read differently (update, delete, clear, a new overlay) and
  stays the same across plain appends; callers cache per (leaf, generation).
* ``after_commit(fn)`` runs ``fn`` once the current write is durable (at once when no transaction is open).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from agentlab.session._messages import DEFAULT_MAX_DEPTH, Appended, CompactionRecord, RowStat, SearchHit

__all__ = ["OutlineStorage", "SearchableStorage", "SessionStorage"]


@runtime_checkable
class SessionStorage(Protocol):
    """The message tree of one session. See the module docstring for the contract."""

    session_id: str
    """The session this storage holds (``""`` is the default session)."""

    lock: Any
    """A re-entrant lock; the session holds it around reads that must see one state (path, rows, overlays)."""

    @property
    def generation(self) -> int:
        """A number that changes whenever a stored path may read differently (plain appends leave it)."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after the current write commits (at once when none is open)."""
        ...

    # -- reads -------------------------------------------------------------------------------------------------

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        """The stored message, or None."""
        ...

    def read(self, ids: Iterable[str]) -> list[dict[str, Any]]:
        """The stored messages of ``ids``, in that order, skipping ids not stored."""
        ...

    def has_message(self, message_id: str) -> bool:
        """Whether ``message_id`` is a message of this session."""
        ...

    def path_ids(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
        """Ids root -> leaf (the latest leaf when ``leaf_id`` is falsy; ``[]`` for an id not stored), cut to the
        newest ``max_depth``."""
        ...

    def path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> tuple[list[str], bool]:
        """:meth:`path_ids`, and whether the path is longer than ``max_depth`` (so it was cut on the root side)."""
        ...

    def read_path(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH
                  ) -> tuple[list[str], list[dict[str, Any]], bool]:
        """:meth:`path`'s ids, their stored messages (as :meth:`read` of them) and whether the path was cut, in one
        read."""
        ...

    def children_ids(self, message_id: str) -> list[str]:
        """The children of ``message_id``, oldest first."""
        ...

    def latest_leaf_id(self) -> str | None:
        """The newest message without a child, or None when the session is empty."""
        ...

    def row_stats(self, leaf_id: str | None = None, *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[RowStat]:
        """``(id, role, UTF-8 bytes of the stored JSON)`` per message on the path, root first."""
        ...

    # -- writes ------------------------------------------------------------------------------------------------

    def append(self, message: Mapping[str, Any], parent_id: Any = ...) -> tuple[Appended, dict[str, Any]]:
        """Store one message; returns what happened and the message as stored."""
        ...

    def append_many(self, messages: Iterable[Mapping[str, Any]],
                    parent_id: Any = ...) -> tuple[list[Appended], list[dict[str, Any]]]:
        """Store messages chained one after another (a ``"parent_id"`` key hangs one elsewhere), all or none;
        returns one :class:`Appended` per input and the new messages as stored."""
        ...

    def update(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the stored content of the message with this id; returns it as stored."""
        ...

    def delete(self, ids: Iterable[str]) -> list[str]:
        """Delete these messages (ids not stored are ignored); returns the ids deleted."""
        ...

    def clear(self) -> int:
        """Delete every message and overlay of the session; returns how many messages were deleted."""
        ...

    # -- compaction overlays and runs --------------------------------------------------------------------------

    def compactions(self) -> list[CompactionRecord]:
        """The stored overlays, oldest first."""
        ...

    def add_compaction(self, summary: str, from_message_id: str, to_message_id: str,
                       **details: Any) -> CompactionRecord:
        """Store an overlay (details: ``leaf_id``, ``messages_covered``, ``tokens_before``, ``tokens_after``,
        ``trigger``); the ids are not checked here."""
        ...

    def record_compaction_event(self, kind: str, *, trigger: str, leaf_id: str | None = None,
                                tokens_before: int | None = None, error: BaseException | None = None) -> None:
        """Record a compaction run that stored nothing (``kind`` ``"error"`` or ``"noop"``)."""
        ...

    def compaction_events(self) -> list[dict[str, Any]]:
        """The recorded runs, oldest first: ``seq, kind, trigger, leaf_id, tokens_before, error_type, error,
        created_at``."""
        ...


@runtime_checkable
class SearchableStorage(Protocol):
    """A storage that can also search its messages (BM25 with SQLite FTS5's tokenizer and ranking)."""

    def search(self, query: str, *, mode: str = "phrase", limit: int = 20, role: str | None = None,
               branch: str | None = None, all_sessions: bool = False,
               max_depth: int = DEFAULT_MAX_DEPTH) -> list[SearchHit]:
        """Hits best first; see :meth:`agentlab.session.Session.search` for the arguments."""
        ...


@runtime_checkable
class OutlineStorage(Protocol):
    """A storage that can list the shape of its whole tree at once, without reading a message."""

    def nodes(self) -> list[tuple[str, str | None, str, int]]:
        """``(id, parent_id, role, order)`` of every message (a fork's shared path included), ``order`` increasing
        with append order."""
        ...
