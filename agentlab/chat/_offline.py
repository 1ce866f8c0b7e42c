"""An offline stand-in for the Messages API: the real ``anthropic`` SDK talking to an in-process transport.

:class:`OfflineClaude` plugs into the SDK as an ``httpx2.MockTransport``, so every layer above it (request
encoding, retries, error classes, response parsing) is the real code. It records every request body, answers
with realistic response bodies (``msg_`` ids, content blocks, stop reasons, and usage with cache fields), and
simulates the prompt cache: a prefix ending at a ``cache_control`` breakpoint is written once and read back by a
later request that repeats it, looking back up to 20 blocks like the API. Token counts are estimates (4
characters per token), not the API's tokenizer.

What answers is a *responder*: ``responder(request_body) -> reply``, where a reply is a response-body dict (see
:func:`message_body`), a list of content blocks, a string, or an :class:`APIErrorReply`. The default responder,
:func:`rule_based_responder`, is a tiny deterministic "model" for notebooks and demos without a key: it stores
what the user asks it to remember through ``set_context`` and answers from the memory in the system prompt.

Invariants: nothing here touches the network; recorded request bodies are the exact bytes the SDK sent, parsed;
the simulated cache state is per :class:`OfflineClaude` instance, so two instances never share hits.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "APIErrorReply",
    "OfflineClaude",
    "message_body",
    "rule_based_responder",
]

_ALPHABET = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_LOOKBACK = 20  # the API checks this many blocks before a breakpoint for an earlier cache entry


def _estimate(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return max(1, (len(text) + 3) // 4)


@dataclass
class APIErrorReply:
    """An HTTP error the offline API answers with, shaped like the real one.

    Attributes:
        status: HTTP status (429 rate limit, 529 overloaded, 400 invalid request, 500 ...).
        error_type: ``error.type`` in the body; derived from the status when empty.
        message: ``error.message``.
        retry_after_ms: Sent as ``retry-after-ms`` so the SDK's retry waits this long (keeps tests fast).
    """

    status: int
    error_type: str = ""
    message: str = ""
    retry_after_ms: int | None = 1
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, request_id: str) -> dict[str, Any]:
        kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}
        kind = self.error_type or kinds.get(self.status, "api_error")
        text = self.message or {"overloaded_error": "Overloaded", "rate_limit_error": "Rate limited"}.get(kind, kind)
        return {"type": "error", "error": {"type": kind, "message": text}, "request_id": request_id}


def message_body(
    content: list[dict[str, Any]],
    *,
    stop_reason: str | None = None,
    model: str = "claude-haiku-5-5",
    usage: Mapping[str, Any] | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """A Messages API response body around ``content``.

    Args:
        content: Content blocks, as the API returns them.
        stop_reason: Defaults to ``"tool_use"`` if a block is a ``tool_use``, else ``"end_turn"``.
        model: Echoed model id.
        usage: Usage fields; :class:`OfflineClaude` fills in estimates for missing ones.
        message_id: ``msg_...`` id; generated when None.
    """
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
    return {
        "id": message_id or "msg_01" + "".join(random.choices(_ALPHABET, k=22)),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage or {}),
    }


class _PromptCache:
    """Prefix cache keyed by a running hash over the request's blocks in API order: tools, system, messages."""

    def __init__(self, min_tokens: int) -> None:
        self.min_tokens = min_tokens
        self.entries: set[str] = set()

    @staticmethod
    def _blocks(body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
        out: list[tuple[str, dict[str, Any], bool]] = []
        for tool in body.get("tools") or ():
            out.append(("tool", tool, "cache_control" in tool))
        system = body.get("system")
        if isinstance(system, str) and system:
            out.append(("system", {"type": "text", "text": system}, False))
        for block in system if isinstance(system, list) else ():
            out.append(("system", block, "cache_control" in block))
        for i, message in enumerate(body.get("messages") or ()):
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
            for block in blocks:
                out.append((f"{i}:{message.get('role')}", block, "cache_control" in block))
        if body.get("cache_control") and out:  # top-level automatic caching marks the last block
            out[-1] = (out[-1][0], out[-1][1], True)
        return out

    def usage(self, body: Mapping[str, Any]) -> dict[str, int]:
        blocks = self._blocks(body)
        hashes, cumulative = [], []
        digest, tokens = hashlib.sha256(), 0
        for where, block, _ in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(where.encode() + json.dumps(plain, sort_keys=True).encode())
            hashes.append(digest.copy().hexdigest())
            tokens += _estimate(plain)
            cumulative.append(tokens)
        total = tokens + 3 * len(body.get("messages") or ())  # per-message framing
        breakpoints = [i for i, (_, _, marked) in enumerate(blocks) if marked]
        hit = -1
        for b in breakpoints:
            for j in range(b, max(-1, b - _LOOKBACK), -1):
                if hashes[j] in self.entries:
                    hit = max(hit, j)
                    break
        read = cumulative[hit] if hit >= 0 else 0
        write = 0
        if breakpoints and breakpoints[-1] > hit and cumulative[breakpoints[-1]] >= self.min_tokens:
            write = cumulative[breakpoints[-1]] - read
        for b in breakpoints:
            if cumulative[b] >= self.min_tokens:
                self.entries.add(hashes[b])
        return {"input_tokens": max(0, total - read - write), "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write}


class OfflineClaude:
    """The Messages API, offline: a responder behind the real SDK, with recorded requests and a simulated cache.

    Example:
        >>> offline = OfflineClaude()
        >>> agent.use_client(offline.client())      # doctest: +SKIP
        >>> offline.requests[-1]["system"]          # doctest: +SKIP

    Args:
        responder: ``body -> reply`` (see the module docstring); defaults to :func:`rule_based_responder`.
        min_cacheable_tokens: Prefixes shorter than this are not cached (the API's minimum is 1,024-4,096
            depending on the model; 0 caches everything, which makes small tests show cache hits).
        seed: Seed for the generated ids, so runs are reproducible.
    """

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], Any] | None = None,
        *,
        min_cacheable_tokens: int = 0,
        seed: int = 0,
    ) -> None:
        self.responder = responder or rule_based_responder
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self.responses: list[dict[str, Any]] = []
        self.cache = _PromptCache(min_cacheable_tokens)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def _id(self, prefix: str) -> str:
        return prefix + "".join(self._random.choices(_ALPHABET, k=22))

    def _normalise(self, reply: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(reply, str):
            reply = [{"type": "text", "text": reply}]
        if isinstance(reply, list):
            reply = message_body(reply, model=str(body.get("model")))
        reply = json.loads(json.dumps(reply))  # a copy the caller cannot mutate afterwards
        if "id" not in reply or not str(reply["id"]).startswith("msg_"):
            reply["id"] = self._id("msg_01")
        for block in reply.get("content") or ():
            if block.get("type") == "tool_use" and not block.get("id"):
                block["id"] = self._id("toolu_01")
        usage = reply.setdefault("usage", {})
        simulated = self.cache.usage(body)
        for key, value in simulated.items():
            usage.setdefault(key, value)
        usage.setdefault("output_tokens", sum(_estimate(b) for b in reply.get("content") or ()))
        usage.setdefault("cache_creation", {"ephemeral_5m_input_tokens": usage["cache_creation_input_tokens"],
                                            "ephemeral_1h_input_tokens": 0})
        usage.setdefault("service_tier", "standard")
        return reply

    def handler(self, request: Any) -> Any:
        """The ``httpx2.MockTransport`` handler: record, respond, simulate usage."""
        import httpx2

        raw = bytes(request.content)
        body = json.loads(raw) if raw else {}
        with self._lock:
            self.raw_requests.append(raw)
            self.requests.append(body)
            request_id = "req_01" + "".join(self._random.choices(_ALPHABET, k=22))
            reply = self.responder(body)
            if isinstance(reply, APIErrorReply):
                headers = {"request-id": request_id, **reply.headers}
                if reply.retry_after_ms is not None:
                    headers["retry-after-ms"] = str(reply.retry_after_ms)
                return httpx2.Response(reply.status, json=reply.body(request_id), headers=headers)
            response = self._normalise(reply, body)
            self.responses.append(response)
        return httpx2.Response(200, json=response, headers={"request-id": request_id})

    def client(self, *, max_retries: int = 2, **options: Any) -> Any:
        """A real ``anthropic.Anthropic`` client whose HTTP goes to this object (no network)."""
        import anthropic
        import httpx2

        transport = httpx2.MockTransport(self.handler)
        return anthropic.Anthropic(
            api_key="offline", max_retries=max_retries,
            http_client=anthropic.DefaultHttpxClient(transport=transport), **options,
        )


# --- a tiny deterministic "model" for demos -----------------------------------------------------------

_REMEMBER = re.compile(r"^\s*(?:please\s+)?(?:remember|note)(?:\s+that)?[:,]?\s+(?P<fact>.+?)\s*$", re.I | re.S)
_WORD = re.compile(r"[a-z0-9']+")
_STOP = frozenset([
    "a", "an", "the", "is", "are", "am", "was", "i", "you", "my", "your", "me", "do", "does", "what", "which",
    "who", "to", "of", "and", "or", "in", "on", "for", "it", "about", "know", "tell", "remember", "should", "could",
    "would", "can"
])


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or () if isinstance(b, Mapping) and b.get("type") == "text")


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else "\n".join(b.get("text", "") for b in system or ())


def _block_lines(prompt: str) -> list[str]:
    """Content lines of the context blocks in a rendered prompt: no instructions, frames or headers."""
    lines = prompt.splitlines()
    framed = [i for i, ln in enumerate(lines) if ln.startswith("\u2550")]
    headers = {i + 1 for i in framed if i + 2 in framed}
    start = framed[0] if framed else len(lines)
    return [ln.strip() for i, ln in enumerate(lines) if i > start and i not in framed and i not in headers
            and ln.strip()]


def _memory_label(tools: Iterable[Mapping[str, Any]]) -> str | None:
    for tool in tools:
        if tool.get("name") == "set_context":
            labels = tool.get("input_schema", {}).get("properties", {}).get("label", {}).get("enum") or []
            return "memory" if "memory" in labels else (labels[0] if labels else None)
    return None


def rule_based_responder(body: Mapping[str, Any]) -> Any:
    """A deterministic stand-in for Claude, good enough to demonstrate memory offline.

    * "remember X" (or "note that X") with a writable block available: calls ``set_context`` to append X.
    * After a tool result: a short confirmation.
    * Otherwise: quotes the system-prompt lines that share words with the question, or says it has nothing.
    """
    messages = body.get("messages") or []
    last = messages[-1] if messages else {"content": ""}
    content = last.get("content")
    if isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content):
        return [{"type": "text", "text": "Noted - it is in my memory now."}]
    question = _text_of(content)
    wanted = _REMEMBER.match(question)
    label = _memory_label(body.get("tools") or ())
    if wanted and label:
        fact = wanted.group("fact").rstrip(".") + "."
        return [
            {"type": "text", "text": "I'll remember that."},
            {"type": "tool_use", "id": "", "name": "set_context",
             "input": {"label": label, "content": fact, "action": "append"}},
        ]
    words = set(_WORD.findall(question.lower())) - _STOP
    hits = [ln for ln in _block_lines(_system_text(body)) if words & set(_WORD.findall(ln.lower()))]
    if hits:
        return [{"type": "text", "text": "From my memory: " + " ".join(hits[:3])}]
    return [{"type": "text", "text": f"(offline model) I have nothing stored about that. You said: {question[:200]}"}]
