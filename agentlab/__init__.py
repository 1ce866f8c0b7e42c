"""agentlab: research agent memory in notebooks (a Python re-creation of the Cloudflare Agents memory layer).

This module only re-exports the names a notebook needs; the layers live in the subpackages (store, search, agent,
context, session, chat; frames, eval, views beside them). Heavy libraries (torch, FAISS, pandas, matplotlib, the
anthropic SDK) load on first use, not here.
"""

from importlib.metadata import PackageNotFoundError, version

from agentlab import _wiring  # noqa: F401 - registers the "ray" backend and executor
from agentlab.agent import NOT_SET, Agent, Connection, get_agent, import_
from agentlab.chat import ChatAgent, ClaudeSummarizer, ExtractiveSummarizer
from agentlab.context import (
    AgentSkillProvider,
    FolderSkillProvider,
    FullTextSearchProvider,
    HybridSearchProvider,
    VectorSearchProvider,
)
from agentlab.errors import AgentlabError
from agentlab.frames import open_many, plot
from agentlab.serve.rpc import rpc
from agentlab.session import Session, SessionManager, create_compact_function
from agentlab.store import Store

callable = rpc

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
    "plot",
    "rpc",
]
