"""Errors and warnings of sessions: messages, branches, compaction, conversation formats, history depth."""

from __future__ import annotations

from agentlab.errors._base import AgentlabError

__all__ = [
    "CompactionError",
    "ConversationFormatError",
    "DuplicateMessageWarning",
    "ForkedHistoryError",
    "HistoryTooDeepError",
    "HistoryTruncatedWarning",
    "InvalidMessageError",
    "RowSizeWarning",
    "SessionError",
    "SessionWarning",
    "UnknownLeafWarning",
    "UnknownMessageError",
    "UnknownRoleWarning",
    "UnknownSessionError",
]


class SessionError(AgentlabError):
    """Base class for message-tree, search and compaction problems."""


class UnknownMessageError(SessionError, KeyError):
    """No message with this id in this session. ``id`` holds it."""

    def __init__(self, message_id: str, what: str = "message") -> None:
        self.id = message_id
        super().__init__(f"Unknown {what} id {message_id!r} in this session.")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidMessageError(SessionError, ValueError):
    """A message without a string id, a string role or a JSON list of parts."""


class UnknownSessionError(SessionError, KeyError):
    """No session with this id in this agent."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        super().__init__(f"Unknown session id {session_id!r}; list them with manager.list().")

    def __str__(self) -> str:
        return str(self.args[0])


class CompactionError(SessionError):
    """Compaction cannot run (for example no compaction function is registered)."""


class ForkedHistoryError(SessionError):
    """A message is shared with a fork (forks share rows, never copy them), so it cannot change."""


class ConversationFormatError(SessionError, ValueError):
    """A conversation to import (OpenAI or Anthropic messages) is not in the expected shape; nothing was stored."""


class SessionWarning(UserWarning):
    """A session call that upstream accepts silently did what upstream does, but probably not what was meant."""


class UnknownRoleWarning(SessionWarning):
    """A message role other than user, assistant, system or tool (often a typo); it was stored as given."""


class DuplicateMessageWarning(SessionWarning):
    """An append reused a stored id with different content; the stored message was kept (the first wins)."""


class UnknownLeafWarning(SessionWarning):
    """A history read named a leaf id this session does not store, so it returned []."""


class RowSizeWarning(SessionWarning):
    """A message over the row size limit was stored with its tool outputs (then texts) truncated."""


class HistoryTooDeepError(SessionError):
    """A branch is longer than the session's ``max_depth`` and the read asked for an error rather than a cut
    (``on_overflow="raise"``). ``leaf_id`` and ``max_depth`` hold what was asked."""

    def __init__(self, leaf_id: str, max_depth: int) -> None:
        self.leaf_id = leaf_id
        self.max_depth = max_depth
        super().__init__(
            f"The branch ending at {leaf_id!r} is longer than max_depth={max_depth:,}. Read it whole with "
            f"Session(..., max_depth=<a larger int>), or accept the newest {max_depth:,} messages with "
            "on_overflow='warn' (the default) or 'truncate'.")


class HistoryTruncatedWarning(SessionWarning):
    """A history read returned only the newest ``max_depth`` messages of a longer branch (``result.truncated``)."""
