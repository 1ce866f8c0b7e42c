"""Connections: the client side of an agent (widgets, terminals, WebSocket clients of ``agentlab.serve``).

A :class:`Connection` receives the agent's protocol frames (upstream's WebSocket messages, as
dicts) and can change state through the same path as the server, with itself as the source.
A served client is the same kind of connection with a ``sender`` that writes each frame to its
socket, so validation, storage and broadcast order stay the agent's own code.

Frames sent to a connection, in upstream's order on connect:
``{"type": "cf_agent_identity", "name", "agent"}`` (with ``"stateFollows": true`` when state is
set), then ``{"type": "cf_agent_state", "state"}`` if state is set. Later: ``cf_agent_state`` on
every change made by someone else (never echoed to the connection that made it),
``cf_agent_session`` / ``cf_agent_session_error`` from sessions. A connection whose ``protocol``
is off gets no identity, state or MCP frames, only the rest.

A served connection outlives the agent object when the agent hibernates (:meth:`Agent.hibernate`): it is
*detached*, keeping its id, its readonly and protocol flags, its upgrade request and its attachment
(:meth:`Connection.serialize_attachment`, upstream's ``serializeAttachment``), and the agent's next instance
adopts it (:meth:`Agent.adopt`) without sending it any frame, as a Durable Object's hibernated WebSocket.

Invariants: a client callback or sender that raises never breaks the write that triggered it; the error goes
to the agent's ``on_error``. A detached connection receives nothing and changes nothing until it is adopted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from agentlab.agent._state import check_json
from agentlab.errors import ConnectionClosedError, InvalidArgumentError, ReadonlyConnectionError, StateError


class ConnectionHost(Protocol):
    """What a connection needs from its agent: its name, the state path with a source, error reporting."""

    name: str

    def _set_state_internal(self, state: Any, source: Any) -> None: ...

    def _drop_connection(self, connection: Connection) -> None: ...

    def on_error(self, error: BaseException) -> None: ...


Frame = dict[str, Any]

MAX_ATTACHMENT_BYTES = 16 * 1024
"""The longest attachment a connection keeps (its compact JSON, in UTF-8 bytes)."""

PROTOCOL_FRAMES = frozenset({"cf_agent_identity", "cf_agent_state", "cf_agent_mcp_servers"})
"""Frame types a connection with ``protocol`` off never receives (upstream's protocol messages)."""

_acting: ContextVar[Connection | None] = ContextVar("agentlab_acting_connection", default=None)


def current_connection() -> Connection | None:
    """The connection whose message the agent is handling right now, or None outside such a call."""
    return _acting.get()


class _Detached:
    """The host of a connection whose agent hibernated: it keeps the agent's name and refuses state changes."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _set_state_internal(self, state: Any, source: Any) -> None:
        raise ConnectionClosedError("The agent of this connection is hibernating; its server wakes it on the "
                                    "client's next frame.")

    def _drop_connection(self, connection: Connection) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass


class Connection:
    """One client of an agent. Create with :meth:`Agent.connect`."""

    def __init__(
        self,
        agent: ConnectionHost,
        *,
        on_state: Callable[[Any], None] | None = None,
        on_message: Callable[[Frame], None] | None = None,
        readonly: bool = False,
        sender: Callable[[Frame], None] | None = None,
        request: Any = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.agent = agent
        self.readonly = readonly
        self.on_state = on_state
        self.on_message = on_message
        self.sender = sender  # writes frames to a remote client (agentlab.serve); None in process
        self.request = request  # the upgrade request of a served client
        self.protocol = True  # False: no identity, state or MCP frames reach this client
        self.closed = False
        self.on_dropped: Callable[[], None] | None = None
        """Called when the agent closes this connection itself (``agent.close()``, ``agent.destroy()``);
        ``agentlab.serve`` ends the client's socket there."""
        self.received: int = 0
        self._attachment = "null"  # compact JSON text: survives hibernation by construction, never aliases

    def __repr__(self) -> str:
        flags = " readonly" if self.readonly else ""
        return f"<Connection {self.id[:8]} to {self.agent.name!r}{flags}{' closed' if self.closed else ''}>"

    # -- server -> client ----------------------------------------------------------------------

    def send(self, frame: Frame) -> None:
        """Deliver a frame to this client's callbacks (called by the agent)."""
        if self.closed or (not self.protocol and frame.get("type") in PROTOCOL_FRAMES):
            return
        self.received += 1
        try:
            if frame.get("type") == "cf_agent_state" and self.on_state is not None:
                self.on_state(frame["state"])
            if self.on_message is not None:
                self.on_message(frame)
            if self.sender is not None:
                self.sender(frame)
        except Exception as exc:  # a broken client must not break the writer
            self.agent.on_error(exc)

    # -- what the connection keeps across hibernation ------------------------------------------

    def serialize_attachment(self, value: Any) -> None:
        """Keep ``value`` with this connection (upstream's ``serializeAttachment``): it survives the agent
        hibernating and waking, when every other Python attribute of the agent is gone.

        The value is copied as JSON: changing it afterwards changes nothing kept. ``None`` clears it.

        Raises:
            StateNotJSONError: ``value`` is not JSON (names the offending path); nothing changes.
            InvalidArgumentError: Its JSON is longer than :data:`MAX_ATTACHMENT_BYTES`; nothing changes.
        """
        check_json(value, "attachment")
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
        if size > MAX_ATTACHMENT_BYTES:
            raise InvalidArgumentError(f"A connection's attachment may be at most {MAX_ATTACHMENT_BYTES} bytes of "
                                       f"JSON, not {size}; keep larger data in the agent's state or its tables.")
        self._attachment = text

    def deserialize_attachment(self) -> Any:
        """A fresh copy of what :meth:`serialize_attachment` kept (``None`` if nothing)."""
        return json.loads(self._attachment)

    @property
    def detached(self) -> bool:
        """Whether the agent hibernated and no instance has adopted this connection yet."""
        return isinstance(self.agent, _Detached)

    def detach(self) -> None:
        """Let go of the agent object (it is hibernating); :meth:`Agent.adopt` attaches the next one."""
        self.agent = _Detached(self.agent.name)

    # -- client -> server ----------------------------------------------------------------------

    def set_state(self, state: Any) -> None:
        """Change the agent's state with this connection as the source.

        Raises:
            ReadonlyConnectionError: The connection is readonly (nothing changes).
            StateRejectedError, StateNotJSONError: As :meth:`Agent.set_state`.
        """
        self._check_open()
        if self.readonly:
            raise ReadonlyConnectionError()
        self.agent._set_state_internal(state, self)

    def receive(self, frame: Frame) -> None:
        """Handle a protocol frame from the client, as a WebSocket server would.

        ``{"type": "cf_agent_state", "state": ...}`` changes state; a refusal is answered with
        ``{"type": "cf_agent_state_error", "error": "Connection is readonly" | "State update
        rejected"}`` (the detailed reason goes to the agent's ``on_error`` only, as upstream).
        """
        self._check_open()
        if frame.get("type") != "cf_agent_state" or "state" not in frame:
            return
        if self.readonly:
            self.send({"type": "cf_agent_state_error", "error": "Connection is readonly"})
            return
        try:
            self.agent._set_state_internal(frame["state"], self)
        except StateError as exc:
            self.agent.on_error(exc)
            self.send({"type": "cf_agent_state_error", "error": "State update rejected"})

    @contextmanager
    def acting(self) -> Iterator[Connection]:
        """Mark this connection as the one the agent is serving (see :func:`current_connection`).

        Inside, :meth:`Agent.set_state` refuses to run for a readonly connection, as upstream does for
        a method a readonly client called.
        """
        token = _acting.set(self)
        try:
            yield self
        finally:
            _acting.reset(token)

    def dropped(self) -> None:
        """The agent closed: stop receiving frames and call :attr:`on_dropped` (once; its errors are ignored)."""
        if self.closed:
            return
        self.closed = True
        if self.on_dropped is not None:
            try:
                self.on_dropped()
            except Exception:  # the agent is going away; a client that cannot be told learns on its next call
                pass

    def close(self) -> None:
        """Stop receiving frames. Safe to call twice."""
        if not self.closed:
            self.closed = True
            self.agent._drop_connection(self)

    def _check_open(self) -> None:
        if self.closed:
            raise ConnectionClosedError("This connection is closed; open a new one with agent.connect().")
