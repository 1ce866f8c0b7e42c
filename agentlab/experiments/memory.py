"""A memory writer: after each dataset session, Claude reads it and updates the writable blocks with set_context.

This is how a policy's context blocks get content while a conversation is replayed: at the end of every dated
session of the conversation the writer sends one request with the session's frozen system prompt (the blocks as
the model sees them), the session's context tools (``session.tools()``, so ``set_context`` with upstream's
schema) and that session's turns as a transcript, and runs every ``set_context`` call of the reply through
``session.run_tool`` (budget and error checks included). One request per dataset session, no tool loop: the
model writes, it does not converse. The replay then refreshes the frozen prompt, so the next dataset session
opens with what was written.

Invariant: the writer changes nothing but the session's blocks, and only through ``session.run_tool``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MEMORY_INSTRUCTIONS", "ClaudeMemoryWriter", "transcript_lines"]

MEMORY_INSTRUCTIONS = (
    "You keep the long-term memory of an assistant that follows a long conversation between people. Below is the "
    "latest session of that conversation. Update your memory blocks with set_context so that they hold the facts "
    "worth remembering about the people in it (events with their dates, plans, preferences, relationships). Keep "
    "what is still true, add what is new, and stay within each block's budget. Call set_context once per block "
    "you change, with the block's complete new text."
)


def transcript_lines(turns: Sequence[Any]) -> list[str]:
    """Turns (dataset turns, or stored ones read back) as ``"Speaker: text"`` lines, in the order given, with a
    ``(date)`` line whenever the date changes and a shared photo's caption after its text."""
    lines: list[str] = []
    date = None
    for turn in turns:
        if turn.date and turn.date != date:
            date = turn.date
            lines.append(f"({date})")
        caption = (turn.metadata or {}).get("blip_caption")
        lines.append(f"{turn.speaker or 'unknown'}: {turn.text}" + (f" [shares a photo: {caption}]" if caption else ""))
    return lines


class ClaudeMemoryWriter:
    """Updates a session's writable blocks from one dataset session with one Claude request.

    Args:
        client: An ``anthropic.Anthropic`` client or a :class:`~agentlab.experiments.cache.CachedClient`.
        model: Model id (default: the settings' model).
        max_tokens: Output limit of the request.
    """

    def __init__(self, client: Any, *, model: str | None = None, max_tokens: int = 1024) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.calls = 0

    def __call__(self, session: Any, turns: Sequence[Any]) -> list[str]:
        """Send the request and run its ``set_context`` calls; returns the tool results."""
        from agentlab.chat import call_messages_api, resolve_settings

        system = session.system_prompt
        body: dict[str, Any] = {
            "model": self.model or resolve_settings().model,
            "max_tokens": self.max_tokens,
            "system": "\n\n".join(p for p in (MEMORY_INSTRUCTIONS, system) if p),
            "tools": session.tools(),
            "messages": [{"role": "user", "content": [{"type": "text", "text": "\n".join(transcript_lines(turns))}]}],
        }
        response = call_messages_api(self.client, body)
        self.calls += 1
        results = []
        for block in response.get("content") or ():
            if block.get("type") == "tool_use" and block.get("name") == "set_context":
                results.append(session.run_tool("set_context", block.get("input") or {}))
        return results
