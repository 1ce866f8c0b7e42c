"""Read-time truncation ("micro-compaction"): shrink older tool outputs and long texts before a model call.

Storage never changes: ``truncate_older_messages`` returns a deep copy in which every message except the last
``keep_recent`` has its tool outputs cut to about ``max_tool_output_chars`` and its text parts to
``max_text_chars``. Tool outputs keep their shape (upstream's ``truncateToolOutput``): strings end in
``"... [truncated N chars]"``, objects shorten their longest string fields first and gain ``"__truncated": True``
and ``"__truncatedChars"`` markers when that is not enough, arrays drop trailing items. All lengths are UTF-16 code
units of the value's JSON text (of the text itself for strings), as JavaScript measures them.

Invariants: inputs are never mutated; an output that already fits is returned as is; truncation is deterministic.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentlab.context import js_stringify, utf16_len, utf16_prefix

__all__ = ["truncate_older_messages", "truncate_tool_output"]

Message = Mapping[str, Any]

_MAX_DEPTH = 8


def _is_sdk_tool_part(part: Mapping[str, Any]) -> bool:
    kind = part.get("type")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def _suffix(original_length: int) -> str:
    return f"... [truncated {original_length} chars]"


def _length(value: Any) -> int:
    return utf16_len(value if isinstance(value, str) else js_stringify(value))


def _cut_string(value: str, max_chars: int, original_length: int) -> str:
    if utf16_len(value) <= max_chars:
        return value
    suffix = _suffix(original_length)
    if max_chars <= len(suffix):
        return suffix[:max_chars]
    return utf16_prefix(value, max_chars - len(suffix)) + suffix


def _child_budget(max_chars: int, count: int) -> int:
    return max_chars if count <= 1 else max(80, math.floor(max_chars / min(count, 10)))


def _object_marker(max_chars: int, original_length: int) -> dict[str, Any]:
    marker = {"__truncated": True, "__truncatedChars": original_length,
              "note": "Tool output too large to keep its structure; omitted."}
    if _length(marker) <= max_chars:
        return marker
    return {"__truncated": True, "__truncatedChars": original_length}


def _array_marker(max_chars: int, original_length: int) -> list[Any]:
    structured = _object_marker(max_chars, original_length)
    if _length([structured]) <= max_chars:
        return [structured]
    marker = [f"Array output too large to keep its structure; omitted{_suffix(original_length)}"]
    if _length(marker) <= max_chars:
        return marker
    return [_suffix(original_length)[:max_chars]]


def _shrink(value: Any, max_chars: int, original_length: int, depth: int) -> Any:
    if isinstance(value, str):
        return _cut_string(value, max_chars, utf16_len(value))
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    if depth >= _MAX_DEPTH:
        return f"[Nested output omitted {_suffix(original_length)}]"
    if isinstance(value, Mapping):
        return _shrink_object(value, max_chars, original_length, depth)
    return _shrink_array(list(value), max_chars, original_length, depth)


def _shrink_array(value: list[Any], max_chars: int, original_length: int, depth: int) -> list[Any]:
    child = _child_budget(max_chars, len(value))
    result = [_shrink(item, child, _length(item), depth + 1) for item in value]
    # JSON length of a list is "[" + items joined by "," + "]"; track it instead of re-serialising per pop.
    lengths = [_length(item) for item in result]
    total = 2 + sum(lengths) + max(0, len(lengths) - 1)
    while len(result) > 1 and total > max_chars:
        result.pop()
        total -= lengths.pop() + 1
    if len(result) < len(value):
        result.append(f"Array output truncated{_suffix(original_length)}")
    if _length(result) > max_chars:
        return _array_marker(max_chars, original_length)
    return result


def _shrink_object(value: Mapping[Any, Any], max_chars: int, original_length: int, depth: int) -> dict[Any, Any]:
    child = _child_budget(max_chars, len(value))
    result = {k: _shrink(v, child, _length(v), depth + 1) for k, v in value.items()}
    result_length = _length(result)
    if result_length <= max_chars:
        return result
    # Shorten the longest string fields first (stable order among equals), until the object fits.
    strings = [(k, v) for k, v in result.items() if isinstance(v, str)]
    for key, text in sorted(strings, key=lambda kv: -utf16_len(kv[1])):
        if _length(result) <= max_chars:
            break
        result[key] = _cut_string(text, max(0, math.floor(max_chars / 4)), utf16_len(text))
    if _length(result) > max_chars:
        result["__truncated"] = True
        result["__truncatedChars"] = result_length
    if _length(result) > max_chars:
        return _object_marker(max_chars, original_length)
    return result


def truncate_tool_output(output: Any, max_chars: int) -> tuple[Any, bool, int]:
    """Shrink a tool output to about ``max_chars`` while keeping its shape.

    Strings are cut to ``max_chars`` UTF-16 units including the suffix ``"... [truncated N chars]"``. Objects and
    arrays are shrunk field by field; when the shape cannot fit, ``"__truncated": True`` and ``"__truncatedChars"``
    markers are added or the value is replaced by a marker object.

    Args:
        output: The tool output (any JSON-like value).
        max_chars: The budget in UTF-16 units of its JSON text (of the text itself for a string).

    Returns:
        ``(new_output, truncated, original_length)``; ``new_output`` is ``output`` itself when it already fits.
    """
    original_length = _length(output)
    if original_length <= max_chars:
        return output, False, original_length
    return _shrink(output, max_chars, original_length, 0), True, original_length


def _truncate_content_blocks(blocks: list[Any], max_chars: int) -> list[Any]:
    # Anthropic tool_result content: the text blocks share one budget, later ones are dropped once it is spent.
    remaining, out = max_chars, []
    for block in blocks:
        text = block.get("text") if isinstance(block, Mapping) and block.get("type") == "text" else None
        if not isinstance(text, str):
            out.append(block)
            continue
        length = utf16_len(text)
        if length <= remaining:
            remaining -= length
            out.append(block)
        elif remaining > 0:
            out.append({**block, "text": _cut_string(text, remaining, length)})
            remaining = 0
    return out


def _truncate_part(part: Any, max_tool: int, max_text: int) -> Any:
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if _is_sdk_tool_part(part) and "output" in part:
        new_output, truncated, _ = truncate_tool_output(part["output"], max_tool)
        if truncated:
            return {**part, "output": new_output}
    elif kind == "tool_result":
        content = part.get("content")
        if isinstance(content, str):
            new_content, truncated, _ = truncate_tool_output(content, max_tool)
            if truncated:
                return {**part, "content": new_content}
        elif isinstance(content, list):
            return {**part, "content": _truncate_content_blocks(content, max_tool)}
    elif kind == "text" and isinstance(part.get("text"), str):
        text = part["text"]
        length = utf16_len(text)
        if length > max_text:
            return {**part, "text": utf16_prefix(text, max_text) + _suffix(length)}
    return part


def truncate_older_messages(
    messages: Sequence[Message], keep_recent: int = 4, max_tool_output_chars: int = 500, max_text_chars: int = 10000
) -> list[dict[str, Any]]:
    """Shrink tool outputs and long texts in all but the last ``keep_recent`` messages (read time only).

    Tool outputs (AI-SDK ``output``, Anthropic ``tool_result`` content) go through ``truncate_tool_output``; for a
    ``tool_result`` whose content is a list of blocks, its text blocks share the budget. Text parts longer than
    ``max_text_chars`` become their first ``max_text_chars`` units plus ``"... [truncated N chars]"``. Tool inputs,
    thinking and images are left alone.

    Args:
        messages: The path about to be sent to a model.
        keep_recent: Messages at the end left untouched.
        max_tool_output_chars: Budget per older tool output, in UTF-16 units.
        max_text_chars: Budget per older text part, in UTF-16 units.

    Returns:
        A deep copy with older messages shrunk; the input is not changed.
    """
    result: list[dict[str, Any]] = [dict(m) for m in copy.deepcopy(list(messages))]
    cutoff = len(result) - keep_recent
    for message in result[: max(0, cutoff)]:
        parts = message.get("parts")
        if isinstance(parts, list):
            message["parts"] = [_truncate_part(p, max_tool_output_chars, max_text_chars) for p in parts]
    return result
