"""Agents by name: one live instance per (class, name, root), each owning one DuckDB file.

Subclass :class:`Agent` (optionally with ``initial_state``) and reach an agent with
:func:`get_agent`. One agent per user means one file per user: nothing one agent stores can reach
another agent's queries or prompts.

State follows upstream's order: validate, persist, broadcast to every connection
except the source, then ``on_state_changed``. A failed validation stores and broadcasts nothing;
an error in ``on_state_changed`` goes to ``on_error`` and never rolls back.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from agentlab._hooks import Accessor
from agentlab.agent.backends import backend_names, backend_opener
from agentlab.agent.connection import Connection, Frame, current_connection
from agentlab.agent.sql import SqlRunner
from agentlab.agent.state import delete_state_row, read_state_row, to_json, write_state_row
from agentlab.errors import (
    AgentClassConflictError,
    AgentClosedError,
    AgentDestroyedError,
    AgentlabError,
    InvalidArgumentError,
    ReadonlyConnectionError,
    StateError,
    StateRejectedError,
)
from agentlab.store.database import Store
from agentlab.store.files import BLOCK_SIZE
from agentlab.store.naming import agent_path, kebab_case, resolve_root, validate_name


class _NotSet:
    def __repr__(self) -> str:
        return "NOT_SET"


NOT_SET: Any = _NotSet()
"""Marks "no initial state" (``None`` is a valid state)."""

A = TypeVar("A", bound="Agent")

# Live agents by the real path of their file: one file has one live agent (and one store) per process, whatever
# class object reached it (a notebook cell re-run defines a new class object of the same name).
_registry: dict[str, Agent] = {}
_registry_lock = threading.RLock()  # re-entrant: on_start() may call get_agent()

class Agent:
    """A named agent with its own DuckDB file, SQL, state and connections.

    Do not construct directly: use :func:`get_agent`, which guarantees one live instance per name.

    Class attributes:
        initial_state: State given to a new agent on first access (JSON). Leave unset for none.
        block_size: DuckDB's block size for the agent's file, used when the file is created (an existing file
            keeps its own). Small blocks keep a small agent's file small (about 220 KB with 20 messages, against
            2.5 MB with DuckDB's default 256 KiB). Message texts are stored with ZSTD, which DuckDB writes about as
            fast with either size, so a large history imports at the same speed with ``block_size = 262_144``.
        hibernate_when_idle: Whether a server may hibernate the agent while its clients are idle (upstream's
            ``hibernate`` option, on by default): see :meth:`hibernate`. Set it to False for an agent that must
            keep something in memory between its clients' frames (a background task, a timer).
    """

    initial_state: ClassVar[Any] = NOT_SET
    block_size: ClassVar[int] = BLOCK_SIZE
    hibernate_when_idle: ClassVar[bool] = True

    def __init__(self, name: str, store: Store, *, root: Path) -> None:
        self.name = name
        self.root = root
        self._store: Store | None = store
        self._destroyed = False
        self.read_only = store.read_only
        self.path = Path(store.path)
        self.sql = SqlRunner(self._store_checked)
        # The store's own lock, not one of the agent's: the store calls back into the agent (dropping cached
        # state after outside SQL) while holding it, so a second lock would deadlock against set_state.
        self._lock = store.lock
        self._state_text: str | None = None
        self._state_loaded = False
        self._held_state: tuple[str, str] | None = None  # (text, source id) not yet written: defer_state_writes()
        self._after_held_write: Callable[[bool], None] | None = None
        self._connections: list[Connection] = []
        store.on_outside_write(self._forget_state)  # agent.sql may have rewritten the state row
        self._check_identity()
        self.on_start()

    # -- life cycle ---------------------------------------------------------------------------

    def on_start(self) -> None:
        """Hook run once when the agent is opened (subclasses set up sessions here)."""

    @property
    def store(self) -> Store:
        """The agent's :class:`Store` (lower layers use it; notebooks use :attr:`sql`)."""
        return self._store_checked()

    @property
    def closed(self) -> bool:
        return self._store is None

    @property
    def health(self) -> Any:
        """The file's :class:`~agentlab.store.StoreHealth`: ``ok`` is False while DuckDB cannot checkpoint it."""
        return self._store_checked().health

    def close(self) -> None:
        """Release the DuckDB file so that another process can open it. Safe to call twice."""
        self._shut(destroy=False)

    def destroy(self) -> None:
        """Delete this agent for good (upstream ``destroy()``): its file, with every table in it, and the files
        DuckDB keeps beside it.

        Connections are closed (served clients get close code 1012), the agent leaves the registry, and later use
        of it or its sessions raises :class:`~agentlab.errors.AgentDestroyedError`; ``get_agent`` with the same
        name then makes a new, empty agent. ``agent.export(folder)`` first keeps a copy. Safe to call twice.

        Raises:
            ReadOnlyAgentError: The agent was opened with ``read_only=True``; nothing is deleted.
        """
        if self._store is not None:
            self._store.require_writable()
        self._shut(destroy=True)

    @property
    def destroyed(self) -> bool:
        """Whether :meth:`destroy` deleted this agent."""
        return self._destroyed

    def hibernate(self) -> list[Connection]:
        """Release the DuckDB file and everything this object keeps in memory, but keep its served clients.

        What a server does with an agent whose clients are all idle (a Durable Object's hibernation): the agent is
        closed as by :meth:`close`, except that its served connections are *detached* instead of closed. They keep
        their id, flags, upgrade request and attachment, and are returned, so the server can hand them to the
        agent's next instance with :meth:`adopt` when a client speaks again. Everything stored is in the file;
        everything else of this object (its sessions, caches, attributes set in ``on_start``) is gone, and
        ``on_start`` runs again in the next instance.

        Raises:
            AgentlabError: An in-process connection (a widget, ``agent.connect()``) is open: its callbacks live in
                this process, so the agent stays open (nothing changes).
        """
        with self._lock:
            self._store_checked()
            local = [c for c in self._connections if c.sender is None]
            if local:
                raise AgentlabError(f"Agent {self.name!r} has {len(local)} in-process connection(s) (widgets or "
                                    "agent.connect()); close them before it can hibernate.")
            served = list(self._connections)
            self._connections = []
        for connection in served:
            connection.detach()
        self._shut(destroy=False)
        return served

    def adopt(self, connections: list[Connection]) -> None:
        """Take over the served connections an earlier instance of this agent detached when it hibernated.

        They rejoin the agent's broadcasts without any frame sent and without ``on_connect``: for their clients,
        the agent never left. Connections closed in the meantime are skipped.

        Raises:
            InvalidArgumentError: A connection is attached to an agent, or was detached from another agent.
        """
        with self._lock:
            self._store_checked()
            for connection in connections:
                if not connection.detached or connection.agent.name != self.name:
                    raise InvalidArgumentError(f"{connection!r} is not a connection that agent {self.name!r} "
                                               "detached when it hibernated.")
            for connection in connections:
                if not connection.closed:
                    connection.agent = self
                    self._connections.append(connection)

    def _shut(self, *, destroy: bool) -> None:
        with self._lock:
            store, self._store = self._store, None
            self._destroyed = self._destroyed or (destroy and store is not None)
            connections, self._connections = list(self._connections), []
        for connection in connections:
            connection.dropped()
        if store is not None and destroy:
            store.destroy()
        elif store is not None:
            store.close()
        with _registry_lock:
            for key, value in list(_registry.items()):
                if value is self:
                    del _registry[key]

    def __enter__(self: A) -> A:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = " read-only" if self.read_only else ""
        return f"<{type(self).__name__} {self.name!r}{mode}{' closed' if self.closed else ''} at {self.path}>"

    def _store_checked(self) -> Store:
        store = self._store
        if store is None:
            if self._destroyed:
                raise AgentDestroyedError(f"Agent {self.name!r} was destroyed; get_agent({type(self).__name__}, "
                                          f"{self.name!r}) would create a new, empty one.")
            raise AgentClosedError(
                f"Agent {self.name!r} is closed; get it again with get_agent({type(self).__name__}, {self.name!r})."
            )
        return store

    def _check_identity(self) -> None:
        store = self._store_checked()
        # A file the store has just created holds no name yet; the name is then written with the agent's first
        # commit (Store.defer), not in a durable commit of its own.
        if store.identity == self.name:
            return  # checked when this process had the file open, and the file is unchanged since
        recorded = None if store.fresh else store.scalar("SELECT value FROM agent_meta WHERE key = 'name'")
        if recorded is None:
            if not store.read_only:
                store.defer("INSERT INTO agent_meta VALUES ('name', ?), ('class', ?)",
                            [self.name, kebab_case(type(self).__name__)])
                store.identity = self.name
        elif recorded == self.name:
            store.identity = self.name
        else:
            store.close()
            raise AgentlabError(
                f"{self.path} belongs to the agent {recorded!r}, not {self.name!r}; refusing to mix them."
            )

    # -- state --------------------------------------------------------------------------------

    @property
    def state(self) -> Any:
        """The current state (a fresh copy: mutate it and call :meth:`set_state` to change it).

        On first access of a new agent, ``initial_state`` is set through the full set path.
        """
        with self._lock:
            self._load_state()
            return None if self._state_text is None else json.loads(self._state_text)

    @property
    def has_state(self) -> bool:
        """Whether state has been set (``None`` can be a set state)."""
        with self._lock:
            self._load_state()
            return self._state_text is not None

    def _forget_state(self) -> None:
        with self._lock:
            self._state_loaded = False
            self._state_text = None

    def _load_state(self) -> None:
        store = self._store_checked()  # first: a closed agent must not answer from memory
        if self._state_loaded:
            return
        text = read_state_row(store)
        self._state_loaded = True
        if text is not None:
            try:
                json.loads(text)
                self._state_text = text
                return
            except ValueError:
                self.on_error(AgentlabError(f"Stored state of {self.name!r} is not valid JSON; falling back."))
                self._state_text = None
                if self.initial_state is NOT_SET and not store.read_only:
                    delete_state_row(store)
        if self.initial_state is not NOT_SET and not store.read_only:
            self._set_state_internal(copy.deepcopy(self.initial_state), "server")

    def set_state(self, state: Any) -> None:
        """Validate, persist and broadcast new state, then call :meth:`on_state_changed`.

        Raises:
            StateNotJSONError: ``state`` is not JSON (names the offending path); nothing changes.
            StateRejectedError: :meth:`validate_state_change` raised; nothing changes.
            ReadOnlyAgentError: The agent was opened read-only.
            ReadonlyConnectionError: Called while serving a readonly connection (an RPC it made).
        """
        acting = current_connection()
        if acting is not None and acting.readonly:
            raise ReadonlyConnectionError()
        self._set_state_internal(state, "server")

    def merge_state(self, partial: dict[str, Any]) -> Any:
        """Shallow-merge ``partial`` into a dict state and set the result; returns it."""
        if not isinstance(partial, dict):
            raise TypeError(f"merge_state takes a dict, not {type(partial).__name__}.")
        with self._lock:
            current = self.state
            if current is None:
                current = {}
            if not isinstance(current, dict):
                raise StateError(
                    f"merge_state needs a dict state, but the state is a {type(current).__name__}; use set_state()."
                )
            merged = {**current, **partial}
            self.set_state(merged)
            return merged

    def reset_state(self) -> None:
        """Go back to ``initial_state`` (or to no state at all when there is none)."""
        if self.initial_state is not NOT_SET:
            self.set_state(copy.deepcopy(self.initial_state))
            return
        with self._lock:
            delete_state_row(self._store_checked())
            self._state_text = None
            self._state_loaded = True
            self.broadcast({"type": "cf_agent_state", "state": None})

    def _set_state_internal(self, state: Any, source: Connection | str) -> None:
        store = self._store_checked()
        store.require_writable()
        text = to_json(state)  # raises StateNotJSONError naming the offending path
        try:
            self.validate_state_change(state, source)
        except Exception as exc:
            raise StateRejectedError(f"State update rejected: {exc}") from exc
        source_id = source if isinstance(source, str) else source.id
        with self._lock:
            if self._after_held_write is not None:  # a server's group commit: stored before any frame leaves
                self._held_state = (text, source_id)
                store.hold_back(lambda: self._write_held_state(store))
            else:
                write_state_row(store, text, source_id)
            self._state_text = text
            self._state_loaded = True
            # Broadcast inside the lock so every client sees changes in the order they were stored.
            self.broadcast({"type": "cf_agent_state", "state": json.loads(text)}, exclude=source)
        try:
            self.on_state_changed(json.loads(text), source)
        except Exception as exc:  # best effort, never rolls back (upstream)
            self.on_error(exc)

    def defer_state_writes(self, after_write: Callable[[bool], None] | None) -> None:
        """Store state changes in groups (what a server does for the agents it owns), or one by one again (None).

        While deferred, :meth:`set_state` keeps the new state in memory and holds its write back
        (:meth:`Store.hold_back <agentlab.store.Store.hold_back>`): several changes in a row are stored as one,
        just before the file's next statement or transaction, at close, or at :meth:`write_held_state`. The
        caller must keep back everything that announces a held change (the broadcast frames) until
        ``after_write(True)`` is called, once the state is stored. ``after_write(False)`` means the write failed:
        the state is read from the file again, and what was kept back must be dropped, since the change never
        happened. This is upstream's output gate: a Durable Object's outgoing messages wait for its storage writes,
        which are coalesced.
        """
        with self._lock:
            if after_write is None:
                if self._store is not None:
                    self._store.write_held_back()  # told to the old after_write
                self._after_held_write = None
            else:
                self._after_held_write = after_write

    @property
    def holds_state_write(self) -> bool:
        """Whether a state change is held back, not yet stored (see :meth:`defer_state_writes`)."""
        return self._held_state is not None

    def write_held_state(self) -> bool:
        """Store a held state change now; returns whether there was one (see :meth:`defer_state_writes`).

        Raises:
            DiskFullError: It could not be stored; the state is read from the file again.
        """
        store = self._store
        if store is None or self._held_state is None:
            return False
        return store.write_held_back()

    def _write_held_state(self, store: Store) -> None:
        """Store the held state in ``store`` (the agent's, which may be closing: its close runs this first)."""
        with self._lock:
            held, self._held_state = self._held_state, None
            if held is None:
                return
            after = self._after_held_write
            try:
                write_state_row(store, *held)
            except BaseException:
                self._forget_state()
                if after is not None:
                    after(False)
                raise
            if after is not None:
                after(True)

    def validate_state_change(self, next_state: Any, source: Connection | str) -> None:
        """Override to reject a change by raising; ``source`` is ``"server"`` or a :class:`Connection`."""

    def on_state_changed(self, state: Any, source: Connection | str) -> None:
        """Override to react after a change is stored and broadcast (on a served agent: held for the group commit
        that comes before any frame leaves, see :meth:`defer_state_writes`)."""

    def on_error(self, error: BaseException) -> None:
        """Override to handle errors from hooks and clients; the default warns."""
        warnings.warn(f"{type(self).__name__} {self.name!r}: {type(error).__name__}: {error}", stacklevel=2)

    # -- connections --------------------------------------------------------------------------

    def connect(
        self,
        *,
        on_state: Any = None,
        on_message: Any = None,
        readonly: bool = False,
        sender: Any = None,
        request: Any = None,
    ) -> Connection:
        """Open a client connection: it gets the identity frame, then the state if set.

        Args:
            on_state: Called with the new state on every change made by someone else.
            on_message: Called with every protocol frame (dicts, upstream's message shapes).
            readonly: Refuse state changes from this client.
            sender: Called with every frame too; ``agentlab.serve`` writes them to the client's socket.
            request: The upgrade request of a served client; with one, the ``should_*`` hooks decide.
        """
        connection = Connection(
            self, on_state=on_state, on_message=on_message, readonly=readonly, sender=sender, request=request
        )
        if request is not None:
            connection.readonly = readonly or bool(self.should_connection_be_readonly(connection, request))
            connection.protocol = bool(self.should_send_protocol_messages(connection, request))
        with self._lock:
            self._store_checked()
            self._load_state()  # first, so a lazy initial state is not sent twice to this client
            self._connections.append(connection)
            identity: dict[str, Any] = {"name": self.name, "agent": kebab_case(type(self).__name__),
                                        "type": "cf_agent_identity"}
            if self.has_state:  # tells the client to wait for the state before it reports ready
                identity["stateFollows"] = True
            connection.send(identity)
            if self.has_state:
                connection.send({"state": self.state, "type": "cf_agent_state"})
        return connection

    @property
    def connections(self) -> list[Connection]:
        """The open connections."""
        with self._lock:
            return list(self._connections)

    def broadcast(self, frame: Frame, exclude: Connection | str | None = None) -> None:
        """Send ``frame`` to every open connection except ``exclude``."""
        with self._lock:
            targets = [c for c in self._connections if c is not exclude]
        for connection in targets:
            connection.send(frame)

    def _drop_connection(self, connection: Connection) -> None:
        with self._lock:
            if connection in self._connections:
                self._connections.remove(connection)

    # -- hooks for served clients (agentlab.serve calls them; in-process connections never do) --

    def on_connect(self, connection: Connection, request: Any) -> Any:
        """Run after a served client got its connect frames; ``request`` is its upgrade request. May be async."""

    def on_message(self, connection: Connection, message: str | bytes) -> Any:
        """Handle a client frame that is not protocol: not JSON, binary, or of an unknown type. May be async."""

    def on_close(self, connection: Connection, code: int, reason: str) -> Any:
        """Run after a served client's socket closed. May be async."""

    def on_request(self, request: Any) -> Any:
        """Answer HTTP at ``/agents/<class>/<name>``: a Response, JSON, str or bytes; None gives 404. May be async."""
        return None

    def should_connection_be_readonly(self, connection: Connection, request: Any) -> bool:
        """Decide, before any frame is sent, whether a served client may change state (default: it may)."""
        return False

    def should_send_protocol_messages(self, connection: Connection, request: Any) -> bool:
        """Decide whether a served client gets identity, state and MCP frames (default: yes); RPC works anyway."""
        return True

    # -- notebook accessors (implemented by agentlab.frames and agentlab.views, bound by the package) --------------

    show = Accessor("agent.show", "A live notebook dashboard of this agent: its state, plus the context and tree of "
                    "its ``session`` attribute, else of the sessions stored in its file (with a picker).", call=True)
    messages_df = Accessor("agent.messages_df", "Every stored message of every session, one row each (call for "
                           "pandas, ``.arrow()`` for Arrow).")
    branches_df = Accessor("agent.branches_df", "Every branch point of every session.")
    compactions_df = Accessor("agent.compactions_df", "Every compaction and compaction event of every session.")
    blocks_history_df = Accessor("agent.blocks_history_df", "Every write to a writable block of every session.")
    tool_calls_df = Accessor("agent.tool_calls_df", "Every tool call with its result, across sessions.")
    usage_df = Accessor("agent.usage_df", "Token usage of every Messages API call.")

    export = Accessor("agent.export", "``agent.export(folder, overwrite=False)``: write every table of this agent "
                      "to Parquet files in ``folder``, with a manifest; restore it with :func:`agentlab.import_` "
                      "(see :func:`agentlab.agent.portable.export`).", call=True)


def get_agent(
    cls: type[A],
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    read_only: bool = False,
    backend: str = "local",
    **options: Any,
) -> A:
    """Return the live agent ``name`` of class ``cls``, opening or creating its DuckDB file.

    The same (class, name, root) gives the same instance within a process until it is closed.

    Args:
        cls: An :class:`Agent` subclass (or ``Agent`` itself).
        name: Any Unicode name, 1 to 512 characters, without control characters.
        root: Folder holding agents; else ``$AGENTLAB_HOME``, else ``./agentlab-data``.
        read_only: Open without write access (works while no other process writes the file).
        backend: ``"local"`` (this process owns the file) or a registered backend such as ``"ray"``, which
            returns a handle whose calls run where the backend keeps the agent (see :mod:`agentlab.cluster`).
        **options: The backend's own options (none for ``"local"``).

    Raises:
        InvalidNameError: The name is empty, too long or has control characters.
        AgentLockedError: Another process holds the file read-write.
        InvalidArgumentError: An unknown backend.
    """
    if not (isinstance(cls, type) and issubclass(cls, Agent)):
        raise TypeError(f"get_agent needs an Agent subclass, not {cls!r}.")
    validate_name(name)
    if backend != "local":
        opener = backend_opener(backend)
        if opener is None:
            known = ", ".join(repr(b) for b in ["local", *backend_names()])
            raise InvalidArgumentError(f"Unknown backend {backend!r}; use one of {known}.")
        return opener(cls, name, root=root, read_only=read_only, **options)
    if options:
        raise TypeError(f"get_agent got {', '.join(sorted(options))}, which only a backend= other than 'local' takes.")
    resolved = resolve_root(root)
    path = agent_path(cls.__name__, name, resolved)
    key = os.path.realpath(path)
    with _registry_lock:
        live = _registry.get(key)
        if live is not None and not live.closed:
            if live.read_only != read_only:
                mode = "read-only" if live.read_only else "read-write"
                raise AgentlabError(
                    f"Agent {name!r} is already open {mode} in this process; close() it before reopening "
                    f"with read_only={read_only}."
                )
            return _rebind(live, cls)
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        store = Store(path, read_only=read_only, block_size=cls.block_size)
        try:
            agent = cls(name, store, root=resolved)
        except BaseException:
            store.close()
            raise
        _registry[key] = agent
        return agent


def live_agent(cls: type[A], name: str, *, root: str | os.PathLike[str] | None = None) -> A | None:
    """The agent ``name`` of ``cls`` if this process has it open now, else None; never opens a file."""
    key = os.path.realpath(agent_path(cls.__name__, validate_name(name), resolve_root(root)))
    with _registry_lock:
        live = _registry.get(key)
    return live if live is not None and not live.closed else None  # type: ignore[return-value]


def _rebind(live: Agent, cls: type[A]) -> A:
    """The live agent of a file, as an instance of ``cls``.

    A class re-defined under the same module and name (a notebook cell run again) takes over the live agent,
    which keeps its sessions, caches and connections; any other class is refused, since two classes whose
    names kebab-case alike (``ChatAgent``, ``CHAT_AGENT``) would otherwise share one file unknowingly.
    """
    old = type(live)
    if old is cls:
        return live  # type: ignore[return-value]
    if old.__module__ == cls.__module__ and old.__qualname__ == cls.__qualname__:
        try:
            live.__class__ = cls
        except TypeError as exc:
            raise AgentClassConflictError(
                f"Agent {live.name!r} is open as the earlier {old.__qualname__} class, and the new one cannot take "
                f"it over ({exc}); call agent.close() on the old agent, then get_agent() again."
            ) from None
        return live  # type: ignore[return-value]
    raise AgentClassConflictError(
        f"{live.path} is already open in this process as {old.__module__}.{old.__qualname__} {live.name!r}; "
        f"{cls.__module__}.{cls.__qualname__} maps to the same file (both are {kebab_case(cls.__name__)!r}). "
        "Use one of the two classes, or close() the open agent first."
    )
