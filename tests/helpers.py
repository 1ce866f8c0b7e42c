"""Small builders and readers shared by the tests: messages in the stored shape, and what a history reads as."""

from __future__ import annotations

from typing import Any

from agentlab.session.compactor import is_compaction_message


def msg(mid: str, text: str | None = None, role: str = "user", **extra: Any) -> dict[str, Any]:
    """A message with one text part (the id itself when no text is given), plus any extra keys."""
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": mid if text is None else text}], **extra}


def ids(messages: list[dict[str, Any]]) -> list[str]:
    """The ids of ``messages``, in order."""
    return [m["id"] for m in messages]


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each message's id, or its summary text when it is a compaction overlay."""
    return [m["parts"][0]["text"] if is_compaction_message(m) else m["id"] for m in messages]
