"""From a stored branch to a Messages API request: roles, content blocks, tool pairs and cache breakpoints.

A stored message's ``parts`` are Anthropic content blocks kept as the API returned them; they are sent back as
they are (thinking blocks with their signatures included), because the API checks that an earlier thinking
block and everything before it are unchanged. The conversion therefore only *selects* and *groups*:

* roles ``user`` and ``assistant`` are kept, others skipped; consecutive messages of one role are joined into one
  API message (the API would join them anyway), so a compaction overlay next to an assistant reply is valid;
* Anthropic blocks pass through untouched; upstream AI-SDK parts are translated where cheap (``text``;
  ``tool-<name>``/``dynamic-tool`` become a ``tool_use`` plus its ``tool_result``), and parts that cannot be sent
  (``reasoning`` without a signature, ``step-start``, empty text) are left out;
* every ``tool_use`` gets a ``tool_result`` in the next user message (a stub marked ``is_error`` when the branch
  lost it) and ``tool_result`` blocks whose call is gone are dropped, so the API never sees a broken pair.

Prompt caching: :func:`build_request` marks two breakpoints with ``cache_control`` (ephemeral): the system prompt
(which also covers the tools, since the cached prefix runs tools, system, messages) and the last cacheable block
of the last message, so each step of a tool loop reads the prefix the previous step wrote.

Invariants: nothing here mutates its input (a block that gets ``cache_control`` is copied first); the output is
a pure function of the input, so identical branches give byte-identical requests and a warm cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EPHEMERAL", "MISSING_RESULT_TEXT", "build_request", "call_messages_api", "mark_last_message",
           "to_api_messages"]

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
MISSING_RESULT_TEXT = "[No result was recorded for this tool call on this branch.]"

_ANTHROPIC_TEXT_KEYS = frozenset({"type", "text", "citations", "cache_control"})
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})
_PASS_THROUGH = frozenset({"thinking", "redacted_thinking", "tool_use", "tool_result", "image", "document"})
_DROPPED = frozenset({"reasoning", "step-start", "source-url", "source-document", "file", "tool-result"})


def _is_sdk_tool(kind: str) -> bool:
    return (kind.startswith("tool-") and kind != "tool-result") or kind == "dynamic-tool"


def _sdk_tool_pair(part: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    kind = str(part.get("type"))
    call_id = str(part.get("toolCallId") or "")
    name = part.get("toolName") or (kind[5:] if kind.startswith("tool-") else "tool")
    tool_input = part.get("input")
    use = {"type": "tool_use", "id": call_id, "name": name,
           "input": tool_input if isinstance(tool_input, Mapping) else {}}
    output = part.get("output", part.get("result"))
    if output is None:
        content, is_error = part.get("errorText") or MISSING_RESULT_TEXT, True
    else:
        content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        is_error = part.get("state") == "output-error"
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        result["is_error"] = True
    return use, result


def _convert_parts(role: str, parts: Sequence[Any]) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
    """The API blocks of one message, plus tool results that AI-SDK tool parts carried inline."""
    blocks: list[Mapping[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in parts:
        if type(part) is not dict and not isinstance(part, Mapping):  # exact type first: ABC checks are slow
            continue
        kind = part.get("type")
        if type(kind) is not str or kind in _DROPPED:
            continue
        if kind == "text":
            text = part.get("text")
            if type(text) is not str or not text:
                continue  # the API rejects empty text blocks
            blocks.append(part if part.keys() <= _ANTHROPIC_TEXT_KEYS else {"type": "text", "text": text})
        elif kind in _PASS_THROUGH:
            blocks.append(part)
        elif _is_sdk_tool(kind):
            if role != "assistant" or not part.get("toolCallId"):
                continue
            use, result = _sdk_tool_pair(part)
            blocks.append(use)
            results.append(result)
        else:
            blocks.append(part)  # an Anthropic block: exactly as stored
    return blocks, results


def _append(out: list[dict[str, Any]], role: str, blocks: Sequence[Mapping[str, Any]]) -> None:
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"] = [*out[-1]["content"], *blocks]  # a new list: stored parts lists are never extended
    else:
        out.append({"role": role, "content": list(blocks)})


def _repair_tool_pairs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every tool_use a result in the next user message and drop results whose call is not just before."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for message in messages:
        content = message["content"]
        if message["role"] == "user":
            if not pending and all(b.get("type") != "tool_result" for b in content):
                out.append(message)  # the common case: plain text, nothing to pair
                continue
            answered = {b.get("tool_use_id") for b in content if b.get("type") == "tool_result"}
            stubs = [{"type": "tool_result", "tool_use_id": i, "content": MISSING_RESULT_TEXT, "is_error": True}
                     for i in pending if i not in answered]
            kept = [b for b in content if b.get("type") != "tool_result" or b.get("tool_use_id") in pending]
            if stubs or len(kept) != len(content):
                results = [b for b in kept if b.get("type") == "tool_result"]
                others = [b for b in kept if b.get("type") != "tool_result"]
                content = results + stubs + others  # results must lead the user turn
            pending = []
            if content:
                out.append({"role": "user", "content": content})
            continue
        if pending:  # an assistant message right after unanswered calls: answer them first
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": MISSING_RESULT_TEXT, "is_error": True}
                for i in pending]})
        pending = [str(b.get("id")) for b in content if b.get("type") == "tool_use"]
        out.append(message)
    if pending:
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": i, "content": MISSING_RESULT_TEXT, "is_error": True}
            for i in pending]})
    return out


def to_api_messages(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Convert a branch (root first, overlays applied) to the ``messages`` of a request.

    Args:
        history: Stored messages ``{"id", "role", "parts", ...}``.

    Returns:
        ``[{"role": "user" | "assistant", "content": [block, ...]}, ...]`` with stored blocks passed through
        unchanged (the same dict objects: do not mutate them).
    """
    out: list[dict[str, Any]] = []
    for message in history:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        blocks, results = _convert_parts(role, message.get("parts") or ())
        _append(out, role, blocks)
        _append(out, "user", results)
    return _repair_tool_pairs(out)


def mark_last_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy ``messages`` with an ephemeral ``cache_control`` on the last cacheable block of the last message.

    Thinking blocks cannot carry ``cache_control``; the nearest block before them that can is marked instead.
    Only the marked message and block are copied; the rest are shared with the input.
    """
    if not messages:
        return messages
    last = messages[-1]
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    for i in range(len(content) - 1, -1, -1):
        block = content[i]
        if block.get("type") in _NOT_CACHEABLE:
            continue
        if "cache_control" in block:
            return messages
        marked = list(content)
        marked[i] = {**block, "cache_control": EPHEMERAL}
        return [*messages[:-1], {**last, "content": marked}]
    return messages


def build_request(
    fields: Mapping[str, Any],
    system: str,
    tools: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    *,
    cache: bool = True,
) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.create`` for one step.

    Args:
        fields: ``model``, ``max_tokens`` and pass-through options (``ChatSettings.request_fields()``).
        system: The system prompt; sent as one text block (omitted when empty).
        tools: Tool definitions (``name``, ``description``, ``input_schema``).
        history: The branch to send, root first.
        cache: Place the two ``cache_control`` breakpoints (system and last message).

    Returns:
        The request body as a dict.
    """
    body: dict[str, Any] = dict(fields)
    if system:
        block: dict[str, Any] = {"type": "text", "text": system}
        if cache:
            block["cache_control"] = EPHEMERAL
        body["system"] = [block]
    if tools:
        tool_list = [dict(t) for t in tools]
        if cache and not system:  # no system block to carry the breakpoint: the tools end the stable prefix
            tool_list[-1]["cache_control"] = EPHEMERAL
        body["tools"] = tool_list
    messages = to_api_messages(history)
    body["messages"] = mark_last_message(messages) if cache else messages
    return body


_CREATE_PARAMS: frozenset[str] | None = None


def _split_extra(body: dict[str, Any]) -> dict[str, Any]:
    """Move request fields the SDK's ``create`` does not name into ``extra_body`` (new API options)."""
    global _CREATE_PARAMS
    if _CREATE_PARAMS is None:
        import inspect

        from anthropic.resources.messages import Messages

        _CREATE_PARAMS = frozenset(inspect.signature(Messages.create).parameters) - {"self"}
    unknown = {k: body.pop(k) for k in list(body) if k not in _CREATE_PARAMS}
    if unknown:
        body["extra_body"] = {**body.get("extra_body", {}), **unknown}
    return body


def call_messages_api(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One ``messages.create`` call; returns the response body as JSON (the content blocks as sent by the API).

    Raises:
        ModelAPIError and subclasses, NoApiKeyError: the SDK's error, translated (``__cause__`` keeps it).
    """
    try:
        messages = client.messages
        raw_api = getattr(messages, "with_raw_response", None)
        if raw_api is not None:
            raw = raw_api.create(**_split_extra(dict(body)))
            return raw.http_response.json()
        response = messages.create(**body)  # a duck-typed client: take its parsed object
        return response if isinstance(response, dict) else response.to_dict()
    except Exception as exc:
        from agentlab.chat._settings import translate_api_error

        translated = translate_api_error(exc)
        if translated is exc:
            raise
        raise translated from exc
