"""Errors of agent state and of the connections it is broadcast to."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = [
    "ConnectionClosedError",
    "ReadonlyConnectionError",
    "StateError",
    "StateNotJSONError",
    "StateRejectedError",
]


class StateError(AgentlabError):
    """Base class for state problems."""


class StateNotJSONError(StateError, TypeError):
    """The state (or part of it) cannot be stored as JSON. ``path`` names the offending value."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"State is not JSON at {path}: {reason}. Use dicts, lists, str, int, finite float, bool or None."
        )


class StateRejectedError(StateError):
    """validate_state_change() rejected the new state; nothing was stored or broadcast."""


class ReadonlyConnectionError(StateError):
    """A readonly connection tried to change state."""

    def __init__(self, message: str = "Connection is readonly") -> None:
        super().__init__(message)


class ConnectionClosedError(StateError):
    """The connection was closed; open a new one with agent.connect()."""
