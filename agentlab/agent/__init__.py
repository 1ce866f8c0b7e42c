"""The agent layer: agents by name on their own DuckDB file, bound-parameter SQL, validated state, connections,
and export/import of an agent as Parquet."""

from agentlab.agent._agent import NOT_SET, Agent, SqlRunner, get_agent, live_agent
from agentlab.agent._backends import register_backend
from agentlab.agent._connection import Connection, current_connection
from agentlab.agent._portable import export, import_, read_manifest
from agentlab.agent._state import check_json, read_state_meta

__all__ = [
    "NOT_SET",
    "Agent",
    "Connection",
    "SqlRunner",
    "check_json",
    "current_connection",
    "export",
    "get_agent",
    "import_",
    "live_agent",
    "read_manifest",
    "read_state_meta",
    "register_backend",
]
