"""The session layer: a conversation as a branching message tree, its full-text search, compaction overlays and
the compactor, the storage contract of the tree (DuckDB and in-memory implementations), and the manager of
several sessions in one agent."""

from agentlab.session._compact_function import apply_compactions, create_compact_function, truncate_older_messages
from agentlab.session._in_memory_storage import InMemorySessionStorage
from agentlab.session._manager import SessionInfo, SessionManager
from agentlab.session._messages import UNSET, Appended, CompactionRecord, RecentHistory, RowStat, SearchHit, now_iso
from agentlab.session._row_size_limit import enforce_row_size_limit
from agentlab.session._session import Session
from agentlab.session._storage_contract import OutlineStorage, SearchableStorage, SessionStorage
from agentlab.session.duckdb import (
    AgentFrames,
    BoundFrame,
    DuckDBSessionStorage,
    SessionFrames,
    blocks_frame,
    blocks_history_frame,
    branches_frame,
    compactions_frame,
    frame_to_pandas,
    many_messages,
    messages_frame,
    tokens_frame,
    tool_calls_frame,
    tree_of,
    usage_frame,
)

__all__ = [
    "UNSET",
    "AgentFrames",
    "Appended",
    "BoundFrame",
    "CompactionRecord",
    "DuckDBSessionStorage",
    "InMemorySessionStorage",
    "OutlineStorage",
    "RecentHistory",
    "RowStat",
    "SearchHit",
    "SearchableStorage",
    "Session",
    "SessionFrames",
    "SessionInfo",
    "SessionManager",
    "SessionStorage",
    "apply_compactions",
    "blocks_frame",
    "blocks_history_frame",
    "branches_frame",
    "compactions_frame",
    "create_compact_function",
    "enforce_row_size_limit",
    "frame_to_pandas",
    "many_messages",
    "messages_frame",
    "now_iso",
    "tokens_frame",
    "tool_calls_frame",
    "tree_of",
    "truncate_older_messages",
    "usage_frame",
]
