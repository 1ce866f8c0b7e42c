"""Importing dataset conversations into an agent's sessions, so the same data feeds search and compaction.

:func:`import_conversation` appends one message per turn to a :class:`~agentlab.session.Session`,
in conversation order, as one unbranched chain. :func:`import_dataset` gives each conversation its
own session of an agent.

Each message is ``{"id", "role", "parts": [{"type": "text", "text": turn.text}], "created_at",
"metadata"}``. ``metadata`` keeps what the message shape has no place for: ``speaker``,
``turn_id``, ``session_id`` (the dataset's session), ``date`` (as the dataset wrote it),
``conversation_id`` and the turn's own extras (such as LoCoMo's ``blip_caption``).

Invariants:

* message ids are ``f"{conversation_id}/{turn_id}"``, so importing the same conversation twice
  adds nothing the second time (appends of an existing id are skipped);
* ``created_at`` follows conversation order: the session date (when it parses) plus one second
  per turn, so sorting by time and by position agree;
* roles: the conversation's first speaker is ``"user"`` and every other speaker ``"assistant"``,
  unless a ``roles`` mapping says otherwise; LongMemEval's ``user``/``assistant`` keep their role.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

from agentlab.eval.datasets import Conversation, Dataset, DialogueTurn, parse_date

if TYPE_CHECKING:
    from agentlab.session import Appended, Session

__all__ = ["import_conversation", "import_dataset", "turn_message"]

_CHAT_ROLES = ("user", "assistant")


def _roles(conversation: Conversation, roles: Mapping[str, str] | None) -> dict[str, str]:
    if roles is not None:
        return dict(roles)
    speakers = list(conversation.speakers) or list(dict.fromkeys(t.speaker for t in conversation.turns))
    if set(speakers) <= set(_CHAT_ROLES):
        return {s: s for s in speakers}
    return {s: ("user" if i == 0 else "assistant") for i, s in enumerate(speakers)}


def turn_message(conversation: Conversation, turn: DialogueTurn, *, role: str, offset: int = 0) -> dict[str, Any]:
    """The message that stands for one turn (see the module docstring for its shape).

    Args:
        conversation: the turn's conversation (for ids and metadata).
        turn: the turn.
        role: the message role.
        offset: seconds added to the session date, to keep turns of one session in order.
    """
    message: dict[str, Any] = {
        "id": f"{conversation.id}/{turn.id}",
        "role": role,
        "parts": [{"type": "text", "text": turn.text}],
        "metadata": {
            "speaker": turn.speaker,
            "turn_id": turn.id,
            "session_id": turn.session_id,
            "date": turn.date,
            "conversation_id": conversation.id,
            **{k: v for k, v in turn.metadata.items() if k not in ("speaker", "turn_id", "session_id", "date")},
        },
    }
    parsed = parse_date(turn.date)
    if parsed is not None:
        stamp = parsed.replace(tzinfo=UTC) + timedelta(seconds=offset)
        message["created_at"] = stamp.isoformat(timespec="seconds").replace("+00:00", "Z")
    return message


def import_conversation(
    session: Session, conversation: Conversation, *, roles: Mapping[str, str] | None = None
) -> list[Appended]:
    """Append every turn of ``conversation`` to ``session``, one message per turn, in one transaction.

    Args:
        session: the target session (e.g. ``Session(agent, "conv-26")``).
        conversation: a dataset conversation.
        roles: speaker -> role (default: first speaker ``"user"``, the others ``"assistant"``).

    Returns:
        What each append did, in turn order; a turn imported before comes back with ``duplicate=True``.

    Raises:
        ValueError: a speaker has no role in ``roles``.
    """
    mapping = _roles(conversation, roles)
    messages = []
    for session_turns in conversation.sessions:
        for turn in session_turns.turns:
            if turn.speaker not in mapping:
                raise ValueError(f"Speaker {turn.speaker!r} has no role; add it to roles={{...}} "
                                 f"(known: {sorted(mapping)}).")
            messages.append(turn_message(conversation, turn, role=mapping[turn.speaker], offset=turn.index))
    return session.append_messages(messages) if messages else []


def import_dataset(agent: Any, dataset: Dataset, *, roles: Mapping[str, str] | None = None) -> dict[str, Session]:
    """Import every conversation of ``dataset`` into its own session of ``agent``.

    The session id and name are the conversation id; an existing session of that id is reused
    (and turns already there are skipped).

    Args:
        agent: an :class:`~agentlab.agent.Agent` or a :class:`~agentlab.store.Store`.
        dataset: the conversations.
        roles: as in :func:`import_conversation`.

    Returns:
        ``{conversation_id: Session}``.
    """
    from agentlab.session import SessionManager

    manager = SessionManager(agent)
    known = {info.id for info in manager.list()}
    out: dict[str, Session] = {}
    for conversation in dataset.conversations:
        if conversation.id not in known:
            manager.create(conversation.id, session_id=conversation.id, source=dataset.name)
        session = manager.session(conversation.id)
        import_conversation(session, conversation, roles=roles)
        out[conversation.id] = session
    return out
