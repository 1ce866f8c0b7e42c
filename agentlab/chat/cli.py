"""``agentlab chat NAME``: a terminal chat with a named agent that keeps a memory block.

The agent (:class:`TerminalAgent`) is a :class:`~agentlab.chat.ChatAgent` with one writable ``memory`` context
block and a cached system prompt, stored under the data folder like any other agent, so a later session (or a
notebook) finds the same conversation and memory. The system prompt is re-rendered once at start-up, then stays
frozen for the session (``/refresh`` re-renders it). Slash commands: ``/retry``, ``/reset``, ``/usage``, ``/prompt``,
``/refresh``, ``/quit``.

Invariants: without an API key (and without ``--offline``) nothing is created: the command prints how to configure
a key and exits with status 2. ``--offline`` talks to :class:`agentlab.chat.OfflineClaude` (no network).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from agentlab.chat._chat_agent import ChatAgent
from agentlab.errors import AgentlabError

__all__ = ["TerminalAgent", "add_parser", "run"]


class TerminalAgent(ChatAgent):
    """The agent behind ``agentlab chat``: a memory block the model writes with ``set_context``."""

    instructions = (
        "You are a helpful assistant chatting in a terminal. Keep answers short. When the user tells you "
        "something worth remembering about them, save it to the memory block with set_context."
    )

    def configure_session(self, session: Any) -> Any:
        return session.with_context(
            "memory", description="Facts the user shared, kept across conversations", max_tokens=1100
        ).with_cached_prompt()


def add_parser(commands: Any, handler: Callable[[argparse.Namespace], int]) -> None:
    """Register the ``chat`` subcommand on ``agentlab``'s subparsers."""
    chat = commands.add_parser("chat", help="chat with a named agent in the terminal (needs ANTHROPIC_API_KEY)")
    chat.add_argument("name", help="the agent's name (one DuckDB file per name)")
    chat.add_argument("--data", help="folder holding agents (default: $AGENTLAB_HOME or ./agentlab-data)")
    chat.add_argument("--model", help="model id (default: AGENTLAB_MODEL or claude-haiku-5-5)")
    chat.add_argument("--max-tokens", type=int, help="output token limit per call")
    chat.add_argument("--offline", action="store_true", help="use the offline stand-in model (no key, no network)")
    chat.set_defaults(func=handler)


def _has_key() -> bool:
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def run(args: argparse.Namespace, *, stdin: TextIO | None = None, out: TextIO | None = None,
        err: TextIO | None = None) -> int:
    """Run the chat loop; returns the process exit status."""
    from agentlab.agent import get_agent
    from agentlab.chat._settings import NO_KEY_HELP

    stdin, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    if not args.offline and not _has_key():
        print(f"agentlab chat: {NO_KEY_HELP}\nOr try it without a key: agentlab chat {args.name} --offline",
              file=err)
        return 2
    try:
        agent = get_agent(TerminalAgent, args.name, root=args.data)
    except AgentlabError as exc:
        print(f"agentlab chat: {exc}", file=err)
        return 1
    try:
        if args.model or args.max_tokens:
            agent.configure(model=args.model, max_tokens=args.max_tokens)
        if args.offline:
            from agentlab.chat._offline import OfflineClaude

            agent.use_client(OfflineClaude().client())
        # A new terminal session starts from the memory as it is now; during the session the prompt stays frozen.
        agent.session.refresh_system_prompt()
        return _loop(agent, stdin, out, err)
    finally:
        agent.close()


def _loop(agent: ChatAgent, stdin: TextIO, out: TextIO, err: TextIO) -> int:
    interactive = stdin.isatty()
    print(f"Chatting with {agent.name!r} ({agent.settings.model}); /quit to leave, /reset to start over.", file=out)
    while True:
        if interactive:
            print("you> ", end="", file=out, flush=True)
        line = stdin.readline()
        if not line:
            return 0
        line = line.strip()
        if not line:
            continue
        try:
            if line in ("/quit", "/exit"):
                return 0
            if line == "/reset":
                agent.reset()
                print("(conversation cleared; memory kept)", file=out)
                continue
            if line == "/usage":
                u = agent.usage()
                print(f"(calls {u.calls}: input {u.input_tokens}, output {u.output_tokens}, cache read "
                      f"{u.cache_read_tokens}, cache write {u.cache_write_tokens})", file=out)
                continue
            if line == "/refresh":
                agent.session.refresh_system_prompt()
                print("(system prompt re-rendered from the memory)", file=out)
                continue
            if line == "/prompt":
                print(agent.system_prompt() or "(empty system prompt)", file=out)
                continue
            turn = agent.retry() if line == "/retry" else agent.ask(line)
        except AgentlabError as exc:
            print(f"error: {exc}", file=err)
            continue
        for call in turn.tool_calls:
            print(f"  [{call.name}] {str(call.output)[:200]}", file=out)
        print(f"claude> {turn.text}" + (f"  [{turn.stop_reason}]" if turn.stop_reason != "end_turn" else ""),
              file=out, flush=True)
