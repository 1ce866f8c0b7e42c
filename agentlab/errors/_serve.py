"""Errors of serving agents over WebSocket and of RPC calls."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = [
    "AgentConnectionError",
    "RpcError",
    "RpcTimeoutError",
    "ServeConfigError",
    "ServeError",
    "ServeRootLockedError",
]


class ServeError(AgentlabError):
    """A problem serving agents to remote clients, or reaching one as a client."""


class ServeConfigError(ServeError, ValueError):
    """Agent classes that cannot be served as given: not Agent classes, two with one URL name, or not importable."""


class ServeRootLockedError(ServeError):
    """Another agentlab server already serves this root folder; each agent file has one owner."""

    def __init__(self, root: str, holder: str = "") -> None:
        self.root = root
        self.holder = holder
        super().__init__(
            f"Another agentlab server ({holder or 'unknown process'}) already serves the agents in {root}. "
            "Stop it, or serve another root (--root DIR)."
        )


class AgentConnectionError(ServeError, ConnectionError):
    """The client's WebSocket to an agent could not be opened, or was closed.

    ``status`` is the HTTP status of a refused upgrade (401, 404...), ``code`` and ``reason`` the close frame's.
    """

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None, reason: str = "") -> None:
        self.status = status
        self.code = code
        self.reason = reason
        super().__init__(message)


class RpcError(ServeError):
    """A method called over the WebSocket failed on the agent; the message is the agent's error text."""

    def __init__(self, method: str, message: str) -> None:
        self.method = method
        super().__init__(message)


class RpcTimeoutError(RpcError, TimeoutError):
    """A method called over the WebSocket gave no answer in time; it may still run on the agent."""
