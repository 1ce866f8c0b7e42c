"""Notebook widgets: live views of an agent's state, message tree and context (re-exports only)."""

from .branch_tree import BranchTree
from .context_view import ContextView
from .dashboard import Dashboard
from .state_view import StateView

__all__ = ["BranchTree", "ContextView", "Dashboard", "StateView"]
