"""How a context block is configured, and the :class:`~agentlab.context.ContextBlock` it loads into.

Invariant: a configuration is checked when it is made (a non-empty label, a non-negative ``max_tokens``, a
provider with ``get()``), so a bad block never reaches the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentlab.context._prompt import ContextBlock
from agentlab.context._providers import ReadonlyProvider, SearchProvider, SkillProvider, WritableProvider
from agentlab.context._tokens import estimate_string_tokens

__all__ = ["ContextConfig", "block_for"]


@dataclass
class ContextConfig:
    """How one block is configured (upstream ``ContextConfig``).

    Attributes:
        label: The block's name (upper-cased in the prompt header, used by the tools).
        description: Shown in the header and in the ``set_context`` description.
        max_tokens: Write budget (estimated tokens); None for no budget.
        provider: Where the text comes from; its kind is recognised by its methods (:mod:`agentlab.context._providers`).
    """

    label: str
    description: str | None = None
    max_tokens: int | None = None
    provider: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"A context block needs a non-empty string label, got {self.label!r}.")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0
        ):
            raise ValueError(f"max_tokens of block {self.label!r} must be a non-negative int or None.")
        if self.provider is not None and not isinstance(self.provider, ReadonlyProvider):
            raise TypeError(
                f"The provider of block {self.label!r} ({self.provider!r}) has no get() method; "
                "see agentlab.context._providers."
            )


def block_for(config: ContextConfig, content: str) -> ContextBlock:
    """The block ``config`` describes, holding ``content`` (its kind read from the provider's methods)."""
    provider = config.provider
    return ContextBlock(
        label=config.label,
        description=config.description,
        content=content,
        tokens=estimate_string_tokens(content),
        max_tokens=config.max_tokens,
        writable=isinstance(provider, WritableProvider),
        is_skill=isinstance(provider, SkillProvider),
        is_searchable=isinstance(provider, SearchProvider),
    )
