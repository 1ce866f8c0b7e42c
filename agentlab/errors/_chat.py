"""Errors of chat turns and of the model API behind them."""

from __future__ import annotations

from typing import Any

from agentlab.errors._base import AgentlabError

__all__ = [
    "ChatError",
    "InvalidClientError",
    "InvalidModelRequestError",
    "ModelAPIError",
    "ModelAuthError",
    "ModelConnectionError",
    "ModelOverloadedError",
    "ModelRateLimitError",
    "ModelServerError",
    "NoApiKeyError",
    "TurnError",
]


class ChatError(AgentlabError):
    """Base class for problems talking to Claude."""


class NoApiKeyError(ChatError):
    """No Anthropic API key is configured."""


class InvalidClientError(ChatError, TypeError):
    """use_client() was given something that is not an Anthropic client (an API key string, for instance)."""


class ModelAPIError(ChatError):
    """The Messages API failed (rate limit, overload, invalid request, connection)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str = "api", cause: Any = None) -> None:
        self.status = status
        self.kind = kind
        self.cause = cause
        super().__init__(message)


class ModelRateLimitError(ModelAPIError):
    """HTTP 429 after the SDK's retries: wait, then agent.retry()."""


class ModelOverloadedError(ModelAPIError):
    """HTTP 529 (overloaded) after the SDK's retries: wait, then agent.retry()."""


class ModelServerError(ModelAPIError):
    """Another 5xx after the SDK's retries."""


class InvalidModelRequestError(ModelAPIError):
    """HTTP 400/404/413/422: the request itself was refused (model name, options, size)."""


class ModelAuthError(ModelAPIError):
    """HTTP 401/403: the key was rejected or may not use this model."""


class ModelConnectionError(ModelAPIError):
    """The API could not be reached (no network, DNS, timeout) after the SDK's retries."""


class TurnError(ChatError):
    """A turn cannot start or continue from the given message (e.g. retry() from an assistant reply)."""
