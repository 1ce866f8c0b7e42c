"""Several sessions in one agent: create, list, rename, delete, search across them, and fork.

A session is a row of the ``sessions`` table plus the messages stored under its id. The default session ``""``
needs no row, and neither does any :class:`~agentlab.session.Session` built by hand; the manager is what gives
sessions names, usage counters and a listing.

**Forks share, never copy** (a deliberate change from upstream, which copied the history with new ids).
``fork(session, at_message_id, name)`` writes one ``sessions`` row with ``parent_session_id``,
``fork_message_id`` and its own ``seq``, and no message rows. The fork reads its parent's path up to the fork
point plus its own messages; its first append goes under the fork point. It sees its own overlays and those of
its parent stored before the fork; later messages and overlays of either side are invisible to the other.
Rows shared with a fork are frozen (updating, deleting or clearing them raises
:class:`~agentlab.errors.ForkedHistoryError`) until the fork is deleted.

Invariants: ``list()`` is ordered by ``updated_at`` (newest first, ties by creation order); appends, updates,
deletes, clears, renames and usage updates of a session with a row bump its ``updated_at``.
"""

from __future__ import annotations

import builtins
import copy
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentlab._checks import INT64_MAX, check_amount, check_count, check_text
from agentlab.errors import ForkedHistoryError, InvalidArgumentError, UnknownMessageError, UnknownSessionError
from agentlab.session._messages import SearchHit
from agentlab.session._session import Session
from agentlab.session.duckdb import delete_events, search_tree, tree_of
from agentlab.store import Store, clock_of, validate_name

__all__ = ["SESSION_SEARCH_TOOL", "SessionInfo", "SessionManager"]

SESSION_SEARCH_TOOL: dict[str, Any] = {
    "name": "session_search",
    "description": "Search past conversations for relevant context. Searches across all sessions.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"}},
                     "required": ["query"]},
}
"""Upstream's ``SessionManager.tools()`` tool, as an Anthropic tool definition (description and schema verbatim)."""

_COLUMNS = ("id, name, parent_session_id, fork_message_id, model, source, input_tokens, output_tokens, "
            "estimated_cost, end_reason, created_at, updated_at, seq")


@dataclass(frozen=True)
class SessionInfo:
    """A ``sessions`` row.

    Attributes:
        id: The session id (a random hex UUID unless given).
        name: Display name.
        parent_session_id: Where it came from (a fork's parent, or lineage given at creation).
        fork_message_id: For a fork, the last shared message; None otherwise.
        model, source: Free-form labels (upstream's columns).
        input_tokens, output_tokens, estimated_cost: Usage added with :meth:`SessionManager.add_usage`.
        end_reason: Why the session ended, if it did.
        created_at, updated_at: Timestamps (UTC).
        seq: Creation order; for a fork, the point in time that decides which parent overlays it sees.
    """

    id: str
    name: str
    parent_session_id: str | None
    fork_message_id: str | None
    model: str | None
    source: str | None
    input_tokens: int
    output_tokens: int
    estimated_cost: float
    end_reason: str | None
    created_at: datetime
    updated_at: datetime
    seq: int

    @property
    def is_fork(self) -> bool:
        return self.fork_message_id is not None


class SessionManager:
    """The sessions of one agent.

    Args:
        agent_or_store: An :class:`~agentlab.agent.Agent` (sessions broadcast to its connections) or a Store.
        configure: Called with every :class:`Session` the manager builds (e.g. to register a compaction
            function and threshold for all of them), like upstream's manager-level builder options.
    """

    def __init__(self, agent_or_store: Any, *, configure: Callable[[Session], Any] | None = None) -> None:
        self._owner = agent_or_store
        self.store: Store = agent_or_store if isinstance(agent_or_store, Store) else agent_or_store.store
        self.tree = tree_of(self.store)
        self.configure = configure
        self._sessions: dict[str, Session] = {}

    # -- rows ------------------------------------------------------------------------------------

    def _row(self, session_id: str) -> SessionInfo | None:
        rows = self.store.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = ?", [session_id]).fetchall()
        return SessionInfo(*rows[0]) if rows else None

    def get(self, session_id: str) -> SessionInfo:
        """The row of ``session_id``.

        Raises:
            UnknownSessionError: No such session.
        """
        with self.store.lock:
            info = self._row(session_id)
        if info is None:
            raise UnknownSessionError(session_id)
        return info

    def list(self) -> list[SessionInfo]:
        """Every session with a row, most recently updated first."""
        with self.store.lock:
            rows = self.store.execute(f"SELECT {_COLUMNS} FROM sessions ORDER BY updated_at DESC, seq DESC").fetchall()
        return [SessionInfo(*r) for r in rows]

    def create(self, name: str, *, parent_session_id: str | None = None, model: str | None = None,
               source: str | None = None, session_id: str | None = None) -> SessionInfo:
        """Create a session row (no messages).

        Args:
            name: Display name (1-512 characters, no control characters).
            parent_session_id: Lineage only (a fork is made with :meth:`fork`).
            model, source: Labels kept with the session.
            session_id: Use this id instead of a random one.

        Raises:
            InvalidNameError: Bad name.
            ValueError: ``session_id`` is taken (or is ``""``, the default session).
            InvalidArgumentError: ``model``, ``source``, ``parent_session_id`` or ``session_id`` is not a string of
                valid UTF-8 (a lone surrogate, for instance).
        """
        validate_name(name, "session name")
        sid = uuid.uuid4().hex if session_id is None else session_id
        if not isinstance(sid, str) or not sid:
            raise ValueError("session_id must be a non-empty str ('' is the default session, which needs no row).")
        for label, value in (("session_id", sid), ("parent_session_id", parent_session_id), ("model", model),
                             ("source", source)):
            if value is not None:
                check_text(label, value)
        with self.store.lock:
            if session_id is not None and self._row(sid) is not None:  # a random id is new
                raise ValueError(f"A session with id {sid!r} exists; pick another id or omit it.")
            # Durable when this returns (a new agent's held name is committed with it).
            with self.store.transaction() as conn:
                row = conn.execute("INSERT INTO sessions (id, seq, name, parent_session_id, model, source) "
                                   f"VALUES (?, ?, ?, ?, ?, ?) RETURNING {_COLUMNS}",
                                   [sid, clock_of(self.store).take(), name, parent_session_id, model,
                                    source]).fetchall()[0]
                self.tree.sessions_changed()
            return SessionInfo(*row)

    def rename(self, session_id: str, name: str) -> SessionInfo:
        """Give a session a new name.

        Raises:
            UnknownSessionError: No such session.
        """
        validate_name(name, "session name")
        return self._update(session_id, "name = ?", [name])

    def add_usage(self, session_id: str, *, input_tokens: int = 0, output_tokens: int = 0,
                  estimated_cost: float = 0.0) -> SessionInfo:
        """Add model usage to a session's counters (upstream ``addUsage``).

        Raises:
            UnknownSessionError: No such session.
            InvalidArgumentError: A token count that is not a whole number of 0 or more, a cost that is NaN,
                infinite or negative, or a total that would no longer fit its column; nothing changes.
        """
        tokens_in = check_count("input_tokens", input_tokens)
        tokens_out = check_count("output_tokens", output_tokens)
        cost = check_amount("estimated_cost", estimated_cost)
        with self.store.lock:
            info = self.get(session_id)
            for label, total in (("input_tokens", info.input_tokens + tokens_in),
                                 ("output_tokens", info.output_tokens + tokens_out)):
                if total > INT64_MAX:
                    raise InvalidArgumentError(f"Adding {label} would take session {session_id!r} past {INT64_MAX:,} "
                                               "tokens, which its counter cannot hold.")
            if not math.isfinite(info.estimated_cost + cost):
                raise InvalidArgumentError(f"Adding estimated_cost would make session {session_id!r}'s cost "
                                           "infinite; pass the cost in a unit that keeps it finite.")
            return self._update(session_id, "input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
                                            "estimated_cost = estimated_cost + ?", [tokens_in, tokens_out, cost])

    def _update(self, session_id: str, assignments: str, params: builtins.list[Any]) -> SessionInfo:
        with self.store.lock:
            self.get(session_id)
            with self.store.transaction() as conn:
                conn.execute(f"UPDATE sessions SET {assignments}, updated_at = now() WHERE id = ?",
                             [*params, session_id]).fetchall()
            return self.get(session_id)

    def forks(self, session_id: str) -> builtins.list[SessionInfo]:
        """The forks made from ``session_id``, oldest first."""
        with self.store.lock:
            rows = self.store.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE parent_session_id = ? AND fork_message_id IS NOT NULL "
                "ORDER BY seq", [session_id]).fetchall()
        return [SessionInfo(*r) for r in rows]

    def delete(self, session_id: str, *, with_forks: bool = False) -> None:
        """Delete a session: its messages, overlays, compaction events and row (context blocks stay).

        Args:
            session_id: The session.
            with_forks: Also delete its forks (and theirs). Without it, a session with forks cannot be deleted.

        Raises:
            UnknownSessionError: No such session.
            ForkedHistoryError: It has forks and ``with_forks`` is False.
        """
        with self.store.lock:
            self.get(session_id)
            forks = self.forks(session_id)
            if forks and not with_forks:
                raise ForkedHistoryError(
                    f"Session {session_id!r} has {len(forks)} fork(s) reading its messages; delete them first or "
                    "pass with_forks=True.")
            with self.store.transaction() as conn:
                for fork in forks:
                    self.delete(fork.id, with_forks=True)
                self.tree.clear(session_id)
                delete_events(conn, session_id)
                conn.execute("DELETE FROM sessions WHERE id = ?", [session_id]).fetchall()
                self.tree.sessions_changed()
            self._sessions.pop(session_id, None)

    # -- sessions --------------------------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The :class:`Session` for ``session_id`` (one per id per manager, configured by ``configure``).

        Raises:
            UnknownSessionError: No such session (``""``, the default session, always exists).
        """
        cached = self._sessions.get(session_id)
        if cached is not None:
            return cached
        if session_id != "" and not self.tree.has_session_row(session_id):
            raise UnknownSessionError(session_id)
        built = Session(self._owner, session_id)
        if self.configure is not None:
            self.configure(built)
        self._sessions[session_id] = built
        return built

    def fork(self, session_id: str, at_message_id: str, name: str) -> SessionInfo:
        """Start a new session that shares ``session_id``'s path up to ``at_message_id`` (nothing is copied).

        Raises:
            UnknownMessageError: ``at_message_id`` is not a message of ``session_id``.
            InvalidNameError: Bad name.
        """
        validate_name(name, "session name")
        with self.store.lock:
            if not self.tree.visible(session_id, at_message_id):
                raise UnknownMessageError(at_message_id)
            parent = self._row(session_id)
            sid = uuid.uuid4().hex
            with self.store.transaction() as conn:
                conn.execute(
                    "INSERT INTO sessions (id, seq, name, parent_session_id, fork_message_id, model, source) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [sid, clock_of(self.store).take(), name, session_id, at_message_id,
                     parent.model if parent else None, parent.source if parent else None]).fetchall()
                self.tree.sessions_changed()
            return self.get(sid)

    def search(self, query: str, *, mode: str = "all", limit: int = 20,
               role: str | None = None) -> builtins.list[SearchHit]:
        """Search the messages of every session (upstream: AND of the words, all sessions, limit 20).

        Each hit carries its ``session_id``; see :meth:`agentlab.session.Session.search`.
        """
        return search_tree(self.tree, None, query, mode=mode, limit=limit, role=role)

    # -- tools ---------------------------------------------------------------------------------------------------

    def tools(self) -> builtins.list[dict[str, Any]]:
        """The manager's tool for the model (upstream ``SessionManager.tools()``): ``session_search``, which
        searches every session's messages (all of the words, best first) and answers with up to 10 hits as
        ``[role] text`` joined by ``"\n---\n"``, or ``No results found.``. Run a call with :meth:`run_tool`.

        A :class:`~agentlab.chat.ChatAgent` offers it from ``get_tools()``:
        ``[{**t, "run": lambda data, name=t["name"]: manager.run_tool(name, data)} for t in manager.tools()]``.
        """
        return [copy.deepcopy(SESSION_SEARCH_TOOL)]

    def run_tool(self, name: str, input: Any) -> str:
        """Execute a ``session_search`` call; never raises (errors come back as ``Error: ...``, as upstream)."""
        if name != "session_search":
            return f'Error: unknown tool "{name}". Available tools: session_search'
        if not isinstance(input, Mapping) or "query" not in input:
            return 'Error: Invalid input for session_search: "query" is required'
        if not isinstance(input["query"], str):
            return 'Error: Invalid input for session_search: "query" must be a string'
        try:
            hits = self.search(input["query"], limit=10)
        except Exception as exc:  # the contract: errors are results, never exceptions
            return f"Error: {exc}"
        if not hits:
            return "No results found."
        return "\n---\n".join(f"[{hit.role}] {hit.text}" for hit in hits)
