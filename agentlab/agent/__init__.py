"""The agent layer: agents by name on their own DuckDB file, bound-parameter SQL, validated state, connections,
and export/import of an agent as Parquet."""

from agentlab.agent._agent import NOT_SET, Agent, SqlRunner, get_agent
from agentlab.agent._connection import Connection
from agentlab.agent._portable import export, import_, read_manifest

__all__ = ["NOT_SET", "Agent", "Connection", "SqlRunner", "export", "get_agent", "import_", "read_manifest"]
