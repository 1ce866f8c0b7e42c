"""Notebook widgets: live views of an agent's state, message tree and context (re-exports only)."""

from agentlab.views._branch_tree import BranchTree
from agentlab.views._context_view import ContextView
from agentlab.views._dashboard import Dashboard, for_agent, for_session, show
from agentlab.views._state_view import StateView

__all__ = [
    "BranchTree",
    "ContextView",
    "Dashboard",
    "StateView",
    "for_agent",
    "for_session",
    "show",
]
