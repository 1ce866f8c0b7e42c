"""Tools a ChatAgent offers besides the session's context tools, and the execution of one ``tool_use`` block.

A :class:`Tool` is a definition (``name``, ``description``, ``input_schema``, sent to the API as is) plus a Python
callable that receives the model's ``input`` dict. Plain functions become tools through
:meth:`Tool.from_function`: the name is the function's, the description its docstring's first paragraph, and the
schema comes from the annotated parameters (``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``).

Invariants: running a tool call never raises (an exception becomes an ``is_error`` result saying
``Error: <type>: <message>``); a call naming no known tool gets an error result too; results are strings, or
lists of content blocks when a tool returns them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.context import writing_as

__all__ = ["Tool", "ToolCall", "as_tools", "run_tool_call"]

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
               "str": "string", "int": "integer", "float": "number", "bool": "boolean", "list": "array",
               "dict": "object"}


@dataclass(frozen=True)
class Tool:
    """A tool the model may call, with the Python function that answers it.

    Attributes:
        name: Tool name (letters, digits, ``_`` and ``-``).
        description: What the tool does; the model reads it.
        input_schema: JSON Schema of the input object.
        run: ``input dict -> result`` (a string, content blocks, or anything JSON-serialisable).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run: Callable[[dict[str, Any]], Any]

    def definition(self) -> dict[str, Any]:
        """The Anthropic tool definition."""
        return {"name": self.name, "description": self.description, "input_schema": dict(self.input_schema)}

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None) -> Tool:
        """Make a tool of a plain function; the model's input is passed as keyword arguments.

        Raises:
            TypeError: A parameter is ``*args``/``**kwargs`` (the schema could not describe it).
        """
        signature = inspect.signature(fn)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"Tool.from_function cannot describe *args/**kwargs of {fn.__name__}; "
                                "build a Tool with an explicit input_schema instead.")
            kind = _JSON_TYPES.get(param.annotation)
            properties[param.name] = {"type": kind} if kind else {}
            if param.default is param.empty:
                required.append(param.name)
        doc = inspect.getdoc(fn) or ""
        schema = {"type": "object", "properties": properties, "required": required}
        return cls(name or fn.__name__, description or doc.split("\n\n")[0] or fn.__name__, schema,
                   lambda data: fn(**data))


@dataclass
class ToolCall:
    """One ``tool_use`` and its result, as stored in the ``tool_result`` block."""

    id: str
    name: str
    input: Any
    output: Any = ""
    is_error: bool = False
    ran: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def not_run(cls, block: Mapping[str, Any], text: str) -> ToolCall:
        """A call the loop did not run (the reply was cut off), answered with an error note."""
        return cls(str(block.get("id")), str(block.get("name")), block.get("input"), text, True, ran=False)

    def result_block(self) -> dict[str, Any]:
        """The ``tool_result`` content block answering this call."""
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.id, "content": self.output}
        if self.is_error:
            block["is_error"] = True
        return block


def _from_dict(spec: Mapping[str, Any]) -> Tool:
    run = spec.get("run") or spec.get("function")
    if not callable(run):
        raise TypeError(f"The tool dict {spec.get('name')!r} needs a callable 'run' (input dict -> result).")
    return Tool(str(spec["name"]), str(spec.get("description", "")),
                spec.get("input_schema") or {"type": "object", "properties": {}}, run)


def as_tools(tools: Sequence[Any] | None) -> list[Tool]:
    """Normalise ``tools=``: :class:`Tool` objects, plain functions, or dicts with a callable ``run``.

    Raises:
        TypeError: An item is none of these.
    """
    out: list[Tool] = []
    for item in tools or ():
        if isinstance(item, Tool):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(_from_dict(item))
        elif callable(item):
            out.append(Tool.from_function(item))
        else:
            raise TypeError(f"A tool is a Tool, a function or a dict with 'run'; got {type(item).__name__}.")
    return out


def _as_content(result: Any) -> Any:
    if isinstance(result, str):
        return result
    if isinstance(result, list) and result and all(isinstance(b, Mapping) and "type" in b for b in result):
        return [dict(b) for b in result]
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def run_tool_call(block: Mapping[str, Any], runners: Mapping[str, Tool | None], session: Any) -> ToolCall:
    """Run the tool a ``tool_use`` block names; never raises.

    Args:
        block: The ``tool_use`` block (``id``, ``name``, ``input``).
        runners: Tool name -> :class:`Tool`, or None for the session's context tools (``session.run_tool``).
        session: The session whose ``run_tool`` answers context tools.
    """
    call = ToolCall(str(block.get("id")), str(block.get("name")), block.get("input"))
    if call.name not in runners:
        call.output, call.is_error = f"Error: unknown tool {call.name!r}. Available: {', '.join(runners)}", True
        return call
    tool = runners[call.name]
    data = call.input if isinstance(call.input, dict) else {}
    try:
        if tool is None:
            with writing_as("tool", call.id):  # the memory timeline names the call that wrote
                output = session.run_tool(call.name, data)
            # Context tools report failures as upstream's "Error: ..." strings; flag them for the model too.
            call.is_error = isinstance(output, str) and output.startswith("Error:")
        else:
            output = tool.run(dict(data))
        call.output = _as_content(output)
    except Exception as exc:  # a tool's failure is the model's information, not the turn's end
        call.output, call.is_error = f"Error: {type(exc).__name__}: {exc}", True
    return call
