"""Compaction without storage: overlays on read, the reference compactor, and read-time truncation.

A compaction never deletes or edits a stored message: it is a row ``(id, summary, from_message_id,
to_message_id)`` that ``apply_compactions`` splices into a path on every read, replacing ``from..to`` with one
assistant message ``"compaction_" + id`` holding the summary. Per start message the newest overlay whose ``to`` is
on the path wins (even if narrower); overlays whose ``to`` is off the path (sibling branches) never apply.
``create_compact_function`` is the reference compactor; ``sanitize_tool_pairs`` and ``truncate_older_messages``
prepare a path for a model call. Parts are read as Anthropic blocks (``tool_use``/``tool_result``) and as upstream
AI-SDK parts (``tool-<name>``/``dynamic-tool`` with ``toolCallId``).

Invariants: no function mutates its arguments; ``sanitize_tool_pairs`` and ``truncate_older_messages`` return
deep copies; ``apply_compactions`` returns a new list of the caller's message dicts plus fresh overlay dicts.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agentlab.context import (
    TokenCounter,
    estimate_message_tokens,
    js_number_to_string,
    js_stringify,
    js_trim,
    utf16_prefix,
)
from agentlab.errors import CompactionError
from agentlab.session._truncation import truncate_older_messages, truncate_tool_output

__all__ = [
    "COMPACTION_PREFIX", "FIRST_SUMMARY_TEMPLATE", "STUB_RESULT_TEXT", "UPDATE_SUMMARY_TEMPLATE",
    "align_boundary_backward", "align_boundary_forward", "apply_compactions", "build_summary_prompt",
    "compute_summary_budget", "create_compact_function", "is_compaction_message", "sanitize_tool_pairs",
    "truncate_older_messages", "truncate_tool_output",
]

Message = Mapping[str, Any]
CompactResult = dict[str, str]

COMPACTION_PREFIX = "compaction_"
STUB_RESULT_TEXT = "[Result from earlier conversation \u2014 see context summary above]"


def _now_iso(now: str | datetime | None) -> str:
    if isinstance(now, str):
        return now
    moment = now or datetime.now(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _field(obj: Any, snake: str, camel: str) -> Any:
    # Compactions arrive as dicts from SQL, dataclasses from a store, or camelCase dicts from upstream JSON.
    if isinstance(obj, Mapping):
        return obj[snake] if snake in obj else obj[camel]
    return getattr(obj, snake)


def is_compaction_message(message: Message) -> bool:
    """True if ``message`` is a compaction overlay (its id starts with ``"compaction_"``)."""
    mid = message.get("id")
    return isinstance(mid, str) and mid.startswith(COMPACTION_PREFIX)


def apply_compactions(
    messages: Sequence[Message], compactions: Sequence[Any], *, now: str | datetime | None = None
) -> list[Any]:
    """Splice stored compaction overlays into a root-to-leaf path.

    At each message, the overlays starting there whose ``to`` is at or after it on the path are candidates; the
    last in ``compactions`` order is emitted and the walk resumes after its ``to``. Otherwise the message is kept.

    Args:
        messages: The path, root first (message dicts with ``id``).
        compactions: Stored overlays in stored order (oldest first, ties by insertion); dicts or objects with ``id``,
            ``summary``, ``from_message_id`` and ``to_message_id`` (camelCase dict keys are accepted too).
        now: Timestamp for the overlays' ``created_at`` (read time); ISO string or datetime. Defaults to now, UTC.

    Returns:
        A new list of the original dicts and overlays ``{"id": "compaction_<id>", "role": "assistant", "parts":
        [{"type": "text", "text": summary}], "created_at": now}``.
    """
    if not compactions:
        return list(messages)
    first_index: dict[Any, int] = {}
    for i, message in enumerate(messages):
        first_index.setdefault(message.get("id"), i)  # upstream uses indexOf: the first occurrence
    by_start: dict[Any, list[Any]] = {}
    for c in compactions:
        by_start.setdefault(_field(c, "from_message_id", "fromMessageId"), []).append(c)
    stamp: str | None = None
    out: list[Any] = []
    i, n = 0, len(messages)
    while i < n:
        chosen, end = None, -1
        for c in by_start.get(messages[i].get("id"), ()):
            j = first_index.get(_field(c, "to_message_id", "toMessageId"), -1)
            if j >= i:
                chosen, end = c, j
        if chosen is None:
            out.append(messages[i])
            i += 1
            continue
        stamp = stamp or _now_iso(now)
        out.append({
            "id": COMPACTION_PREFIX + str(_field(chosen, "id", "id")),
            "role": "assistant",
            "parts": [{"type": "text", "text": _field(chosen, "summary", "summary")}],
            "created_at": stamp,
        })
        i = end + 1
    return out


# --- tool pairs ---------------------------------------------------------------------------------


def _is_sdk_tool_part(part: Any) -> bool:
    kind = part.get("type") if isinstance(part, Mapping) else None
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def _parts(message: Message) -> list[Any]:
    return [p for p in (message.get("parts") or ()) if isinstance(p, Mapping)]


def _has_tool_calls(message: Message) -> bool:
    return any(_is_sdk_tool_part(p) or p.get("type") == "tool_use" for p in _parts(message))


def _tool_call_ids(message: Message) -> dict[Any, Mapping[str, Any]]:
    """Call ids in part order (a dict used as an ordered set), each with the part that made the call."""
    ids: dict[Any, Mapping[str, Any]] = {}
    for p in _parts(message):
        if _is_sdk_tool_part(p) and "toolCallId" in p:
            ids.setdefault(p["toolCallId"], p)
        elif p.get("type") == "tool_use" and "id" in p:
            ids.setdefault(p["id"], p)
    return ids


def _result_id(part: Mapping[str, Any], *, need_output: bool) -> Any:
    """The call id a part answers, or None. AI-SDK parts answer only with an ``output`` key if ``need_output``."""
    if _is_sdk_tool_part(part) and "toolCallId" in part and (not need_output or "output" in part):
        return part["toolCallId"]
    if part.get("type") == "tool_result":
        return part.get("tool_use_id")
    return None


def _is_tool_result_for(message: Message, call_ids: Mapping[Any, Any]) -> bool:
    for p in _parts(message):
        rid = _result_id(p, need_output=False)
        if rid is not None and rid in call_ids:
            return True
    return False


def align_boundary_forward(messages: Sequence[Message], idx: int) -> int:
    """Move a cut forward past the results of the tool calls made just before it.

    Args:
        messages: The path.
        idx: A boundary index (the first message after the cut).

    Returns:
        The aligned index: if ``messages[idx - 1]`` is an assistant message with tool calls, the first following
        message that holds no result for those calls; otherwise ``idx``.
    """
    if idx <= 0 or idx >= len(messages):
        return idx
    prev = messages[idx - 1]
    if prev.get("role") == "assistant" and _has_tool_calls(prev):
        call_ids = _tool_call_ids(prev)
        while idx < len(messages) and _is_tool_result_for(messages[idx], call_ids):
            idx += 1
    return idx


def align_boundary_backward(messages: Sequence[Message], idx: int) -> int:
    """Move a cut back onto the tool-call message when it lands on that call's results.

    Args:
        messages: The path.
        idx: A boundary index (the first message kept after the cut).

    Returns:
        ``idx - 1`` if ``messages[idx]`` answers calls made by the assistant message before it, else ``idx``.
    """
    if idx <= 0 or idx >= len(messages):
        return idx
    while idx > 0:
        msg = messages[idx]
        if msg.get("role") == "assistant" and _has_tool_calls(msg):
            break
        prev = messages[idx - 1]
        if prev.get("role") == "assistant" and _has_tool_calls(prev) and _is_tool_result_for(msg, _tool_call_ids(prev)):
            idx -= 1
            continue
        break
    return idx


def sanitize_tool_pairs(messages: Sequence[Message], *, now: str | datetime | None = None) -> list[dict[str, Any]]:
    """Repair tool call/result pairs broken by a cut (upstream ``sanitizeToolPairs``; the compactor never calls it).

    Results whose call is in no assistant message are removed. After an assistant message whose call has no result,
    a stub ``"stub-<call id>"`` is inserted: upstream's assistant ``tool-result`` part for an AI-SDK call, a user
    ``tool_result`` block for an Anthropic ``tool_use`` (what the Messages API accepts), both with
    ``STUB_RESULT_TEXT``. Messages left with no parts are dropped.

    Args:
        messages: The path to repair.
        now: ``created_at`` for stubs; defaults to now, UTC.

    Returns:
        A repaired deep copy.
    """
    result: list[dict[str, Any]] = [dict(m) for m in copy.deepcopy(list(messages))]
    surviving: dict[Any, None] = {}
    for msg in result:
        if msg.get("role") == "assistant":
            surviving.update(dict.fromkeys(_tool_call_ids(msg)))
    answered: dict[Any, None] = {}
    for msg in result:
        for p in _parts(msg):
            rid = _result_id(p, need_output=True)
            if rid is not None:
                answered[rid] = None
    orphaned = {rid for rid in answered if rid not in surviving}
    if orphaned:
        for msg in result:
            parts = msg.get("parts") or []
            kept = [p for p in parts if not (isinstance(p, Mapping) and _result_id(p, need_output=True) in orphaned)]
            if len(kept) != len(parts):
                msg["parts"] = kept
    missing = {cid for cid in surviving if cid not in answered and cid not in orphaned}
    if missing:
        patched: list[dict[str, Any]] = []
        for msg in result:
            patched.append(msg)
            if msg.get("role") != "assistant":
                continue
            for cid, call in _tool_call_ids(msg).items():
                if cid not in missing:
                    continue
                if call.get("type") == "tool_use":
                    stub_part = {"type": "tool_result", "tool_use_id": cid, "content": STUB_RESULT_TEXT}
                    role = "user"
                else:
                    name = call.get("toolName")
                    stub_part = {"type": "tool-result", "toolCallId": cid,
                                 "toolName": "unknown" if name is None else name, "result": STUB_RESULT_TEXT}
                    role = "assistant"
                patched.append({"id": f"stub-{cid}", "role": role, "parts": [stub_part], "created_at": _now_iso(now)})
        result = patched
    return [m for m in result if m.get("parts")]


# --- summary prompt -----------------------------------------------------------------------------

_SECTIONS = """## Topic
[What the conversation is about]

## Key Points
[Important information, decisions, and conclusions from the conversation]

## Current State
[Where things stand now \u2014 what has been done, what is in progress]

## Open Items
[Unresolved questions, pending tasks, or next steps discussed]

Target ~{budget} tokens. Be factual \u2014 only include information that was explicitly discussed in the conversation. \
Do NOT invent file paths, commands, or details that were not mentioned. Write only the summary body."""

FIRST_SUMMARY_TEMPLATE = """Create a concise summary of this conversation that preserves the important information \
for future context.

CONVERSATION TO SUMMARIZE:
{content}

Use this structure:

""" + _SECTIONS

UPDATE_SUMMARY_TEMPLATE = """You are updating a conversation summary. A previous summary exists below. New \
conversation turns have occurred since then and need to be incorporated.

PREVIOUS SUMMARY:
{previous}

NEW TURNS TO INCORPORATE:
{content}

Update the summary. PRESERVE existing information that is still relevant. ADD new information. Remove information \
only if it is clearly obsolete.

""" + _SECTIONS


def _js_truthy(value: Any) -> bool:
    # JavaScript truthiness: empty objects and arrays are truthy, unlike in Python.
    if value is None or value is False:
        return False
    if isinstance(value, str):
        return value != ""
    if isinstance(value, (int, float)):
        return value == value and value != 0
    return True


def _as_text(value: Any) -> str:
    # Upstream (at commit a0e134bb) used String(output), which prints "[object Object]"; later upstream switched
    # structured outputs to JSON, and so do we.
    return value if isinstance(value, str) else js_stringify(value)


def _format_tool(name: Any, tool_input: Any, output: Any) -> str:
    lines = [f"[Tool: {name if name is not None else 'unknown'}]"]
    if _js_truthy(tool_input):
        lines.append("Input: " + utf16_prefix(js_stringify(tool_input), 500))
    if _js_truthy(output):
        lines.append("Output: " + utf16_prefix(_as_text(output), 500))
    return "\n".join(lines)


def _joined_text(message: Message) -> str:
    # Array.join writes null and undefined as "".
    texts = (p.get("text") for p in _parts(message) if p.get("type") == "text")
    return "\n".join("" if t is None else str(t) for t in texts)


def _format_message(message: Message, tool_names: Mapping[Any, Any]) -> str:
    parts = _parts(message)
    text = _joined_text(message)
    tools = []
    for p in parts:
        kind = p.get("type")
        if _is_sdk_tool_part(p):
            tools.append(_format_tool(p.get("toolName"), p.get("input"), p.get("output")))
        elif kind == "tool_use":
            tools.append(_format_tool(p.get("name"), p.get("input"), None))
        elif kind == "tool_result":
            tools.append(_format_tool(tool_names.get(p.get("tool_use_id")), None, p.get("content")))
    tool_text = "\n".join(tools)
    return f"[{message.get('role')}]\n{text}" + (f"\n{tool_text}" if tool_text else "")


def build_summary_prompt(messages: Sequence[Message], previous_summary: str | None, budget: int) -> str:
    """The prompt asking a model to summarise ``messages`` (upstream ``buildSummaryPrompt``).

    Each message is ``[role]``, its text parts, then per tool part ``[Tool: name]`` with ``Input:`` (JSON) and
    ``Output:`` (text, or JSON if structured), each cut to 500 UTF-16 units and shown only if JS-truthy. A
    ``tool_use`` gives name and input; a ``tool_result`` gives the output, named after its ``tool_use`` if present.

    Args:
        messages: The messages to summarise (the compactor's middle).
        previous_summary: Text of an earlier overlay; when non-empty the "You are updating a conversation summary"
            template is used, else the first-compaction template.
        budget: Target summary length in tokens.

    Returns:
        The prompt text.
    """
    tool_names = {p.get("id"): p.get("name") for m in messages for p in _parts(m) if p.get("type") == "tool_use"}
    content = "\n\n---\n\n".join(_format_message(m, tool_names) for m in messages)
    budget_text = js_number_to_string(budget)
    if previous_summary:
        return UPDATE_SUMMARY_TEMPLATE.format(previous=previous_summary, content=content, budget=budget_text)
    return FIRST_SUMMARY_TEMPLATE.format(content=content, budget=budget_text)


def compute_summary_budget(messages: Sequence[Message]) -> int:
    """Summary target: ``max(100, floor(0.2 * estimate_message_tokens(messages)))``."""
    return max(100, math.floor(estimate_message_tokens(messages) * 0.2))


# --- the reference compactor --------------------------------------------------------------------


def _tail_cut(messages: Sequence[Message], head_end: int, count: Callable[[Message], Any], budget: float,
              min_tail: int) -> int:
    n = len(messages)
    used: Any = 0
    token_cut = n
    for i in range(n - 1, head_end - 1, -1):
        tokens = count(messages[i])
        # Stop before the budget is exceeded, but only once the tail holds at least one message.
        if used + tokens > budget and token_cut < n:
            break
        used += tokens
        token_cut = i
    min_cut = n - min_tail
    cut = min(token_cut, min_cut) if min_cut >= head_end else token_cut
    return align_boundary_backward(messages, cut)


def create_compact_function(
    summarize: Callable[[str], str],
    *,
    protect_head: int = 3,
    tail_token_budget: float = 20000,
    min_tail_messages: int = 2,
    token_counter: Callable[[list[Message]], float] | None = None,
) -> Callable[..., CompactResult | None]:
    """Build the reference compaction function (upstream ``createCompactFunction``).

    The returned ``fn(history, token_counter=None)`` takes the overlay-applied path and returns ``{"from_message_id",
    "to_message_id", "summary"}`` or None: None for ``protect_head + min_tail_messages`` messages or
    fewer; the middle runs from ``align_boundary_forward(history, protect_head)`` to a tail cut found by walking back
    until ``tail_token_budget`` would be exceeded (keeping at least ``min_tail_messages``, then
    ``align_boundary_backward``); ``compaction_*`` messages are left out of it and the first one supplies the
    previous summary. Note that a tail within budget leaves nothing to compact. A blank summary gives None.
    Per-message counts: this function's ``token_counter`` (one-message list), else the Session ``TokenCounter``
    given to ``fn`` (``system_prompt=""``, ``context_blocks=[]``), else ``estimate_message_tokens``.

    Args:
        summarize: ``prompt -> summary``, synchronous (e.g. one Claude call).
        protect_head: Messages at the start that are never summarised.
        tail_token_budget: Tokens of recent messages kept verbatim.
        min_tail_messages: Messages at the end that are never summarised.
        token_counter: Optional ``messages -> tokens`` counter for the tail walk.

    Returns:
        The compaction function.

    Raises:
        CompactionError: (from ``fn``) if ``summarize`` returns an awaitable or a non-string.
    """
    message_counter = token_counter

    def compact(history: Sequence[Message], token_counter: TokenCounter | None = None) -> CompactResult | None:
        messages = list(history)
        if len(messages) <= protect_head + min_tail_messages:
            return None
        if message_counter is not None:
            count: Callable[[Message], Any] = lambda m: message_counter([m])  # noqa: E731
        elif token_counter is not None:
            session_counter = token_counter
            count = lambda m: session_counter(messages=[dict(m)], system_prompt="", context_blocks=[])  # noqa: E731
        else:
            count = lambda m: estimate_message_tokens([m])  # noqa: E731
        start = align_boundary_forward(messages, protect_head)
        cut = _tail_cut(messages, start, count, tail_token_budget, min_tail_messages)
        if cut <= start:
            return None
        middle = [m for m in messages[start:cut] if not is_compaction_message(m)]
        if not middle:
            return None
        earlier = next((m for m in messages if is_compaction_message(m)), None)
        previous = None if earlier is None else _joined_text(earlier)
        summary = summarize(build_summary_prompt(middle, previous, compute_summary_budget(middle)))
        if inspect.isawaitable(summary):
            if inspect.iscoroutine(summary):
                summary.close()  # avoid a "never awaited" warning
            raise CompactionError(
                "summarize returned an awaitable; create_compact_function needs a synchronous function. "
                "Wrap the async call, e.g. lambda p: asyncio.run(summarize_async(p)) outside a running loop."
            )
        if summary is None or (isinstance(summary, str) and not js_trim(summary)):
            return None
        if not isinstance(summary, str):
            raise CompactionError(f"summarize must return a str, got {type(summary).__name__}; return the text.")
        return {"from_message_id": middle[0]["id"], "to_message_id": middle[-1]["id"], "summary": summary}

    return compact
