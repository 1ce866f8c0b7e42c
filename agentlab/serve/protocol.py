"""One client message, handled inside the agent's turn: upstream's WebSocket protocol on a :class:`Connection`.

A text frame that parses as ``{"type": "cf_agent_state", "state": ...}`` goes to
:meth:`Connection.receive`, which validates, stores and broadcasts through the agent's own code (or
answers ``cf_agent_state_error``). ``{"type": "rpc", "id": str, "method": str, "args": list}`` calls a
method marked with :func:`~agentlab.serve.rpc.rpc`. Anything else (not JSON, another shape, binary)
goes to the agent's ``on_message`` hook, as upstream; nothing is stored for it.

Invariants:

* Every call runs with the connection marked as acting, so a method a readonly client called cannot
  change state.
* Every RPC request gets exactly one final frame (``done: true`` or ``success: false``) unless its
  method is a streaming one that never closes its stream; an exception becomes the error frame.
* Hooks and methods may be ``async``: the handler then returns an awaitable that finishes the job, and the
  server awaits it inside the same turn.

Nothing here imports the server's libraries; the server calls :func:`handle_message` from its worker
threads.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agentlab.agent import Connection
from agentlab.errors import ConnectionClosedError

from .rpc import MethodLookupError, Stream, check_json, resolve

Flush = Callable[[], None]

_NOT_JSON = object()
_log = logging.getLogger("agentlab.serve")


def encode(frame: Any) -> str:
    """The compact JSON text of a frame, as ``JSON.stringify`` writes it."""
    return json.dumps(frame, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def mcp_frame() -> dict[str, Any]:
    """The MCP servers frame upstream sends on connect; agentlab agents have no MCP servers."""
    return {"mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []}, "type": "cf_agent_mcp_servers"}


def parse(text: str) -> Any:
    """The JSON value of ``text``, or a marker object when it is not JSON (too deep counts as not JSON)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def is_state_frame(frame: Any) -> bool:
    return isinstance(frame, dict) and frame.get("type") == "cf_agent_state" and "state" in frame


def is_rpc_frame(frame: Any) -> bool:
    return (
        isinstance(frame, dict)
        and frame.get("type") == "rpc"
        and isinstance(frame.get("id"), str)
        and isinstance(frame.get("method"), str)
        and isinstance(frame.get("args"), list)
    )


def report(agent: Any, error: BaseException) -> None:
    """Hand ``error`` to the agent's ``on_error``; an ``on_error`` that raises is only logged, and so is an error
    with no live agent to hear it (one that could not be opened or woken)."""
    if agent is None:
        _log.warning("%s: %s", type(error).__name__, error)
        return
    try:
        agent.on_error(error)
    except Exception:  # the server must keep serving whatever a hook does (a warning turned error, too)
        _log.exception("%s.on_error raised while handling %s: %s", type(agent).__name__, type(error).__name__, error)


def error_text(error: BaseException) -> str:
    return str(error) or type(error).__name__


def handle_message(agent: Any, connection: Connection, message: str | bytes, flush: Flush) -> Awaitable[None] | None:
    """Handle one frame from ``connection``'s client; returns an awaitable when async code must still run."""
    with connection.acting():
        if isinstance(message, str):
            frame = parse(message)
            if is_state_frame(frame):
                _receive_state(agent, connection, frame)
                return None
            if is_rpc_frame(frame):
                return _call(agent, connection, frame, flush)
        return call_hook(agent, connection, agent.on_message, connection, message)


def _receive_state(agent: Any, connection: Connection, frame: dict[str, Any]) -> None:
    try:
        connection.receive(frame)  # readonly and validation answers are the connection's own
    except ConnectionClosedError:
        raise
    except Exception as exc:  # a failed write (a full disk, a closed file) is a rejection too, as upstream
        report(agent, exc)
        connection.send({"type": "cf_agent_state_error", "error": "State update rejected"})


def call_hook(agent: Any, connection: Connection | None, hook: Callable[..., Any],
              *args: Any) -> Awaitable[None] | None:
    """Run a hook; errors go to ``on_error``. An async hook comes back as an awaitable to finish."""
    try:
        result = hook(*args)
    except Exception as exc:
        report(agent, exc)
        return None
    if inspect.isawaitable(result):
        return _finish_hook(agent, connection, result)
    return None


async def _finish_hook(agent: Any, connection: Connection | None, pending: Awaitable[Any]) -> None:
    try:
        if connection is None:
            await pending
        else:
            with connection.acting():
                await pending
    except Exception as exc:
        report(agent, exc)


def _call(agent: Any, connection: Connection, frame: dict[str, Any], flush: Flush) -> Awaitable[None] | None:
    call_id, method, args = frame["id"], frame["method"], frame["args"]
    try:
        fn, info = resolve(agent, method)
    except MethodLookupError as exc:
        report(agent, exc)
        connection.send(_error_frame(call_id, str(exc)))
        return None
    if info.streaming:
        stream = Stream(connection.send, call_id, flush)
        try:
            result = fn(stream, *args)
        except Exception as exc:
            _stream_failed(agent, stream, exc)
            return None
        if inspect.isawaitable(result):
            return _finish_stream(agent, connection, stream, result)
        return None
    try:
        result = fn(*args)
    except Exception as exc:
        report(agent, exc)
        connection.send(_error_frame(call_id, error_text(exc)))
        return None
    if inspect.isawaitable(result):
        return _finish_call(agent, connection, call_id, result)
    _reply(agent, connection, call_id, result)
    return None


async def _finish_call(agent: Any, connection: Connection, call_id: str, pending: Awaitable[Any]) -> None:
    with connection.acting():
        try:
            result = await pending
        except Exception as exc:
            report(agent, exc)
            connection.send(_error_frame(call_id, error_text(exc)))
            return
    _reply(agent, connection, call_id, result)


async def _finish_stream(agent: Any, connection: Connection, stream: Stream, pending: Awaitable[Any]) -> None:
    with connection.acting():
        try:
            await pending
        except Exception as exc:
            _stream_failed(agent, stream, exc)


def _stream_failed(agent: Any, stream: Stream, error: BaseException) -> None:
    report(agent, error)
    if not stream.closed:  # a method that raises before closing its stream still answers the caller
        stream.error(error_text(error))


def _reply(agent: Any, connection: Connection, call_id: str, result: Any) -> None:
    try:
        check_json(result, "method's result")
    except Exception as exc:
        report(agent, exc)
        connection.send(_error_frame(call_id, error_text(exc)))
        return
    connection.send({"done": True, "id": call_id, "result": result, "success": True, "type": "rpc"})


def _error_frame(call_id: str, message: str) -> dict[str, Any]:
    return {"error": message, "id": call_id, "success": False, "type": "rpc"}
