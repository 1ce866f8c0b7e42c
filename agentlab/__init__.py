"""agentlab: research agent memory in notebooks (a Python re-creation of the Cloudflare Agents memory layer).

This module only re-exports; see the modules for the concepts.
"""

from importlib.metadata import PackageNotFoundError, version

from .agent import NOT_SET, Agent, get_agent
from .connection import Connection
from .errors import AgentlabError
from .store import Store

try:
    __version__ = version("agentlab")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "NOT_SET",
    "Agent",
    "AgentlabError",
    "Connection",
    "Store",
    "__version__",
    "get_agent",
]
