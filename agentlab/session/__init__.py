"""The session layer: a conversation as a branching message tree, its full-text search, compaction overlays and
the compactor, the storage contract of the tree (DuckDB and in-memory implementations), and the manager of
several sessions in one agent."""

from agentlab.session.compactor import apply_compactions, create_compact_function, truncate_older_messages
from agentlab.session.duckdb._storage import DuckDBSessionStorage
from agentlab.session.manager import SessionInfo, SessionManager
from agentlab.session.memory_storage import InMemorySessionStorage
from agentlab.session.messages import UNSET, Appended, CompactionRecord, RecentHistory, RowStat, SearchHit
from agentlab.session.session import Session
from agentlab.session.storage import OutlineStorage, SearchableStorage, SessionStorage

__all__ = [
    "UNSET",
    "Appended",
    "CompactionRecord",
    "DuckDBSessionStorage",
    "InMemorySessionStorage",
    "OutlineStorage",
    "RecentHistory",
    "RowStat",
    "SearchHit",
    "SearchableStorage",
    "Session",
    "SessionInfo",
    "SessionManager",
    "SessionStorage",
    "apply_compactions",
    "create_compact_function",
    "truncate_older_messages",
]
