"""The store layer: one DuckDB file per agent, its schema migrations, agent names and file paths, the seq clock.

Everything above reads and writes an agent's data through a :class:`Store`; nothing here knows about agents,
sessions or search.
"""

from agentlab.store._clock import SeqClock, clock_of
from agentlab.store._database import MEMORY, Store
from agentlab.store._files import BLOCK_SIZE, SEARCH_INDEX_SUFFIX, remove_database_files
from agentlab.store._fsync import fsync_dir, fsync_file
from agentlab.store._health import StoreHealth
from agentlab.store._migrations import MIGRATIONS, Migration, adopt_old_message_postings
from agentlab.store._naming import agent_path, file_name_for, kebab_case, resolve_root, validate_name
from agentlab.store._quoting import sql_ident, sql_literal
from agentlab.store._stamp import file_stamp

__all__ = [
    "BLOCK_SIZE",
    "MEMORY",
    "MIGRATIONS",
    "SEARCH_INDEX_SUFFIX",
    "Migration",
    "SeqClock",
    "Store",
    "StoreHealth",
    "adopt_old_message_postings",
    "agent_path",
    "clock_of",
    "file_name_for",
    "file_stamp",
    "fsync_dir",
    "fsync_file",
    "kebab_case",
    "remove_database_files",
    "resolve_root",
    "sql_ident",
    "sql_literal",
    "validate_name",
]
