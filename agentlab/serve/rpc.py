"""Methods a remote client may call over an agent's WebSocket, and the stream a streaming method writes to.

Mark a method with ``@agentlab.rpc()`` (``@agentlab.callable()`` is the same decorator under upstream's
name, for use as an attribute so that Python's builtin ``callable`` is never shadowed). A client then calls
it with ``{"type": "rpc", "id", "method", "args"}`` and gets ``{"type": "rpc", "id", "success", "result",
"done"}`` back. ``@rpc(streaming=True)`` methods receive a :class:`Stream` first and answer with any number
of chunks, then one final frame.

Invariants:

* Only a function defined on the agent's class and marked here can be run by a client; a subclass that
  overrides a marked method without marking it again makes it uncallable, as upstream.
* Looking a method up never runs code of the agent (no property or ``__getattr__`` is evaluated).
* A stream sends nothing after it is closed; every chunk is JSON or the send raises.

This module imports nothing outside the standard library, so agent classes can use the decorator
without the server's libraries installed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agentlab.agent import check_json as check_state_json
from agentlab.errors import InvalidArgumentError, StateNotJSONError

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__agentlab_rpc__"


@dataclass(frozen=True)
class RpcInfo:
    """How a marked method is called: ``streaming`` methods get a :class:`Stream` first."""

    streaming: bool = False
    description: str = ""


def rpc(fn: Any = None, *, streaming: bool = False, description: str = "") -> Any:
    """Mark an agent method as callable by remote clients (upstream's ``@callable()``).

    Use as ``@rpc()``, ``@rpc(streaming=True)`` or bare ``@rpc``. The method may be ``async``.

    Args:
        streaming: The method is called as ``method(stream, *args)`` and answers through the
            :class:`Stream` (``send`` chunks, then ``end`` or ``error``).
        description: Free text kept with the mark (upstream keeps it for tool listings).

    Raises:
        TypeError: What is decorated is not a plain function.
    """
    info = RpcInfo(streaming=bool(streaming), description=str(description))

    def mark(target: F) -> F:
        if not inspect.isfunction(target):
            raise TypeError(
                f"@rpc() marks functions defined in an Agent class, not {type(target).__name__} objects."
            )
        setattr(target, _MARK, info)
        return target

    if fn is not None:
        return mark(fn)
    return mark


def rpc_methods(cls: type) -> dict[str, RpcInfo]:
    """The marked methods of ``cls`` (its own and inherited ones), by name."""
    found: dict[str, RpcInfo] = {}
    for name in dir(cls):
        attr = inspect.getattr_static(cls, name, None)
        info = getattr(attr, _MARK, None) if inspect.isfunction(attr) else None
        if isinstance(info, RpcInfo):
            found[name] = info
    return found


class MethodLookupError(LookupError):
    """The frame names a method the client may not call; the message is the text sent back to it."""


def resolve(agent: Any, method: str) -> tuple[Callable[..., Any], RpcInfo]:
    """The bound method ``method`` of ``agent`` and its mark, if a client may call it.

    Raises:
        MethodLookupError: ``Method <name> does not exist`` (no function of that name on the class) or
            ``Method <name> is not callable`` (a function without the mark), upstream's two texts.
    """
    attr = inspect.getattr_static(type(agent), method, None)
    if not inspect.isfunction(attr):
        raise MethodLookupError(f"Method {method} does not exist")
    info = getattr(attr, _MARK, None)
    if not isinstance(info, RpcInfo):
        raise MethodLookupError(f"Method {method} is not callable")
    return attr.__get__(agent, type(agent)), info


def check_json(value: Any, what: str) -> None:
    """Raise :class:`InvalidArgumentError` unless ``value`` is plain JSON that a frame can carry.

    The check is the state's (:func:`agentlab.agent.check_json`): besides what ``json.dumps`` refuses, a string
    with a lone surrogate is refused too, since the server could not encode the frame as UTF-8.
    """
    try:
        check_state_json(value, what)
    except StateNotJSONError as exc:
        raise InvalidArgumentError(
            f"The {what} is not JSON (at {exc.path}: {exc.reason}); return dicts, lists, str, numbers, bool or None."
        ) from None


class Stream:
    """The answer channel of one streaming call: any number of :meth:`send`, then :meth:`end` or :meth:`error`.

    Every method returns False, and sends nothing, once the stream is closed; a frame for a client that has
    gone away is dropped silently.
    """

    def __init__(self, send: Callable[[dict[str, Any]], None], call_id: str, flush: Callable[[], None] | None = None):
        self._send = send
        self._flush = flush
        self.id = call_id
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`end` or :meth:`error` was called."""
        return self._closed

    def send(self, chunk: Any) -> bool:
        """Send one chunk (``done: false``). Raises :class:`InvalidArgumentError` if it is not JSON."""
        if self._closed:
            return False
        check_json(chunk, "stream chunk")
        self._emit({"done": False, "id": self.id, "result": chunk, "success": True, "type": "rpc"})
        return True

    def end(self, final: Any = None) -> bool:
        """Send the final chunk (``done: true``) and close the stream."""
        if self._closed:
            return False
        check_json(final, "final stream chunk")
        self._closed = True
        self._emit({"done": True, "id": self.id, "result": final, "success": True, "type": "rpc"})
        return True

    def error(self, message: str) -> bool:
        """Send an error (``success: false``) and close the stream."""
        if self._closed:
            return False
        self._closed = True
        self._emit({"error": str(message), "id": self.id, "success": False, "type": "rpc"})
        return True

    def _emit(self, frame: dict[str, Any]) -> None:
        self._send(frame)
        if self._flush is not None:  # chunks go out as they are made, not when the method returns
            self._flush()
