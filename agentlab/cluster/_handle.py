"""Handles to agents that live in named Ray actors: ``get_agent(Cls, name, backend="ray")``.

An :class:`AgentHandle` has a local agent's methods for state (``state``, ``set_state``, ``merge_state``), SQL
(``sql``, ``sql.df``, ``sql.arrow``), the default session (``append_message``, ``append_messages``,
``get_history``, ``get_branches``, ``search``...), ``ask`` for a :class:`~agentlab.chat.ChatAgent`, and
``session(id)`` for other sessions; each call runs in the actor that owns the agent's file
(:class:`~agentlab.cluster._actor.AgentActor`), one call at a time across the whole cluster.

Invariants:

* One actor per agent file: the actor is named after the file (``actor_name``) in one namespace (``"agentlab"``
  unless told otherwise), detached (it outlives the driver that made it), and found or created atomically
  (``get_if_exists``), so any number of handles, in any number of drivers, reach the same actor.
* An error raised in the actor reaches the caller as its own class (``UnknownMessageError``, ``SqlError``...),
  never as a ``RayTaskError``; the remote traceback is attached as a note.
* Nothing acknowledged is lost: a call returns only after the actor's write committed to the DuckDB file. An actor
  that died (``ray.kill``, its node lost) is recreated by the next call, which reopens the file. Calls that are
  harmless to send twice (reads, ``set_state``, ``merge_state``, appends, whose message ids make a second copy a
  no-op) are sent again when the actor died under them; any other call (SQL that writes, ``ask``, ``call``) first
  checks that the actor is alive, and if the actor dies during it raises
  :class:`~agentlab.errors.ActorLostError` rather than risk running it twice.

Where the files live: the actor opens ``<root>/<class>/<name>.duckdb`` on whatever node Ray places it, with the
root the caller resolved. So the root must be a folder every node can read and write under the same path (a shared
file system), or the actors must be pinned to the one node that owns the root (``ray_options`` with a custom
resource that only that node has, or a ``NodeAffinitySchedulingStrategy``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentlab.cluster._actor import LOCK_WAIT, actor_name_for, remote_class
from agentlab.errors import ActorLostError, AgentClassConflictError, AgentClosedError, AgentlabError, ClusterError
from agentlab.store import agent_path, resolve_root

from ._remote import ensure_ray, require_ray, unwrap

__all__ = ["DEFAULT_NAMESPACE", "AgentHandle", "SessionHandle", "open_handle"]

DEFAULT_NAMESPACE = "agentlab"
_OMITTED: Any = object()


def _kwargs(**given: Any) -> dict[str, Any]:
    """Only the arguments the caller gave: the actor applies its own defaults (and sentinels stay there)."""
    return {k: v for k, v in given.items() if v is not _OMITTED}


def _reads_only(query: str) -> bool:
    """Whether ``query`` is only plain SELECTs (safe to send twice); unparsable text counts as a write."""
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except (duckdb.Error, TypeError):
        return False
    return bool(statements) and all(s.type == duckdb.StatementType.SELECT for s in statements)


class _Sql:
    """``handle.sql(query, *params)`` -> rows as dicts; ``.df(...)`` -> pandas; ``.arrow(...)`` -> pyarrow."""

    def __init__(self, handle: AgentHandle) -> None:
        self._handle = handle

    def __call__(self, query: str, *params: Any) -> list[dict[str, Any]]:
        return self._handle._call("sql", "", query, params, safe=_reads_only(query), label="sql")

    def df(self, query: str, *params: Any) -> Any:
        return self._handle._call("sql", "df", query, params, safe=_reads_only(query), label="sql.df")

    def arrow(self, query: str, *params: Any) -> Any:
        return self._handle._call("sql", "arrow", query, params, safe=_reads_only(query), label="sql.arrow")


class SessionHandle:
    """One session of an agent that lives in a Ray actor: the :class:`~agentlab.session.Session` methods.

    Get one with ``handle.session(session_id)``; ``""`` is the default session (for a ChatAgent, the one ``ask``
    talks in).
    """

    def __init__(self, handle: AgentHandle, session_id: str) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str ('' for the default session), not {session_id!r}.")
        self._handle = handle
        self.session_id = session_id

    def _run(self, method: str, *args: Any, safe: bool, **kwargs: Any) -> Any:
        return self._handle._call("session", self.session_id, method, args, kwargs, safe=safe, label=method)

    def append_message(self, message: Mapping[str, Any], parent_id: Any = _OMITTED) -> Any:
        """Append one message (see :meth:`agentlab.session.Session.append_message`); returns ``Appended``."""
        return self._run("append_message", dict(message), safe=True, **_kwargs(parent_id=parent_id))

    def append_messages(self, messages: Iterable[Mapping[str, Any]], parent_id: Any = _OMITTED) -> list[Any]:
        """Append many messages in one transaction (see :meth:`agentlab.session.Session.append_messages`)."""
        return self._run("append_messages", [dict(m) for m in messages], safe=True, **_kwargs(parent_id=parent_id))

    def get_history(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The path root -> leaf with compaction overlays applied (latest leaf when ``leaf_id`` is falsy)."""
        return self._run("get_history", leaf_id, safe=True)

    def get_branches(self, message_id: str) -> list[dict[str, Any]]:
        """The children of ``message_id``, oldest first."""
        return self._run("get_branches", message_id, safe=True)

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        """The stored message, or None."""
        return self._run("get_message", message_id, safe=True)

    def latest_leaf_id(self) -> str | None:
        """Id of the current tip."""
        return self._run("latest_leaf_id", safe=True)

    def search(self, query: str, **options: Any) -> list[Any]:
        """BM25 full-text search (``mode``, ``limit``, ``role``, ``branch``, ``all_sessions``); returns hits."""
        return self._run("search", query, safe=True, **options)

    def compact(self, *args: Any, **kwargs: Any) -> Any:
        """Run the session's compaction function now (it must be set, e.g. with ``configure_session``)."""
        return self._run("compact", *args, safe=False, **kwargs)

    def messages_df(self, **options: Any) -> Any:
        """One row per stored message (a pandas DataFrame, built in the actor)."""
        return self._run("messages_df", safe=True, **options)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any other Session method in the actor (not repeated if the actor dies during it)."""
        return self._run(method, *args, safe=False, **kwargs)

    def __repr__(self) -> str:
        return f"<SessionHandle {self.session_id!r} of {self._handle.name!r} in {self._handle.actor_name!r}>"


class AgentHandle:
    """An agent that lives in a named, detached Ray actor. Make one with ``get_agent(Cls, name, backend="ray")``.

    Args (``get_agent``'s options for ``backend="ray"``):
        namespace: The Ray namespace of the actor (default ``"agentlab"``, whatever the driver's namespace is).
        configure_session: ``session -> session`` the actor applies to each session it opens (e.g.
            ``CompactionPolicy().apply``); it must be picklable. The actor's first creator's choice holds.
        address: The cluster to join when this process is not connected to Ray yet.
        ray_options: More actor options (``num_cpus``, ``resources``, ``scheduling_strategy``, ``runtime_env``).
        lock_wait: Seconds the actor waits for another process to release the file.

    Attributes:
        name, cls, root, path: The agent, and where its file is (on the node the actor runs on).
        actor_name: The Ray actor's name (``"agentlab:" + path``); ``namespace``: its Ray namespace.
        read_only: Whether the actor opened the file read-only.
        reconnect_timeout: Seconds a call keeps trying to reach an actor that is restarting.
    """

    reconnect_timeout: float = 60.0

    def __init__(self, cls: type, name: str, *, root: Any = None, read_only: bool = False,
                 namespace: str = DEFAULT_NAMESPACE, configure_session: Callable[[Any], Any] | None = None,
                 address: str | None = None, ray_options: Mapping[str, Any] | None = None,
                 lock_wait: float = LOCK_WAIT) -> None:
        ensure_ray(address)
        resolved = resolve_root(root)  # here, not in the actor: it does not share our cwd or $AGENTLAB_HOME
        self.cls, self.name, self.root, self.read_only = cls, name, resolved, read_only
        self.path = agent_path(cls.__name__, name, resolved)
        self.actor_name = actor_name_for(self.path)
        self.namespace = namespace
        self._args = (cls, name, str(resolved), read_only, configure_session, lock_wait)
        # Ray restarts a dead actor by itself where it can (node lost); calls are never retried by Ray, since
        # only this handle knows which ones are safe to send twice.
        self._options = {"max_restarts": -1, "max_task_retries": 0, **dict(ray_options or {})}
        self._actor: Any = None
        self._lock = threading.Lock()
        self._closed = False
        self.sql = _Sql(self)
        self._default = SessionHandle(self, "")
        try:
            info = self.info()
        except AgentlabError:
            self._kill()  # an actor that cannot open the file would only hold a process
            raise
        if info["read_only"] != read_only:
            mode = "read-only" if info["read_only"] else "read-write"
            raise AgentlabError(f"Agent {name!r} is already open {mode} in the Ray actor {self.actor_name!r}; "
                                f"close() that handle before opening it with read_only={read_only}.")
        wanted = f"{cls.__module__}.{cls.__qualname__}"
        if info["class"] != wanted:
            raise AgentClassConflictError(
                f"{info['path']} is already owned by a Ray actor running {info['class']} {name!r}; {wanted} maps to "
                "the same file. Use one of the two classes, or close() the other handle first.")
        self._chat = bool(info["chat"])

    # -- reaching the actor ------------------------------------------------------------------------------

    @property
    def actor(self) -> Any:
        """The Ray actor handle (for ``ray.kill`` and Ray's own tools); found or created as needed."""
        return self._current()

    def _current(self) -> Any:
        with self._lock:
            if self._actor is None:
                self._actor = remote_class().options(
                    name=self.actor_name, namespace=self.namespace, lifetime="detached", get_if_exists=True,
                    **self._options).remote(*self._args)
            return self._actor

    def _forget(self, actor: Any) -> None:
        with self._lock:
            if self._actor is actor:
                self._actor = None

    def _give_up(self, deadline: float, exc: Exception) -> None:
        if getattr(exc, "actor_init_failed", False):
            first = str(exc).strip().splitlines()[0]
            raise ClusterError(f"The Ray actor {self.actor_name!r} could not start: {first}") from None
        if time.monotonic() >= deadline:
            raise ClusterError(f"The Ray actor {self.actor_name!r} stayed unreachable for {self.reconnect_timeout:g} s "
                               f"({type(exc).__name__}); is the cluster up?") from None

    def _alive(self) -> Any:
        """The actor, once it answers (recreating it if it died): a call that must not run twice goes to it."""
        ray = require_ray()
        from ray.exceptions import RayActorError

        deadline, delay = time.monotonic() + self.reconnect_timeout, 0.02
        while True:
            actor = self._current()
            try:
                ray.get(actor.__ray_ready__.remote())
                return actor
            except RayActorError as exc:
                self._forget(actor)
                self._give_up(deadline, exc)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _call(self, kind: str, *args: Any, safe: bool, label: str) -> Any:
        if self._closed:
            raise AgentClosedError(f"This handle to agent {self.name!r} is closed; get it again with "
                                   "get_agent(..., backend='ray').")
        ray = require_ray()
        from ray.exceptions import RayActorError, RayTaskError

        deadline, delay = time.monotonic() + self.reconnect_timeout, 0.02
        while True:
            actor = self._current() if safe else self._alive()
            try:
                reply = ray.get(getattr(actor, kind).remote(*args))
            except RayActorError as exc:
                self._forget(actor)
                self._give_up(deadline, exc)
                if not safe:
                    self._current()  # recreated now, so that the next call finds it
                    raise ActorLostError(self.actor_name, label, type(exc).__name__) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except RayTaskError as exc:  # Ray itself could not run the method, e.g. a result it cannot pickle
                raise ClusterError(f"Ray could not run {label}() in {self.actor_name!r}: {exc.cause!r}") from None
            return unwrap(reply, f"the Ray actor {self.actor_name!r}")

    def _kill(self) -> None:
        with self._lock:
            actor, self._actor = self._actor, None
        if actor is not None:
            require_ray().kill(actor)

    # -- what the actor is --------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The actor's ``pid``, ``node_id``, ``path``, ``read_only``, ``class``, ``chat`` and ``incarnation``
        (a new value each time the actor process starts)."""
        return self._call("info", safe=True, label="info")

    def memory(self) -> dict[str, int]:
        """The actor process's memory in bytes (``rss``, ``pss``, ``uss``)."""
        return self._call("memory", safe=True, label="memory")

    # -- state ---------------------------------------------------------------------------------------

    def _agent(self, method: str, *args: Any, safe: bool, **kwargs: Any) -> Any:
        return self._call("agent", method, args, kwargs, safe=safe, label=method)

    @property
    def state(self) -> Any:
        """The current state (a copy)."""
        return self._call("agent", "state", None, {}, safe=True, label="state")

    @property
    def has_state(self) -> bool:
        """Whether state has been set."""
        return self._call("agent", "has_state", None, {}, safe=True, label="has_state")

    def set_state(self, state: Any) -> None:
        """Validate, persist and broadcast new state (see :meth:`agentlab.agent.Agent.set_state`)."""
        self._agent("set_state", state, safe=True)

    def merge_state(self, partial: dict[str, Any]) -> Any:
        """Shallow-merge ``partial`` into a dict state and set the result; returns it."""
        if not isinstance(partial, dict):
            raise TypeError(f"merge_state takes a dict, not {type(partial).__name__}.")
        return self._agent("merge_state", partial, safe=True)

    def reset_state(self) -> None:
        """Go back to ``initial_state`` (or to no state)."""
        self._agent("reset_state", safe=True)

    # -- the default session, other sessions, chat ----------------------------------------------------------

    def session(self, session_id: str = "") -> SessionHandle:
        """A handle to the session ``session_id`` of this agent (``""``: the default session)."""
        return self._default if session_id == "" else SessionHandle(self, session_id)

    def append_message(self, message: Mapping[str, Any], parent_id: Any = _OMITTED) -> Any:
        """Append to the default session (see :meth:`SessionHandle.append_message`)."""
        return self._default.append_message(message, parent_id)

    def append_messages(self, messages: Iterable[Mapping[str, Any]], parent_id: Any = _OMITTED) -> list[Any]:
        """Append many messages to the default session in one transaction."""
        return self._default.append_messages(messages, parent_id)

    def get_history(self, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The default session's path to ``leaf_id`` (the latest leaf when falsy)."""
        return self._default.get_history(leaf_id)

    def get_branches(self, message_id: str) -> list[dict[str, Any]]:
        """The children of ``message_id`` in the default session."""
        return self._default.get_branches(message_id)

    def search(self, query: str, **options: Any) -> list[Any]:
        """Full-text search in the default session."""
        return self._default.search(query, **options)

    def ask(self, text: Any, **options: Any) -> Any:
        """Run a chat turn (a :class:`~agentlab.chat.ChatAgent` only); returns the ``Turn``.

        Not sent twice: if the actor dies during the turn, :class:`~agentlab.errors.ActorLostError` is raised.
        """
        if not self._chat:
            raise TypeError(f"ask() needs a ChatAgent; {self.cls.__name__} is not one.")
        return self._agent("ask", text, safe=False, **options)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call any other method of the agent in the actor (``retry``, ``configure``...); not sent twice."""
        return self._agent(method, *args, safe=False, **kwargs)

    # -- life cycle ---------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the agent and end its actor, releasing the file. Safe to call twice.

        Other handles to the same agent start a new actor on their next call.
        """
        if self._closed:
            return
        self._closed = True
        ray = require_ray()
        from ray.exceptions import RayActorError

        with self._lock:
            actor, self._actor = self._actor, None
        if actor is None:
            return
        try:
            ray.get(actor.close.remote())
        except RayActorError:
            pass  # already gone: nothing holds the file
        ray.kill(actor)

    def __enter__(self) -> AgentHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<AgentHandle {self.cls.__name__} {self.name!r}{' closed' if self._closed else ''} "
                f"actor={self.actor_name!r} namespace={self.namespace!r}>")


def open_handle(cls: type, name: str, *, root: Any = None, read_only: bool = False, **options: Any) -> AgentHandle:
    """The ``"ray"`` backend of :func:`agentlab.get_agent`: options are :class:`AgentHandle`'s
    (``namespace``, ``configure_session``, ``address``, ``ray_options``)."""
    return AgentHandle(cls, name, root=root, read_only=read_only, **options)
