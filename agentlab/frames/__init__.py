"""Frames: every part of an agent's memory as DataFrames or Arrow tables, plots, and many agents in one SQL.

Reads through the public APIs of the layers below; never writes.
"""

from agentlab.frames import plot
from agentlab.frames._multi import MultiAgent, open_many
from agentlab.session import (
    blocks_frame as blocks,
)
from agentlab.session import (
    blocks_history_frame as blocks_history,
)
from agentlab.session import (
    branches_frame as branches,
)
from agentlab.session import (
    compactions_frame as compactions,
)
from agentlab.session import (
    messages_frame as messages,
)
from agentlab.session import (
    tokens_frame as tokens,
)
from agentlab.session import (
    tool_calls_frame as tool_calls,
)
from agentlab.session import (
    usage_frame as usage,
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
