"""One conversation in and out of a session, as OpenAI or Anthropic message lists in JSON or JSONL files.

``session.import_conversation(source)`` and ``session.export_conversation(path)`` are these functions. They move
one conversation (a branch of one session); ``agent.export(folder)`` and ``agentlab.import_(folder)`` move a
whole agent, every table, through Parquet.

* A source is a ``.jsonl`` file (one message per line), a ``.json`` file (a list of messages, or a request body
  ``{"messages": [...], "system"?: ...}``), or the list itself. The format is told from the messages
  (``format="auto"``) or given.
* An export writes the path root -> leaf (the current branch unless ``leaf_id`` names another) as stored, or as
  the model sees it with ``compacted=True`` (summaries in place of what they replace).

Invariants: an import converts and checks every message before it stores any, then appends them in one
transaction, so bad input leaves the session as it was; an export writes its file only once every message has
converted, through a temporary file renamed into place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentlab.errors import ConversationFormatError
from agentlab.session._formats import FORMATS, detect_format, from_anthropic, from_openai, to_anthropic, to_openai
from agentlab.session._messages import UNSET, Appended

__all__ = ["export_conversation", "import_conversation", "read_conversation"]


class ConversationHost(Protocol):
    """What importing and exporting need from a session (a :class:`~agentlab.session.Session`)."""

    storage: Any
    max_depth: int

    def append_messages(self, messages: Any, parent_id: Any = UNSET) -> list[Appended]: ...

    def get_history(self, leaf_id: str | None = None) -> list[dict[str, Any]]: ...


def _check_format(format: str, allow_auto: bool) -> None:
    known = (*FORMATS, "auto") if allow_auto else FORMATS
    if format not in known:
        raise ConversationFormatError(f"format must be one of {', '.join(map(repr, known))}, not {format!r}.")


def _parse_lines(text: str, path: Path) -> list[Any]:
    messages = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except ValueError as exc:
            raise ConversationFormatError(f"{path}, line {number}, is not JSON ({exc}); a .jsonl file holds one "
                                          "message per line. Nothing was stored.") from None
    return messages


def read_conversation(source: Any) -> list[Any] | Mapping[str, Any]:
    """The messages in ``source``: a ``.jsonl`` / ``.json`` path, or a list (or request body) given directly.

    Raises:
        FileNotFoundError: No file at the path.
        ConversationFormatError: The file is not JSON / JSONL, or holds neither a list nor a request body.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".jsonl":
            return _parse_lines(text, path)
        try:
            data = json.loads(text)
        except ValueError:
            if path.suffix.lower() == ".json":
                raise ConversationFormatError(f"{path} is not JSON; give a list of messages, or a .jsonl file with "
                                              "one message per line. Nothing was stored.") from None
            return _parse_lines(text, path)
    else:
        data = source
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        return data
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return list(data)
    raise ConversationFormatError(f"A conversation is a list of messages (or {{'messages': [...]}}), not "
                                  f"{type(data).__name__}. Nothing was stored.")


def import_conversation(session: ConversationHost, source: Any, *, format: str = "auto",
                        parent_id: Any = UNSET) -> list[Appended]:
    """Append a conversation in OpenAI or Anthropic form to ``session``, keeping its order and tool pairs.

    Messages get new ids; consecutive OpenAI tool messages become one user message of ``tool_result`` blocks.

    Args:
        session: The session (``session.import_conversation(source)`` passes itself).
        source: A ``.jsonl`` or ``.json`` file, or the list of messages (or ``{"messages", "system"}``) itself.
        format: ``"auto"`` (told from the messages), ``"openai"`` or ``"anthropic"``.
        parent_id: As :meth:`~agentlab.session.Session.append_messages` (default: after the latest leaf).

    Returns:
        One :class:`~agentlab.session.Appended` per stored message.

    Raises:
        ConversationFormatError: A message is in neither shape, or a tool result answers no earlier call; nothing
            is stored.
        FileNotFoundError: No file at ``source``.
    """
    _check_format(format, allow_auto=True)
    data = read_conversation(source)
    messages = data["messages"] if isinstance(data, Mapping) else data
    if format == "auto":
        format = "anthropic" if isinstance(data, Mapping) and "system" in data else detect_format(messages)
    stored = from_anthropic(data) if format == "anthropic" else from_openai(messages)
    return session.append_messages(stored, parent_id=parent_id)


def export_conversation(session: ConversationHost, path: str | os.PathLike[str] | None = None, *,
                        format: str = "openai", leaf_id: str | None = None,
                        compacted: bool = False) -> list[dict[str, Any]] | Path:
    """Write one branch of ``session`` as OpenAI or Anthropic messages.

    Args:
        session: The session (``session.export_conversation(path)`` passes itself).
        path: A ``.jsonl`` file (one message per line) or a ``.json`` file (a list); None returns the list.
        format: ``"openai"`` or ``"anthropic"``.
        leaf_id: The branch's leaf (default: the current branch).
        compacted: Write what the model sees (compaction summaries in place) instead of the stored rows.

    Returns:
        The path written, or the messages when ``path`` is None.

    Raises:
        ConversationFormatError: A part the format cannot hold (nothing is written).
    """
    _check_format(format, allow_auto=False)
    if compacted:
        history = session.get_history(leaf_id)
    else:
        storage = session.storage
        with storage.lock:
            history = storage.read(storage.path_ids(leaf_id, max_depth=session.max_depth))
    messages = to_anthropic(history) if format == "anthropic" else to_openai(history)
    if path is None:
        return messages
    target = Path(path)
    if target.suffix.lower() == ".json":
        text = json.dumps(messages, ensure_ascii=False, indent=1) + "\n"
    else:
        text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)
    return target
