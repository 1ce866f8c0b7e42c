"""ChatAgent: an agent that remembers, then answers, through Claude's Messages API.

A turn (:meth:`ChatAgent.ask`) appends the user message to the agent's session, then loops: send the frozen
system prompt, the tools (the session's context tools, the agent's :meth:`~ChatAgent.get_tools`, the call's
``tools=``; later names win) and the branch's history; store the whole assistant content as it came; run every
``tool_use``; store the ``tool_result`` user message; stop when the model stops asking for tools or after
``max_steps`` calls. :class:`Turn` reports what happened.

Invariants:

* Only appends: a turn never edits or deletes a stored message. Assistant content is stored exactly as the API
  returned it (thinking blocks with signatures, tool_use, text) and sent back exactly as stored.
* Every message is stored through upstream's row size limit (:mod:`agentlab.session._row_size_limit`): a tool output
  that would make a message over 1.8 MB is stored truncated, with a marker, and the pairs stay intact.
* History stays valid: an assistant message with ``tool_use`` blocks is stored in the same transaction as the
  user message holding a ``tool_result`` for each of them (an ``is_error`` note when a call was not run, e.g. a
  reply cut off by ``max_tokens``), together with the call's usage row.
* No key or no network: the error is raised after the user message is stored and before anything else is
  written (not even a frozen prompt). Any API failure leaves the branch ending at a user message, and
  :meth:`ChatAgent.retry` continues the turn from it. The SDK's own retries (429, 5xx, 529, connection) are the
  only retries; errors come out as :mod:`agentlab.errors` types, carrying the partial turn as ``error.turn``.

The client is injectable: ``agent.use_client(anthropic.Anthropic(...))`` (or ``agent.client = ...``), a
``client_factory`` class attribute, or, by default, one built from the settings (:mod:`agentlab.chat._settings`).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentlab.agent import Agent
from agentlab.chat._api import build_request, call_messages_api
from agentlab.chat._settings import ChatSettings, build_client, resolve_settings
from agentlab.chat._tools import Tool, ToolCall, as_tools, run_tool_call
from agentlab.chat._usage import Usage, record_usage, session_usage, usage_from_api
from agentlab.errors import ChatError, CompactionError, InvalidClientError, TurnError
from agentlab.session import UNSET, AgentFrames, enforce_row_size_limit, now_iso

__all__ = ["ChatAgent", "Tool", "ToolCall", "Turn"]

NOT_RUN_TEXT = "Not run: the reply stopped ({reason}) before this tool call was complete. Ask again to retry it."


@dataclass
class Turn:
    """What one :meth:`ChatAgent.ask` or :meth:`ChatAgent.retry` did.

    Attributes:
        id: The turn's id (``chat_usage.turn_id``).
        text: The final assistant text (its text blocks joined by blank lines; "" if none).
        message_ids: Ids of every message the turn appended, in order (the user message first for ``ask``).
        stop_reason: The last call's ``stop_reason`` (``end_turn``, ``max_tokens``, ``refusal``...), or
            ``"max_steps"`` when the step limit ended a tool loop.
        usage: Token counts summed over the turn's calls.
        steps: Number of API calls.
        model: The model the API reported.
        tool_calls: Every tool call, with its result.
        start_id: The user message the turn answered.
    """

    id: str
    text: str = ""
    message_ids: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    model: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    start_id: str | None = None

    @property
    def leaf_id(self) -> str | None:
        """The last message the turn appended (the branch tip after the turn)."""
        return self.message_ids[-1] if self.message_ids else self.start_id


def _new_id() -> str:
    return uuid.uuid4().hex


def _checked_client(client: Any) -> Any:
    if client is None or callable(getattr(getattr(client, "messages", None), "create", None)):
        return client
    if isinstance(client, str):
        raise InvalidClientError(
            "use_client() takes a client such as anthropic.Anthropic(...), not a string. To give an API key, use "
            "agent.configure(api_key=...) or set ANTHROPIC_API_KEY.")
    raise InvalidClientError(f"use_client() takes a client with messages.create (anthropic.Anthropic(...)), not "
                             f"{type(client).__name__}.")


def _final_text(content: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(b["text"] for b in content if b.get("type") == "text" and isinstance(b.get("text"), str))


class ChatAgent(AgentFrames, Agent):
    """An :class:`~agentlab.agent.Agent` with a session and a Claude tool loop.

    Subclass it, add context blocks in :meth:`configure_session`, and reach it with ``get_agent``::

        class Assistant(ChatAgent):
            instructions = "You are a concise assistant."
            def configure_session(self, session):
                return session.with_context("memory", description="Facts about the user", max_tokens=1100)

        agent = get_agent(Assistant, "alice")
        agent.ask("Remember that I take my coffee black.")

    Class attributes:
        chat_settings: Settings layer for every agent of the class (:class:`~agentlab.chat.ChatSettings`).
        instructions: Text placed before the context blocks in the system prompt ("" for none).
        client_factory: ``agent -> client``; used instead of building a client from the settings.
    """

    chat_settings: ClassVar[ChatSettings | None] = None
    instructions: ClassVar[str] = ""
    client_factory: ClassVar[Callable[[ChatAgent], Any] | None] = None

    def on_start(self) -> None:
        super().on_start()
        self._client: Any = None
        self._instance_settings = ChatSettings()
        self._turn_lock = threading.RLock()
        self.session = self.configure_session(self.create_session())

    # -- hooks --------------------------------------------------------------------------------------

    def create_session(self) -> Any:
        """The session the agent talks in (default: ``Session.create(self)``, the agent's default session)."""
        from agentlab.session import Session

        return Session.create(self)

    def configure_session(self, session: Any) -> Any:
        """Hook: add context blocks (``session.with_context(...)``) and return the session. Default: unchanged."""
        return session

    def get_tools(self) -> list[Tool]:
        """Hook: tools this agent always offers, besides the session's context tools."""
        return []

    # -- configuration and client ----------------------------------------------------------------------

    def configure(self, **changes: Any) -> ChatAgent:
        """Override settings for this agent (``model=``, ``max_tokens=``, ``thinking=``, ``effort=``...); chainable.

        Raises:
            TypeError: An unknown setting name. ValueError: an invalid value.
        """
        layer = self._instance_settings.merge(ChatSettings(**changes))
        resolve_settings(self.chat_settings, layer)  # validate before keeping
        self._instance_settings = layer
        if any(k in changes for k in ("api_key", "base_url", "max_retries", "timeout")):
            self._client = None  # rebuilt with the new connection settings
        return self

    @property
    def settings(self) -> ChatSettings:
        """The resolved settings: defaults, environment, class, then instance overrides."""
        return resolve_settings(self.chat_settings, self._instance_settings)

    @property
    def client(self) -> Any:
        """The ``anthropic.Anthropic`` client; built on first use when none was given.

        Raises:
            NoApiKeyError: No client was given and no key is configured.
        """
        if self._client is None:
            factory = type(self).client_factory
            self._client = factory(self) if factory is not None else build_client(self.settings)
        return self._client

    @client.setter
    def client(self, client: Any) -> None:
        self._client = _checked_client(client)

    def use_client(self, client: Any) -> ChatAgent:
        """Talk through ``client`` (a proxy, another base URL, a mock transport); returns the agent.

        Raises:
            InvalidClientError: ``client`` has no ``messages.create`` (an API key string, for instance: use
                ``agent.configure(api_key=...)`` for that).
        """
        self._client = _checked_client(client)
        return self

    # -- turns --------------------------------------------------------------------------------------

    def ask(
        self,
        text: str | Sequence[Mapping[str, Any]],
        *,
        parent_id: Any = UNSET,
        model: str | None = None,
        tools: Sequence[Any] | None = None,
        max_steps: int | None = None,
        max_tokens: int | None = None,
        thinking: Mapping[str, Any] | None = None,
        effort: str | None = None,
    ) -> Turn:
        """Append a user message and run the turn to the model's answer.

        Args:
            text: The question, or a list of content blocks (text, image...).
            parent_id: Where the message goes: omitted -> after the latest leaf; a message id -> a new branch
                from that message (regenerate); None -> a new root.
            model, max_tokens, thinking, effort: Overrides for this turn only.
            tools: Extra tools for this turn: :class:`Tool` objects, plain functions, or dicts with
                ``name``/``description``/``input_schema`` and a callable ``run``.
            max_steps: Most API calls in this turn.

        Returns:
            The :class:`Turn`.

        Raises:
            NoApiKeyError: No key (the user message is stored; configure a key and call :meth:`retry`).
            ModelAPIError: The API failed after the SDK's retries (the branch ends at a user message).
            ValueError: Empty text.
        """
        parts = self._user_parts(text)
        call = ChatSettings(model=model, max_steps=max_steps, max_tokens=max_tokens, thinking=thinking, effort=effort)
        settings = resolve_settings(self.chat_settings, self._instance_settings, call)
        user_tools = as_tools(tools)
        with self._turn_lock:
            message = enforce_row_size_limit({"id": _new_id(), "role": "user", "parts": parts, "created_at": now_iso()})
            self.session.append_message(message, parent_id=parent_id)  # UNSET is append_message's own default
            turn = Turn(id=_new_id(), message_ids=[message["id"]], start_id=message["id"])
            return self._run(turn, settings, user_tools)

    def retry(
        self,
        message_id: str | None = None,
        *,
        model: str | None = None,
        tools: Sequence[Any] | None = None,
        max_steps: int | None = None,
        max_tokens: int | None = None,
        thinking: Mapping[str, Any] | None = None,
        effort: str | None = None,
    ) -> Turn:
        """Continue (or regenerate) a turn from a stored user message, without appending a new question.

        After a failed turn, ``agent.retry()`` continues from the branch tip (the question, or the last tool
        results). ``agent.retry(question_id)`` on an answered question makes a new reply on a new branch.

        Raises:
            TurnError: The message is not a user message (an assistant reply cannot be continued).
            UnknownMessageError: No such message.
        """
        call = ChatSettings(model=model, max_steps=max_steps, max_tokens=max_tokens, thinking=thinking, effort=effort)
        settings = resolve_settings(self.chat_settings, self._instance_settings, call)
        user_tools = as_tools(tools)
        with self._turn_lock:
            start = self._start_message(message_id)
            return self._run(Turn(id=_new_id(), start_id=start), settings, user_tools)

    def reset(self) -> None:
        """Start a fresh conversation: clear the session's messages (as upstream), which refreshes the prompt.

        Context blocks (memory) and usage rows are kept.
        """
        with self._turn_lock:
            self.session.clear_messages()

    def usage(self, *, turn_id: str | None = None, all_sessions: bool = False) -> Usage:
        """Summed token usage: of one turn, of this agent's session (default), or of every session."""
        from agentlab.chat._usage import turn_usage

        if turn_id is not None:
            return turn_usage(self.store, turn_id)
        return session_usage(self.store, None if all_sessions else self._session_id())

    def summarizer(self, **options: Any) -> Any:
        """A :class:`~agentlab.chat.ClaudeSummarizer` on this agent's client, recording its usage here."""
        from agentlab.chat._summarizers import ClaudeSummarizer

        options.setdefault("model", self.settings.model)
        return ClaudeSummarizer(lambda: self.client, usage_sink=self._record_summary_usage, **options)

    # -- internals --------------------------------------------------------------------------------------

    def _session_id(self) -> str:
        return str(getattr(self.session, "session_id", "") or "")

    @staticmethod
    def _user_parts(text: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        if isinstance(text, str):
            if not text.strip():
                raise ValueError("ask() needs a non-empty question (the API rejects empty text).")
            return [{"type": "text", "text": text}]
        parts = [dict(p) for p in text]
        if not parts or not all(isinstance(p.get("type"), str) for p in parts):
            raise ValueError("ask() takes a string or a non-empty list of content blocks with a 'type'.")
        return parts

    def _start_message(self, message_id: str | None) -> str:
        session = self.session
        if message_id is None:
            leaf = session.latest_leaf()
            if leaf is None:
                raise TurnError("Nothing to retry: the conversation is empty. Use agent.ask(...).")
            message = leaf
        else:
            message = session.get_message(message_id)
        if message is None:
            from agentlab.errors import UnknownMessageError

            raise UnknownMessageError(str(message_id))
        if message.get("role") != "user":
            raise TurnError(
                f"Message {message['id']!r} is an assistant reply; retry() continues from a user message. To "
                "regenerate that reply, retry from the question before it: agent.retry(question_id)."
            )
        return str(message["id"])

    def _tool_table(self, user_tools: list[Tool]) -> tuple[list[dict[str, Any]], dict[str, Tool | None]]:
        definitions: dict[str, dict[str, Any]] = {}
        runners: dict[str, Tool | None] = {}
        for tool in as_tools(self.get_tools()):
            definitions[tool.name], runners[tool.name] = tool.definition(), tool
        session_tools = getattr(self.session, "tools", None)  # a plain Session has no context tools
        for definition in session_tools() if session_tools is not None else ():
            # The session's context tools run through session.run_tool.
            definitions[definition["name"]], runners[definition["name"]] = dict(definition), None
        for tool in user_tools:
            definitions[tool.name], runners[tool.name] = tool.definition(), tool
        return list(definitions.values()), runners

    def system_prompt(self) -> str:
        """The system prompt of the next call: ``instructions`` then the session's frozen prompt."""
        freeze = getattr(self.session, "freeze_system_prompt", None)
        frozen = (freeze() if freeze is not None else "") or ""
        return "\n\n".join(p for p in (self.instructions, frozen) if p)

    def _run(self, turn: Turn, settings: ChatSettings, user_tools: list[Tool]) -> Turn:
        session = self.session
        try:
            client = self.client  # before any other write: a missing key leaves only the question stored
        except ChatError as exc:
            exc.turn = turn  # type: ignore[attr-defined]
            raise
        # Automatic compaction waits for the end of the turn (upstream: never mid-turn): an overlay or a refreshed
        # prompt between two steps would change the prefix the previous step cached and its thinking relies on.
        threshold = getattr(session, "token_threshold", None)
        if threshold is not None:
            session.compact_after(None)
        finished = False
        try:
            self._loop(turn, settings, user_tools, client)
            finished = True
            return turn
        except ChatError as exc:
            exc.turn = turn  # type: ignore[attr-defined]
            raise
        finally:
            if threshold is not None:
                session.compact_after(threshold)
                if finished:
                    self._compact_if_needed(threshold)

    def _compact_if_needed(self, threshold: int) -> None:
        session = self.session
        try:
            if session.estimate_tokens() > threshold:
                session.compact(trigger="automatic")
        except CompactionError:
            pass  # no compaction function registered: nothing to do, as the session's own trigger
        except Exception as exc:  # the turn succeeded; a failed compaction must not turn it into an error
            self.on_error(exc)

    def _loop(self, turn: Turn, settings: ChatSettings, user_tools: list[Tool], client: Any) -> None:
        session = self.session
        system = self.system_prompt()
        tool_defs, runners = self._tool_table(user_tools)
        fields = settings.request_fields()
        leaf = turn.start_id
        session_id = self._session_id()
        # Read the branch once; later steps extend it with what they stored, as upstream keeps a multi-step
        # turn's messages in memory (and a mid-turn edit of an old message must not change the sent prefix).
        branch = session.get_history(leaf)
        for step in range(1, int(settings.max_steps or 1) + 1):
            body = build_request(fields, system, tool_defs, branch)
            response = call_messages_api(client, body)
            content = list(response.get("content") or [])
            stop = response.get("stop_reason")
            usage = usage_from_api(response.get("usage"))
            turn.steps, turn.stop_reason, turn.model = step, stop, response.get("model")
            turn.usage = turn.usage + usage
            uses = [b for b in content if b.get("type") == "tool_use"]
            # Calls are only run when the model finished asking for them; a reply cut short (max_tokens...) may
            # hold a truncated input, so each of its calls is answered with a note instead of being run.
            calls = [run_tool_call(b, runners, session) if stop == "tool_use"
                     else ToolCall.not_run(b, NOT_RUN_TEXT.format(reason=stop)) for b in uses]
            assistant: dict[str, Any] = {"id": _new_id(), "role": "assistant", "parts": content,
                                         "created_at": now_iso(),
                         "metadata": {"model": turn.model, "stop_reason": stop, "response_id": response.get("id")}}
            stored: list[dict[str, Any]] = [assistant]
            if calls:
                stored.append({"id": _new_id(), "role": "user", "created_at": now_iso(),
                               "parts": [c.result_block() for c in calls]})
            stored = [enforce_row_size_limit(m) for m in stored]  # a huge tool output must not break the branch
            with self.store.transaction():  # the reply, its results and its usage land together
                parent = leaf
                for message in stored:
                    session.append_message(message, parent_id=parent)
                    parent = message["id"]
                record_usage(self.store, usage, session_id=session_id, turn_id=turn.id, step=step,
                             model=turn.model, response_id=response.get("id"), message_id=assistant["id"],
                             stop_reason=stop)
            branch = branch + stored
            leaf = stored[-1]["id"]
            turn.message_ids.extend(m["id"] for m in stored)
            turn.tool_calls.extend(calls)
            turn.text = _final_text(content)
            if stop != "tool_use" or not uses:
                return
        turn.stop_reason = "max_steps"

    def _record_summary_usage(self, response: Mapping[str, Any]) -> None:
        if self.read_only:
            return
        record_usage(self.store, usage_from_api(response.get("usage")), session_id=self._session_id(),
                     purpose="compaction", model=response.get("model"), response_id=response.get("id"),
                     stop_reason=response.get("stop_reason"))
