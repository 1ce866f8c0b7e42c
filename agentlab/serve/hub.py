"""The agents a server holds: one turn at a time per agent, hibernation, frames carried from threads to sockets.

An agent is opened (``get_agent``) on the first request that names it. Every call into an agent (a client's
frame, an HTTP request, a connect or close) is one *turn*: turns of one agent run one after another in arrival
order, turns of different agents run at the same time on a pool of worker threads.

An agent goes through three states. *Open*: its object and DuckDB database are in memory. *Hibernated*: it has
sockets, but none of its clients sent anything and no turn ran for ``hibernate_after`` seconds, so the server
released its database and every in-memory cache (:meth:`Agent.hibernate`) while the sockets stay open with their
connections detached; the next turn (a frame, an HTTP request, a new client) first wakes it: ``get_agent`` opens
the file again, ``on_start`` runs, and the new instance adopts the connections without a frame being sent, as a
Durable Object's hibernated WebSockets. *Closed*: it has had no socket, no in-process connection and no turn for
``idle_timeout`` seconds, so the server forgot it; the next request opens it again.

Frames an agent sends during a turn (its broadcasts, RPC answers) are collected and handed to the event loop in
one batch when the turn ends, in the order they were sent; a stream's chunks are handed over as they are made.

State is stored in groups (group commit): an agent the server owns keeps each turn's new state in memory
(:meth:`Agent.defer_state_writes`), and the server stores it when no other turn of the agent is waiting, or
before anything else touches the file. The frames of the turns since the last write wait with it and leave only
once the state they announce is stored (an output gate, as a Durable Object's), so a crash can lose only
changes no client was told of, and ten queued updates of one agent cost one write.

Invariants:

* One server process owns the agents of a root folder: :class:`RootLock` holds an exclusive lock on a file in
  it for the server's lifetime, so a second server on the same root fails at start-up, even for agents the
  first one has closed while idle.
* An agent is closed or hibernated only after its last turn has finished, inside a turn of its own, and it is
  opened or woken again only after that, inside the next turn.
* The server closes and hibernates only agents it opened itself; an agent a notebook had open before stays open,
  and so does one with an in-process connection (a widget) or of a class with ``hibernate = False``.
* A hibernated agent's sockets stay in its entry, so every frame its clients send wakes it; one of its sockets
  closing wakes it only when its class overrides ``on_close`` (upstream wakes a Durable Object for
  ``webSocketClose``; with the base ``on_close`` there is nothing to run).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket as socketlib
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentlab._memory import release_freed_memory
from agentlab.agent import get_agent, live_agent
from agentlab.errors import AgentlabError, ServeConfigError, ServeRootLockedError

from .protocol import encode, report

try:  # POSIX only; elsewhere the lock is a no-op and the DuckDB file lock is the only guard
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".agentlab-serve.lock"


class RootLock:
    """An exclusive lock on ``<root>/.agentlab-serve.lock`` that says which server owns the root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, holder: str) -> None:
        """Take the lock, writing ``holder`` into the file for the error a second server shows.

        Raises:
            ServeRootLockedError: Another server holds it (in this process or another).
            ServeConfigError: The root is not a folder that can be created and written.
        """
        if self._fd is not None or fcntl is None:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ServeConfigError(f"{self.root} cannot be the root folder of the agents ({exc.strerror}); "
                                   "choose a folder this process can create and write (--root DIR).") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise ServeRootLockedError(str(self.root), other) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def default_holder() -> str:
    return f"pid {os.getpid()} on {socketlib.gethostname()}"


class Outbox:
    """Carries frames from the threads that run turns to the sockets on the event loop.

    ``post`` is the sender of every served :class:`~agentlab.agent.Connection`. A frame broadcast to many
    connections is encoded once (the agent hands the same dict to each of them).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
        self.loop = loop
        self.loop_thread = loop_thread
        self._local = threading.local()

    def post(self, target: Any, frame: dict[str, Any]) -> None:
        local = self._local
        if getattr(local, "frame", None) is frame:
            text = local.text
        else:
            text = encode(frame)
            local.frame, local.text = frame, text
        pending = getattr(local, "pending", None)
        if pending is not None:
            pending.append((target, text))
            return
        # Outside a turn's batch (an async hook going on on the loop, a notebook thread): this frame may announce
        # a held state change, so the change is stored first (and the frames gated before it leave first).
        entry = getattr(target, "entry", None)
        if entry is not None and _holds_write(entry):
            _write_held(entry)
        if threading.get_ident() == self.loop_thread:
            target.push(text)
        else:
            try:
                self.loop.call_soon_threadsafe(target.push, text)
            except RuntimeError:  # the server has stopped: nobody is left to read it
                pass

    def run_turn(self, fn: Callable[..., Any], args: tuple[Any, ...], entry: Served | None = None) -> Any:
        """Run ``fn(*args)`` on this worker thread, collecting the frames it sends into one batch.

        For a turn of ``entry``'s agent: while the agent holds a state write back, the batch waits in
        ``entry.gated``; the write is made at the end of the turn when no other turn of the agent is waiting, or
        when the turn returns something its caller hands on (an HTTP answer, or async work still to run).
        """
        local = self._local
        local.pending, local.entry = [], entry
        result: Any = None
        try:
            result = fn(*args)
            return result
        finally:
            try:
                if entry is not None and _holds_write(entry):
                    entry.gated.extend(local.pending)
                    local.pending = []
                    # Else the next turn joins this write. A result leaves the gate with the caller: an HTTP
                    # answer must not announce an unstored change, and a turn that goes on on the loop (an async
                    # RPC) sends its next frames from there, which must not overtake these.
                    if not entry.waiting or result is not None:
                        _write_held(entry)
                else:
                    self.flush()
            finally:
                local.pending = local.entry = None
                local.frame = local.text = None  # do not keep the last frame alive

    def flush(self) -> None:
        """Hand the frames collected so far to the loop now (a stream's chunks: a held state write is made first)."""
        local = self._local
        entry = getattr(local, "entry", None)
        if entry is not None and _holds_write(entry):
            _write_held(entry)
        pending = getattr(local, "pending", None)
        if pending:
            local.pending = []
            self.deliver(pending)

    def deliver(self, batch: list[tuple[Any, str]]) -> None:
        """Hand ``batch`` to the sockets, from any thread."""
        if threading.get_ident() == self.loop_thread:
            _deliver(batch)
            return
        try:
            self.loop.call_soon_threadsafe(_deliver, batch)
        except RuntimeError:  # the server has stopped: nobody is left to read it
            pass

    def gate(self, entry: Served) -> Callable[[bool], None]:
        """The ``after_write`` of ``entry``'s agent (:meth:`Agent.defer_state_writes`): its frames leave once the
        held state is stored, and are dropped if storing it failed (the change never happened)."""
        def after_write(stored: bool) -> None:
            batch, entry.gated = entry.gated, []
            if stored and batch:
                self.deliver(batch)

        return after_write


def _holds_write(entry: Served) -> bool:
    agent = entry.agent
    return agent is not None and agent.holds_state_write


def _write_held(entry: Served) -> None:
    """Store ``entry``'s held state now; a failure is reported to the agent (its frames were dropped)."""
    try:
        entry.agent.write_held_state()
    except Exception as exc:
        report(entry.agent, exc)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # the awaiting caller may have gone; its error is not "never retrieved"


def _deliver(batch: Iterable[tuple[Any, str]]) -> None:
    for target, text in batch:
        target.push(text)


class Served:
    """One agent the server holds, with its turn lock and the sockets connected to it.

    ``agent`` is the live agent, or None while it is hibernated (``hibernated`` is then True) or being opened.
    """

    def __init__(self, key: tuple[str, str], cls: type, name: str) -> None:
        self.key = key
        self.cls = cls
        self.name = name
        self.agent: Any = None
        self.owned = False  # opened by this server (so the server may close and hibernate it)
        self.hibernated = False
        self.turn = asyncio.Lock()
        self.sockets: set[Any] = set()
        self.busy = 0
        self.last_used = time.monotonic()
        self.opening: asyncio.Future[Any] | None = None
        self.waiting = 0  # turns waiting for ``turn``
        self.gated: list[tuple[Any, str]] = []  # frames waiting for the agent's held state write

    def idle_for(self, now: float) -> float:
        """Seconds since the last turn, or 0 while anything uses the agent (a turn, a socket, a connection)."""
        if self.busy or self.sockets or self.agent is None or self.agent.connections:
            return 0.0
        return now - self.last_used

    def may_hibernate(self, now: float, after: float) -> bool:
        """Whether the agent has served sockets only, and no turn for ``after`` seconds."""
        agent = self.agent
        if (self.busy or self.hibernated or not self.owned or not self.sockets or agent is None or agent.closed
                or not getattr(self.cls, "hibernate_when_idle", True) or now - self.last_used < after):
            return False
        return all(connection.sender is not None for connection in agent.connections)

    def live_connections(self) -> list[Any]:
        """The detached connections of sockets still open, for the agent's next instance to adopt."""
        return [s.connection for s in self.sockets
                if s.connection is not None and not s.dead and not s.connection.closed]


class Hub:
    """Opens, serialises and closes the agents of one root folder."""

    def __init__(self, root: Path, *, idle_timeout: float | None, threads: int,
                 hibernate_after: float | None = None) -> None:
        self.root = root
        self.idle_timeout = idle_timeout
        self.hibernate_after = hibernate_after
        self.hibernations = 0  # how many times an agent hibernated / woke, for stats()
        self.wakes = 0
        self.dropped = 0  # sockets closed because their client did not read (see ClientSocket.push)
        self.entries: dict[tuple[str, str], Served] = {}
        self._closing: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="agentlab-serve")
        self.outbox: Outbox | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.outbox = Outbox(loop, threading.get_ident())
        if (self.idle_timeout is not None or self.hibernate_after is not None) and self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep_forever())

    def stats(self) -> dict[str, int]:
        """How many agents are open and hibernated now, their sockets, and the hibernations, wakes and slow clients
        dropped so far."""
        entries = list(self.entries.values())
        return {
            "open": sum(1 for e in entries if e.agent is not None and not e.hibernated),
            "hibernated": sum(1 for e in entries if e.hibernated),
            "sockets": sum(len(e.sockets) for e in entries),
            "hibernations": self.hibernations,
            "wakes": self.wakes,
            "dropped": self.dropped,
        }

    async def in_thread(self, fn: Callable[..., Any], *args: Any, entry: Served | None = None) -> Any:
        loop = asyncio.get_running_loop()
        assert self.outbox is not None
        return await loop.run_in_executor(self._pool, self.outbox.run_turn, fn, args, entry)

    def _own(self, entry: Served, agent: Any, owned: bool) -> None:
        """Store the state of an agent this server opened in groups (see the module's docstring)."""
        if owned:
            assert self.outbox is not None
            agent.defer_state_writes(self.outbox.gate(entry))

    async def acquire(self, key: tuple[str, str], cls: type, name: str) -> Served:
        """The open entry of agent ``name`` of ``cls``, opening the agent if needed.

        The entry counts as busy (never closed for idleness) until the caller calls :meth:`release`.

        Raises:
            AgentlabError: Opening failed (``AgentLockedError`` when another process holds the file).
        """
        for _ in range(3):
            entry = self.entries.get(key)
            if entry is None:
                closing = self._closing.get(key)
                if closing is not None:
                    await asyncio.shield(closing)
                entry = self.entries.get(key)
            if entry is None:
                entry = Served(key, cls, name)
                self.entries[key] = entry
                entry.opening = asyncio.ensure_future(self._open(entry))
            assert entry.opening is not None
            try:
                await asyncio.shield(entry.opening)
            except BaseException:
                if self.entries.get(key) is entry:
                    del self.entries[key]
                raise
            if entry.hibernated or not entry.agent.closed:  # a hibernated agent wakes in the caller's first turn
                entry.busy += 1  # not idle while the caller sets up its connection or request
                return entry
            self.forget(key, entry)  # closed behind the server's back (agent.close() in a notebook)
        raise RuntimeError(f"agent {name!r} keeps closing while it is being opened")

    async def _open(self, entry: Served) -> None:
        def open_agent() -> tuple[Any, bool]:
            was_live = live_agent(entry.cls, entry.name, root=self.root) is not None
            agent: Any = get_agent(entry.cls, entry.name, root=self.root)
            self._own(entry, agent, not was_live)
            return agent, not was_live

        entry.agent, entry.owned = await self.in_thread(open_agent)

    def release(self, entry: Served) -> None:
        """The caller of :meth:`acquire` is done setting up (its socket is registered, or its request answered)."""
        entry.busy -= 1
        entry.last_used = time.monotonic()

    def forget(self, key: tuple[str, str], entry: Served) -> None:
        if self.entries.get(key) is entry:
            del self.entries[key]
        for sock in list(entry.sockets):
            sock.kill(1012, "The agent was closed; reconnect to reopen it.")

    async def run(self, entry: Served, fn: Callable[..., Any], *args: Any) -> Any:
        """One turn of ``entry``'s agent: ``fn(agent, *args)`` on a worker thread, then any awaitable it returned.

        A hibernated agent is woken first, inside the turn. A caller that is cancelled stops waiting, but the turn
        itself runs to its end and keeps the agent until then, so no two turns of one agent ever overlap.

        Raises:
            AgentlabError: Waking the agent failed (its sockets were closed with 1011), or what ``fn`` raised.
        """
        turn = asyncio.ensure_future(self._turn(entry, fn, args))
        turn.add_done_callback(_retrieve)
        return await asyncio.shield(turn)

    async def _turn(self, entry: Served, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        entry.busy += 1
        entry.waiting += 1
        try:
            try:
                await entry.turn.acquire()
            finally:
                entry.waiting -= 1
            try:
                if entry.hibernated:
                    await self._wake(entry)
                result = await self.in_thread(fn, entry.agent, *args, entry=entry)
                if inspect.isawaitable(result):
                    result = await result
                    if _holds_write(entry):  # changed on the loop after the turn's batch: stored before answering
                        await self.in_thread(_write_held, entry)
                return result
            finally:
                entry.turn.release()
        finally:
            entry.busy -= 1
            entry.last_used = time.monotonic()

    async def _wake(self, entry: Served) -> None:
        """Open a hibernated agent again and give it its sockets' connections (inside the entry's turn)."""
        connections = entry.live_connections()

        def wake() -> tuple[Any, bool]:
            was_live = live_agent(entry.cls, entry.name, root=self.root) is not None
            agent: Any = get_agent(entry.cls, entry.name, root=self.root)
            self._own(entry, agent, not was_live)
            agent.adopt(connections)
            return agent, not was_live

        try:
            entry.agent, entry.owned = await self.in_thread(wake)
        except BaseException as exc:
            reason = f"The agent could not be woken: {exc}"[:120]  # a close reason is at most 123 bytes
            for sock in list(entry.sockets):
                sock.kill(1011, reason)
            if self.entries.get(entry.key) is entry:
                del self.entries[entry.key]
            raise
        entry.hibernated = False
        self.wakes += 1

    async def hibernate(self, entry: Served) -> bool:
        """Hibernate ``entry``'s agent now if it may (see :meth:`Served.may_hibernate`, any idle time); returns
        whether it did."""
        async with entry.turn:
            if not entry.may_hibernate(float("inf"), 0.0):
                return False
            agent = entry.agent
            entry.hibernated = True  # from here on, a caller that acquires the entry wakes it in its turn
            try:
                await self.in_thread(agent.hibernate)
            except AgentlabError:  # an in-process connection appeared meanwhile: the agent stays open
                entry.hibernated = False
                return False
            entry.agent = None
            self.hibernations += 1
            return True

    async def _sweep_forever(self) -> None:
        limits = [t for t in (self.idle_timeout, self.hibernate_after) if t is not None]
        interval = min(max(min(limits) / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            await self.sweep()

    async def sweep(self) -> None:
        """Close agents idle for longer than ``idle_timeout``, hibernate those whose clients were all idle for
        ``hibernate_after``, and drop entries whose agent was closed behind the server's back."""
        now = time.monotonic()
        sleepy: list[Served] = []
        for key, entry in list(self.entries.items()):
            if entry.opening is None or not entry.opening.done():
                continue
            if entry.hibernated:
                if not entry.sockets and not entry.busy:
                    del self.entries[key]  # its last client left while it slept: nothing is open
                continue
            if entry.agent is None:
                continue
            if entry.agent.closed:
                self.forget(key, entry)
            elif self.idle_timeout is not None and entry.idle_for(now) > self.idle_timeout:
                self._close_entry(key, entry)
            elif self.hibernate_after is not None and entry.may_hibernate(now, self.hibernate_after):
                sleepy.append(entry)
        if sleepy:
            done = await asyncio.gather(*(self.hibernate(entry) for entry in sleepy), return_exceptions=True)
            if any(result is True for result in done):
                await self.in_thread(release_freed_memory)

    def _close_entry(self, key: tuple[str, str], entry: Served) -> asyncio.Future[Any]:
        del self.entries[key]

        async def close() -> None:
            try:
                async with entry.turn:  # after the last turn that was already waiting
                    if entry.owned and entry.agent is not None:
                        await self.in_thread(entry.agent.close)
            finally:
                self._closing.pop(key, None)

        task = asyncio.ensure_future(close())
        self._closing[key] = task
        return task

    async def close_all(self) -> None:
        """Close every agent this server opened (at shutdown), then stop the worker threads."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        tasks = [self._close_entry(key, entry) for key, entry in list(self.entries.items())
                 if entry.agent is not None or entry.hibernated]
        tasks += list(self._closing.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.shutdown(wait=True)


