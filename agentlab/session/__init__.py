"""The session layer: a conversation as a branching message tree, its full-text search, compaction overlays and
the compactor, the storage contract of the tree (DuckDB and in-memory implementations), and the manager of
several sessions in one agent."""

from agentlab.session._compact_function import apply_compactions, create_compact_function, truncate_older_messages
from agentlab.session._in_memory_storage import InMemorySessionStorage
from agentlab.session._manager import SessionInfo, SessionManager
from agentlab.session._messages import UNSET, Appended, CompactionRecord, RecentHistory, RowStat, SearchHit
from agentlab.session._session import Session
from agentlab.session._storage_contract import OutlineStorage, SearchableStorage, SessionStorage
from agentlab.session.duckdb._storage import DuckDBSessionStorage

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
