"""The base class and argument errors shared by every layer."""

from __future__ import annotations

__all__ = ["AgentlabError", "InvalidArgumentError"]


class AgentlabError(Exception):
    """Base class of every error agentlab raises on purpose."""


class InvalidArgumentError(AgentlabError, ValueError):
    """An argument a call cannot use: NaN, infinite, negative, out of range, or text that is not valid UTF-8."""
