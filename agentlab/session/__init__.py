"""The session layer: a conversation as a branching message tree, its full-text search, compaction overlays and
the compactor, and the manager of several sessions in one agent."""

from agentlab.session.compactor import apply_compactions, create_compact_function, truncate_older_messages
from agentlab.session.manager import SessionInfo, SessionManager
from agentlab.session.messages import UNSET, Appended, RecentHistory, RowStat
from agentlab.session.overlays import CompactionRecord
from agentlab.session.search import SearchHit
from agentlab.session.session import Session

__all__ = [
    "UNSET",
    "Appended",
    "CompactionRecord",
    "RecentHistory",
    "RowStat",
    "SearchHit",
    "Session",
    "SessionInfo",
    "SessionManager",
    "apply_compactions",
    "create_compact_function",
    "truncate_older_messages",
]
