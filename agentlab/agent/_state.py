"""Agent state as JSON: checking, serialising and storing it.

State is any JSON value. It is stored as one row of ``agent_state`` holding the exact JSON text;
the row's presence marks state as set (so ``0``, ``""`` and ``None`` are valid states).

Invariant: :func:`to_json` either returns text that :func:`json.loads` turns back into an equal
value, or raises :class:`StateNotJSONError` naming the first offending path, such as
``state["players"][2]``. Nothing is stored in the second case.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentlab.errors import StateNotJSONError

STATE_ROW_ID = "state"
MAX_DEPTH = 512


def _child(path: str, key: Any) -> str:
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def check_json(value: Any, root: str = "state") -> None:
    """Raise :class:`StateNotJSONError` unless ``value`` is plain JSON.

    Accepted: ``dict`` with ``str`` keys, ``list``, ``str`` (valid Unicode), ``int``, finite ``float``,
    ``bool`` and ``None``. Tuples, sets, objects, NaN, infinities, lone surrogates and cycles are
    refused, as is nesting deeper than :data:`MAX_DEPTH`.
    """
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    on_path: dict[int, int] = {}  # id of containers currently being walked -> depth
    exit_marker = object()
    while stack:
        item, path, depth = stack.pop()
        if item is exit_marker:
            on_path.pop(depth, None)  # depth holds the container id here
            continue
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise StateNotJSONError(path, f"{item!r} is not a finite number")
            continue
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise StateNotJSONError(path, "the string contains a lone surrogate") from None
            continue
        if isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise StateNotJSONError(path, f"nesting deeper than {MAX_DEPTH} levels")
            if id(item) in on_path:
                raise StateNotJSONError(path, "it refers back to a value that contains it (a cycle)")
            on_path[id(item)] = depth
            stack.append((exit_marker, path, id(item)))
            if isinstance(item, dict):
                for key, child in reversed(list(item.items())):
                    if not isinstance(key, str):
                        raise StateNotJSONError(
                            f"{path}[{key!r}]", f"dict keys must be strings, not {type(key).__name__}"
                        )
                    stack.append((child, _child(path, key), depth + 1))
            else:
                for index in range(len(item) - 1, -1, -1):
                    stack.append((item[index], f"{path}[{index}]", depth + 1))
            continue
        raise StateNotJSONError(path, f"{type(item).__name__} is not a JSON type")


def to_json(value: Any) -> str:
    """Serialise checked state to compact JSON text."""
    check_json(value)
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def read_state_row(store: Any) -> str | None:
    """The stored JSON text, or None when state was never set."""
    return store.scalar("SELECT state FROM agent_state WHERE id = ?", [STATE_ROW_ID])


def read_state_meta(store: Any) -> tuple[str, Any] | None:
    """``(source, updated_at)`` of the stored state: ``"server"`` or the id of the connection that set it, and
    when (a timezone-aware datetime); None when state was never set."""
    rows = store.execute("SELECT source, updated_at FROM agent_state WHERE id = ?", [STATE_ROW_ID]).fetchall()
    return (rows[0][0], rows[0][1]) if rows else None


def write_state_row(store: Any, text: str, source: str) -> None:
    """Replace the stored state in one transaction (DELETE + INSERT: DuckDB upserts are slower)."""
    with store.transaction() as conn:
        conn.execute("DELETE FROM agent_state WHERE id = ?", [STATE_ROW_ID])
        conn.execute(
            "INSERT INTO agent_state (id, state, source) VALUES (?, ?, ?)", [STATE_ROW_ID, text, source]
        )


def delete_state_row(store: Any) -> None:
    with store.transaction() as conn:
        conn.execute("DELETE FROM agent_state WHERE id = ?", [STATE_ROW_ID])
