"""Messages in the formats researchers have: OpenAI Chat Completions and Anthropic Messages lists.

agentlab stores a message as ``{"id", "role", "parts"}`` with Anthropic content blocks as parts. This module
converts whole conversations both ways, keeping their order and their tool pairs:

* **OpenAI**: ``{"role": "system" | "developer" | "user" | "assistant" | "tool", "content": str | [parts]}``;
  an assistant's ``tool_calls`` (``{"id", "type": "function", "function": {"name", "arguments": JSON text}}``)
  become ``tool_use`` blocks, and each ``{"role": "tool", "tool_call_id", "content"}`` a ``tool_result`` block.
  Consecutive tool messages become one user message, as the Anthropic API wants them.
* **Anthropic**: ``{"role": "user" | "assistant", "content": str | [blocks]}``; blocks are kept as they are
  (``cache_control`` and thinking signatures included). A request body ``{"system", "messages"}`` is accepted.

Both carry a system prompt as a ``{"role": "system", "content": "..."}`` message (OpenAI's own form; for
Anthropic a common convention in datasets), stored with role ``"system"``. Imported messages get new ids.

Invariants: a conversion either returns every message or raises
:class:`~agentlab.errors.ConversationFormatError` naming the message (by position) and what to change; a tool
result must answer a call made earlier in the conversation and not yet answered. Exporting drops what the target
format cannot hold (thinking blocks for OpenAI, ``is_error`` flags for OpenAI) and refuses parts it cannot
represent at all, naming them. ``import(export(x))`` gives back the same parts for messages made of text, images,
tool calls and tool results.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentlab.errors import ConversationFormatError

__all__ = ["FORMATS", "detect_format", "from_anthropic", "from_chat_message", "from_openai", "to_anthropic",
           "to_openai"]

FORMATS = ("openai", "anthropic")

_OPENAI_ONLY_ROLES = {"tool", "developer", "function"}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"}
_OPENAI_PARTS = {"image_url", "input_audio", "file", "refusal"}
_DROPPED_IN_OPENAI = {"thinking", "redacted_thinking", "reasoning", "step-start"}


def _fail(index: int | None, problem: str) -> ConversationFormatError:
    where = f"Message {index}" if index is not None else "The message"
    return ConversationFormatError(f"{where}: {problem} Nothing was stored.")


def _new_id() -> str:
    return uuid.uuid4().hex


def detect_format(messages: Sequence[Any]) -> str:
    """``"openai"`` or ``"anthropic"``, from roles, keys and block types; text-only lists read the same in both.

    Raises:
        ConversationFormatError: The list mixes signs of both formats.
    """
    openai = anthropic = False
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        kinds = {b.get("type") for b in content if isinstance(b, Mapping) and isinstance(b.get("type"), str)} \
            if isinstance(content, list) else set()
        role = message.get("role")
        openai |= (isinstance(role, str) and role in _OPENAI_ONLY_ROLES) or "tool_calls" in message \
            or bool(kinds & _OPENAI_PARTS)
        anthropic |= bool(kinds & _ANTHROPIC_BLOCKS)
    if openai and anthropic:
        raise ConversationFormatError("These messages mix OpenAI (tool_calls, role 'tool', image_url) and Anthropic "
                                      "(tool_use, tool_result blocks) shapes; pass format='openai' or 'anthropic'.")
    return "anthropic" if anthropic else "openai"


# -- into stored messages -------------------------------------------------------------------------------------------


def _text_of(content: Any, index: int | None, what: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "\n\n".join(p["text"] for p in content)
    raise _fail(index, f"{what} content must be a string or a list of text parts; got {content!r:.80}.")


def _image_from_url(url: Any, index: int | None) -> dict[str, Any]:
    if not isinstance(url, str):
        raise _fail(index, "an image_url part needs {'image_url': {'url': ...}}.")
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _openai_parts(content: Any, index: int | None) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _fail(index, f"'content' must be a string, a list of parts or null; got {type(content).__name__}.")
    parts = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(dict(part))  # as it is: in a text-only list it may be an Anthropic block (cache_control)
        elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
            parts.append(_image_from_url(part["image_url"].get("url"), index))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        else:
            raise _fail(index, f"content part {part!r:.80} is not supported (text and image_url parts are).")
    return parts


def _tool_use(call: Any, index: int | None) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(call.get("id"), str) or \
            not isinstance(function.get("name"), str):
        raise _fail(index, "each tool call needs {'id': str, 'type': 'function', 'function': {'name': str, "
                           "'arguments': JSON text}}.")
    arguments = function.get("arguments") or "{}"
    try:
        data = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise _fail(index, f"tool call {call['id']!r} has arguments that are not a JSON object: {arguments!r:.80}.")
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": data}


def _from_openai_one(message: Any, index: int | None) -> dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise _fail(index, f"an OpenAI message is {{'role': ..., 'content': ...}}; got {message!r:.80}.")
    role, content = message["role"], message.get("content")
    if role in ("system", "developer"):
        return {"role": "system", "parts": [{"type": "text", "text": _text_of(content, index, "a system message's")}]}
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise _fail(index, "a 'tool' message needs the 'tool_call_id' of the call it answers.")
        if not isinstance(content, str):
            content = [{"type": "text", "text": _text_of(content, index, "a tool message's")}]
        return {"role": "user", "parts": [{"type": "tool_result", "tool_use_id": call_id, "content": content}]}
    if role == "function" or "function_call" in message:
        raise _fail(index, "legacy 'function' messages and 'function_call' are not supported; use 'tool_calls' and "
                           "'tool' messages.")
    parts = _openai_parts(content, index)
    if role == "assistant":
        parts += [_tool_use(call, index) for call in message.get("tool_calls") or ()]
    return {"role": role, "parts": parts}


def _anthropic_parts(content: Any, index: int | None) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _fail(index, f"'content' must be a string or a list of content blocks; got {type(content).__name__}.")
    blocks = []
    for block in content:
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _fail(index, f"each content block is a dict with a 'type'; got {block!r:.80}.")
        kind = block["type"]
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                                       and isinstance(block.get("input"), Mapping)):
            raise _fail(index, "a tool_use block needs a string 'id' and 'name' and an object 'input'.")
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise _fail(index, "a tool_result block needs the 'tool_use_id' of the call it answers.")
        blocks.append(dict(block))
    return blocks


def _from_anthropic_one(message: Any, index: int | None) -> dict[str, Any]:
    if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant", "system"):
        raise _fail(index, f"an Anthropic message is {{'role': 'user' | 'assistant', 'content': ...}}; got "
                           f"{message!r:.80}.")
    if message["role"] == "system":
        return {"role": "system", "parts": [{"type": "text", "text": _text_of(message.get("content"), index,
                                                                              "a system message's")}]}
    return {"role": message["role"], "parts": _anthropic_parts(message.get("content"), index)}


def from_chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI or Anthropic message (``{"role", "content"}``) as a stored message, with a new id unless it has
    a string ``id``; ``created_at`` and ``metadata`` are kept.

    Raises:
        ConversationFormatError: The message is in neither shape.
    """
    convert = _from_anthropic_one if detect_format([message]) == "anthropic" else _from_openai_one
    mid = message.get("id")
    converted = {"id": mid if isinstance(mid, str) and mid else _new_id(), **convert(message, None)}
    converted.update((key, message[key]) for key in ("created_at", "metadata") if key in message)
    return converted


def _check_pairs(messages: list[dict[str, Any]]) -> None:
    """Every tool_result answers an earlier, unanswered tool_use (whatever the source format)."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        for part in message["parts"]:
            if part.get("type") == "tool_use":
                if part["id"] in open_calls:
                    raise _fail(index, f"tool call id {part['id']!r} is used twice; ids must be unique.")
                open_calls.add(part["id"])
            elif part.get("type") == "tool_result":
                if part["tool_use_id"] not in open_calls:
                    raise _fail(index, f"the result for tool call {part['tool_use_id']!r} answers no earlier, "
                                       "unanswered call; check its id and the message order.")
                open_calls.discard(part["tool_use_id"])


def _stored(converted: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": _new_id(), **m} for m in converted]


def from_openai(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions messages as stored messages (new ids), consecutive tool messages merged.

    Raises:
        ConversationFormatError: A message is not in OpenAI's shape, or a tool result answers no open call.
    """
    out: list[dict[str, Any]] = []
    tool_run = False
    for index, message in enumerate(messages):
        converted = _from_openai_one(message, index)
        is_tool = isinstance(message, Mapping) and message.get("role") == "tool"
        if is_tool and tool_run:
            out[-1]["parts"].extend(converted["parts"])
        else:
            out.append(converted)
        tool_run = is_tool
    _check_pairs(out)
    return _stored(out)


def from_anthropic(messages: Sequence[Any] | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Anthropic Messages API messages (a list, or a request body with ``system`` and ``messages``) as stored
    messages with new ids.

    Raises:
        ConversationFormatError: A message is not in Anthropic's shape, or a tool result answers no open call.
    """
    if isinstance(messages, Mapping):
        system, listed = messages.get("system"), messages.get("messages")
        if not isinstance(listed, list):
            raise ConversationFormatError("A request body needs a 'messages' list. Nothing was stored.")
        messages = [{"role": "system", "content": system}, *listed] if system else listed
    out = [_from_anthropic_one(message, index) for index, message in enumerate(messages)]
    _check_pairs(out)
    return _stored(out)


# -- out of stored messages -----------------------------------------------------------------------------------------


def _is_sdk_tool(part: Mapping[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool") and "toolCallId" in part


def _sdk_call(part: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An AI-SDK tool part as an Anthropic ``tool_use`` block and, if it has an output, its ``tool_result``."""
    name = part.get("toolName") or str(part["type"])[5:]
    use = {"type": "tool_use", "id": part["toolCallId"], "name": name, "input": part.get("input") or {}}
    if part.get("state") != "output-available":
        return use, None
    output = part.get("output", part.get("result"))
    content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return use, {"type": "tool_result", "tool_use_id": part["toolCallId"], "content": content}


def _blocks(message: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A stored message's parts as Anthropic blocks, and the results of its AI-SDK tool parts (they follow it)."""
    blocks, results = [], []
    for part in message.get("parts") or ():
        if not isinstance(part, Mapping):
            continue
        if _is_sdk_tool(part):
            use, result = _sdk_call(part)
            blocks.append(use)
            if result is not None:
                results.append(result)
        elif part.get("type") in ("reasoning", "step-start"):
            continue  # AI-SDK reasoning has no signature, so no API accepts it back
        else:
            blocks.append(dict(part))
    return blocks, results


def to_anthropic(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages as Anthropic messages (``content`` always a list of blocks; system prompts as
    ``{"role": "system", "content": text}``)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks, results = _blocks(message)
        if role == "system":
            out.append({"role": "system", "content": _text_of(blocks, None, "a system message's")})
            continue
        if role not in ("user", "assistant"):
            raise ConversationFormatError(f"Message {message.get('id')!r} has role {role!r}, which Anthropic's "
                                          "format does not have (user, assistant). Nothing was written.")
        out.append({"role": role, "content": blocks})
        if results:
            out.append({"role": "user", "content": results})
    return out


def _openai_content(blocks: list[dict[str, Any]], mid: Any) -> Any:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif block["type"] == "image":
            source = block.get("source") or {}
            url = (source.get("url") if source.get("type") == "url"
                   else f"data:{source.get('media_type')};base64,{source.get('data')}")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise ConversationFormatError(f"Message {mid!r} has a {block['type']!r} block, which OpenAI's format "
                                          "cannot hold; export it with format='anthropic'. Nothing was written.")
    if not parts:
        return None
    return parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts


def _tool_message(result: Mapping[str, Any], mid: Any) -> dict[str, Any]:
    content = result.get("content", "")
    if isinstance(content, list):
        texts = [b for b in content if isinstance(b, Mapping)]
        if any(b.get("type") != "text" for b in texts):
            raise ConversationFormatError(f"Message {mid!r} has a tool result with non-text blocks, which OpenAI's "
                                          "format cannot hold; export it with format='anthropic'. Nothing was "
                                          "written.")
        content = texts[0]["text"] if len(texts) == 1 else [{"type": "text", "text": b["text"]} for b in texts]
    return {"role": "tool", "tool_call_id": result["tool_use_id"], "content": content}


def to_openai(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages as OpenAI Chat Completions messages (thinking blocks and ``is_error`` flags dropped).

    Raises:
        ConversationFormatError: A part OpenAI's format cannot hold (documents, server tools, images in tool
            results); nothing is returned.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role, mid = message.get("role"), message.get("id")
        blocks, results = _blocks(message)
        blocks = [b for b in blocks if b.get("type") not in _DROPPED_IN_OPENAI]
        if role == "system":
            out.append({"role": "system", "content": _text_of(blocks, None, "a system message's")})
            continue
        calls = [b for b in blocks if b.get("type") == "tool_use"]
        answers = [b for b in blocks if b.get("type") == "tool_result"]
        rest = [b for b in blocks if b.get("type") not in ("tool_use", "tool_result")]
        out.extend(_tool_message(r, mid) for r in answers)
        if role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": _openai_content(rest, mid)}
            if calls:
                entry["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                    "name": c["name"], "arguments": json.dumps(c.get("input") or {}, ensure_ascii=False)}}
                    for c in calls]
            out.append(entry)
        elif rest or not answers:
            if calls:
                raise ConversationFormatError(f"Message {mid!r} ({role}) makes tool calls; only assistant messages "
                                              "can in OpenAI's format. Nothing was written.")
            out.append({"role": role, "content": _openai_content(rest, mid) or ""})
        out.extend(_tool_message(r, mid) for r in results)
    return out
