"""The actor that owns one agent's DuckDB file: every call to that agent in the cluster runs here, one at a time.

A named Ray actor is the nearest thing Ray has to a Durable Object: one actor per name in a namespace, and a
synchronous actor runs its calls one after another. :class:`AgentActor` is a plain class (Ray wraps it on first
use, see :func:`remote_class`); it opens the agent with :func:`agentlab.get_agent` in its own process and keeps
the sessions it has been asked for.

Invariants:

* The actor opens the agent lazily, on its first call, so a restart (Ray re-runs the constructor after the
  process died) costs nothing until the next call, which reopens the file and replays DuckDB's log: every write
  that returned before the death is there.
* A previous owner of the file that is still exiting (a killed actor) is waited for, up to ``LOCK_WAIT``
  seconds, instead of failing at once with :class:`~agentlab.errors.AgentLockedError`.
* Every method returns ``(True, result)`` or ``(False, Failure)``; nothing raises through Ray
  (see :mod:`agentlab.cluster._remote`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentlab.errors import AgentLockedError

from ._remote import guarded

__all__ = ["LOCK_WAIT", "AgentActor", "actor_name_for", "remote_class"]

LOCK_WAIT = 15.0  # seconds a new owner waits for a dying one to release the file

_REMOTE: Any = None


def actor_name_for(path: Any) -> str:
    """The actor name of the agent whose file is ``path``: one name per file, so one owner per file."""
    return f"agentlab:{os.fspath(path)}"


def remote_class() -> Any:
    """:class:`AgentActor` as a Ray actor class (made once per process)."""
    global _REMOTE
    if _REMOTE is None:
        from ._remote import require_ray

        _REMOTE = require_ray().remote(AgentActor)
    return _REMOTE


class AgentActor:
    """Owns one agent (class, name, root) inside a Ray actor process.

    Args:
        cls: The agent class (shipped by Ray: importable on the workers, or defined in a notebook).
        name: The agent's name.
        root: The absolute root folder, as the caller resolved it (actors do not see the caller's environment).
        read_only: Open the file without write access.
        configure_session: Optional ``session -> session`` applied to every session the actor opens (compaction
            settings, context blocks); it survives restarts, since Ray re-runs the constructor with it.
        lock_wait: Seconds to wait for another process to release the file before raising
            :class:`~agentlab.errors.AgentLockedError`.
    """

    def __init__(self, cls: type, name: str, root: str, read_only: bool = False,
                 configure_session: Callable[[Any], Any] | None = None, lock_wait: float = LOCK_WAIT) -> None:
        self._cls, self._name, self._root, self._read_only = cls, name, root, read_only
        self._configure = configure_session
        self._lock_wait = lock_wait
        self._agent: Any = None
        self._sessions: dict[str, Any] = {}
        self._incarnation = uuid.uuid4().hex  # a new one whenever Ray or a handle starts the actor again

    # -- the agent and its sessions --------------------------------------------------------------------

    def _open(self) -> Any:
        if self._agent is not None and not self._agent.closed:
            return self._agent
        from agentlab.agent import get_agent

        deadline = time.monotonic() + self._lock_wait
        while True:
            try:
                self._agent = get_agent(self._cls, self._name, root=self._root, read_only=self._read_only)
                break
            except AgentLockedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        self._sessions = {}
        return self._agent

    def _session(self, session_id: str) -> Any:
        agent = self._open()
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        from agentlab.session import Session

        own = getattr(agent, "session", None)  # a ChatAgent talks in its own, configured default session
        session = own if session_id == "" and isinstance(own, Session) else Session.create(agent, session_id)
        if self._configure is not None:
            session = self._configure(session)
            if session_id == "" and isinstance(own, Session):
                agent.session = session  # ask() then runs with the same settings
        self._sessions[session_id] = session
        return session

    # -- calls (each returns a guarded reply) ------------------------------------------------------------

    def info(self) -> tuple[bool, Any]:
        """Open the agent; return where and what it is."""

        def describe() -> dict[str, Any]:
            agent = self._open()
            import ray

            kind = type(agent)
            return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                    "path": str(agent.path), "read_only": agent.read_only, "incarnation": self._incarnation,
                    "class": f"{kind.__module__}.{kind.__qualname__}", "chat": callable(getattr(agent, "ask", None))}

        return guarded(describe)

    def agent(self, method: str, args: tuple[Any, ...] | None, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """Call ``agent.method(*args, **kwargs)``, or read the attribute ``method`` when ``args`` is None."""

        def run() -> Any:
            target = getattr(self._open(), method)
            return target if args is None else target(*args, **kwargs)

        return guarded(run)

    def session(self, session_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """Call ``method`` on the session ``session_id`` (``""``: the default one)."""
        return guarded(lambda: getattr(self._session(session_id), method)(*args, **kwargs))

    def sql(self, kind: str, query: str, params: tuple[Any, ...]) -> tuple[bool, Any]:
        """``agent.sql(query, *params)`` (``kind`` ``""``), or its ``df`` / ``arrow`` variant."""

        def run() -> Any:
            runner = self._open().sql
            return (runner if not kind else getattr(runner, kind))(query, *params)

        return guarded(run)

    def memory(self) -> tuple[bool, Any]:
        """This actor process's memory (see :func:`agentlab.cluster._remote.process_memory`)."""
        from ._remote import process_memory

        return guarded(process_memory)

    def close(self) -> tuple[bool, Any]:
        """Close the agent, releasing its file (the handle then ends the actor)."""

        def run() -> None:
            agent, self._agent, self._sessions = self._agent, None, {}
            if agent is not None:
                agent.close()

        return guarded(run)

    def __repr__(self) -> str:  # Ray shows it in errors and logs
        return f"AgentActor({self._cls.__name__}, {self._name!r})"

