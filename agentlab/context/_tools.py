"""The tools a session gives the model for its context blocks, as Anthropic tool definitions.

``context_tools(blocks, loaded)`` returns ``{"name", "description", "input_schema"}`` dicts with upstream's
descriptions and JSON schemas byte for byte, using ``label`` (not ``block``):

* ``set_context`` when any block is writable (keyed skill/search blocks with ``set`` included);
* ``load_context`` and ``unload_context`` when any skill block exists;
* ``search_context`` when any searchable block exists.

An ``append`` through ``set_context`` of text the block already holds as whole lines writes nothing and says so
(``Unchanged: memory already holds this text, ...``): a retried turn re-runs the model's memory write, and upstream
would store the text twice.

``run_tool(context, name, input)`` executes one call and **never raises**: failures come back as upstream's
``Error: ...`` strings, and input that does not match the schema is an error string too (the ``label`` enum is left
to the tool itself, so a wrong label gets upstream's message listing the valid ones).

``scan_loaded_skills(messages)`` reads the calls back from a conversation (Anthropic ``tool_use``/``tool_result``
blocks, or upstream's AI SDK tool parts) to restore which skills are loaded when a session reopens.

Invariants: enums follow block order; the definitions are a pure function of the blocks and the loaded-skill set;
``run_tool`` returns a ``str`` for any input whatsoever.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentlab.context._keys import context_entry_key
from agentlab.context._prompt import ContextBlock, js_round
from agentlab.context._tokens import js_number_to_string

__all__ = [
    "TOOL_NAMES", "UNLOADED_PREFIX", "context_tool_calls", "context_tools", "is_loaded_text", "run_tool",
    "scan_loaded_skills", "tool_result_text",
]

TOOL_NAMES = ("set_context", "load_context", "unload_context", "search_context")

_KEYED_HINT = (
    "\n\nFor keyed blocks (skill collections / searchable), pass `metadata: { title, description }` \u2014 title "
    "stabilises updates, description helps the model pick entries. Metadata is optional; short content rarely "
    "needs it, long loadable entries benefit most."
)
_METADATA_DESCRIPTION = (
    'Optional metadata for keyed entries (skill collections, searchable blocks: "skills", "knowledge"). Short '
    "content doesn't need metadata; longer loadable entries (skills) benefit from a title and description so the "
    "model can pick the right one without loading it."
)
_TITLE_DESCRIPTION = (
    "Short title. Used as a stable identifier \u2014 entries with the same title are updated in place, different "
    "titles create new entries."
)
_ENTRY_DESCRIPTION = (
    "One-line summary shown alongside the title in the system prompt so the model can decide when to load the entry."
)
# The deliberate improvement over upstream: the unloaded text is not lost (see SessionContext.unloaded_skill_text).
UNLOAD_NOTE = "Its full text stays in storage: load_context with the same label and key brings it back."


class ToolContext(Protocol):
    """What running a context tool needs from the blocks (:class:`~agentlab.context.ContextBlocks` has it)."""

    def block_spec(self, label: str) -> ContextBlock | None: ...

    def set_block(self, label: str, content: str) -> ContextBlock: ...

    def append_to_block(self, label: str, content: str) -> ContextBlock: ...

    def set_skill(self, label: str, key: str, content: str, description: str | None = None) -> ContextBlock: ...

    def set_search_entry(self, label: str, key: str, content: str) -> ContextBlock: ...

    def is_loaded(self, label: str, key: str) -> bool: ...

    def load_skill(self, label: str, key: str) -> str | None: ...

    def unload_skill(self, label: str, key: str) -> bool: ...

    def search(self, label: str, query: str) -> str | None: ...

    def tools(self) -> list[dict[str, Any]]: ...



def _kind(block: ContextBlock) -> str:
    if block.is_skill:
        return "skill collection, keyed entries"
    if block.is_searchable:
        return "searchable, keyed entries"
    return "writable"


def _quoted(labels: Iterable[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


def _set_context(writable: Sequence[ContextBlock]) -> dict[str, Any]:
    lines = "\n".join(
        f'- "{b.label}" ({_kind(b)}): {b.description if b.description is not None else "no description"}'
        for b in writable
    )
    keyed = any(b.is_skill or b.is_searchable for b in writable)
    properties: dict[str, Any] = {
        "label": {"type": "string", "enum": [b.label for b in writable], "description": "Block label to write to"},
        "content": {"type": "string", "description": "The main content to write to the block."},
        "action": {"type": "string", "enum": ["replace", "append"], "description": "replace (default) or append"},
    }
    if keyed:
        properties["metadata"] = {
            "type": "object",
            "description": _METADATA_DESCRIPTION,
            "properties": {
                "title": {"type": "string", "description": _TITLE_DESCRIPTION},
                "description": {"type": "string", "description": _ENTRY_DESCRIPTION},
            },
        }
    return {
        "name": "set_context",
        "description": (
            f"Write to a context block. Available blocks:\n{lines}\n\nWrites are durable and persist across "
            f"sessions.{_KEYED_HINT if keyed else ''}"
        ),
        "input_schema": {"type": "object", "required": ["label", "content"], "properties": properties},
    }


def _label_key_schema(labels: list[str], label_description: str, key_description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": labels, "description": label_description},
            "key": {"type": "string", "description": key_description},
        },
        "required": ["label", "key"],
    }


def context_tools(blocks: Sequence[ContextBlock], loaded: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Tool definitions for these blocks, in the order set, load, unload, search.

    Args:
        blocks: The session's blocks in configured order.
        loaded: Loaded skills as ``"label:key"``, listed in the ``unload_context`` description.

    Returns:
        Anthropic tool dicts (``name``, ``description``, ``input_schema``); ``[]`` when every block is read-only.
    """
    tools = []
    writable = [b for b in blocks if b.writable]
    if writable:
        tools.append(_set_context(writable))
    skills = [b.label for b in blocks if b.is_skill]
    if skills:
        tools.append({
            "name": "load_context",
            "description": (
                f"Load a document from a skill block by key. Available skill blocks: {_quoted(skills)}. "
                "Check the system prompt for available keys."
            ),
            "input_schema": _label_key_schema(skills, "Skill block label", "Skill key to load"),
        })
        names = list(loaded)
        state = f" Currently loaded: {', '.join(names)}." if names else " No skills currently loaded."
        tools.append({
            "name": "unload_context",
            "description": (
                "Unload a previously loaded skill to free context space. The skill remains available for "
                f"re-loading.{state}"
            ),
            "input_schema": _label_key_schema(skills, "Skill block label", "Skill key to unload"),
        })
    searchable = [b.label for b in blocks if b.is_searchable]
    if searchable:
        tools.append({
            "name": "search_context",
            "description": (
                f"Search for information in a searchable context block. ONLY these blocks are searchable: "
                f"{_quoted(searchable)}. Other blocks cannot be searched."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "enum": searchable, "description": "Searchable block label"},
                    "query": {"type": "string", "description": "Search query"},
                },
                "required": ["label", "query"],
            },
        })
    return tools


# -- input checking ----------------------------------------------------------------------------------------------


def _validate(tool: Mapping[str, Any], data: Any) -> str | None:
    """The first way ``data`` breaks ``tool``'s schema, or None. The label enum is checked by the tool itself."""
    name = tool["name"]
    schema = tool["input_schema"]
    if not isinstance(data, Mapping):
        return f"Invalid input for {name}: expected an object, got {type(data).__name__}"
    for required in schema["required"]:
        if required not in data:
            return f'Invalid input for {name}: "{required}" is required'
    for prop, spec in schema["properties"].items():
        if prop not in data:
            continue
        value = data[prop]
        if spec["type"] == "string":
            if not isinstance(value, str):
                return f'Invalid input for {name}: "{prop}" must be a string'
            if prop != "label" and "enum" in spec and value not in spec["enum"]:
                return f'Invalid input for {name}: "{prop}" must be one of {_quoted(spec["enum"])}'
        elif spec["type"] == "object":
            if not isinstance(value, Mapping):
                return f'Invalid input for {name}: "{prop}" must be an object'
            for sub in spec["properties"]:
                if sub in value and not isinstance(value[sub], str):
                    return f'Invalid input for {name}: "{prop}.{sub}" must be a string'
    return None


# -- execution ---------------------------------------------------------------------------------------------------


def _usage(block: ContextBlock) -> str:
    tokens = js_number_to_string(block.tokens)
    if block.max_tokens:
        pct = js_number_to_string(js_round(block.tokens / block.max_tokens * 100))
        return f"{pct}% ({tokens}/{js_number_to_string(block.max_tokens)} tokens)"
    return f"{tokens} tokens"


def _already_there(existing: str, content: str) -> bool:
    """Whether ``content`` (its lines, trimmed of blank ones at the ends) is already whole lines of ``existing``."""
    lines = content.strip("\n")
    return bool(lines.strip()) and f"\n{lines}\n" in f"\n{existing}\n"


def _run_set(context: ToolContext, data: Mapping[str, Any]) -> str:
    label, content = data["label"], data["content"]
    block = context.block_spec(label)
    if block is None:
        return f'Error: block "{label}" not found'
    if block.is_skill or block.is_searchable:
        metadata = data.get("metadata") or {}
        key = context_entry_key(metadata.get("title"), content)
        if block.is_skill:
            description = metadata.get("description")
            context.set_skill(label, key, content, description if description is not None else metadata.get("title"))
        else:
            context.set_search_entry(label, key, content)
        return f'Indexed "{key}" in {label}.'
    if data.get("action") == "append":
        if block.writable and _already_there(block.content, content):
            # Not upstream (which appends a second copy): a retried turn re-runs the same write.
            return f"Unchanged: {label} already holds this text, so nothing was written. Usage: {_usage(block)}"
        written = context.append_to_block(label, content)
    else:
        written = context.set_block(label, content)
    return f"Written to {label}. Usage: {_usage(written)}"


def _run_load(context: ToolContext, data: Mapping[str, Any]) -> str:
    label, key = data["label"], data["key"]
    if context.is_loaded(label, key):
        # Not upstream (which returns the text again): a second copy would only fill the context window.
        return (
            f'Skill "{key}" is already loaded from {label}; its text is earlier in this conversation. '
            "Unload it first to load it again."
        )
    content = context.load_skill(label, key)
    return content if content is not None else f"Not found: {key}"


def _run_unload(context: ToolContext, data: Mapping[str, Any]) -> str:
    label, key = data["label"], data["key"]
    if not context.unload_skill(label, key):
        return f'Skill "{key}" is not currently loaded in "{label}".'
    return f'Unloaded "{key}" from {label}. Context reclaimed. {UNLOAD_NOTE}'


def _run_search(context: ToolContext, data: Mapping[str, Any]) -> str:
    result = context.search(data["label"], data["query"])
    return result if result is not None else "No results found."


_RUNNERS = {"set_context": _run_set, "load_context": _run_load, "unload_context": _run_unload,
            "search_context": _run_search}


def run_tool(context: ToolContext, name: str, data: Any) -> str:
    """Execute one context tool call; never raises.

    Args:
        context: The session's :class:`~agentlab.context.ContextBlocks`.
        name: The tool name from the model's ``tool_use`` block.
        data: Its ``input``.

    Returns:
        The tool result text: upstream's success strings, or ``Error: ...``.
    """
    try:
        tools = {t["name"]: t for t in context.tools()}
        tool = tools.get(name)
        if tool is None:
            available = ", ".join(tools) or "none (every block is read-only)"
            return f'Error: unknown tool "{name}". Available tools: {available}'
        problem = _validate(tool, data)
        if problem is not None:
            return f"Error: {problem}"
        return _RUNNERS[name](context, data)
    except Exception as exc:  # the contract: errors are results, never exceptions
        return f"Error: {exc}"


# -- reading calls back from a conversation -----------------------------------------------------------------------

UNLOADED_PREFIX = "[skill unloaded:"
_CONTEXT_TOOLS = ("load_context", "unload_context")


@dataclass(frozen=True)
class _ToolCall:
    """A load/unload call found in a conversation, with where its result sits."""

    name: str
    label: Any
    key: Any
    text: str
    message_index: int
    part_index: int
    field: str  # "content" (Anthropic tool_result) or "output" (AI SDK tool part)


def tool_result_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # Anthropic content blocks
        return "\n".join(b.get("text", "") for b in value if isinstance(b, Mapping) and b.get("type") == "text")
    return json.dumps(value, ensure_ascii=False)


def context_tool_calls(messages: Iterable[Mapping[str, Any]]) -> Iterable[_ToolCall]:
    """Every answered load/unload call in conversation order (Anthropic blocks and AI SDK tool parts)."""
    pending: dict[Any, tuple[str, Any, Any]] = {}
    for m_index, message in enumerate(messages):
        parts = message.get("parts")
        if not isinstance(parts, list):
            continue
        for p_index, part in enumerate(parts):
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind == "tool_use" and part.get("name") in _CONTEXT_TOOLS:
                given = part.get("input")
                data = given if isinstance(given, Mapping) else {}
                pending[part.get("id")] = (part["name"], data.get("label"), data.get("key"))
            elif kind == "tool_result" and part.get("tool_use_id") in pending:
                name, label, key = pending.pop(part.get("tool_use_id"))
                if not part.get("is_error"):
                    text = tool_result_text(part.get("content"))
                    yield _ToolCall(name, label, key, text, m_index, p_index, "content")
            else:
                # AI SDK shapes: upstream matches toolName; the static "tool-<name>" type is accepted too.
                tool_name = part.get("toolName")
                if tool_name not in _CONTEXT_TOOLS and isinstance(kind, str) and kind.startswith("tool-"):
                    tool_name = kind[5:]
                if tool_name in _CONTEXT_TOOLS and part.get("state") == "output-available":
                    given = part.get("input")
                    data = given if isinstance(given, Mapping) else {}
                    output = part.get("output", part.get("result"))
                    field = "output" if "output" in part or "result" not in part else "result"
                    yield _ToolCall(tool_name, data.get("label"), data.get("key"), tool_result_text(output), m_index,
                                    p_index, field)


def is_loaded_text(call: _ToolCall) -> bool:
    text = call.text
    return not (
        text.startswith(UNLOADED_PREFIX)
        or text.startswith("Error:")
        or text == f"Not found: {call.key}"
        or text.startswith(f'Skill "{call.key}" is already loaded')
    )


def scan_loaded_skills(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The skills a conversation has loaded and not unloaded, as ``"label:key"`` in load order.

    A ``load_context`` result counts unless it is an error, ``Not found``, or the ``[skill unloaded: key]`` marker;
    a later successful ``unload_context`` removes the skill.
    """
    loaded: dict[str, None] = {}
    for call in context_tool_calls(messages):
        name = f"{call.label}:{call.key}"
        if call.name == "load_context" and is_loaded_text(call):
            loaded[name] = None
        elif call.name == "unload_context" and call.text.startswith("Unloaded "):
            loaded.pop(name, None)
    return list(loaded)
