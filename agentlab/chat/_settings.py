"""Chat configuration: which model, how many tokens, how to reach the API, and how its failures read.

Settings are layered, most general first, and each layer only overrides what it sets (``None`` means "inherit"):

1. :data:`DEFAULTS` (model ``claude-haiku-5-5``, 4,096 max tokens, 8 model calls per turn, the SDK's 2 retries);
2. the environment (:meth:`ChatSettings.from_env`): ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``,
   ``AGENTLAB_MODEL``, ``AGENTLAB_MAX_TOKENS``;
3. the agent class (``ChatAgent.chat_settings``), then the agent instance (``agent.configure(...)``);
4. the call (``agent.ask(..., model=..., max_tokens=..., thinking=..., effort=...)``).

``thinking`` and ``effort`` are passed through to the Messages API untouched (``thinking={"type": "adaptive"}`` or
``{"type": "enabled", "budget_tokens": 2048}``; ``effort`` becomes ``output_config.effort``), so new options work
without a new agentlab release.

Invariants: settings objects are immutable; the ``anthropic`` package (several seconds to import) is imported only
when a client is built or an error is translated, never at module import; an API key is never written into an
error message or a repr.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentlab._checks import check_amount, check_text
from agentlab.errors import InvalidArgumentError, ModelAPIError, NoApiKeyError

__all__ = [
    "DEFAULTS",
    "DEFAULT_MODEL",
    "NO_KEY_HELP",
    "ChatSettings",
    "build_client",
    "resolve_settings",
    "translate_api_error",
]

DEFAULT_MODEL = "claude-haiku-5-5"

NO_KEY_HELP = (
    "No Anthropic API key is configured. Set one in the environment (export ANTHROPIC_API_KEY=sk-ant-...), "
    "or in a notebook: agent.configure(api_key=...), or give the agent your own client: "
    "agent.use_client(anthropic.Anthropic(api_key=...)). To work offline, use "
    "agent.use_client(agentlab.chat._offline.OfflineClaude().client())."
)


@dataclass(frozen=True)
class ChatSettings:
    """One layer of chat configuration; ``None`` fields inherit from the layer below.

    Attributes:
        model: Model id, e.g. ``"claude-haiku-5-5"``.
        max_tokens: Output token limit per model call.
        thinking: Passed through as the ``thinking`` request field (a dict), e.g. ``{"type": "adaptive"}``.
        effort: Passed through as ``output_config.effort`` (``"low"`` ... ``"max"``).
        max_steps: Model calls allowed in one turn (each tool round trip is one more call).
        max_retries: Retries the SDK makes on 408/409/429/5xx and connection errors (with backoff).
        timeout: Seconds before one HTTP request gives up (SDK default: 10 minutes).
        api_key: The key; normally left to ``ANTHROPIC_API_KEY``. Never shown in ``repr``.
        base_url: Another endpoint (a proxy or a local stub); normally ``ANTHROPIC_BASE_URL``.
        extra: More request fields passed to ``messages.create`` as they are (``temperature``, ``metadata`` ...).
    """

    model: str | None = None
    max_tokens: int | None = None
    thinking: Mapping[str, Any] | None = None
    effort: str | None = None
    max_steps: int | None = None
    max_retries: int | None = None
    timeout: float | None = None
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    extra: Mapping[str, Any] | None = None

    def merge(self, other: ChatSettings | None) -> ChatSettings:
        """Return these settings overridden by every field ``other`` sets (``extra`` dicts are merged)."""
        if other is None:
            return self
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(other):
            value = getattr(other, f.name)
            if value is None:
                continue
            if f.name == "extra" and self.extra:
                value = {**self.extra, **value}
            changes[f.name] = value
        return dataclasses.replace(self, **changes) if changes else self

    def replace(self, **changes: Any) -> ChatSettings:
        """A copy with ``changes`` applied (unknown names raise ``TypeError``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ChatSettings:
        """The layer read from environment variables (only the ones that are set and not blank).

        Raises:
            ValueError: ``AGENTLAB_MAX_TOKENS`` is not a positive integer.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name)
            return value.strip() if value and value.strip() else None

        max_tokens = get("AGENTLAB_MAX_TOKENS")
        if max_tokens is not None and not (max_tokens.isdigit() and int(max_tokens) > 0):
            raise ValueError(f"AGENTLAB_MAX_TOKENS must be a positive integer, not {max_tokens!r}.")
        return cls(
            model=get("AGENTLAB_MODEL"),
            max_tokens=int(max_tokens) if max_tokens else None,
            api_key=get("ANTHROPIC_API_KEY"),
            base_url=get("ANTHROPIC_BASE_URL"),
        )

    def validate(self) -> ChatSettings:
        """Check the resolved values; returns self.

        Raises:
            ValueError: A limit is not a positive integer, or ``thinking`` is not a dict.
            InvalidArgumentError: ``model`` is empty or not a string, ``model``, ``effort`` or ``base_url`` is not
                valid UTF-8 text (a lone surrogate cannot be sent), or ``timeout`` is not a positive number of
                seconds.
        """
        if self.model is not None:
            check_text("model", self.model, empty=False)
        for name in ("effort", "base_url"):
            if getattr(self, name) is not None:
                check_text(name, getattr(self, name))
        if self.timeout is not None and check_amount("timeout", self.timeout) <= 0:
            raise InvalidArgumentError(f"timeout must be a positive number of seconds, not {self.timeout!r}.")
        for name in ("max_tokens", "max_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer, not {value!r}.")
        if self.max_retries is not None and (not isinstance(self.max_retries, int) or self.max_retries < 0):
            raise ValueError(f"max_retries must be an integer >= 0, not {self.max_retries!r}.")
        if self.thinking is not None and not isinstance(self.thinking, Mapping):
            raise ValueError(
                f"thinking must be a dict such as {{'type': 'adaptive'}}, not {type(self.thinking).__name__}."
            )
        return self

    def request_fields(self) -> dict[str, Any]:
        """The Messages API fields these settings contribute: model, max_tokens, thinking, output_config, extra."""
        fields: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if self.thinking is not None:
            fields["thinking"] = dict(self.thinking)
        if self.effort is not None:
            fields["output_config"] = {"effort": self.effort}
        for key, value in (self.extra or {}).items():
            if key == "output_config" and "output_config" in fields:
                fields["output_config"] = {**value, **fields["output_config"]}
            else:
                fields[key] = value
        return fields


DEFAULTS = ChatSettings(model=DEFAULT_MODEL, max_tokens=4096, max_steps=8, max_retries=2)
"""The bottom layer."""


def resolve_settings(*layers: ChatSettings | None, environ: Mapping[str, str] | None = None) -> ChatSettings:
    """Defaults, then the environment, then each layer in order; validated.

    Args:
        layers: Class, instance and call layers (``None`` entries are skipped).
        environ: Environment to read instead of ``os.environ`` (tests).
    """
    settings = DEFAULTS.merge(ChatSettings.from_env(environ))
    for layer in layers:
        settings = settings.merge(layer)
    return settings.validate()


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def build_client(settings: ChatSettings) -> Any:
    """An ``anthropic.Anthropic`` client for resolved settings, shared by agents with the same connection settings.

    Sharing keeps one connection pool for many users' agents; a client holds no conversation state.

    Raises:
        NoApiKeyError: Neither the settings nor ``ANTHROPIC_API_KEY``/``ANTHROPIC_AUTH_TOKEN`` hold a key
            (the message says how to configure one).
    """
    key = settings.api_key or os.environ.get("ANTHROPIC_API_KEY") or None
    token = os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
    if not key and not token:
        raise NoApiKeyError(NO_KEY_HELP)
    cache_key = (key, token, settings.base_url, settings.max_retries, settings.timeout)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            client = _clients[cache_key] = _new_client(settings, key, token)
        return client


def _new_client(settings: ChatSettings, key: str | None, token: str | None) -> Any:
    import anthropic  # several seconds: only when a client is really needed

    options: dict[str, Any] = {"max_retries": settings.max_retries if settings.max_retries is not None else 2}
    if key:
        options["api_key"] = key
    else:
        options["auth_token"] = token
    if settings.base_url:
        options["base_url"] = settings.base_url
    if settings.timeout is not None:
        options["timeout"] = settings.timeout
    return anthropic.Anthropic(**options)


# --- errors ---------------------------------------------------------------------------------------

_STATUS_ADVICE = {
    400: "The request was rejected as invalid; the history is unchanged. Check the model name and options.",
    401: "The API key was rejected. " + NO_KEY_HELP.replace("No Anthropic API key is configured. ", ""),
    403: "The API key may not use this model or feature; check the key's workspace and permissions.",
    404: "Unknown model or endpoint; check the model name (agent.configure(model=...)) and base URL.",
    413: "The request is too large; compact the session (session.compact()) or start a new branch.",
    429: "Rate limited (the SDK already retried with backoff). Wait and call agent.retry(), or raise limits.",
    529: "The API is overloaded (the SDK already retried with backoff). Wait a little and call agent.retry().",
}


def translate_api_error(exc: BaseException) -> BaseException:
    """Turn an ``anthropic`` exception into the matching agentlab error (others are returned unchanged).

    The result carries the HTTP status, a ``kind`` and the original exception as ``cause``, and its message
    says what to do. Nothing here retries: the SDK has already retried what it retries.
    """
    from agentlab import errors

    module = type(exc).__module__ or ""
    if not module.startswith("anthropic"):
        if isinstance(exc, TypeError) and "authentication" in str(exc):
            return errors.NoApiKeyError(NO_KEY_HELP)
        return exc
    import anthropic

    detail = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, anthropic.APIConnectionError):
        kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection"
        return errors.ModelConnectionError(
            f"Could not reach the Anthropic API ({kind}: {detail}). Check the network or ANTHROPIC_BASE_URL, then "
            "call agent.retry(); the user message is stored. " + NO_KEY_HELP.split(". ", 1)[1],
            kind=kind,
            cause=exc,
        )
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        advice = _STATUS_ADVICE.get(status) or (
            "The API failed on its side (the SDK already retried); call agent.retry() later."
            if status >= 500
            else "The API refused the request."
        )
        message = f"Anthropic API error {status}: {exc.api_message or detail}. {advice}"
        cls: type[ModelAPIError]
        if status == 429:
            cls, kind = errors.ModelRateLimitError, "rate_limit"
        elif status == 529:
            cls, kind = errors.ModelOverloadedError, "overloaded"
        elif status in (401, 403):
            cls, kind = errors.ModelAuthError, "authentication"
        elif status in (400, 404, 413, 422):
            cls, kind = errors.InvalidModelRequestError, "invalid_request"
        elif status >= 500:
            cls, kind = errors.ModelServerError, "server"
        else:
            cls, kind = ModelAPIError, "api"
        return cls(message, status=status, kind=kind, cause=exc)
    if isinstance(exc, anthropic.AnthropicError):
        return ModelAPIError(f"Anthropic SDK error: {detail}", kind="api", cause=exc)
    return exc
