"""One WebSocket client of a served agent: its connection, its send queue, and how it ends.

The client is an ordinary :class:`~agentlab.agent.Connection` of the agent whose sender posts frames
to this socket's queue; a writer task drains the queue to the socket, a reader passes each received frame
to the agent as one turn, in the order received.

Invariants:

* Frames reach the client in the order the agent sent them.
* A client that does not read cannot make the server hold more than ``max_queue_bytes`` for it: once the
  transport's own buffer is full (the ASGI server stops taking frames), frames wait in this socket's queue, and
  past ``max_queue_bytes`` there the client is dropped from the agent and its socket closed with 1008 (policy
  violation), while every other client goes on. Broadcasts never wait for a slow client: a turn only appends to
  each client's queue.
* A frame longer than ``max_message_bytes`` closes the socket with 1009 before the agent sees it.
* Whatever ends the socket, the agent's connection is closed and ``on_close`` runs, once (for a hibernated
  agent only if its class overrides ``on_close``: waking it to run the base class's empty hook would cost a
  database open for nothing).
* The socket outlives its agent's hibernation: its connection is detached and adopted by the next instance,
  and every frame is handed to whichever instance is live when its turn comes.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from agentlab.agent import Agent
from agentlab.errors import ConnectionClosedError

from .http import HttpRequest
from .protocol import call_hook, handle_message, mcp_frame, report

if TYPE_CHECKING:
    from .hub import Hub, Served

CLOSE_TIMEOUT = 1.0  # seconds to wait for a close frame to leave; a client that never reads never takes it
SLOW_CLIENT_CODE = 1008  # policy violation (RFC 6455 7.4.1): the client broke the rule "read what you are sent"


class ClientSocket:
    """The server's side of one accepted WebSocket."""

    def __init__(self, hub: Hub, entry: Served, send: Any, *, max_message_bytes: int, max_queue_bytes: int) -> None:
        self.hub = hub
        self.entry = entry
        self._send = send
        self.max_message_bytes = max_message_bytes
        self.max_queue_bytes = max_queue_bytes
        self.queue: deque[str] = deque()
        self.queued = 0  # characters waiting in ``queue``
        self.dead = False
        self.connection: Any = None
        self._wake = asyncio.Event()
        self._killed = asyncio.Event()
        self._kill: tuple[int, str] | None = None
        assert hub.outbox is not None
        self._post = functools.partial(hub.outbox.post, self)

    # -- called on the event loop --------------------------------------------------------------

    def push(self, text: str) -> None:
        """Queue one encoded frame for the client."""
        if self.dead:
            return
        self.queue.append(text)
        self.queued += len(text)
        if self.queued > self.max_queue_bytes:
            self.hub.dropped += 1
            self.kill(SLOW_CLIENT_CODE, "The client does not read its messages; it was dropped.")
            return
        self._wake.set()

    def kill(self, code: int, reason: str) -> None:
        """End the socket from the server's side with close ``code``."""
        if self.dead:
            return
        self.dead = True
        self.queue.clear()
        self.queued = 0
        self._kill = (code, reason)
        self._killed.set()
        self._wake.set()

    async def serve(self, receive: Any, request: HttpRequest) -> None:
        """Run the socket until the client leaves or the server ends it."""
        entry = self.entry
        entry.sockets.add(self)
        writer = asyncio.ensure_future(self._write())
        code, reason, client_left = 1006, "", False
        try:
            try:
                await self.hub.run(entry, self._open, request)
            except Exception as exc:
                report(entry.agent, exc)
                self.kill(1011, "The agent could not take the connection.")
            if not self.dead:
                reader = asyncio.ensure_future(self._read(receive))
                killed = asyncio.ensure_future(self._killed.wait())
                await asyncio.wait({reader, killed}, return_when=asyncio.FIRST_COMPLETED)
                killed.cancel()
                left = reader.result() if reader.done() and not reader.cancelled() and not reader.exception() else None
                if left is not None:
                    code, reason = left
                    client_left = True
                else:
                    reader.cancel()
        finally:
            entry.sockets.discard(self)
            self.dead = True
            writer.cancel()
            if self._kill is not None and not client_left:
                code, reason = self._kill
                await self._close_socket(code, reason)
            if self.connection is not None:
                if entry.hibernated and not _overrides(entry.cls, "on_close"):
                    self.connection.close()  # detached: nothing to tell a sleeping agent
                    entry.last_used = time.monotonic()
                else:
                    try:
                        await self.hub.run(entry, self._closed, code, reason)
                    except Exception as exc:  # the server is shutting down; the agent closes with it
                        report(entry.agent, exc)

    async def _read(self, receive: Any) -> tuple[int, str] | None:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "websocket.disconnect":
                return int(message.get("code", 1005)), str(message.get("reason") or "")
            if kind != "websocket.receive":
                continue
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            if len(data) > self.max_message_bytes:
                self.kill(1009, f"A message may be at most {self.max_message_bytes} bytes.")
                return None
            if self.connection.closed:
                self.kill(1012, "The agent was closed; reconnect to reopen it.")
                return None
            try:
                await self.hub.run(self.entry, handle_message, self.connection, data, self._flush)
            except ConnectionClosedError:
                self.kill(1012, "The agent was closed; reconnect to reopen it.")
                return None
            except Exception as exc:  # a broken hook or a failed write: the agent hears of it, the socket goes on
                report(self.entry.agent, exc)
                if self.dead:  # waking the agent failed: the hub closed every socket of it
                    return None

    async def _write(self) -> None:
        queue = self.queue
        try:
            while not self.dead:
                await self._wake.wait()
                self._wake.clear()
                while queue and not self.dead:
                    text = queue.popleft()
                    self.queued -= len(text)
                    await self._send({"type": "websocket.send", "text": text})
        except asyncio.CancelledError:
            raise
        except Exception:  # the client went away; the reader sees its disconnect
            self.dead = True

    async def _close_socket(self, code: int, reason: str) -> None:
        try:
            closing = {"type": "websocket.close", "code": code, "reason": reason}
            await asyncio.wait_for(self._send(closing), CLOSE_TIMEOUT)
        except Exception:  # gone already, or never reads: the server closes the transport when serve() returns
            pass

    def _flush(self) -> None:
        assert self.hub.outbox is not None
        self.hub.outbox.flush()

    # -- called on a worker thread, inside the agent's turn ------------------------------------

    def _open(self, agent: Any, request: HttpRequest) -> Any:
        connection = agent.connect(sender=self._post, request=request)
        connection.on_dropped = self._agent_gone
        self.connection = connection
        if connection.protocol:
            connection.send(mcp_frame())
        with connection.acting():
            return call_hook(agent, connection, agent.on_connect, connection, request)

    def _agent_gone(self) -> None:
        """The agent was closed or destroyed (in a notebook, say): end this socket now, from the loop's thread."""
        reason = ("The agent was destroyed." if getattr(self.entry.agent, "destroyed", False)
                  else "The agent was closed; reconnect to reopen it.")
        outbox = self.hub.outbox
        assert outbox is not None
        if threading.get_ident() == outbox.loop_thread:
            self.kill(1012, reason)
        else:
            try:
                outbox.loop.call_soon_threadsafe(self.kill, 1012, reason)
            except RuntimeError:  # the server has stopped already
                pass

    def _closed(self, agent: Any, code: int, reason: str) -> Any:
        connection = self.connection
        connection.close()
        if agent.closed:
            return None
        with connection.acting():
            return call_hook(agent, connection, agent.on_close, connection, code, reason)


def _overrides(cls: type, hook: str) -> bool:
    """Whether ``cls`` defines ``hook`` itself rather than inheriting the base Agent's."""
    return getattr(cls, hook, None) is not getattr(Agent, hook)
