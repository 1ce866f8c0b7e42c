"""The context layer: labelled blocks rendered into the system prompt, their providers, and the tools that let
the model read and write them. Token estimates (upstream's heuristic) live here too."""

from agentlab.context._block_history import BlockJournal, BlockWrite, block_history, watch_blocks, writing_as
from agentlab.context._blocks import ContextBlocks, ContextConfig
from agentlab.context._prompt import SEPARATOR, ContextBlock, js_round, render_block, render_prompt
from agentlab.context._providers import (
    AgentContextProvider,
    AgentSkillProvider,
    FolderSkillProvider,
    ReadonlyProvider,
    SearchProvider,
    SkillProvider,
    WritableProvider,
    legacy_block_name,
    provider_kind,
)
from agentlab.context._search_providers import (
    EntryHit,
    FullTextSearchProvider,
    HybridSearchProvider,
    VectorSearchProvider,
)
from agentlab.context._tokens import (
    TokenCounter,
    estimate_message_tokens,
    estimate_string_tokens,
    js_number_to_string,
    js_stringify,
    js_trim,
    normalize_count,
    utf16_len,
    utf16_prefix,
)
from agentlab.context._tools import context_tool_calls, is_loaded_text, scan_loaded_skills, tool_result_text

__all__ = [
    "SEPARATOR",
    "AgentContextProvider",
    "AgentSkillProvider",
    "BlockJournal",
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
    "TokenCounter",
    "VectorSearchProvider",
    "WritableProvider",
    "block_history",
    "context_tool_calls",
    "estimate_message_tokens",
    "estimate_string_tokens",
    "is_loaded_text",
    "js_number_to_string",
    "js_round",
    "js_stringify",
    "js_trim",
    "legacy_block_name",
    "normalize_count",
    "provider_kind",
    "render_block",
    "render_prompt",
    "scan_loaded_skills",
    "tool_result_text",
    "utf16_len",
    "utf16_prefix",
    "watch_blocks",
    "writing_as",
]
