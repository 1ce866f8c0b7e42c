"""A scripted Messages API for tests: the real ``anthropic`` SDK over ``httpx2.MockTransport``.

:class:`ScriptedClaude` answers each request with the next item of its script: a response body (build one with
:func:`reply` from :func:`text`, :func:`tool_use`, :func:`thinking` blocks), an :class:`APIErrorReply`
(:func:`overloaded`, :func:`rate_limited`, :func:`invalid_request`), or a callable ``body -> item``. Every request
body is recorded (``.requests``, parsed; ``.raw_requests``, bytes), and usage comes back with realistic cache
fields from the simulated prompt cache of :class:`agentlab.chat._offline.OfflineClaude`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from agentlab.chat._offline import APIErrorReply, OfflineClaude, message_body

__all__ = [
    "APIErrorReply", "ScriptedClaude", "invalid_request", "overloaded", "rate_limited", "redacted_thinking", "reply",
    "text", "thinking", "tool_use",
]


def text(value: str) -> dict[str, Any]:
    """A text block as the API returns it (with ``citations: null``)."""
    return {"type": "text", "text": value, "citations": None}


def tool_use(name: str, input: Mapping[str, Any], *, id: str = "") -> dict[str, Any]:
    """A tool_use block; an empty id is filled with a ``toolu_01...`` id by the mock."""
    return {"type": "tool_use", "id": id, "name": name, "input": dict(input)}


def thinking(value: str, *, signature: str | None = None) -> dict[str, Any]:
    """A thinking block with an opaque base64 signature (derived from the text unless given)."""
    if signature is None:
        digest = hashlib.sha512(value.encode()).digest() * 3
        signature = "Er" + base64.b64encode(digest).decode()
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted_thinking(data: str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP") -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


def reply(*blocks: Mapping[str, Any], stop_reason: str | None = None, model: str = "claude-haiku-5-5",
          usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A response body; the stop reason defaults to ``tool_use`` when a block is a tool call, else ``end_turn``."""
    return message_body([dict(b) for b in blocks], stop_reason=stop_reason, model=model, usage=usage)


def overloaded() -> APIErrorReply:
    return APIErrorReply(529, "overloaded_error", "Overloaded")


def rate_limited(retry_after_ms: int = 1) -> APIErrorReply:
    return APIErrorReply(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                         retry_after_ms=retry_after_ms)


def invalid_request(message: str = "messages: roles must alternate") -> APIErrorReply:
    return APIErrorReply(400, "invalid_request_error", message, retry_after_ms=None)


class ScriptedClaude(OfflineClaude):
    """Answers requests with a script, in order; ``default`` answers once the script is used up.

    Without a default, a request past the end gets a 500 that the SDK does not retry, saying so.
    """

    def __init__(self, *script: Any, default: Any = None, min_cacheable_tokens: int = 0) -> None:
        self.script: deque[Any] = deque(script)
        self.default = default
        super().__init__(self._next, min_cacheable_tokens=min_cacheable_tokens)

    def _next(self, body: dict[str, Any]) -> Any:
        item = self.script.popleft() if self.script else self.default
        if item is None:
            return APIErrorReply(500, "api_error", f"anthropic_mock: no scripted reply for request "
                                 f"#{len(self.requests)}", retry_after_ms=None, headers={"x-should-retry": "false"})
        return item(body) if callable(item) and not isinstance(item, APIErrorReply) else item

    def client(self, *, max_retries: int = 2, **options: Any) -> Any:
        return super().client(max_retries=max_retries, **options)

    def dumps(self, i: int = -1) -> str:
        """A recorded request as canonical JSON text (for substring checks)."""
        return json.dumps(self.requests[i], ensure_ascii=False, sort_keys=True)


def echo(body: Mapping[str, Any]) -> dict[str, Any]:
    """A responder that answers with the last user text (for load and isolation tests)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        said = content
    else:
        said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return reply(text(f"echo: {said}"))


Responder = Callable[[dict[str, Any]], Any]
