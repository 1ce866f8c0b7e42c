"""Agent classes the Ray tests run in actors: a module the workers import by name (tests/cluster is on their path)."""

from __future__ import annotations

import time
from typing import Any

from agentlab import Agent, ChatAgent
from agentlab.chat._offline import OfflineClaude


class Notes(Agent):
    initial_state = {"visits": 0}

    def validate_state_change(self, next_state: Any, source: Any) -> None:
        if isinstance(next_state, dict) and next_state.get("visits", 0) < 0:
            raise ValueError("visits must be >= 0")

    def slow_write(self, seconds: float, body: str) -> None:
        """Sleep, then insert a row: a call that is in flight long enough to kill its actor under it."""
        time.sleep(seconds)
        self.sql("CREATE TABLE IF NOT EXISTS facts (body VARCHAR)")
        self.sql("INSERT INTO facts VALUES (?)", body)


class OtherNotes(Agent):
    """Another class: maps to another folder, so it never conflicts with Notes."""


def _offline_client(agent: ChatAgent) -> Any:
    return OfflineClaude().client()


class Assistant(ChatAgent):
    """A ChatAgent that talks to the offline Messages API (the real SDK over a mock transport)."""

    client_factory = _offline_client

    def configure_session(self, session: Any) -> Any:
        return session.with_context("memory", description="Facts about the user", max_tokens=500)
