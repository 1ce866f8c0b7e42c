"""Analysis exports: every part of an agent's memory as a pandas DataFrame or a pyarrow Table.

Each frame is built from the database: one DuckDB query reads the rows (parts, text and the strings the token
estimate measures come out of ``json_transform`` and a list lambda), numpy over the Arrow buffers finishes the
token estimate (:mod:`._frame_columns`), and numpy computes the tree columns from the parent pointers
(:mod:`._tree_columns`). Sessions and agents get them as accessors bound by the package (:func:`bound_frame`):
``session.messages_df()`` returns a DataFrame and ``session.messages_df.arrow()`` the same rows as a pyarrow
Table, without a pandas copy.

The module functions (:func:`messages`, :func:`branches`, ...) return Arrow tables and take a
:class:`~agentlab.session.Session` (that session: its own rows plus, for a fork, the shared path) or an
:class:`~agentlab.agent.Agent` / :class:`~agentlab.store.Store` (every session, each row seen from its own session).

Invariants: frames never write; the token columns equal :func:`agentlab.context.estimate_message_tokens` of the
messages exactly; ``covered_by_compaction`` and the branch token estimates follow upstream's overlay rule
(on the current branch as the session reads it, elsewhere along the message's own branch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentlab.context import estimate_string_tokens
from agentlab.session.duckdb import _frame_columns as core
from agentlab.session.duckdb import _messages_table as messages_table
from agentlab.session.duckdb._tree_columns import View, overlay_tokens, scope, where

__all__ = [
    "AgentFrames", "BoundFrame", "SessionFrames", "blocks", "blocks_history", "branches", "compactions",
    "frame_to_pandas", "many_messages", "messages", "tokens", "tool_calls", "usage",
]

_COMPACTIONS_SQL = """
SELECT seq, 'compaction' AS kind, created_at, session_id, id, trigger, leaf_id, from_message_id, to_message_id,
       messages_covered, tokens_before, tokens_after,
       CASE WHEN tokens_after > 0 THEN tokens_before / tokens_after END AS compression_ratio,
       length(summary) AS summary_chars, summary, NULL AS error_type, NULL AS error
FROM compactions WHERE id IN (SELECT unnest(?::VARCHAR[]))
UNION ALL BY NAME
SELECT seq, kind, created_at, session_id, trigger, leaf_id, tokens_before, error_type, error
FROM compaction_events WHERE {where}
ORDER BY seq
"""

def _finish_messages(store: Any, table: Any) -> Any:
    seqs = table.column("seq")

    def contents(rows: list[int]) -> list[str]:
        wanted = [seqs[i].as_py() for i in rows]
        found = messages_table.contents(store, wanted)
        return [found[s] for s in wanted]

    columns = core.part_columns(table.column("_parts"), table.column("_text_null"), contents)
    table = table.drop_columns(["_parts", "_text_null"])
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


def _content_view(target: Any) -> View:
    return View(target, messages_table.MESSAGES_FRAME, _finish_messages)


# --- frames ----------------------------------------------------------------------------------------------------


def messages(target: Any) -> Any:
    """One row per stored message, with tree, part, text, token and compaction columns (a pyarrow Table).

    Columns: ``session_id`` (the session storing the row), ``seq``, ``id``, ``parent_id``, ``role``,
    ``created_at``, ``depth`` (0 at a root), ``branch_id`` (id of the branch's first message; a branch continues
    through each message's oldest child), ``is_leaf``, ``on_current_branch``, ``n_parts``, ``part_kinds``,
    ``text`` (text parts joined by a space, as search indexes them), ``tokens`` (the message's
    estimate by upstream's heuristic) and ``covered_by_compaction`` (id of the overlay that replaces it, or null).

    Args:
        target: A Session (its rows, plus a fork's shared path) or an Agent/Store (every session's own rows).
    """
    import numpy as np
    import pyarrow as pa

    view = _content_view(target)
    n = view.table.num_rows
    depth = np.zeros(n, dtype=np.int64)
    branch_row = np.zeros(n, dtype=np.int64)
    leaf = np.zeros(n, dtype=bool)
    current = np.zeros(n, dtype=bool)
    covered = np.full(n, None, dtype=object)
    for part in view.parts:
        keep = part.owned if view.session_id is None else np.ones(len(part.rows), dtype=bool)
        rows = part.rows[keep]
        depth[rows] = part.shape.depth[keep]
        branch_row[rows] = part.rows[part.shape.branch][keep]
        leaf[rows], current[rows] = part.shape.is_leaf[keep], part.on_current[keep]
        if part.overlays:
            covered[rows] = np.array(part.coverage(), dtype=object)[keep]
    t = view.table
    return pa.table({
        "session_id": t.column("session_id"), "seq": t.column("seq"), "id": t.column("id"),
        "parent_id": t.column("parent_id"), "role": t.column("role"), "created_at": t.column("created_at"),
        "depth": pa.array(depth), "branch_id": t.column("id").take(pa.array(branch_row)), "is_leaf": pa.array(leaf),
        "on_current_branch": pa.array(current), "n_parts": t.column("n_parts"), "part_kinds": t.column("part_kinds"),
        "text": t.column("text"), "tokens": t.column("tokens"),
        "covered_by_compaction": pa.array(covered, pa.string()) if covered.any() else pa.nulls(n, pa.string()),
    })


def branches(target: Any) -> Any:
    """One row per leaf (a root-to-leaf path) of a session, or of every session of an agent (a pyarrow Table).

    Columns: ``session_id``, ``branch_id`` (the first message of the leaf's own branch), ``leaf_id``,
    ``is_current``, ``length`` (messages root to leaf), ``branch_messages`` (messages on the branch itself),
    ``diverges_from`` (the message after which the branch splits off; null for the first branch of a root),
    ``last_activity`` (newest ``created_at`` on the path), ``raw_tokens`` (sum of the message estimates),
    ``tokens`` (the same path read through its compaction overlays, as the session estimates history),
    ``compacted`` (an overlay applies), ``compactions`` (how many apply) and ``hidden_messages``.
    """
    import numpy as np
    import pyarrow as pa

    view = _content_view(target)
    rows: list[dict[str, Any]] = []
    for part in view.parts:
        shape, tok = part.shape, part.table.column("tokens").to_numpy()
        cum = shape.prefix_sum(tok)
        stamps = part.table.column("created_at").cast(pa.int64()).to_numpy()
        newest = shape.prefix_max(stamps)
        seqs = part.table.column("seq").to_numpy()
        counts = np.bincount(shape.branch, minlength=len(shape))
        for lf in part.leaves():
            start = int(shape.branch[lf])
            applied = part.applied(lf)
            path = part.leaf_path(lf) if applied else []
            saved = sum(int(cum[path[a.last]] - cum[path[a.first]] + tok[path[a.first]]) for a in applied)
            rows.append({
                "session_id": part.session_id, "branch_id": shape.ids[start], "leaf_id": shape.ids[lf],
                "is_current": lf == part.current_leaf, "length": int(shape.depth[lf]) + 1,
                "branch_messages": int(counts[start]),
                "diverges_from": shape.ids[shape.parent[start]] if shape.parent[start] >= 0 else None,
                "last_activity": int(newest[lf]), "raw_tokens": int(cum[lf]),
                "tokens": int(cum[lf]) - saved + sum(overlay_tokens(a.summary) for a in applied),
                "compacted": bool(applied), "compactions": len(applied),
                "hidden_messages": sum(a.last - a.first + 1 for a in applied), "seq": int(seqs[lf]),
            })
    rows.sort(key=lambda r: (r["session_id"], r["seq"]))
    stamp = view.table.schema.field("created_at").type
    schema = pa.schema([("session_id", pa.string()), ("branch_id", pa.string()), ("leaf_id", pa.string()),
                        ("is_current", pa.bool_()), ("length", pa.int64()), ("branch_messages", pa.int64()),
                        ("diverges_from", pa.string()), ("last_activity", pa.int64()),
                        ("raw_tokens", pa.int64()), ("tokens", pa.int64()), ("compacted", pa.bool_()),
                        ("compactions", pa.int64()), ("hidden_messages", pa.int64())])
    table = pa.Table.from_pylist(rows, schema=schema)
    index = table.schema.get_field_index("last_activity")
    return table.set_column(index, pa.field("last_activity", stamp), table.column(index).cast(stamp))


def compactions(target: Any, *, events: bool = True) -> Any:
    """One row per compaction overlay, plus (``events=True``) one per run that stored nothing (a pyarrow Table).

    Columns: ``seq``, ``kind`` (``"compaction"``, or ``"error"`` / ``"noop"`` for runs that stored nothing),
    ``created_at``, ``session_id``, ``id``, ``trigger`` (``"manual"`` / ``"automatic"``), ``leaf_id``, ``branch_id``
    (the branch holding the overlay's last message), ``from_message_id``, ``to_message_id``, ``messages_covered``,
    ``tokens_before`` and ``tokens_after`` (the session estimate around it, as recorded), ``compression_ratio``
    (before / after), ``summary_chars``, ``summary_tokens`` (the overlay message's estimate), ``applied`` (the
    overlay replaces messages on the current branch), ``summary``, ``error_type`` and ``error``.

    Args:
        target: A Session (its overlays, and for a fork its parent's overlays from before the fork) or an Agent.
        events: Include the error and no-op runs.
    """
    import pyarrow as pa

    store, _, sid = scope(target)
    condition, params = ("session_id = ?", [sid]) if sid is not None else ("true", [])
    if not events:
        condition, params = "false", []
    with store.lock:  # the overlays and the rows they name from one database state
        view = View(target, messages_table.STRUCTURE)
        visible = sorted({c.id for records in view.overlays.values() for c in records})
        table = store.relation(_COMPACTIONS_SQL.format(where=condition), [visible, *params]).to_arrow_table()
    branch: dict[str, str] = {}
    applied: set[str] = set()
    for part in view.parts:
        for c in part.overlays:
            row = part.shape.row_of.get(c.to_message_id)
            if row is not None:
                branch.setdefault(c.id, part.shape.ids[part.shape.branch[row]])
        applied.update(a.id for a in part.applied(part.current_leaf))
    ids = table.column("id").to_pylist()
    summaries = table.column("summary").to_pylist()
    extra = {
        "branch_id": pa.array([branch.get(i) if i else None for i in ids], pa.string()),
        "summary_tokens": pa.array([overlay_tokens(s) if s is not None else None for s in summaries], pa.int64()),
        "applied": pa.array([(i in applied) if i else None for i in ids], pa.bool_()),
    }
    order = ["seq", "kind", "created_at", "session_id", "id", "trigger", "leaf_id", "branch_id", "from_message_id",
             "to_message_id", "messages_covered", "tokens_before", "tokens_after", "compression_ratio",
             "summary_chars", "summary_tokens", "applied", "summary", "error_type", "error"]
    return pa.table({name: extra[name] if name in extra else table.column(name) for name in order})


def tokens(target: Any, *, threshold: int | None = None, prompt_tokens: int | None = None) -> Any:
    """The session's token estimate after every append and every compaction: the saw-tooth (a pyarrow Table).

    Replays the session in seq order: after each append the estimate of the path to the new message, read
    through the overlays stored before it; after each compaction the estimate of the compacted leaf's path with
    the new overlay. Columns: ``step``, ``seq``, ``kind`` (``"append"`` / ``"compaction"``), ``message_id``
    (the appended message, or the compacted leaf), ``compaction_id``, ``appends`` (appends so far: the x axis
    on which a compaction is a vertical drop), ``history_tokens``, ``prompt_tokens``, ``tokens`` (their sum,
    the number the threshold is compared with) and ``threshold``.

    Args:
        target: A Session.
        threshold: The compaction threshold to report (default: the session's ``token_threshold``).
        prompt_tokens: Tokens of the system prompt to add to every point (default: the estimate of the session's
            current system prompt; the prompt of earlier moments is not stored).
    """
    import numpy as np
    import pyarrow as pa

    if getattr(target, "session_id", None) is None:
        raise TypeError("tokens() needs a Session (the estimate is per session); use session.tokens_df().")
    view = _content_view(target)
    part = view.parts[0]
    if threshold is None:
        threshold = getattr(target, "token_threshold", None)
    if prompt_tokens is None:
        provider = getattr(target, "system_prompt_provider", None)
        text = provider() if callable(provider) else None
        prompt_tokens = estimate_string_tokens(text) if isinstance(text, str) else 0
    rows = part.replay()
    history_col = pa.array([r[5] for r in rows], pa.int64())
    total = [None if r[5] is None else r[5] + prompt_tokens for r in rows]
    return pa.table({
        "step": pa.array(np.arange(len(rows)), pa.int64()), "seq": pa.array([r[0] for r in rows], pa.int64()),
        "kind": pa.array([r[1] for r in rows], pa.string()), "message_id": pa.array([r[2] for r in rows], pa.string()),
        "compaction_id": pa.array([r[3] for r in rows], pa.string()),
        "appends": pa.array([r[4] for r in rows], pa.int64()), "history_tokens": history_col,
        "prompt_tokens": pa.array([prompt_tokens] * len(rows), pa.int64()), "tokens": pa.array(total, pa.int64()),
        "threshold": pa.array([threshold] * len(rows), pa.float64() if isinstance(threshold, float) else pa.int64()),
    })


def blocks(target: Any) -> Any:
    """One row per configured context block of a session, loaded from its provider (a pyarrow Table).

    Columns: ``position``, ``label``, ``description``, ``kind`` (``readonly``, ``writable``, ``skill``,
    ``search``), ``provider`` (class name), ``max_tokens``, ``content``, ``chars``, ``tokens`` (estimate),
    ``budget_used`` (tokens / max_tokens), ``entries`` (keys of a skill or search block), ``error`` (the
    provider failed to load) and ``updated_at`` (when a block stored in the agent was last written).
    A session without context blocks gives an empty table with these columns.
    """
    import pyarrow as pa

    from agentlab.context import provider_kind

    context = getattr(target, "context", None) if hasattr(type(target), "context") else None
    rows: list[dict[str, Any]] = []
    if context is not None:
        errors = context.errors
        for position, label in enumerate(context.labels):
            spec, config = context.block_spec(label), context.config(label)
            provider = getattr(config, "provider", None)
            try:
                kind = provider_kind(provider) if provider is not None else "readonly"
            except TypeError:
                kind = None
            counter = getattr(provider, "count", None) or getattr(provider, "keys", None)
            try:
                entries = counter() if callable(counter) and kind in ("skill", "search") else None
                entries = len(entries) if isinstance(entries, (list, tuple, set)) else entries
            except Exception:  # a provider that cannot list itself still shows its text
                entries = None
            content = spec.content if spec is not None else ""
            rows.append({"position": position, "label": label, "description": getattr(config, "description", None),
                         "kind": kind, "provider": type(provider).__name__ if provider is not None else None,
                         "max_tokens": getattr(config, "max_tokens", None), "content": content,
                         "chars": len(content), "tokens": estimate_string_tokens(content),
                         "entries": entries if isinstance(entries, int) else None,
                         "error": str(errors[label]) if label in errors else None,
                         **_stored_key(provider, kind)})
    schema = pa.schema([("position", pa.int64()), ("label", pa.string()), ("description", pa.string()),
                        ("kind", pa.string()), ("provider", pa.string()), ("max_tokens", pa.int64()),
                        ("content", pa.string()), ("chars", pa.int64()), ("tokens", pa.int64()),
                        ("entries", pa.int64()), ("error", pa.string()), ("stored_session", pa.string()),
                        ("stored_label", pa.string()), ("legacy_label", pa.string())])
    listed = pa.Table.from_pylist(rows, schema=schema)
    store = scope(target)[0]
    with store.lock:
        store.conn.register("_agentlab_blocks", listed)
        try:
            return store.relation("""
                SELECT b.* EXCLUDE (stored_session, stored_label, legacy_label, entries, error),
                       CASE WHEN b.max_tokens > 0 THEN b.tokens / b.max_tokens END AS budget_used,
                       b.entries, b.error,
                       -- the session's own row, else the legacy row it reads (see AgentContextProvider)
                       coalesce(c.updated_at, (SELECT max(l.updated_at) FROM context_blocks l
                                               WHERE l.session_id IS NULL AND l.label = b.legacy_label)) AS updated_at
                FROM _agentlab_blocks b
                LEFT JOIN context_blocks c ON c.session_id = b.stored_session AND c.label = b.stored_label
                ORDER BY b.position
            """).to_arrow_table()
        finally:
            store.conn.unregister("_agentlab_blocks")


def _stored_key(provider: Any, kind: str | None) -> dict[str, str | None]:
    # Where a block stored in the agent keeps its row: (session id, label), and the legacy name it may read.
    from agentlab.context import legacy_block_name

    key = None
    if kind == "writable":
        try:
            key = getattr(provider, "storage_key", None)
        except Exception:  # no label yet: nothing stored to join
            key = None
    if not (isinstance(key, tuple) and len(key) == 2):
        return {"stored_session": None, "stored_label": None, "legacy_label": None}
    return {"stored_session": key[0], "stored_label": key[1], "legacy_label": legacy_block_name(*key)}


_HISTORY_SQL = """
SELECT seq, written_at, session_id, label, writer, writer_id, old_content, new_content
FROM context_block_history {where}
ORDER BY seq
"""


def blocks_history(target: Any) -> Any:
    """The memory timeline: one row per write to a writable context block, oldest first (a pyarrow Table).

    Columns: ``seq`` (the store's clock, comparable with message seqs), ``written_at``, ``session_id``, ``label``,
    ``writer`` (``"tool"``: a ``set_context`` call; ``"python"``; ``"client"``: a served client), ``writer_id``
    (the ``tool_use`` id or the connection id, when known), ``old_content``, ``new_content``, ``old_tokens`` and
    ``new_tokens`` (the estimates of the two texts).

    Args:
        target: A Session (the writes to its blocks) or an Agent/Store (every session's).
    """
    store, _, sid = scope(target)
    condition, params = ("WHERE session_id = ?", [sid]) if sid is not None else ("", [])
    with store.lock:
        table = store.relation(_HISTORY_SQL.format(where=condition), params).to_arrow_table()
    import pyarrow as pa

    for name in ("old", "new"):
        table = table.append_column(f"{name}_tokens", pa.array(core.string_tokens(table.column(f"{name}_content"))))
    return table


def tool_calls(target: Any) -> Any:
    """One row per tool call, joined with its result (a pyarrow Table).

    Calls are Anthropic ``tool_use`` blocks (answered by the first later ``tool_result`` with the same id) and
    AI-SDK tool parts (``tool-<name>`` / ``dynamic-tool``, which carry their own output). Columns: ``session_id``,
    ``seq`` and ``message_id`` (the calling message), ``part_index``, ``created_at``, ``tool_use_id``,
    ``tool_name``, ``input`` (JSON text), ``result`` (text, or JSON text of a list of blocks), ``is_error``
    (null while unanswered), ``error_text`` (an AI-SDK part's error), ``result_message_id`` and ``duration_ms``
    (read from the result message's ``metadata.tool_durations_ms`` when the chat layer recorded it, else null).
    """
    store, tree, sid = scope(target)
    with store.lock:
        condition, params = where(tree, sid)
        return store.relation(messages_table.TOOL_CALLS.replace("{where}", condition), params).to_arrow_table()


def usage(target: Any) -> Any:
    """One row per Claude API call from the ``chat_usage`` table (a session's calls, or the whole agent's)."""
    store, _, sid = scope(target)
    condition, params = ("WHERE session_id = ?", [sid]) if sid is not None else ("", [])
    with store.lock:
        return store.relation(f"SELECT * FROM chat_usage {condition} ORDER BY seq", params).to_arrow_table()


# --- methods ---------------------------------------------------------------------------------------------------


def frame_to_pandas(table: Any) -> Any:
    """Arrow -> pandas, keeping list columns (``part_kinds``) as Arrow-backed: unpacking them into one numpy array
    per row would cost more than the rest of the conversion together."""
    import pandas as pd
    import pyarrow as pa

    return table.to_pandas(types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_list(t) else None)


def many_messages(run: Callable[[str], Any], connection: Callable[[], Any]) -> Any:
    """The messages frame (Arrow) of many attached files, from their stacked ``messages`` table.

    Args:
        run: Runs a query over the stacked tables (which carry ``agent``, ``agent_class`` and ``_alias``) and
            returns an Arrow table.
        connection: Gives a connection to read single rows of the stacked table from.

    Returns:
        ``agent``, ``agent_class``, ``session_id``, ``seq``, ``id``, ``parent_id``, ``role``, ``created_at``,
        ``n_parts``, ``part_kinds``, ``text`` and ``tokens``, ordered by agent, file and seq.
    """
    table = run(messages_table.MANY_MESSAGES_FRAME)
    aliases, seqs = table.column("_alias"), table.column("seq")

    def contents(rows: list[int]) -> list[str]:
        return [messages_table.content_in(connection(), aliases[i].as_py(), seqs[i].as_py()) for i in rows]

    columns = core.part_columns(table.column("_parts"), table.column("_text_null"), contents)
    table = table.drop_columns(["_alias", "_parts", "_text_null"])
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


class BoundFrame:
    """A frame of one session or agent: a DataFrame when called, a pyarrow Table from ``.arrow(...)``."""

    def __init__(self, build: Callable[..., Any], obj: Any) -> None:
        self._build, self._obj = build, obj
        self.__doc__ = build.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return frame_to_pandas(self._build(self._obj, *args, **kwargs))

    def arrow(self, *args: Any, **kwargs: Any) -> Any:
        """The same rows as a pyarrow Table (no pandas copy)."""
        return self._build(self._obj, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<frame {self._build.__name__} of {self._obj!r}>"


class AgentFrames:
    """The frames of every session stored in an agent's file, as properties of the agent (a mixin).

    Each property is a :class:`BoundFrame`: call it for a pandas DataFrame, ``.arrow()`` for the pyarrow Table.
    """

    @property
    def messages_df(self) -> BoundFrame:
        """Every stored message of every session, one row each (:func:`messages`)."""
        return BoundFrame(messages, self)

    @property
    def branches_df(self) -> BoundFrame:
        """Every branch point of every session (:func:`branches`)."""
        return BoundFrame(branches, self)

    @property
    def compactions_df(self) -> BoundFrame:
        """Every compaction and compaction event of every session (:func:`compactions`)."""
        return BoundFrame(compactions, self)

    @property
    def blocks_history_df(self) -> BoundFrame:
        """Every write to a writable block of every session (:func:`blocks_history`)."""
        return BoundFrame(blocks_history, self)

    @property
    def tool_calls_df(self) -> BoundFrame:
        """Every tool call with its result, across sessions (:func:`tool_calls`)."""
        return BoundFrame(tool_calls, self)

    @property
    def usage_df(self) -> BoundFrame:
        """Token usage of every Messages API call (:func:`usage`)."""
        return BoundFrame(usage, self)


class SessionFrames(AgentFrames):
    """The frames of one session, as properties of the session (a mixin): those of :class:`AgentFrames`, limited
    to the session, plus its token estimate and its context blocks."""

    @property
    def tokens_df(self) -> BoundFrame:
        """The token estimate along the current branch, message by message (:func:`tokens`)."""
        return BoundFrame(tokens, self)

    @property
    def blocks_df(self) -> BoundFrame:
        """One row per context block, with its stored text and tokens (:func:`blocks`)."""
        return BoundFrame(blocks, self)
