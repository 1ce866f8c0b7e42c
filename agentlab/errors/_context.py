"""Errors of context blocks and their providers."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = [
    "BlockBudgetError",
    "BlockNotFoundError",
    "BlockReadonlyError",
    "ContextError",
    "ContextProviderError",
    "EmbedderError",
]


class ContextError(AgentlabError):
    """Base class for context-block problems. Messages follow upstream's wording."""


class BlockNotFoundError(ContextError, KeyError):
    """No context block with this label."""

    def __str__(self) -> str:
        return str(self.args[0])


class BlockReadonlyError(ContextError):
    """The block cannot be written."""


class BlockBudgetError(ContextError, ValueError):
    """A write would exceed the block's max_tokens."""


class EmbedderError(ContextError, ValueError):
    """An embedder returned vectors of the wrong shape, or NaN/infinite values."""


class ContextProviderError(ContextError):
    """A context block's provider raised; the block is left out of the prompt until a reload works."""

    def __init__(self, label: str, cause: BaseException) -> None:
        self.label = label
        self.cause = cause
        super().__init__(
            f'The provider of block "{label}" failed: {type(cause).__name__}: {cause}. The prompt was rendered '
            "without it; fix the provider and call refresh_system_prompt()."
        )
