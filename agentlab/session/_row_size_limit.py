"""The write-time row size limit: a chat message whose JSON is over :data:`ROW_MAX_BYTES` is shrunk before it is stored.

Upstream's chat harnesses (Think, AIChatAgent) pass every message they persist through ``enforceRowSizeLimit``
(``ROW_MAX_BYTES`` = 1.8 MB, headroom under SQLite's 2 MB row limit), so that one huge tool output cannot make a
conversation impossible to store or to send to the model again. :class:`~agentlab.chat.ChatAgent` does the same
with :func:`enforce_row_size_limit` for the question, each reply and each tool-result message of a turn. The
session itself stores what it is given (DuckDB has no row limit, and a stored message reads back byte for byte),
so code that appends messages of its own can call the function too.

1. Every tool output over 1,000 characters is truncated with its shape kept (upstream's ``truncateToolOutput``:
   strings end in ``"... [truncated N chars]"``, objects gain ``"__truncated"`` markers). That is an AI-SDK tool
   part's ``output`` (``state: "output-available"``) and, in Anthropic's shape, a ``tool_result`` block's
   ``content`` (its text blocks share the budget). The tool-call ids go to ``metadata.compactedToolOutputs``.
2. If the message is still over the limit, text parts over 1,000 characters are replaced, oldest first and only
   until it fits, by ``"[Text truncated for storage (N chars). First 500 chars: ...]"``; their indices go to
   ``metadata.compactedTextParts``.

The message stays valid: every part keeps its type and ids, so each ``tool_use`` still has its ``tool_result``.
One difference from upstream: step 1 applies to every role, not only to assistant messages, because Anthropic
tool results travel in user messages. A message still over the limit after both steps (large images) is stored
as it is. Every shrink is announced with a :class:`~agentlab.errors.RowSizeWarning`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from agentlab.context import utf16_len, utf16_prefix
from agentlab.errors import RowSizeWarning
from agentlab.session._truncation import _truncate_content_blocks, truncate_tool_output

__all__ = ["ROW_MAX_BYTES", "enforce_row_size_limit", "row_bytes"]

ROW_MAX_BYTES = 1_800_000
"""Largest stored message, in UTF-8 bytes of its JSON (upstream's value)."""

_TOOL_OUTPUT_CHARS = 1000
_TEXT_CHARS = 1000
_TEXT_HEAD = 500


def row_bytes(message: Mapping[str, Any]) -> int:
    """UTF-8 bytes of ``message`` as compact JSON, the form it is stored in."""
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _shrink_tool_part(part: Any) -> tuple[Any, str | None]:
    """The part with its tool output truncated, and the tool-call id if anything was cut."""
    if not isinstance(part, Mapping):
        return part, None
    if part.get("type") == "tool_result":
        content = part.get("content")
        if isinstance(content, str):
            new, cut, _ = truncate_tool_output(content, _TOOL_OUTPUT_CHARS)
        elif isinstance(content, list):
            new = _truncate_content_blocks(content, _TOOL_OUTPUT_CHARS)
            cut = new != content
        else:
            return part, None
        return ({**part, "content": new}, str(part.get("tool_use_id"))) if cut else (part, None)
    if "output" in part and "toolCallId" in part and part.get("state") == "output-available":
        new, cut, _ = truncate_tool_output(part["output"], _TOOL_OUTPUT_CHARS)
        return ({**part, "output": new}, str(part["toolCallId"])) if cut else (part, None)
    return part, None


def _annotate(message: dict[str, Any], key: str, values: list[Any]) -> None:
    metadata = message.get("metadata")
    if metadata is None or isinstance(metadata, Mapping):
        message["metadata"] = {**(metadata or {}), key: values}


def _truncate_texts(message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    parts = list(message["parts"])
    cut: list[int] = []
    for i, part in enumerate(parts):
        text = part.get("text") if isinstance(part, Mapping) and part.get("type") == "text" else None
        if not isinstance(text, str) or utf16_len(text) <= _TEXT_CHARS:
            continue
        cut.append(i)
        parts[i] = {**part, "text": f"[Text truncated for storage ({utf16_len(text)} chars). "
                                    f"First {_TEXT_HEAD} chars: {utf16_prefix(text, _TEXT_HEAD)}...]"}
        if row_bytes({**message, "parts": parts}) <= ROW_MAX_BYTES:
            break
    result = {**message, "parts": parts}
    if cut:
        _annotate(result, "compactedTextParts", cut)
    return result, cut


def enforce_row_size_limit(message: dict[str, Any], size: int | None = None) -> dict[str, Any]:
    """``message`` itself if its JSON fits in :data:`ROW_MAX_BYTES`, else a shrunk copy (see the module docstring).

    Args:
        message: A prepared message (``id``, ``role``, a list of ``parts``).
        size: Its JSON size in bytes, if already known.

    Returns:
        The message to store. The input is never changed.
    """
    size = row_bytes(message) if size is None else size
    if size <= ROW_MAX_BYTES:
        return message
    shrunk = [_shrink_tool_part(p) for p in message["parts"]]
    result = {**message, "parts": [p for p, _ in shrunk]}
    ids = [i for _, i in shrunk if i is not None]
    if ids:
        _annotate(result, "compactedToolOutputs", ids)
    texts: list[int] = []
    if row_bytes(result) > ROW_MAX_BYTES:
        result, texts = _truncate_texts(result)
    what = f"{len(ids)} tool output(s) and {len(texts)} text part(s)"
    warnings.warn(
        f"Message {message['id']!r} is {size:,} bytes, over the {ROW_MAX_BYTES:,}-byte row limit; it was stored with "
        f"{what} truncated (see its metadata). Keep large tool outputs elsewhere (a file, a search block) and "
        "store a reference to them.", RowSizeWarning, stacklevel=2)
    return result
