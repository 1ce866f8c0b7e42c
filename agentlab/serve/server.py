"""The ASGI application that serves agents to their clients, routed as upstream's ``routeAgentRequest``.

``/agents/<kebab-class>/<name>`` (and anything below it) reaches the agent ``name`` of the class whose
kebab-case name is ``<kebab-class>``: a WebSocket upgrade becomes a :class:`~agentlab.agent.Connection`
speaking upstream's protocol, any other request goes to the agent's ``on_request`` hook.

Before the agent is touched, ``on_before_connect(websocket, route)`` (upgrades) or
``on_before_request(request, route)`` (the rest) may refuse by returning a Starlette ``Response`` (a 401,
say) or pass by returning None; this is the place for authentication. With ``cors``, preflight requests
are answered and every HTTP answer carries the CORS headers, as upstream.

Invariants:

* An unknown class, a name that is not an agent name, or a path outside the prefix is a 404 with a JSON
  ``{"error": ...}`` body, and touches no file.
* A request reaches an agent only through its turn (see :mod:`agentlab.serve.hub`), so HTTP and WebSocket
  calls to one agent never overlap.
* The server holds the root folder's lock from start-up to shutdown, and closes the agents it opened when
  it shuts down, so their files hold everything they stored.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.websockets import WebSocket

from agentlab.agent import Agent
from agentlab.errors import AgentlabError, AgentLockedError, ServeConfigError
from agentlab.store import kebab_case, resolve_root

from .http import NoRoute, Route, match, request_from_scope
from .hub import Hub, RootLock, default_holder
from .protocol import encode, error_text, report
from .rpc import check_json
from .sockets import ClientSocket

Hook = Callable[[Any, Route], Any]

DEFAULT_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": "*",
    "Access-Control-Max-Age": "86400",
}
MAX_MESSAGE_BYTES = 2 * 1024 * 1024  # the largest row a Durable Object's SQL storage holds, so upstream's too
MAX_QUEUE_BYTES = 16 * 1024 * 1024
IDLE_TIMEOUT = 300.0
HIBERNATE_AFTER = 10.0  # a Durable Object hibernates after 10 s without events (Cloudflare's lifecycle docs)


class AgentServer:
    """An ASGI application serving agent classes from one root folder. Build it with :func:`app`."""

    def __init__(
        self,
        classes: type | Iterable[type],
        *,
        root: str | os.PathLike[str] | None = None,
        prefix: str = "agents",
        cors: bool | dict[str, str] = False,
        idle_timeout: float | None = IDLE_TIMEOUT,
        hibernate_after: float | None = HIBERNATE_AFTER,
        on_before_connect: Hook | None = None,
        on_before_request: Hook | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        threads: int = 8,
    ) -> None:
        self.classes = class_map(classes)
        self.root = resolve_root(root)
        self.prefix = tuple(part for part in prefix.split("/") if part)
        if not self.prefix:
            raise ServeConfigError("The prefix must have at least one path segment, such as 'agents'.")
        self.cors = _cors_headers(cors)
        for label, value in (("max_message_bytes", max_message_bytes), ("max_queue_bytes", max_queue_bytes),
                             ("threads", threads)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ServeConfigError(f"{label} must be a positive whole number, not {value!r}.")
        for label, seconds in (("idle_timeout", idle_timeout), ("hibernate_after", hibernate_after)):
            if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                        or not seconds > 0):
                raise ServeConfigError(f"{label} must be a positive number of seconds or None, not {seconds!r}.")
        self.on_before_connect = on_before_connect
        self.on_before_request = on_before_request
        self.max_message_bytes = max_message_bytes
        self.max_queue_bytes = max_queue_bytes
        self.hub = Hub(self.root, idle_timeout=idle_timeout, threads=threads, hibernate_after=hibernate_after)
        self._root_lock = RootLock(self.root)
        self._started = False

    def __repr__(self) -> str:
        return f"<AgentServer {', '.join(sorted(self.classes))} at {self.root}>"

    def lock_root(self, holder: str | None = None) -> None:
        """Take the root folder's lock now (``start()`` and the CLI do, to fail before they listen).

        Raises:
            ServeRootLockedError: Another server serves this root.
        """
        self._root_lock.acquire(holder or default_holder())

    def release_root(self) -> None:
        """Give the root folder's lock back (``shutdown`` does; so does a ``start()`` that failed)."""
        self._root_lock.release()

    @property
    def agents(self) -> dict[tuple[str, str], Any]:
        """The agents open now (not hibernated), by (URL class name, name)."""
        return {key: entry.agent for key, entry in self.hub.entries.items()
                if entry.agent is not None and not entry.hibernated}

    @property
    def hibernated(self) -> set[tuple[str, str]]:
        """The agents hibernated now (their sockets open, their databases released), by (URL class name, name)."""
        return {key for key, entry in self.hub.entries.items() if entry.hibernated}

    def stats(self) -> dict[str, int]:
        """Counts for monitoring: agents ``open`` and ``hibernated`` now, ``sockets``, and the ``hibernations``,
        ``wakes`` and slow clients ``dropped`` (closed with 1008) since the server started."""
        return self.hub.stats()

    async def hibernate(self, cls: type, name: str) -> bool:
        """Hibernate agent ``name`` of ``cls`` now, without waiting for ``hibernate_after`` (for tests and notebooks
        that want to watch a wake); returns whether it did. It does only what the server would do by itself: an
        agent with no socket, a turn running, an in-process connection, or one the server did not open stays as it
        is."""
        entry = self.hub.entries.get((kebab_case(cls.__name__) or "agent", name))
        return entry is not None and await self.hub.hibernate(entry)

    async def startup(self) -> None:
        if not self._started:
            self.lock_root()
            self.hub.start()
            self._started = True

    async def shutdown(self) -> None:
        """Close every socket and every agent this server opened, then release the root folder."""
        for entry in list(self.hub.entries.values()):
            for sock in list(entry.sockets):
                sock.kill(1001, "The server is shutting down.")
        try:
            await self.hub.close_all()
        finally:
            self.release_root()
            self._started = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.startup()  # for hosts that do not run the lifespan protocol
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except AgentlabError as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _route(self, scope: dict[str, Any]) -> Route:
        raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8")
        return match(raw.split(b"?", 1)[0], self.prefix, self.classes)

    # -- HTTP ----------------------------------------------------------------------------------

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            route = self._route(scope)
        except NoRoute as exc:
            await _error(exc.status, str(exc))(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS" and self.cors is not None:
            await Response(None, headers=self.cors)(scope, receive, send)
            return
        response = await self._before(self.on_before_request, Request(scope, receive), route)
        if response is None:
            response = await self._answer(scope, receive, route)
        if self.cors is not None:
            response.headers.update(self.cors)
        await response(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], receive: Any, route: Route) -> Response:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _error(400, "The client went away before sending its request body.")
            body += message.get("body", b"")
            if len(body) > self.max_message_bytes:
                return _error(413, f"A request body may be at most {self.max_message_bytes} bytes.")
            if not message.get("more_body", False):
                break
        try:
            entry = await self.hub.acquire((route.class_name, route.name), route.agent_class, route.name)
        except AgentlabError as exc:
            return _error(423 if isinstance(exc, AgentLockedError) else 500, str(exc))
        request = request_from_scope(scope, route.rest, bytes(body))
        try:
            result = await self.hub.run(entry, _call_on_request, request)
            return to_response(result)
        except Exception as exc:
            report(entry.agent, exc)
            return _error(500, error_text(exc))
        finally:
            self.hub.release(entry)

    # -- WebSocket -----------------------------------------------------------------------------

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        try:
            route = self._route(scope)
        except NoRoute as exc:
            await _deny(scope, receive, send, _error(exc.status, str(exc)))
            return
        response = await self._before(self.on_before_connect, WebSocket(scope, receive, send), route)
        if response is not None:
            await _deny(scope, receive, send, response)
            return
        try:
            entry = await self.hub.acquire((route.class_name, route.name), route.agent_class, route.name)
        except AgentlabError as exc:
            await _deny(scope, receive, send, _error(423 if isinstance(exc, AgentLockedError) else 500, str(exc)))
            return
        try:
            await send({"type": "websocket.accept"})
            sock = ClientSocket(
                self.hub, entry, send, max_message_bytes=self.max_message_bytes, max_queue_bytes=self.max_queue_bytes
            )
            entry.sockets.add(sock)
        finally:
            self.hub.release(entry)
        await sock.serve(receive, request_from_scope(scope, route.rest))

    async def _before(self, hook: Hook | None, conn: Any, route: Route) -> Response | None:
        if hook is None:
            return None
        try:
            result = hook(conn, route)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            return _error(500, f"The {getattr(hook, '__name__', 'before')} hook failed: {error_text(exc)}")
        if result is None or isinstance(result, Response):
            return result
        return _error(500, f"A before-hook must return a Response or None, not {type(result).__name__}.")


def app(classes: type | Iterable[type], **options: Any) -> AgentServer:
    """An ASGI application serving ``classes`` at ``/agents/<kebab-class>/<name>``.

    Args:
        classes: One :class:`~agentlab.Agent` subclass or several (their kebab-case names must differ).
        root: Folder of the agents' files; else ``$AGENTLAB_HOME``, else ``./agentlab-data``.
        prefix: The first path segment(s), ``"agents"`` as upstream.
        cors: True for upstream's permissive CORS headers, or a dict of the headers to send.
        idle_timeout: Seconds after which an agent with no clients and no calls is closed (None: never).
        hibernate_after: Seconds after which an agent whose clients are all idle hibernates: its database and
            caches are released and its sockets stay open; the next frame or request wakes it (None: never).
        on_before_connect: ``hook(websocket, route)`` before an upgrade: return a Response to refuse.
        on_before_request: ``hook(request, route)`` before any other request: return a Response to refuse.
        max_message_bytes: Longest frame or request body accepted (longer ones close with 1009 / get 413).
        max_queue_bytes: Most text queued for one client that does not read before it is dropped.
        threads: Worker threads running agent turns (turns of different agents run at the same time).

    Raises:
        ServeConfigError: A class is not an Agent subclass, two classes share a URL name, or an option is bad.
    """
    return AgentServer(classes, **options)


def class_map(classes: type | Iterable[type]) -> dict[str, type]:
    """The served classes by their URL (kebab-case) name."""
    if isinstance(classes, type):
        classes = [classes]
    found: dict[str, type] = {}
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, Agent)):
            raise ServeConfigError(f"Only Agent subclasses can be served, not {cls!r}.")
        url_name = kebab_case(cls.__name__) or "agent"
        if url_name in found and found[url_name] is not cls:
            raise ServeConfigError(
                f"{found[url_name].__qualname__} and {cls.__qualname__} both serve at /{url_name}; rename one."
            )
        found[url_name] = cls
    if not found:
        raise ServeConfigError("Give at least one Agent subclass to serve.")
    return found


def to_response(value: Any) -> Response:
    """What an ``on_request`` hook returned, as a Response: None is upstream's 404 ``Not implemented``."""
    if isinstance(value, Response):
        return value
    if value is None:
        return PlainTextResponse("Not implemented", status_code=404)
    if isinstance(value, str):
        return PlainTextResponse(value)
    if isinstance(value, (bytes, bytearray)):
        return Response(bytes(value), media_type="application/octet-stream")
    check_json(value, "on_request result")
    return Response(encode(value), media_type="application/json")


def _call_on_request(agent: Any, request: Any) -> Any:
    return agent.on_request(request)


def _cors_headers(cors: bool | dict[str, str]) -> dict[str, str] | None:
    if cors is True:
        return dict(DEFAULT_CORS)
    if isinstance(cors, dict):
        return {str(key): str(value) for key, value in cors.items()}
    if cors is False or cors is None:
        return None
    raise ServeConfigError(f"cors must be True, False or a dict of headers, not {cors!r}.")


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


async def _deny(scope: dict[str, Any], receive: Any, send: Any, response: Response) -> None:
    """Answer a WebSocket upgrade with an HTTP response (a 401, a 404) instead of accepting it."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await response(scope, receive, send)
    else:  # the host cannot send a response body: a plain refusal (403) is all it can say
        await send({"type": "websocket.close", "code": 1008})
