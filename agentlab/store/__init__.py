"""The store layer: one DuckDB file per agent, its schema migrations, agent names and file paths, the seq clock.

Everything above reads and writes an agent's data through a :class:`Store`; nothing here knows about agents,
sessions or search.
"""

from agentlab.store._clock import SeqClock, clock_of
from agentlab.store._database import MEMORY, Store
from agentlab.store._health import StoreHealth
from agentlab.store._migrations import MIGRATIONS, Migration
from agentlab.store._naming import agent_path, file_name_for, kebab_case, resolve_root, validate_name

__all__ = [
    "MEMORY",
    "MIGRATIONS",
    "Migration",
    "SeqClock",
    "Store",
    "StoreHealth",
    "agent_path",
    "clock_of",
    "file_name_for",
    "kebab_case",
    "resolve_root",
    "validate_name",
]
