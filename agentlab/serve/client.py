"""A Python client of a served agent, speaking the same protocol as upstream's ``AgentClient``.

For notebooks that talk to an agent in another process, and for tests. It is synchronous: a reader thread
keeps :attr:`AgentClient.state` current and runs the callbacks; :meth:`AgentClient.call` blocks until the
answer comes.

Invariants, as upstream's client:

* ``set_state`` is optimistic: it sends, sets the local state and calls ``on_state(state, "client")``; a
  rejection brings ``on_state_error(message)`` and no corrective state.
* Every call ends exactly once: with its result, an :class:`~agentlab.errors.RpcError`, an
  :class:`~agentlab.errors.RpcTimeoutError` (non-streaming calls time out after 30 s by default), or an
  :class:`~agentlab.errors.AgentConnectionError` when the socket closes first. Answers to unknown ids are
  dropped.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from agentlab.errors import AgentConnectionError, InvalidArgumentError, RpcError, RpcTimeoutError
from agentlab.store import kebab_case

DEFAULT_CALL_TIMEOUT = 30.0
_UNSET: Any = object()


class _Call:
    def __init__(self, method: str, on_chunk: Callable[[Any], None] | None) -> None:
        self.method = method
        self.on_chunk = on_chunk
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class AgentClient:
    """A WebSocket client of one agent: ``state``, ``set_state``, ``call``, ``on_state``.

    Args:
        url: The server (``http://127.0.0.1:8787``) with ``agent`` and ``name``, or an agent's full URL.
        agent: The agent class, or its name (``"Counter"`` and ``"counter"`` both give ``/agents/counter``).
        name: The agent's name (upstream's default is ``"default"``).
        query: Query parameters for the upgrade request (a hook may read them, e.g. a token).
        headers: Extra HTTP headers for the upgrade request (``Authorization``...).
        on_state: ``on_state(state, source)`` with source ``"server"`` or ``"client"``.
        on_state_error: ``on_state_error(message)`` when the agent refused a ``set_state``.
        on_message: ``on_message(frame)`` for every frame received (decoded JSON, or the raw text/bytes).
        wait: Wait for the identity frame (and the state it announces) before returning.
        timeout: Seconds to wait for the connection and the identity.

    Raises:
        AgentConnectionError: The server refused the upgrade (``status`` holds the HTTP status) or cannot be
            reached, or sent no identity in time.
    """

    def __init__(
        self,
        url: str,
        agent: type | str | None = None,
        name: str = "default",
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        on_state: Callable[[Any, str], None] | None = None,
        on_state_error: Callable[[str], None] | None = None,
        on_message: Callable[[Any], None] | None = None,
        wait: bool = True,
        timeout: float = 10.0,
        max_frame_bytes: int | None = 64 * 1024 * 1024,
    ) -> None:
        self.url = agent_ws_url(url, agent, name, query)
        self.on_state = on_state
        self.on_state_error = on_state_error
        self.on_message = on_message
        self.name: str | None = None
        self.agent: str | None = None
        self.state_errors: list[str] = []
        self.frames: deque[Any] = deque(maxlen=10_000)
        self.close_code: int | None = None
        self.close_reason = ""
        self.read_error: BaseException | None = None  # what ended the reader, when it was not a close
        self._state: Any = _UNSET
        self._state_follows = False
        self._identified = False
        self._closed = False
        self._calls: dict[str, _Call] = {}
        self._cond = threading.Condition()
        try:
            self._ws = connect(
                self.url, open_timeout=timeout, additional_headers=headers, max_size=max_frame_bytes, legacy=True
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body.decode("utf-8", "replace") if exc.response.body else ""
            raise AgentConnectionError(
                f"The server refused the connection to {self.url}: HTTP {status} {_error_of(body)}".rstrip(),
                status=status,
            ) from None
        except (OSError, TimeoutError) as exc:
            raise AgentConnectionError(f"Cannot reach {self.url}: {exc}.") from None
        self._reader = threading.Thread(target=self._read, name="agentlab-client", daemon=True)
        self._reader.start()
        if wait and not self.wait_for(lambda c: c.ready, timeout):
            self.close()
            raise AgentConnectionError(
                f"{self.url} sent no identity within {timeout} s (closed: {self.close_code}); if the agent turns "
                "protocol messages off for this client, pass wait=False."
            )

    # -- state -----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the identity (and the state it announced) has arrived."""
        return self._identified and (not self._state_follows or self._state is not _UNSET)

    @property
    def state(self) -> Any:
        """The agent's state as this client last saw it (None before any state arrived)."""
        with self._cond:
            return None if self._state is _UNSET else self._state

    @property
    def has_state(self) -> bool:
        return self._state is not _UNSET

    @property
    def closed(self) -> bool:
        return self._closed

    def set_state(self, state: Any) -> None:
        """Send new state to the agent (optimistic, as upstream: the local state changes at once)."""
        self._send({"state": state, "type": "cf_agent_state"})
        with self._cond:
            self._state = state
            self._cond.notify_all()
        if self.on_state is not None:
            self.on_state(state, "client")

    def send(self, message: str | bytes) -> None:
        """Send a raw frame (the agent's ``on_message`` hook gets what is not protocol)."""
        self._check_open()
        self._ws.send(message)

    # -- RPC -------------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        *args: Any,
        timeout: float | None = _UNSET,
        on_chunk: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call a method the agent marked with ``@rpc()``; returns its result (a stream's final chunk).

        Args:
            method: The method's name.
            *args: JSON arguments.
            timeout: Seconds to wait; default 30 for plain calls and none for streams (``on_chunk`` given).
            on_chunk: Called with each chunk of a streaming method, before the final result returns.

        Raises:
            RpcError: The agent answered with an error (its message).
            RpcTimeoutError: No answer in time.
            AgentConnectionError: The socket closed before the answer.
        """
        if timeout is _UNSET:
            timeout = None if on_chunk is not None else DEFAULT_CALL_TIMEOUT
        call_id = uuid.uuid4().hex
        pending = _Call(method, on_chunk)
        with self._cond:
            self._check_open()
            self._calls[call_id] = pending
        try:
            self._send({"args": list(args), "id": call_id, "method": method, "type": "rpc"})
            if not pending.done.wait(timeout):
                raise RpcTimeoutError(method, f"RPC call to {method} timed out after {timeout} s")
        finally:
            with self._cond:
                self._calls.pop(call_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    # -- waiting and closing ---------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[AgentClient], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate(client)`` holds (checked after every frame); False on timeout or close."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return bool(predicate(self))
                self._cond.wait(remaining)
            return True

    def close(self) -> None:
        """Close the socket; pending calls fail with AgentConnectionError. Safe to call twice."""
        try:
            self._ws.close()
        finally:
            if threading.current_thread() is not self._reader:  # close() from a callback must not wait on itself
                self._reader.join(5)
            self._finish(None, "")

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AgentClient {self.url}{' closed' if self._closed else ''}>"

    # -- internals -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise AgentConnectionError(
                f"The connection to {self.url} is closed (code {self.close_code}); open a new AgentClient.",
                code=self.close_code,
                reason=self.close_reason,
            )

    def _send(self, frame: dict[str, Any]) -> None:
        self._check_open()
        try:
            text = json.dumps(frame, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"Cannot send a value that is not JSON ({exc}).") from None
        try:
            self._ws.send(text)
        except ConnectionClosed:
            self._check_open()
            raise

    def _read(self) -> None:
        code, reason = None, ""
        try:
            while True:
                message = self._ws.recv()
                self._dispatch(message)
        except ConnectionClosed as exc:
            if exc.rcvd is not None:
                code, reason = exc.rcvd.code, exc.rcvd.reason
        except Exception as exc:  # a broken socket or a callback that raised: the client is closed either way
            self.read_error = exc
        self._finish(code, reason)

    def _dispatch(self, message: str | bytes) -> None:
        frame: Any = message
        if isinstance(message, str):
            try:
                frame = json.loads(message)
            except ValueError:
                frame = message
        self.frames.append(frame)
        callback: Callable[[], None] | None = None
        kind = frame.get("type") if isinstance(frame, dict) else None
        with self._cond:
            if kind == "cf_agent_identity":
                self.name, self.agent = frame.get("name"), frame.get("agent")
                self._state_follows = frame.get("stateFollows") is True and self._state is _UNSET
                self._identified = True
            elif kind == "cf_agent_state":
                self._state = frame.get("state")
                if self.on_state is not None:
                    state, hook = self._state, self.on_state
                    callback = lambda: hook(state, "server")  # noqa: E731
            elif kind == "cf_agent_state_error":
                error = str(frame.get("error"))
                self.state_errors.append(error)
                if self.on_state_error is not None:
                    hook_error = self.on_state_error
                    callback = lambda: hook_error(error)  # noqa: E731
            elif kind == "rpc":
                self._answer(frame)
            self._cond.notify_all()
        if callback is not None:
            callback()
        if self.on_message is not None:
            self.on_message(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        pending = self._calls.get(frame.get("id"))  # type: ignore[arg-type]
        if pending is None:
            return  # timed out or unknown: dropped, as upstream
        if not frame.get("success"):
            pending.error = RpcError(pending.method, str(frame.get("error")))
        elif frame.get("done", True) is False:
            if pending.on_chunk is not None:
                pending.on_chunk(frame.get("result"))
            return
        else:
            pending.result = frame.get("result")
        self._calls.pop(frame.get("id"), None)  # type: ignore[arg-type]
        pending.done.set()

    def _finish(self, code: int | None, reason: str) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self.close_code, self.close_reason = code, reason
            calls, self._calls = self._calls, {}
            self._cond.notify_all()
        for pending in calls.values():
            pending.error = AgentConnectionError("Connection closed", code=code, reason=reason)
            pending.done.set()


def agent_ws_url(url: str, agent: type | str | None, name: str, query: dict[str, str] | None = None) -> str:
    """The ``ws://`` URL of an agent, from a server URL with ``agent`` and ``name``, or from its full URL."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None:
        raise InvalidArgumentError(f"{url!r} is not an http(s):// or ws(s):// URL.")
    path = parts.path.rstrip("/")
    if agent is not None:
        class_name = kebab_case(agent.__name__ if isinstance(agent, type) else str(agent))
        path = f"{path}/agents/{class_name}/{quote(name, safe='')}"
    query_string = "&".join(filter(None, [parts.query, urlencode(query or {})]))
    return urlunsplit((scheme, parts.netloc, path, query_string, ""))


def _error_of(body: str) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:200]
