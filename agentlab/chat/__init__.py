"""The chat layer: ChatAgent runs Claude turns (the ``anthropic`` SDK) over a session, with tools, prompt caching,
usage per call, summarizers for compaction, an offline stand-in for the API and a terminal chat."""

from agentlab.chat._api import call_messages_api
from agentlab.chat._chat_agent import ChatAgent, Tool, ToolCall, Turn
from agentlab.chat._offline import OfflineClaude
from agentlab.chat._settings import NO_KEY_HELP, ChatSettings, build_client, resolve_settings
from agentlab.chat._summarizers import ClaudeSummarizer, ExtractiveSummarizer
from agentlab.chat._usage import Usage

__all__ = [
    "NO_KEY_HELP",
    "ChatAgent",
    "ChatSettings",
    "ClaudeSummarizer",
    "ExtractiveSummarizer",
    "OfflineClaude",
    "Tool",
    "ToolCall",
    "Turn",
    "Usage",
    "build_client",
    "call_messages_api",
    "resolve_settings",
]
