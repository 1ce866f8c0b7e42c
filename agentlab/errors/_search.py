"""Errors and warnings of full-text search and its index files."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = ["CorruptIndexError", "InvalidSearchError", "SearchIndexWarning"]


class InvalidSearchError(AgentlabError, ValueError):
    """A full-text index or search call with a bad argument (unknown mode, negative limit, bad namespace)."""


class SearchIndexWarning(UserWarning):
    """The search index beside an agent's file could not be written (a full disk); searches stay right, from
    memory, and the index is rebuilt from the file when next opened."""


class CorruptIndexError(AgentlabError):
    """A file of the derived search index is damaged or not an index file. The index catches it and rebuilds the
    file from the agent's DuckDB file, which holds the truth; it reaches a caller only from the index's own
    file-level functions. ``path`` names the file."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        super().__init__(f"The search index file {self.path} {reason}; it is rebuilt from the agent's file.")
