"""The context layer: labelled blocks rendered into the system prompt, their providers, and the tools that let
the model read and write them. Token estimates (upstream's heuristic) live here too."""

from agentlab.context._block_history import BlockWrite, block_history, writing_as
from agentlab.context._blocks import ContextBlocks, ContextConfig
from agentlab.context._prompt import ContextBlock, render_prompt
from agentlab.context._providers import (
    AgentContextProvider,
    AgentSkillProvider,
    FolderSkillProvider,
    ReadonlyProvider,
    SearchProvider,
    SkillProvider,
    WritableProvider,
)
from agentlab.context._search_providers import (
    EntryHit,
    FullTextSearchProvider,
    HybridSearchProvider,
    VectorSearchProvider,
)
from agentlab.context._tokens import estimate_message_tokens, estimate_string_tokens

__all__ = [
    "AgentContextProvider",
    "AgentSkillProvider",
    "BlockWrite",
    "ContextBlock",
    "ContextBlocks",
    "ContextConfig",
    "EntryHit",
    "FolderSkillProvider",
    "FullTextSearchProvider",
    "HybridSearchProvider",
    "ReadonlyProvider",
    "SearchProvider",
    "SkillProvider",
    "VectorSearchProvider",
    "WritableProvider",
    "block_history",
    "estimate_message_tokens",
    "estimate_string_tokens",
    "render_prompt",
    "writing_as",
]
