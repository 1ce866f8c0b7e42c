"""Running the server: in the foreground for ``agentlab serve``, or on a thread of a notebook's process.

:func:`start` serves on a background thread and returns at once with a :class:`ServerHandle`; the notebook
and the server then share the same live agents, so a widget and a browser watch one agent. ``stop()`` shuts
the server down cleanly: clients get close code 1001, the agents it opened are closed, and their files hold
everything stored.

Invariants: both take the root folder's lock before they listen, so a second server on the same root fails
with :class:`~agentlab.errors.ServeRootLockedError` before it takes a port; both bind 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from typing import Any

import uvicorn
from uvicorn.config import LOG_LEVELS

from agentlab.errors import ServeConfigError, ServeError
from agentlab.store import kebab_case

from .hub import default_holder
from .server import AgentServer, app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787


class ServerHandle:
    """A server running on a background thread: ``url``, ``agent_url(cls, name)``, ``stop()``."""

    def __init__(self, server: AgentServer, uv: uvicorn.Server, thread: threading.Thread, host: str, port: int):
        self.app = server
        self._uv = uv
        self._thread = thread
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """The server's base URL, such as ``http://127.0.0.1:8787``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def agent_url(self, cls: type, name: str, *, websocket: bool = False) -> str:
        """The URL of agent ``name`` of ``cls`` (``ws://`` with ``websocket=True``); ``name`` is percent-encoded."""
        from urllib.parse import quote

        base = self.url.replace("http://", "ws://", 1) if websocket else self.url
        return f"{base}/{'/'.join(self.app.prefix)}/{kebab_case(cls.__name__)}/{quote(name, safe='')}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def hibernate(self, cls: type, name: str, timeout: float = 10.0) -> bool:
        """Hibernate agent ``name`` of ``cls`` now, as the server does after ``hibernate_after``; returns whether it
        did (see :meth:`AgentServer.hibernate`)."""
        import asyncio

        loop = self._uv_loop()
        return asyncio.run_coroutine_threadsafe(self.app.hibernate(cls, name), loop).result(timeout)

    def stats(self) -> dict[str, int]:
        """The server's counts (see :meth:`AgentServer.stats`)."""
        return self.app.stats()

    def _uv_loop(self) -> Any:
        loop = self.app.hub.outbox.loop if self.app.hub.outbox is not None else None
        if loop is None or not self.running:
            raise ServeError("The server is not running.")
        return loop

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down and wait for it (at most ``timeout`` seconds). Safe to call twice."""
        self._uv.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._uv.force_exit = True
            self._thread.join(timeout)

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ServerHandle {self.url}{'' if self.running else ' stopped'}>"


def start(
    classes: type | Iterable[type],
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    log_level: str = "warning",
    idle_timeout: float | None = None,
    hibernate_after: float | None = None,
    compression: bool = False,
    **options: Any,
) -> ServerHandle:
    """Serve ``classes`` on a background thread; returns once the server accepts connections.

    Args:
        classes: Agent subclasses, as for :func:`agentlab.serve.app`.
        host: Interface to bind; 127.0.0.1 keeps the agents to this machine.
        port: Port to bind; 0 picks a free one (see ``handle.url``).
        log_level: uvicorn's log level.
        idle_timeout: Seconds before an agent nobody uses is closed. None (the default here) keeps agents open,
            since the notebook shares them with the server.
        hibernate_after: Seconds of idle clients before an agent hibernates; None (the default here) keeps agents
            awake for the same reason. ``handle.hibernate(cls, name)`` hibernates one at once.
        compression: Accept clients' offer of permessage-deflate. Off by default, as in Node's ``ws`` server:
            its zlib streams cost about 46 KB per connection, more than everything else an idle connection
            holds, and each frame broadcast is then compressed once per client.
        **options: The other options of :func:`agentlab.serve.app` (root, cors, hooks, limits).

    Raises:
        ServeRootLockedError: Another server serves the root folder.
        ServeConfigError: A bad port or log level, or a root that cannot be a folder.
        ServeError: The port cannot be bound, or the server did not come up.
    """
    _check(port, log_level, compression)
    server = app(classes, idle_timeout=idle_timeout, hibernate_after=hibernate_after, **options)
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    try:
        server.lock_root(f"{default_holder()}, http://{host}:{bound_port}")
    except BaseException:
        sock.close()
        raise
    uv = uvicorn.Server(_config(server, host, bound_port, log_level, compression))
    thread = threading.Thread(target=_serve, args=(uv, sock), name=f"agentlab-serve-{bound_port}", daemon=True)
    thread.start()
    handle = ServerHandle(server, uv, thread, host, bound_port)
    while not uv.started:
        if not thread.is_alive():
            server.release_root()
            raise ServeError(f"The server on {handle.url} stopped while starting; see its log above.")
        thread.join(0.01)
    return handle


def run(classes: type | Iterable[type], *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
        log_level: str = "info", announce: Any = None, compression: bool = False, **options: Any) -> None:
    """Serve ``classes`` in the foreground until interrupted (``agentlab serve``).

    ``announce(url)`` is called once the port is bound, before serving; ``compression`` is as for :func:`start`.
    """
    _check(port, log_level, compression)
    server = app(classes, **options)
    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    try:
        server.lock_root(f"{default_holder()}, http://{host}:{bound_port}")
    except BaseException:
        sock.close()
        raise
    if announce is not None:
        announce(f"http://{host}:{bound_port}", server)
    uv = uvicorn.Server(_config(server, host, bound_port, log_level, compression))
    uv.run(sockets=[sock])


def _check(port: Any, log_level: Any, compression: Any = False) -> None:
    """Refuse a port or log level uvicorn cannot use before anything is bound or locked.

    Raises:
        ServeConfigError: The port is not a whole number from 0 to 65535, or the log level is not uvicorn's.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ServeConfigError(f"The port must be a whole number from 0 to 65535, not {port!r}.")
    if not isinstance(log_level, str) or log_level.lower() not in LOG_LEVELS:
        raise ServeConfigError(f"The log level must be one of {', '.join(LOG_LEVELS)}, not {log_level!r}.")
    if not isinstance(compression, bool):
        raise ServeConfigError(f"compression must be True or False, not {compression!r}.")


def _config(server: AgentServer, host: str, port: int, log_level: str, compression: bool) -> uvicorn.Config:
    return uvicorn.Config(
        server,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        ws="websockets-sansio",
        ws_per_message_deflate=compression,
        ws_max_size=server.max_message_bytes,  # refuse a long frame while it arrives, not once it is buffered
        timeout_graceful_shutdown=5,
    )


def _serve(uv: uvicorn.Server, sock: socket.socket) -> None:
    uv.run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"Cannot listen on {host}:{port} ({exc.strerror or exc}); check the host, or choose another "
                         "port.") from None
    sock.listen(2048)  # clients that come before uvicorn runs wait in the backlog instead of being refused
    return sock
