"""Messages on their way into a session: chat-format messages converted, and misuse that upstream accepts noted.

Upstream stores whatever it is given. agentlab keeps that behaviour and tells the user about the three mistakes it
hides (each a :class:`~agentlab.errors.SessionWarning`, shown once per call site):

* a role that is not ``user``, ``assistant``, ``system`` or ``tool``, often a typo (:class:`UnknownRoleWarning`);
* an append that reuses a stored id with different content, which is ignored because the first wins
  (:class:`DuplicateMessageWarning`);
* a history read of a leaf id the session does not have, which returns ``[]`` (:class:`UnknownLeafWarning`).

A message with ``content`` and no ``parts`` (OpenAI's or Anthropic's ``{"role", "content"}``) is converted by
:func:`agentlab.session._formats.from_chat_message` and given an id when it has none.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from agentlab.errors import DuplicateMessageWarning, UnknownLeafWarning, UnknownRoleWarning
from agentlab.session._formats import from_chat_message
from agentlab.session._messages import Appended

__all__ = ["KNOWN_ROLES", "Intake", "warn_unknown_leaf"]

KNOWN_ROLES = frozenset({"user", "assistant", "system", "tool"})
"""Roles stored without a warning (``tool`` is the AI SDK's; OpenAI's ``tool`` messages are converted)."""


class Intake:
    """One append call's messages: converted as they pass, remembered for the checks after the write."""

    def __init__(self) -> None:
        self.given: list[Any] = []
        self.unknown_roles: dict[str, Any] = {}  # role -> id of the first message with it

    def take(self, message: Any) -> Any:
        """``message``, converted if it is a chat-format message; noted for :meth:`check`."""
        # Runs once per message of a bulk import: exact-type checks first, ABC checks only for other mappings.
        if type(message) is dict or isinstance(message, Mapping):
            if "parts" not in message and "content" in message:
                message = from_chat_message(message)
            role = message.get("role")
            if type(role) is str and role not in KNOWN_ROLES and role:
                self.unknown_roles.setdefault(role, message.get("id"))
        self.given.append(message)
        return message

    def stream(self, messages: Iterable[Any]) -> Iterable[Any]:
        """:meth:`take` each message as the storage reads it (a list at once, a generator lazily)."""
        if type(messages) is list:
            take = self.take
            return [take(m) for m in messages]
        return (self.take(m) for m in messages)

    def check(self, storage: Any, results: list[Appended], *, stacklevel: int) -> None:
        """Warn about unknown roles and duplicates whose content differs from the stored message."""
        for role, mid in self.unknown_roles.items():
            close = difflib.get_close_matches(role, sorted(KNOWN_ROLES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            warnings.warn(
                f"Message {mid!r} has role {role!r}, which is not one of {', '.join(sorted(KNOWN_ROLES))}; {hint}"
                "It was stored as given (roles are free text, as upstream), but models and exports only know those.",
                UnknownRoleWarning, stacklevel=stacklevel + 1)
        for result, message in zip(results, self.given):
            if result.duplicate:
                stored = storage.get_message(result.id)
                if stored is not None and _differs(message, stored):
                    warnings.warn(
                        f"Message {result.id!r} is already stored with different content; the stored message was "
                        "kept (appends are idempotent: the first wins, as upstream). Use update_message() to change "
                        "it, or give the new message a new id.", DuplicateMessageWarning, stacklevel=stacklevel + 1)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _differs(given: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    return given.get("role") != stored.get("role") or _canonical(given.get("parts")) != _canonical(stored.get("parts"))


def warn_unknown_leaf(storage: Any, leaf_id: Any, *, stacklevel: int) -> None:
    """Warn that ``leaf_id`` names no message of the session (a history read of it returned ``[]``)."""
    if leaf_id and not storage.has_message(leaf_id):
        warnings.warn(
            f"No message {leaf_id!r} in session {storage.session_id!r}, so its history is [] (as upstream). Check "
            "the id; session.latest_leaf_id() gives the current leaf.", UnknownLeafWarning, stacklevel=stacklevel + 1)
