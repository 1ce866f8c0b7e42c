"""Frames: every part of an agent's memory as DataFrames or Arrow tables, plots, and many agents in one SQL.

Reads through the public APIs of the layers below; never writes.
"""

from agentlab.frames import plot
from agentlab.frames._multi import MultiAgent, open_many
from agentlab.session.duckdb._frames import (
    blocks,
    blocks_history,
    branches,
    compactions,
    messages,
    tokens,
    tool_calls,
    usage,
)

__all__ = [
    "MultiAgent",
    "blocks",
    "blocks_history",
    "branches",
    "compactions",
    "messages",
    "open_many",
    "plot",
    "tokens",
    "tool_calls",
    "usage",
]
