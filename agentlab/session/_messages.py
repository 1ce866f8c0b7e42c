"""Messages as values: validation, the stored JSON form, the searchable text, and small result types.

A message is ``{"id": str, "role": str, "parts": [dict, ...], "created_at": str}``; parts are Anthropic content
blocks (or upstream AI-SDK parts) and are never interpreted here beyond their ``text``.

Invariants:

* :func:`prepare_message` never changes the caller's dict; what it returns is what will be stored.
* The stored form is compact JSON with non-ASCII kept, and a read returns ``json.loads`` of exactly that
  text: a message round-trips byte for byte after JSON (thinking blocks keep their signatures).
* A stored row counts as a message only if it parses to a dict with a string ``id``, a string ``role`` and a
  list ``parts``; other rows are skipped on every read.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, NoReturn

from agentlab.errors import InvalidMessageError, InvalidSearchError
from agentlab.search import MODES

__all__ = ["DEFAULT_MAX_DEPTH", "MAX_MESSAGE_NESTING", "OVERFLOW_MODES", "UNSET", "Appended", "CompactionRecord",
           "History", "RecentHistory", "RowStat", "SearchHit", "check_search", "keep_messages", "message_text",
           "now_iso", "parse_rows", "prepare_message", "prepare_placed", "recent_window"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks an omitted ``parent_id``: append after the latest leaf (``None`` means "a new root")."""

DEFAULT_MAX_DEPTH = 100_000
"""Longest path a history read walks (upstream caps its CTE at 10,000). A longer path is cut on the root
side: the newest ``max_depth`` messages are returned, and the read says so (see :data:`OVERFLOW_MODES`)."""

OVERFLOW_MODES = ("warn", "raise", "truncate")
"""What a history read does with a branch longer than ``max_depth``: ``"warn"`` returns the newest ``max_depth``
messages with ``truncated`` set and a :class:`~agentlab.errors.HistoryTruncatedWarning`; ``"raise"`` raises
:class:`~agentlab.errors.HistoryTooDeepError`; ``"truncate"`` returns the cut history with ``truncated`` set and
no warning (for callers that want a window on purpose)."""


class History(list[dict[str, Any]]):
    """The messages of a branch, root first (a ``list``), and whether the branch was cut.

    Attributes:
        truncated: True when the branch is longer than the session's ``max_depth``, so that only its newest
            ``max_depth`` messages are here.
    """

    truncated: bool = False

    def __init__(self, messages: Any = (), truncated: bool = False) -> None:
        super().__init__(messages)
        self.truncated = truncated

    def __reduce__(self) -> Any:  # pickles (Ray, multiprocessing) with its flag
        return (History, (list(self), self.truncated))


MAX_MESSAGE_NESTING = 128
"""Most levels of objects and arrays in one message's JSON; the message object is level 1, ``parts`` level 2, a
part level 3, so a tool input or result may nest 125 levels.

Every write refuses a deeper message, because the readers recurse: token estimates and tool-output truncation
(``js_stringify``, ``copy.deepcopy``) spend up to about four Python frames per level, so with Python's limit of
1,000 frames they fail at about 250 levels even when called from an empty stack, and ``json.loads`` at about 990.
At 128 levels the deepest reader still leaves about 480 frames to its caller (a notebook cell, a widget
handler, a chat turn). Real messages stay far below: Anthropic content blocks add three or four levels to
whatever a tool takes or returns, and common JSON parsers stop at 64 (.NET's System.Text.Json), 100 (Ruby) or
128 levels (Rust's serde_json) by default."""


class Appended(NamedTuple):
    """What an append did: the row's id, parent and seq; ``duplicate`` if the id existed (nothing stored).

    A named tuple, not a dataclass: a bulk import makes one per message, and tuples are several times cheaper.
    """

    id: str
    parent_id: str | None
    seq: int
    duplicate: bool = False


@dataclass(frozen=True)
class RowStat:
    """One row on a path, without its content: id, role and the UTF-8 size of the stored JSON."""

    id: str
    role: str
    bytes: int


# --- messages as values ----------------------------------------------------------------------------


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any], str]:
    # Same output as json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False), but the C
    # encoder is built once instead of per call (about 2x faster on a bulk import). Without circular-reference
    # markers a cycle ends in RecursionError, which prepare_message reports like any other non-JSON value.
    c_make = getattr(json.encoder, "c_make_encoder", None)
    if c_make is None:  # pragma: no cover - CPython always has the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    encode = c_make(None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(encode(value, 0))


_encode = _make_encoder()


SHAPE = "{'id': 'm1', 'role': 'user', 'parts': [{'type': 'text', 'text': 'Hello'}]}"
"""The stored message shape, shown in errors about it."""


def _bad_parts(mid: str, value: Any) -> NoReturn:
    raise InvalidMessageError(
        f"Message {mid!r} needs 'parts' as a list of dicts (content blocks such as {{'type': 'text', 'text': ...}}); "
        f"got {type(value).__name__}.")


def prepare_message(message: Any, *, stamp: str | None = None) -> tuple[dict[str, Any], str]:
    """Validate a message and return ``(copy, compact JSON)``; the caller's dict is never changed.

    Args:
        message: ``{"id": str, "role": str, "parts": [dict, ...], "created_at"?: str}``; other keys are kept.
        stamp: ``created_at`` to use when the message has none (default: now, ISO 8601 UTC).

    Returns:
        The message with ``created_at`` filled in, and its JSON text as it will be stored.

    Raises:
        InvalidMessageError: No non-empty string id, no non-empty string role, parts not a list of dicts,
            something that is not JSON (sets, bytes, NaN, lone surrogates...), or JSON nested more than
            :data:`MAX_MESSAGE_NESTING` levels.
    """
    copy, text, _ = _prepare(message, stamp, False)
    return copy, text


def prepare_placed(message: Any, *, stamp: str | None = None) -> tuple[dict[str, Any], str, Any]:
    """:func:`prepare_message` for bulk imports: a ``"parent_id"`` key is taken out of the copy and returned.

    Returns:
        ``(copy, compact JSON, parent)``; ``parent`` is the removed ``"parent_id"`` value, or :data:`UNSET`.
    """
    return _prepare(message, stamp, True)


def _prepare(message: Any, stamp: str | None, placement: bool) -> tuple[dict[str, Any], str, Any]:
    # Exact-type checks first: this runs once per message on bulk imports, and ABC checks are slow.
    if type(message) is not dict and not isinstance(message, Mapping):
        raise InvalidMessageError(
            f"A message is a dict with 'id', 'role' and 'parts', not a {type(message).__name__}.")
    mid = message.get("id")
    if not isinstance(mid, str) or not mid:
        raise InvalidMessageError(f"A message needs a non-empty string 'id'; got {mid!r}. Messages look like "
                                  f"{SHAPE}; Session.append_message also converts OpenAI/Anthropic messages "
                                  "({'role': 'user', 'content': 'Hello'}), giving them an id.")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidMessageError(f"Message {mid!r} needs a non-empty string 'role' (e.g. 'user'); got {role!r}.")
    parts = message.get("parts")
    if type(parts) is not list:
        _bad_parts(mid, parts)
    for part in parts:
        if type(part) is not dict and not isinstance(part, Mapping):
            _bad_parts(mid, part)
    copy = dict(message)
    placed = copy.pop("parent_id", UNSET) if placement else UNSET
    created = copy.get("created_at")
    if created is None:
        copy["created_at"] = stamp or now_iso()
    elif isinstance(created, datetime):
        copy["created_at"] = created.isoformat()
    elif not isinstance(created, str):
        raise InvalidMessageError(f"Message {mid!r}: 'created_at' must be an ISO string or a datetime.")
    try:
        text = _encode(copy)
        if not text.isascii():
            text.encode("utf-8")  # lone surrogates cannot be stored
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(
            f"Message {mid!r} is not JSON ({exc}); parts may hold only dicts, lists, str, finite numbers, "
            "bool and None.") from None
    # Nesting needs as many "{" or "[" in the text as levels (brackets inside strings only add to the count), so
    # the exact walk runs only for the rare message with more brackets than the limit.
    if text.count("{") + text.count("[") > MAX_MESSAGE_NESTING and _nests_deeper(copy, MAX_MESSAGE_NESTING):
        raise InvalidMessageError(
            f"Message {mid!r} nests objects and arrays more than {MAX_MESSAGE_NESTING} levels deep (the message "
            f"is level 1, parts level 2); readers cannot walk deeper JSON. Flatten the deep value, or store it "
            "as a JSON string inside a part.")
    return copy, text, placed


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` (already encoded as JSON, so made of dicts, lists and tuples) nests more than ``limit``."""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if level > limit:
            return True
        for child in (node.values() if isinstance(node, dict) else node):
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, level + 1))
    return False


def message_text(message: Mapping[str, Any]) -> str:
    """The searchable text of a message: its ``text`` parts joined by a space."""
    texts = [p["text"] for p in message.get("parts") or ()
             if (type(p) is dict or isinstance(p, Mapping)) and p.get("type") == "text"
             and isinstance(p.get("text"), str)]
    return texts[0] if len(texts) == 1 else " ".join(texts)


def keep_messages(values: list[Any]) -> list[dict[str, Any]]:
    """The values that are messages: dicts with a string ``id``, a string ``role`` and a list ``parts``."""
    return [m for m in values if type(m) is dict and type(m.get("id")) is str
            and type(m.get("role")) is str and type(m.get("parts")) is list]


def parse_rows(contents: list[str]) -> list[dict[str, Any]]:
    """Parse stored contents, skipping rows that do not parse or are not messages."""
    if not contents:
        return []
    try:  # one parse of a joined array is about 3x faster than one parse per row
        parsed = json.loads("[" + ",".join(contents) + "]")
        if len(parsed) != len(contents):
            raise ValueError("a row held more than one value")
    except ValueError:
        parsed = []
        for text in contents:
            try:
                parsed.append(json.loads(text))
            except ValueError:
                continue
    return keep_messages(parsed)


@dataclass(frozen=True)
class RecentHistory:
    """A byte-bounded window of the newest messages of a path (upstream's ``getRecentHistory``).

    Attributes:
        messages: The window, root side first, overlays applied inside it.
        truncated: True if older messages of the path were left out.
        total_content_bytes: UTF-8 bytes of every stored row on the whole path.
    """

    messages: list[dict[str, Any]]
    truncated: bool
    total_content_bytes: int


def recent_window(stats: list[RowStat], max_bytes: int, min_recent: float = 1) -> int:
    """Where the byte-bounded window of a path starts (upstream's ``getRecentHistory``): extend from the leaf
    toward the root while fewer than ``max(1, floor(min_recent))`` rows are taken or the next row still fits in
    ``max_bytes``."""
    floor_recent = max(1, math.floor(min_recent))
    start, used, taken = len(stats), 0, 0
    while start > 0 and (taken < floor_recent or used + stats[start - 1].bytes <= max_bytes):
        start -= 1
        used += stats[start].bytes
        taken += 1
    return start


@dataclass(frozen=True)
class CompactionRecord:
    """One stored overlay.

    Attributes:
        seq: Position in the agent-wide write order (newest overlay wins by seq).
        id: Random id; the overlay message reads back as ``"compaction_" + id``.
        session_id: The session that owns the overlay.
        summary: The text that replaces the range.
        from_message_id: First message replaced.
        to_message_id: Last message replaced (must be on the path being read for the overlay to apply).
        leaf_id: The leaf whose path was compacted, if known.
        messages_covered: Stored messages in the range on that path, if known.
        tokens_before: Session estimate before the compaction, if known.
        tokens_after: Session estimate right after it, if known.
        trigger: ``"manual"`` or ``"automatic"``.
        created_at: When it was stored (UTC).
    """

    seq: int
    id: str
    session_id: str
    summary: str
    from_message_id: str
    to_message_id: str
    leaf_id: str | None
    messages_covered: int | None
    tokens_before: int | None
    tokens_after: int | None
    trigger: str
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (``created_at`` as an ISO string), e.g. for events and JSON."""
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        return data


@dataclass(frozen=True)
class SearchHit:
    """One message found by a search.

    Attributes:
        id: The message id.
        role: Its role.
        text: Its searchable text (text parts joined by a space).
        snippet: A short excerpt around the match.
        score: BM25 relevance, higher is better (comparable within one search only).
        on_current_branch: Whether it is on the path to its session's latest leaf.
        session_id: The session storing it.
        created_at: The message's own ``created_at``.
    """

    id: str
    role: str
    text: str
    snippet: str
    score: float
    on_current_branch: bool
    session_id: str
    created_at: str | None = None


def check_search(query: Any, mode: str, limit: Any) -> bool:
    """Check a search's mode and limit (InvalidSearchError) and query type; False when nothing can match."""
    if mode not in MODES:
        raise InvalidSearchError(f"mode must be one of {MODES}, not {mode!r}.")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise InvalidSearchError(f"limit must be a non-negative int, not {limit!r}.")
    if query is None:
        return False
    if not isinstance(query, str):
        raise TypeError(f"A search query is a str, not {type(query).__name__}.")
    return bool(query.strip()) and limit > 0
