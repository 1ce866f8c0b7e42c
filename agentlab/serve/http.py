"""What an agent's hooks see of a client's request, and where a request is routed.

:class:`HttpRequest` is a plain, already-read copy of an HTTP request (or of a WebSocket's upgrade request),
so a hook can read it from any thread without awaiting. :func:`match` maps a path to an agent the way
upstream's ``routeAgentRequest`` does: ``/<prefix>/<kebab-class>/<name>[/<rest>]``, empty segments skipped.

Invariants: a name is the percent-decoded UTF-8 of its path segment (so ``%2F`` puts a slash in a name and
no name can escape its folder: names map to hashed file names); a segment that is not valid UTF-8 is
refused, never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from agentlab.errors import InvalidArgumentError, InvalidNameError
from agentlab.store import validate_name


@dataclass(frozen=True)
class HttpRequest:
    """A request to an agent: ``path`` is what follows ``/agents/<class>/<name>`` (``""`` or ``"/..."``)."""

    method: str
    url: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    client: tuple[str, int] | None = None

    def text(self) -> str:
        """The body as UTF-8 text."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(f"The request body is not UTF-8 ({exc}).") from None

    def json(self) -> Any:
        """The body parsed as JSON."""
        try:
            return json.loads(self.text())
        except ValueError as exc:
            raise InvalidArgumentError(f"The request body is not JSON ({exc}).") from None


@dataclass(frozen=True)
class Route:
    """Where a request goes: ``agent_class`` under its URL name ``class_name``, instance ``name``."""

    agent_class: type
    class_name: str
    name: str
    rest: str = ""


def request_from_scope(scope: dict[str, Any], rest: str, body: bytes = b"") -> HttpRequest:
    """An :class:`HttpRequest` from an ASGI ``http`` or ``websocket`` scope."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    query_string = scope.get("query_string", b"").decode("latin-1")
    query = dict(parse_qsl(query_string, keep_blank_values=True))
    scheme = scope.get("scheme", "http")
    host = headers.get("host") or "{}:{}".format(*(scope.get("server") or ("127.0.0.1", 80)))
    url = f"{scheme}://{host}{scope.get('path', '')}" + (f"?{query_string}" if query_string else "")
    client = scope.get("client")
    return HttpRequest(
        method=scope.get("method", "GET"),
        url=url,
        path=rest,
        headers=headers,
        query=query,
        body=body,
        client=tuple(client) if client else None,
    )


class NoRoute(Exception):
    """The path names no served agent; ``status`` and the message are what the client is told."""

    def __init__(self, message: str, status: int = 404) -> None:
        self.status = status
        super().__init__(message)


def match(raw_path: bytes, prefix: tuple[str, ...], classes: dict[str, type]) -> Route:
    """The :class:`Route` of a raw (still percent-encoded) request path.

    Raises:
        NoRoute: Not under the prefix, no class of that URL name, or a name that cannot be an agent name.
    """
    parts = [part for part in raw_path.split(b"/") if part]
    try:
        texts = [unquote_to_bytes(part).decode("utf-8") for part in parts]
    except UnicodeDecodeError:
        raise NoRoute("The path is not valid UTF-8 once percent-decoded.") from None
    base = "/" + "/".join(prefix)
    if len(texts) < len(prefix) + 2 or tuple(texts[: len(prefix)]) != prefix:
        raise NoRoute(f"No agent here: agents are served at {base}/<class>/<name>.")
    class_name, name = texts[len(prefix)], texts[len(prefix) + 1]
    cls = classes.get(class_name)
    if cls is None:
        served = ", ".join(sorted(classes)) or "none"
        raise NoRoute(f"No agent class {class_name!r} is served here (served: {served}).")
    try:
        validate_name(name)
    except InvalidNameError as exc:
        raise NoRoute(str(exc)) from None
    rest = "".join("/" + text for text in texts[len(prefix) + 2 :])
    return Route(agent_class=cls, class_name=class_name, name=name, rest=rest)
