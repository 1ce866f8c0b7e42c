"""The session storage in the agent's DuckDB file: the message tree and its index, the messages and compactions
tables, the message search index, and the frames read from them.

Each table has one module that writes its SQL (``_messages_table``, ``_compactions_table``); the tree, the index
and the frames call it. The rest of the session layer uses the names below.
"""

from agentlab.session.duckdb._compactions_table import delete_events
from agentlab.session.duckdb._frames import AgentFrames, BoundFrame, SessionFrames, frame_to_pandas, many_messages
from agentlab.session.duckdb._frames import blocks as blocks_frame
from agentlab.session.duckdb._frames import blocks_history as blocks_history_frame
from agentlab.session.duckdb._frames import branches as branches_frame
from agentlab.session.duckdb._frames import compactions as compactions_frame
from agentlab.session.duckdb._frames import messages as messages_frame
from agentlab.session.duckdb._frames import tokens as tokens_frame
from agentlab.session.duckdb._frames import tool_calls as tool_calls_frame
from agentlab.session.duckdb._frames import usage as usage_frame
from agentlab.session.duckdb._search import search_tree
from agentlab.session.duckdb._storage import DuckDBSessionStorage, resolve_owner
from agentlab.session.duckdb._tree import MessageTree, tree_of

__all__ = [
    "AgentFrames",
    "BoundFrame",
    "DuckDBSessionStorage",
    "MessageTree",
    "SessionFrames",
    "blocks_frame",
    "blocks_history_frame",
    "branches_frame",
    "compactions_frame",
    "delete_events",
    "frame_to_pandas",
    "many_messages",
    "messages_frame",
    "resolve_owner",
    "search_tree",
    "tokens_frame",
    "tool_calls_frame",
    "tree_of",
    "usage_frame",
]
