"""Messages as the branch tree shows them: a one-line summary, and their parts with tool calls and results as such.

A stored message's parts come in two shapes: Anthropic content blocks (``text``, ``tool_use``, ``tool_result``,
``thinking``) and the AI SDK's UI parts (``text``, ``reasoning``, ``tool-<name>`` / ``dynamic-tool`` carrying
both the call and its output). :func:`parts_json` turns either into a small list of typed parts:

* ``{"k": "text", "text", "n"}`` and ``{"k": "thinking", "text", "n"}``;
* ``{"k": "call", "name", "id", "input", "n"}``: a tool call, its input as JSON text;
* ``{"k": "result", "id", "name", "text", "n", "error"}``: a tool's result (``name`` when the part says it);
* ``{"k": "other", "kind", "text", "n"}``: anything else, as JSON text.

``n`` is the full length of ``text`` / ``input``; a part longer than the limit is cut, and the message is fetched
again with a larger limit to show it whole.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parts_json", "short_text", "tool_kind"]


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _result_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, dict) for b in value):  # Anthropic content blocks
        texts = [b.get("text") for b in value if b.get("type") == "text" and isinstance(b.get("text"), str)]
        if len(texts) == len(value):
            return "\n".join(texts)
    return _json(value)


def _tool_name(part: dict[str, Any]) -> str | None:
    kind = str(part.get("type", ""))
    name = part.get("toolName") or part.get("name")
    if name is None and kind.startswith("tool-"):
        name = kind.removeprefix("tool-")
    return str(name) if name is not None else None


def _typed(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every part as an uncut typed part."""
    out: list[dict[str, Any]] = []
    for part in (message or {}).get("parts") or ():
        if not isinstance(part, dict):
            out.append({"k": "other", "kind": type(part).__name__, "text": _json(part)})
            continue
        kind = str(part.get("type", "?"))
        if kind == "text" and isinstance(part.get("text"), str):
            out.append({"k": "text", "text": part["text"]})
        elif kind in ("thinking", "reasoning"):
            text = part.get("thinking", part.get("text", ""))
            out.append({"k": "thinking", "text": text if isinstance(text, str) else _json(text)})
        elif kind == "tool_use":
            out.append({"k": "call", "name": str(part.get("name", "?")), "id": part.get("id"),
                        "input": _json(part.get("input"))})
        elif kind == "tool_result":
            out.append({"k": "result", "id": part.get("tool_use_id"), "name": None,
                        "text": _result_text(part.get("content")), "error": bool(part.get("is_error"))})
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            name, call_id = _tool_name(part) or "?", part.get("toolCallId")
            out.append({"k": "call", "name": name, "id": call_id, "input": _json(part.get("input"))})
            if part.get("state") == "output-error" or part.get("errorText") is not None:
                out.append({"k": "result", "id": call_id, "name": name, "text": str(part.get("errorText", "")),
                            "error": True})
            elif "output" in part or "result" in part:
                out.append({"k": "result", "id": call_id, "name": name,
                            "text": _result_text(part.get("output", part.get("result"))), "error": False})
        else:
            out.append({"k": "other", "kind": kind, "text": _json({k: v for k, v in part.items() if k != "type"})})
    return out


def parts_json(message: dict[str, Any] | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The message's parts as typed parts with texts cut to ``limit`` characters; and whether any was cut."""
    cut = False
    parts = _typed(message)
    for part in parts:
        field = "input" if part["k"] == "call" else "text"
        value = part[field]
        part["n"] = len(value)
        if len(value) > limit:
            part[field] = value[:limit]
            cut = True
    return parts, cut


def short_text(message: dict[str, Any] | None, limit: int = 80) -> str:
    """A one-line summary of a message, its parts in order: texts, tool calls as ``[tool name] {input}`` and
    results as ``[result] text`` / ``[error] text`` (thinking and other parts only when there is nothing else)."""
    if not message:
        return ""
    parts = _typed(message)
    pieces = []
    for p in parts:
        if p["k"] == "text":
            pieces.append(p["text"])
        elif p["k"] == "call":
            pieces.append(f"[tool {p['name']}] {p['input'] if p['input'] not in ('null', '{}') else ''}".rstrip())
        elif p["k"] == "result":
            pieces.append(f"[{'error' if p['error'] else 'result'}] {p['text']}".rstrip())
    if not pieces:
        pieces = [p["text"] if p["k"] == "thinking" else f"[{p.get('kind', p['k'])}]" for p in parts]
    text = " ".join(" ".join(pieces).split())  # whitespace runs become one space
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_kind(message: dict[str, Any] | None) -> str:
    """``"call"`` for a message that calls a tool, ``"result"`` for one that answers tools and has no text, else
    ``""``: the outline marks such rows."""
    kinds = {p["k"] for p in _typed(message)}
    if "call" in kinds:
        return "call"
    return "result" if "result" in kinds and "text" not in kinds else ""
