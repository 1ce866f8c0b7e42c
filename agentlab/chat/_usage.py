"""Token usage of Claude calls, stored per call in the agent's DuckDB file and summed per turn or session.

Every successful Messages API call made by a :class:`agentlab.chat.ChatAgent` (turn steps and summarizer calls)
becomes one ``chat_usage`` row (migration ``m050_usage``) with the four counts the API reports:

* ``input_tokens``: uncached input (the API's ``input_tokens`` already excludes cache reads and writes);
* ``output_tokens``: everything generated, thinking included;
* ``cache_read_tokens``: ``cache_read_input_tokens``, served from the prompt cache;
* ``cache_write_tokens``: ``cache_creation_input_tokens``, written to the prompt cache.

Invariants: a row is written in the same transaction as the messages its call produced (the caller opens it);
sums are computed in SQL from the rows, never kept as running totals that could drift. A :class:`Usage` holds
whole counts of 0 or more, and :func:`record_usage` refuses one a BIGINT column cannot hold before writing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentlab._checks import INT64_MAX, check_count, check_text
from agentlab.errors import InvalidArgumentError
from agentlab.store import Store

__all__ = ["Usage", "record_usage", "session_usage", "turn_usage", "usage_from_api", "usage_rows"]


@dataclass(frozen=True)
class Usage:
    """Token counts of one call, or the sum of several (``calls`` says how many).

    Attributes:
        input_tokens: Uncached input tokens.
        output_tokens: Output tokens (thinking included).
        cache_read_tokens: Input tokens read from the prompt cache.
        cache_write_tokens: Input tokens written to the prompt cache.
        calls: Number of API calls summed.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "calls"):
            object.__setattr__(self, name, check_count(name, getattr(self, name), maximum=None))

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.calls + other.calls,
        )

    @property
    def total_input_tokens(self) -> int:
        """All input tokens the model saw: uncached + cache read + cache write."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cache_hit_rate(self) -> float:
        """Share of input tokens served from the cache (0.0 when there was no input)."""
        total = self.total_input_tokens
        return self.cache_read_tokens / total if total else 0.0


def _count(usage: Mapping[str, Any], key: str) -> int:
    # The reply has already arrived when its usage is read, so an unusable count must not fail the turn.
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= INT64_MAX:
        return 0  # also NaN, for which every comparison is false
    return int(value)


def usage_from_api(usage: Mapping[str, Any] | None) -> Usage:
    """Read the API's ``usage`` object (a dict from the response JSON).

    Missing or null counts are 0, and so are counts no BIGINT column can hold as a token count (negative, NaN,
    infinite, above 2**63 - 1, not a number): the reply they came with is kept either way.
    """
    usage = usage or {}
    return Usage(
        input_tokens=_count(usage, "input_tokens"),
        output_tokens=_count(usage, "output_tokens"),
        cache_read_tokens=_count(usage, "cache_read_input_tokens"),
        cache_write_tokens=_count(usage, "cache_creation_input_tokens"),
        calls=1,
    )


_INSERT = """
INSERT INTO chat_usage (session_id, turn_id, step, purpose, model, response_id, message_id, stop_reason,
                        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

_PURPOSES = ("turn", "compaction", "other")  # the CHECK constraint of chat_usage.purpose

_SUM = """
SELECT coalesce(sum(input_tokens), 0)       AS input_tokens,
       coalesce(sum(output_tokens), 0)      AS output_tokens,
       coalesce(sum(cache_read_tokens), 0)  AS cache_read_tokens,
       coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens,
       count(*)                             AS calls
FROM chat_usage
"""


def record_usage(
    store: Store,
    usage: Usage,
    *,
    session_id: str = "",
    turn_id: str | None = None,
    step: int | None = None,
    purpose: str = "turn",
    model: str | None = None,
    response_id: str | None = None,
    message_id: str | None = None,
    stop_reason: str | None = None,
) -> None:
    """Insert one ``chat_usage`` row (joins the caller's transaction if one is open).

    Args:
        store: The agent's store.
        usage: Counts of one call.
        session_id: The session the call served ("" for the default session).
        turn_id: The turn's id (``Turn.id``); None for calls outside a turn.
        step: 1-based position of the call in its turn.
        purpose: ``"turn"``, ``"compaction"`` or ``"other"``.
        model: Model id the API reported.
        response_id: The API's message id (``msg_...``).
        message_id: The stored assistant message's id.
        stop_reason: The call's stop reason.

    Raises:
        InvalidArgumentError: A count above 2**63 - 1, ``step`` not a whole number of 1 or more, an unknown
            ``purpose``, or a text argument that is not a string of valid UTF-8; nothing is written.
    """
    if not isinstance(usage, Usage):
        raise TypeError(f"record_usage needs a Usage, not {type(usage).__name__}.")
    counts = [check_count(name, getattr(usage, name)) for name in
              ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")]
    if step is not None and check_count("step", step, maximum=2**31 - 1) < 1:
        raise InvalidArgumentError(f"step must be 1 or more (a call's position in its turn), not {step!r}.")
    if purpose not in _PURPOSES:
        raise InvalidArgumentError(f"purpose must be one of {list(_PURPOSES)}, not {purpose!r}.")
    check_text("session_id", session_id)
    for name, value in (("turn_id", turn_id), ("model", model), ("response_id", response_id),
                        ("message_id", message_id), ("stop_reason", stop_reason)):
        if value is not None:
            check_text(name, value)
    store.execute(
        _INSERT,
        [session_id, turn_id, step, purpose, model, response_id, message_id, stop_reason,
         *counts],
    )


def _sum(store: Store, where: str, params: list[Any]) -> Usage:
    row = store.rows(_SUM + where, params)[0]
    return Usage(**{k: int(v) for k, v in row.items()})


def turn_usage(store: Store, turn_id: str) -> Usage:
    """Summed usage of every call of one turn."""
    return _sum(store, "WHERE turn_id = ?", [turn_id])


def session_usage(store: Store, session_id: str | None = "", *, purpose: str | None = None) -> Usage:
    """Summed usage of a session (``session_id=None``: the whole agent), optionally of one purpose only."""
    clauses, params = [], []
    if session_id is not None:
        clauses.append("session_id = ?")
        params.append(session_id)
    if purpose is not None:
        clauses.append("purpose = ?")
        params.append(purpose)
    return _sum(store, ("WHERE " + " AND ".join(clauses)) if clauses else "", params)


def usage_rows(store: Store, session_id: str | None = None) -> Any:
    """Every usage row (one per call, oldest first) as a pandas DataFrame; ``session_id`` filters."""
    query = "SELECT * FROM chat_usage" + (" WHERE session_id = ?" if session_id is not None else "") + " ORDER BY seq"
    return store.relation(query, [session_id] if session_id is not None else None).df()
