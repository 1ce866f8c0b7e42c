"""Errors of agent files and their stores: names, locks, schema, disk, SQL."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = [
    "AgentClassConflictError",
    "AgentClosedError",
    "AgentDestroyedError",
    "AgentFileError",
    "AgentLockedError",
    "CheckpointWarning",
    "DiskFullError",
    "InvalidNameError",
    "MigrationError",
    "ReadOnlyAgentError",
    "SchemaTooNewError",
    "SqlError",
    "StoreInUseError",
]


class InvalidNameError(AgentlabError, ValueError):
    """An agent or session name that cannot be used (empty, control characters, too long)."""


class AgentLockedError(AgentlabError):
    """Another process holds the agent's DuckDB file open for writing."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"The agent file {path} is locked by another process ({detail or 'conflicting lock'}). "
            "Close the agent there (agent.close()), or open it here with "
            "get_agent(..., read_only=True) while no writer holds it."
        )


class AgentClosedError(AgentlabError):
    """The agent was closed; get a fresh one with get_agent()."""


class AgentDestroyedError(AgentClosedError):
    """The agent was destroyed (its data and file deleted); get_agent() would create a new, empty one."""


class ReadOnlyAgentError(AgentlabError):
    """A write was attempted on an agent opened with read_only=True."""


class MigrationError(AgentlabError):
    """A schema migration failed; the database was left at the previous version."""


class AgentFileError(AgentlabError):
    """The file at an agent's path is not an agentlab agent file; it was left exactly as it was."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path} cannot be opened as an agentlab agent: {reason}. Nothing in it was changed; move it "
            "away (or restore it from an export) and open the agent again."
        )


class SchemaTooNewError(AgentFileError):
    """The file was written by a newer agentlab (it records migrations this version does not know)."""

    def __init__(self, path: str, *, file_version: str, known_version: str, unknown: list[str]) -> None:
        self.file_version = file_version
        self.known_version = known_version
        self.unknown = unknown
        AgentlabError.__init__(
            self,
            f"{path} was written by a newer agentlab: its schema is at {file_version}, this agentlab knows up "
            f"to {known_version} (unknown: {', '.join(unknown)}). Upgrade agentlab to write to it, or open it "
            "with read_only=True to read it.",
        )
        self.path = path
        self.reason = "newer schema"


class StoreInUseError(AgentlabError):
    """This process already has a live store on the file; two would corrupt it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is already open in this process. Use the agent that holds it (get_agent() returns the "
            "live one), or close() it before opening the file again."
        )


class DiskFullError(AgentlabError):
    """A write failed because the disk is full; nothing was stored."""

    def __init__(self, path: str, doing: str) -> None:
        self.path = path
        super().__init__(
            f"The disk holding {path} is full ({doing} failed); nothing was stored. Free some space and retry."
        )


class CheckpointWarning(UserWarning):
    """A write was stored, but DuckDB could not checkpoint the file afterwards (see ``store.health``)."""


class AgentClassConflictError(AgentlabError):
    """Two different agent classes map to one file (their names kebab-case the same)."""


class SqlError(AgentlabError):
    """A SQL statement failed. ``query`` holds the statement, ``__cause__`` the DuckDB error."""

    def __init__(self, query: str, cause: BaseException) -> None:
        self.query = query
        self.cause = cause
        super().__init__(f"{cause}\nQuery: {query}")
