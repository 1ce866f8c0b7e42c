"""agentlab: research agent memory in notebooks (a Python re-creation of the Cloudflare Agents memory layer).

This module only re-exports; see the modules for the concepts. Heavy libraries (torch,
sentence-transformers, FAISS, pandas, matplotlib, the anthropic SDK) load on first use, not here.
"""

from importlib.metadata import PackageNotFoundError, version

from .agent import NOT_SET, Agent, get_agent
from .chat import ChatAgent
from .compaction import create_compact_function
from .connection import Connection
from .errors import AgentlabError
from .manager import SessionManager
from .multi import open_many
from .portable import import_
from .serve.rpc import rpc
from .providers import (
    AgentSkillProvider,
    FolderSkillProvider,
    FullTextSearchProvider,
    HybridSearchProvider,
    VectorSearchProvider,
)
from .session import Session
from .store import Store
from .summarizers import ClaudeSummarizer, ExtractiveSummarizer

callable = rpc  # noqa: A001 - upstream's name, for use as @agentlab.callable(); not in __all__ (builtin)

try:
    __version__ = version("agentlab")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "NOT_SET",
    "Agent",
    "AgentSkillProvider",
    "AgentlabError",
    "ChatAgent",
    "ClaudeSummarizer",
    "Connection",
    "ExtractiveSummarizer",
    "FolderSkillProvider",
    "FullTextSearchProvider",
    "HybridSearchProvider",
    "Session",
    "SessionManager",
    "Store",
    "VectorSearchProvider",
    "__version__",
    "create_compact_function",
    "get_agent",
    "import_",
    "open_many",
    "rpc",
]
