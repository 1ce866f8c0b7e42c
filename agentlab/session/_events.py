"""What a session tells the world after a write: events, agent frames, and message-change notices.

:class:`SessionEvents` is the notification half of a :class:`~agentlab.session.Session`. Three audiences:

* **subscribers** (``session.subscribe(fn)``): every event as a dict with ``type``, ``session_id``,
  ``tokenEstimate``, ``tokenThreshold`` and details (widgets and notebooks listen here);
* **the agent's connections**: upstream's ``cf_agent_session`` / ``cf_agent_session_error`` frames;
* **message-change listeners** (``session.on_messages_changed(fn)``, upstream's ``internal_onMessagesChanged``):
  for hosts that keep their own copy of the messages. Events are upstream's shapes, with snake-case keys:
  ``{"type": "append", "message", "parent_id", "inserted"}``, ``{"type": "update", "message"}``,
  ``{"type": "delete", "message_ids"}``, ``{"type": "clear"}`` and ``{"type": "compact"}``. An append that
  triggered an automatic compaction is announced as ``compact`` only, as upstream does, since the whole view
  changed.

Invariants: everything here runs after the write committed; a subscriber or listener that raises never breaks
the write, its error goes to the agent's ``on_error`` (or the ``agentlab.session`` logger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from agentlab.session._messages import Appended

__all__ = ["SessionEvents"]

logger = logging.getLogger("agentlab.session")

Event = dict[str, Any]


class EventsHost(Protocol):
    """What :class:`SessionEvents` needs from its session (a :class:`~agentlab.session.Session`)."""

    agent: Any
    session_id: str
    compaction: Any

    def estimate_tokens(self, leaf_id: str | None = None) -> int: ...


class SessionEvents:
    """The subscribers and message-change listeners of one session, and the frames sent to its agent."""

    def __init__(self, session: EventsHost) -> None:
        self.session = session
        self.subscribers: list[Callable[[Event], Any]] = []
        self.change_listeners: list[Callable[[Event], Any]] = []

    @staticmethod
    def _adder(listeners: list[Callable[[Event], Any]], callback: Callable[[Event], Any]) -> Callable[[], None]:
        if not callable(callback):
            raise TypeError(f"A listener must be callable, not {callback!r}.")
        listeners.append(callback)

        def remove() -> None:
            if callback in listeners:
                listeners.remove(callback)

        return remove

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        return self._adder(self.subscribers, callback)

    def on_messages_changed(self, listener: Callable[[Event], Any]) -> Callable[[], None]:
        return self._adder(self.change_listeners, listener)

    # -- delivery ----------------------------------------------------------------------------------------------

    def report(self, exc: BaseException) -> None:
        agent = self.session.agent
        if agent is not None and not agent.closed:
            try:
                agent.on_error(exc)
                return
            except Exception:  # an on_error that raises must not break the write either
                pass
        logger.warning("session %r: %s: %s", self.session.session_id, type(exc).__name__, exc)

    def _deliver(self, listeners: list[Callable[[Event], Any]], event: Event) -> None:
        for callback in list(listeners):
            try:
                callback(event)
            except Exception as exc:
                self.report(exc)

    def emit(self, event: Event) -> None:
        self._deliver(self.subscribers, event)

    def changed(self, event: Event) -> None:
        """Tell the message-change listeners (upstream's ``internal_onMessagesChanged``)."""
        if self.change_listeners:
            self._deliver(self.change_listeners, event)

    def broadcast(self, frame: Event) -> None:
        agent = self.session.agent
        if agent is not None and not agent.closed:
            agent.broadcast(frame)

    def has_audience(self) -> bool:
        agent = self.session.agent
        return bool(self.subscribers) or (agent is not None and not agent.closed and bool(agent.connections))

    def needs_estimate(self) -> bool:
        compaction = self.session.compaction
        return self.has_audience() or (compaction.threshold is not None and compaction.fn is not None)

    def status(self, kind: str, *, estimate: int | None = None, phase: str = "idle",
               frame_extra: Event | None = None, **details: Any) -> int:
        """Emit one event and one ``cf_agent_session`` frame; returns the estimate used."""
        session = self.session
        if estimate is None:
            estimate = session.estimate_tokens() if self.needs_estimate() else 0
        threshold = session.compaction.threshold
        self.emit({"type": kind, "session_id": session.session_id, "tokenEstimate": estimate,
                   "tokenThreshold": threshold, **details})
        self.broadcast({"type": "cf_agent_session", "phase": phase, "tokenEstimate": estimate,
                        "tokenThreshold": threshold, **(frame_extra or {})})
        return estimate

    # -- after an append -----------------------------------------------------------------------------------------

    def after_append(self, appended: list[Appended], stored: list[dict[str, Any]], given: list[Any]) -> None:
        """Update the estimate, emit ``appended``, compact if the threshold is passed, tell the listeners."""
        compaction = self.session.compaction
        compactions_before = compaction.count
        try:
            compaction.advance_estimate(appended, stored)
            new_ids = [a.id for a in appended if not a.duplicate]
            estimate = self.status("appended", ids=[a.id for a in appended], new_ids=new_ids,
                                   duplicate=not new_ids)
            if new_ids:
                compaction.maybe_auto_compact(estimate)
        except Exception as exc:  # the append itself succeeded; never fail it afterwards
            compaction.failed(exc)
        if not self.change_listeners:
            return
        if compaction.count != compactions_before:
            return  # the compaction told the listeners: the whole view changed
        for result, message in zip(appended, given):
            self.changed({"type": "append", "message": message, "parent_id": result.parent_id,
                          "inserted": not result.duplicate})
